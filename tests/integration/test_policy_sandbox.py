"""Egress you can see and steer, against real sandboxes on the real engine and the local
"internet" (an origin on 127.0.0.1 reached through `[network] upstream_proxy`):

- `sbx policy allow|deny|rm` applied live to a running named sandbox (a request loop inside
  sees the next request follow the rule) and to the next one-shot run; a user deny wins over a
  kit's allow, a user allow never beats a kit's deny;
- the fix printed in a 403 body, pasted as is on a terminal, makes that request pass and
  nothing broader;
- `sbx policy log -f NAME` follows a running sandbox; the log of a real run holds no secret;
- a named sandbox follows its changed kits at its next start (a widening asked for, a
  narrowing applied, the rest named with `--recreate`, which keeps HOME);
- `sbx explain NAME METHOD URL` judges by the sandbox's real rules; a failed install hook
  names the egress refusal first.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import shlex
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sbx.domain.credentials.secrets import SecretStore
from sbx.domain.egress import requestlog
from tests.support.kits import api_key_credential, capabilities, network_policy, rule
from tests.support.origin import Internet
from tests.support.sbxproc import SBX, Finished, run_sbx

pytestmark = pytest.mark.docker

BOOKWORM = "sbx-base/bookworm:1"
SECRET = "ghp_policy_sandbox_real_token_" + "y" * 10
RECIPE = f"FROM {BOOKWORM}\nUSER agent\nWORKDIR /home/agent/work\nCMD [\"sleep\", \"600\"]\n"
KIT = capabilities(
    network_policy(version=2, runtime=[
        "example.org", rule(["api.github.com"], methods=["GET"])],
        deny=[rule(["example.org"], methods=["ANY"], paths=["/private/**"])]),
    api_key_credential("github", "GH_TOKEN", "api.github.com"))


def code(url: str, *, method: str = "GET", body: str | None = None) -> str:
    """A shell snippet printing the HTTP status of one request (and the body to a file)."""
    out = f" -o {shlex.quote(body)}" if body else " -o /dev/null"
    return f'curl -sS -m 10{out} -w "%{{http_code}}\\n" -X {method} {shlex.quote(url)}'


@pytest.fixture
def env(tmp_path: Path, state_home: Path, internet: Internet) -> dict[str, str]:
    internet.origin.clear()
    config = internet.sbx_config(tmp_path / "config.toml")
    SecretStore(state_home).set("github", SECRET)
    return {**os.environ, "SBX_HOME": str(state_home), "SBX_CONFIG": str(config),
            "NO_COLOR": "1"}


@pytest.fixture
def kit(kit_factory: Callable[..., Path]) -> Path:
    return kit_factory("steer", RECIPE, KIT)


def sbx(env: dict[str, str], *args: str, timeout: float = 180) -> Finished:
    return run_sbx(list(args), env=env, timeout=timeout)


def ok(done: Finished) -> str:
    assert done.returncode == 0, (done.stdout.decode()[-2000:], done.stderr.decode()[-3000:])
    return done.stdout.decode()


def run_script(env: dict[str, str], kit: Path, script: str) -> list[str]:
    return ok(sbx(env, "run", str(kit), "--timeout", "120", "--", "bash", "-c",
                  script + "; true")).split()


def paste_on_a_terminal(command: str, env: dict[str, str], answer: bytes = b"y\n") -> str:
    """Run ``command`` as pasted into a shell on a terminal, answering its question."""
    words = shlex.split(command)
    assert words[0] == "sbx"
    leader, follower = pty.openpty()
    process = subprocess.Popen([str(SBX), *words[1:]], stdin=follower, stdout=subprocess.PIPE,
                               stderr=follower, env=env)
    os.close(follower)
    seen = b""
    deadline = time.monotonic() + 60
    answered = False
    while process.poll() is None and time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 0.2)
        if ready:
            try:
                seen += os.read(leader, 4096)
            except OSError:
                break
        if not answered and b"[y/N]" in seen:
            os.write(leader, answer)
            answered = True
    out, _ = process.communicate(timeout=60)
    os.close(leader)
    assert answered, seen.decode(errors="replace")
    assert process.returncode == 0, (seen.decode(errors="replace"), out)
    return seen.decode(errors="replace")


def test_a_403_body_fix_pasted_as_is_passes_that_request_and_nothing_broader(
        env: dict[str, str], kit: Path, state_home: Path) -> None:
    first = ok(sbx(env, "run", str(kit), "--timeout", "120", "--", "bash", "-c",
                   code("https://api.github.com/v1/messages", method="POST", body="/tmp/b")
                   + "; cat /tmp/b"))
    assert first.startswith("403\n"), first
    [fix] = re.findall(r"^fix: (sbx policy allow .*)$", first, re.MULTILINE)
    assert fix == "sbx policy allow api.github.com '/v1/**' --method POST"
    assert "kit fix: " in first and "methods: [POST]" in first
    shown = paste_on_a_terminal(fix, env)
    assert "+ network.runtime.http.allow: POST api.github.com/v1/**" in shown
    statuses = run_script(env, kit, "; ".join([
        code("https://api.github.com/v1/messages", method="POST"),
        code("https://api.github.com/v1/other", method="POST"),
        code("https://api.github.com/v2/messages", method="POST"),
        code("https://api.github.com/v1/messages", method="DELETE"),
        code("https://uploads.github.com/v1/messages", method="POST")]))
    assert statuses[:2] == ["200", "200"]
    assert statuses[2:4] == ["403", "403"]
    assert statuses[4] in ("403", "000")  # refused at CONNECT: curl may show 000
    events = [json.loads(line) for line in (state_home / "audit.jsonl").read_text().splitlines()]
    added = [e for e in events if e["event_type"] == "policy_rule_added"]
    assert added[-1]["details"]["via"] == "terminal"


def test_user_rules_reach_the_next_one_shot_run_deny_wins_and_never_beat_a_kit_deny(
        env: dict[str, str], kit: Path) -> None:
    script = "; ".join([code("http://example.net/x"), code("http://example.org/ok"),
                        code("http://example.org/private/k")])
    assert run_script(env, kit, script) == ["403", "200", "403"]
    ok(sbx(env, "policy", "allow", "example.net", "--yes"))
    deny = ok(sbx(env, "policy", "deny", "example.org/ok"))
    ok(sbx(env, "policy", "allow", "example.org/private/**", "--yes"))
    assert run_script(env, kit, script) == ["200", "403", "403"]
    rule_id = deny.split("added rule ", 1)[1].split(":", 1)[0]
    ok(sbx(env, "policy", "rm", rule_id))
    assert run_script(env, kit, script) == ["200", "200", "403"]


def test_named_sandbox_follows_policy_live_and_its_log_is_followed(
        env: dict[str, str], kit: Path, cleanup: list[str], state_home: Path) -> None:
    name = f"p-{uuid.uuid4().hex[:8]}"
    cleanup.append(name)
    ok(sbx(env, "run", "--name", name, "-d", str(kit)))
    follower = subprocess.Popen([str(SBX), "policy", "log", "-f", "--json", name],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    # Each line: when the request started (the sandbox shares the host's clock), its status.
    loop = subprocess.Popen(
        [str(SBX), "exec", name, "--", "bash", "-c",
         "for i in $(seq 1 300); do printf '%s ' \"$(date +%s.%N)\"; "
         + code("http://example.net/live") + "; sleep 0.05; done"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)

    def lines(count: int) -> list[tuple[float, str]]:
        assert loop.stdout is not None
        read = [loop.stdout.readline().decode().split() for _ in range(count)]
        return [(float(when), status) for when, status in read]

    try:
        assert {status for _, status in lines(5)} == {"403"}
        ok(sbx(env, "policy", "allow", "example.net/live", "--sandbox", name, "--yes"))
        changed = time.time()
        statuses = lines(60)
        later = [status for when, status in statuses if when > changed]
        assert len(later) >= 5 and set(later) == {"200"}, statuses
        explained = sbx(env, "explain", name, "GET", "http://example.net/live")
        assert explained.returncode == 0, explained.stdout.decode()
        assert "user policy, rule" in explained.stdout.decode()
        other = sbx(env, "explain", name, "GET", "http://example.net/other")
        assert other.returncode == 1
        assert f"--sandbox {name}" in other.stdout.decode()
    finally:
        loop.kill()
        loop.communicate(timeout=30)
    # The follower printed the sandbox's records as they were written: denied then allowed.
    seen: list[dict[str, Any]] = []
    assert follower.stdout is not None
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not any(
            r["decision"] == "allowed" for r in seen):
        ready, _, _ = select.select([follower.stdout], [], [], 0.5)
        if ready:
            seen.append(json.loads(follower.stdout.readline()))
    follower.kill()
    follower.communicate(timeout=30)
    assert seen and all(r["sandbox"] == name for r in seen)
    assert seen[0]["decision"] == "denied" and seen[0]["fix"].startswith(
        "sbx policy allow example.net /live --method GET --sandbox")
    assert any(r["decision"] == "allowed" and r["rule"]["source"] == "user" for r in seen)
    summary = ok(sbx(env, "policy", "log", name))
    assert "example.net:80" in summary
    written = b"".join(p.read_bytes() for p in (state_home / requestlog.LOG_DIR).rglob("*")
                       if p.is_file())
    assert SECRET.encode() not in written
    # Its rules go with it: a new sandbox of that name does not inherit them.
    ok(sbx(env, "rm", "-f", name))
    listed = json.loads(ok(sbx(env, "policy", "ls", "--json")).strip().splitlines()[-1])
    assert listed["data"]["rules"] == []


def test_a_named_sandbox_follows_its_changed_kits_or_says_why_not(
        env: dict[str, str], kit_factory: Callable[..., Path], cleanup: list[str]) -> None:
    kit = kit_factory("moving", RECIPE, capabilities(
        network_policy(version=2, runtime=["example.org"])))
    descriptor = next(kit.glob("*.yaml"))
    name = f"k-{uuid.uuid4().hex[:8]}"
    cleanup.append(name)
    ok(sbx(env, "run", "--name", name, "-d", str(kit)))
    ok(sbx(env, "exec", name, "--", "sh", "-c", 'echo kept > "$HOME/mark"'))
    probe = "; ".join([code("http://example.org/"), code("http://example.net/")])

    def statuses() -> list[str]:
        return ok(sbx(env, "exec", name, "--", "bash", "-c", probe)).split()

    assert statuses() == ["200", "403"]
    ok(sbx(env, "stop", name))
    # A widening: refused without a terminal, applied with --accept.
    descriptor.write_text(descriptor.read_text().replace(
        '"allow": ["example.org"]', '"allow": ["example.org", "example.net"]'))
    refused = sbx(env, "run", "--name", name, "-d", str(kit))
    assert refused.returncode == 125 and b"(permission_widened)" in refused.stderr
    assert b"+ network.runtime.allow: example.net" in refused.stderr
    started = sbx(env, "run", "--name", name, "-d", "--accept", str(kit))
    ok(started)
    assert b"applied its kits' changes" in started.stderr
    assert statuses() == ["200", "200"]
    # A narrowing applies silently at the next start.
    ok(sbx(env, "stop", name))
    descriptor.write_text(descriptor.read_text().replace(
        '"allow": ["example.org", "example.net"]', '"allow": ["example.net"]'))
    ok(sbx(env, "run", "--name", name, "-d", str(kit)))
    assert statuses() == ["403", "200"]
    # What a running container cannot take is named, with the command that recreates it.
    ok(sbx(env, "stop", name))
    descriptor.write_text(descriptor.read_text() + (
        '  - type: com.docker.sandbox/port@1\n    config: {"container": 8080}\n'))
    warned = sbx(env, "run", "--name", name, "-d", str(kit))
    ok(warned)
    assert b"--recreate" in warned.stderr and b"ports: +8080/tcp" in warned.stderr
    explained = ok(sbx(env, "explain", name))
    assert "--recreate" in explained
    # --recreate plans the new container first: the kit gate's refusal of a kit that asks for
    # more than was approved (its port) leaves the sandbox as it was.
    refused = sbx(env, "run", "--name", name, "-d", "--recreate", str(kit))
    assert refused.returncode == 125 and b"(permission_widened)" in refused.stderr
    assert b"old container is removed" not in refused.stderr
    assert statuses() == ["403", "200"]
    # --recreate --accept: a new container from the kits as they are, HOME kept.
    recreated = sbx(env, "run", "--name", name, "-d", "--recreate", "--accept", str(kit))
    ok(recreated)
    assert b"old container is removed" in recreated.stderr
    assert ok(sbx(env, "exec", name, "--", "sh", "-c", 'cat "$HOME/mark"')).strip() == "kept"
    assert statuses() == ["403", "200"]
    quiet = sbx(env, "run", "--name", name, "-d", str(kit))
    ok(quiet)
    assert b"--recreate" not in quiet.stderr


def test_a_hook_failing_after_an_egress_refusal_names_the_refusal_first(
        env: dict[str, str], kit_factory: Callable[..., Path]) -> None:
    kit = kit_factory("hooked", RECIPE, capabilities(
        network_policy(version=2, install=["example.org"], runtime=["example.org"]), """
        - type: com.docker.sandbox/lifecycle@1
          config:
            install:
              - command: curl -sSf -m 10 -o /dev/null http://install.example.net/pkg.tgz
        """))
    done = sbx(env, "run", str(kit), "--", "true")
    stderr = done.stderr.decode()
    assert done.returncode == 126 and "(hook_failed)" in stderr, stderr
    assert "after sbx refused its request: denied GET http://install.example.net/pkg.tgz" \
        in stderr
    assert ("sbx policy allow install.example.net /pkg.tgz --method GET --phase install"
            in stderr)
    assert "fix the kit's install command" not in stderr
