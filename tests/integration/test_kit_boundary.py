"""A sandbox must not widen its own next run, against a real engine: a kit under a writable
mount is read-only inside the sandbox (and cannot be moved aside and replaced), a kit changed
between runs is refused until its widening is approved — shown and asked on a terminal, or
``--accept`` — with credential destinations part of what is compared; the legitimate uses
(a kit author editing a kit outside the workspace, approving on a terminal) still work.

The "internet" is the tests' local one (TESTING.md): what reached a host is what its origin saw.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sbx.domain.credentials.secrets import SecretStore
from sbx.seams import audit
from tests.support.kits import api_key_credential, capabilities, network_policy, write_kit
from tests.support.origin import Internet

from .conftest import BUSYBOX
from .test_session_tty import Pane, pane  # noqa: F401 - the tmux pane fixture

pytestmark = pytest.mark.docker

BOOKWORM = "sbx-base/bookworm:1"
SECRET = "ghp-kit-boundary-secret-stays-home"  # noqa: S105 - a test value
SHELL_RECIPE = f'FROM {BUSYBOX}\nUSER agent\nWORKDIR /workspace\nCMD ["true"]\n'


def _owned(path: Path) -> None:
    """The tree as a user's project is: theirs (the sandbox runs as the workspace's owner)."""
    if os.geteuid() == 0:
        for root, dirs, files in os.walk(path):
            for name in [*dirs, *files]:
                os.chown(os.path.join(root, name), 1000, 1000, follow_symlinks=False)
        os.chown(path, 1000, 1000)


def _gh_kit(root: Path, inject: str = "api.github.com") -> Path:
    return write_kit(root, "agent", capabilities(
        network_policy(runtime=["api.github.com", "example.com"]),
        api_key_credential("github", "GH_TOKEN", inject)),
        f"FROM {BOOKWORM}\nUSER agent\nWORKDIR /workspace\n")


@pytest.fixture
def env(state_home: Path) -> dict[str, str]:
    return {**os.environ, "SBX_HOME": str(state_home), "SBX_CONFIG": os.devnull,
            "NO_COLOR": "1"}


@pytest.fixture
def online(env: dict[str, str], tmp_path: Path, internet: Internet,
           state_home: Path) -> Iterator[dict[str, str]]:
    internet.origin.clear()
    SecretStore(state_home).set("github", SECRET)
    yield {**env, "SBX_CONFIG": str(internet.sbx_config(tmp_path / "config.toml"))}


def test_a_kit_in_the_workspace_cannot_be_rewritten_moved_or_replaced_by_its_run(
        sbx_cli: Any, env: dict[str, str], tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    kit = write_kit(ws / "tools", "agent", capabilities(network_policy(runtime=["example.com"])),
                    SHELL_RECIPE)
    (ws / ".sbx").mkdir()
    config = ws / ".sbx" / "config.toml"  # the user keeps sbx's config in the project
    config.write_text("[sandbox]\n", encoding="utf-8")
    env = {**env, "SBX_CONFIG": str(config)}
    _owned(ws)
    before = {p: p.read_bytes() for p in kit.iterdir()}
    attacks = {
        "config": "echo 'memory_bytes = 68719476736' >> .sbx/config.toml",
        "append": "echo '  - example.net' >> tools/agent/agent.yaml",
        "sed": "sed -i s/example.com/example.net/ tools/agent/agent.yaml",
        "create": "echo x > tools/agent/agent.dockerfile.new",
        "unlink": "rm -f tools/agent/agent.dockerfile",
        "move": "mv tools/agent tools/old",
        "move-parent": "mv tools tools-old",
        "replace": "rm -rf tools",
    }
    script = "; ".join(f"({command}) 2>/dev/null && echo {name}=done || echo {name}=failed"
                       for name, command in attacks.items())
    script += "; echo work > out.txt && echo write=done"
    result = sbx_cli(["run", "./tools/agent", ".", "--", "sh", "-c", script], env=env, cwd=ws)
    assert result.exit_code == 0, result.stderr
    outcome = dict(line.split("=") for line in result.stdout.split())
    assert outcome == {**dict.fromkeys(attacks, "failed"), "write": "done"}
    assert {p: p.read_bytes() for p in kit.iterdir()} == before
    assert config.read_text(encoding="utf-8") == "[sandbox]\n"
    assert (ws / "out.txt").read_text(encoding="utf-8") == "work\n"  # the workspace is rw
    # The same command again: nothing changed, nothing to ask.
    again = sbx_cli(["run", "./tools/agent", ".", "--", "true"], env=env, cwd=ws)
    assert again.exit_code == 0, again.stderr


def test_a_writable_mount_holding_the_kit_gets_it_read_only(
        sbx_cli: Any, env: dict[str, str], tmp_path: Path) -> None:
    share = tmp_path / "share"
    kit = write_kit(share, "agent", "", SHELL_RECIPE)
    _owned(share)
    result = sbx_cli(["run", str(kit), "--mount", f"{share}:/data:rw", "--", "sh", "-c",
                      "echo x >> /data/agent/agent.yaml && echo kit=written; "
                      "echo y > /data/other && echo other=written"], env=env)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.split() == ["other=written"]
    assert b"x\n" not in (kit / "agent.yaml").read_bytes()


def test_a_workspace_that_is_the_kit_is_refused_unless_read_only(
        sbx_cli: Any, env: dict[str, str], tmp_path: Path) -> None:
    kit = write_kit(tmp_path, "agent", "", SHELL_RECIPE)
    _owned(kit)
    refused = sbx_cli(["run", ".", "."], env=env, cwd=kit)
    assert refused.exit_code == 125
    assert "(mount_blocked)" in refused.stderr and "kit_writable" in refused.stderr
    inside = kit / "src"
    inside.mkdir()
    _owned(inside)
    below = sbx_cli(["run", str(kit), str(inside)], env=env)
    assert below.exit_code == 125 and "kit_writable" in below.stderr
    read_only = sbx_cli(["run", ".", ".", "--access", "ro", "--", "true"], env=env, cwd=kit)
    assert read_only.exit_code == 0, read_only.stderr


def test_a_kit_rewritten_by_another_sandbox_is_refused_before_its_run_starts(
        sbx_cli: Any, online: dict[str, str], tmp_path: Path, internet: Internet,
        state_home: Path) -> None:
    ws = tmp_path / "ws"
    _gh_kit(ws)
    write_kit(ws, "other", "", SHELL_RECIPE)
    # -k: example.com is tunnelled (not intercepted) until it is an inject domain, and the
    # tests' origin has a certificate of the test CA, which the sandbox does not trust.
    _owned(ws)
    request = ["--", "sh", "-c", 'curl -ksS -m 10 -o /dev/null -w "%{http_code}" '
                                 '-H "Authorization: Bearer $GH_TOKEN" https://example.com/x']
    first = sbx_cli(["run", "./agent", ".", *request], env=online, cwd=ws)
    assert first.exit_code == 0 and first.stdout == "200", first.stderr
    seen = [r.header("authorization") for r in internet.origin.requests()]
    assert seen == ["Bearer sbx-proxy-managed-github"]  # not an inject domain: the sentinel
    # Another sandbox with this directory as its workspace rewrites the kit it does not run:
    # the user's secret is now to be injected at example.com, a host the policy allowed
    # already (the move a surface without credential destinations saw as "within").
    rewrite = sbx_cli(["run", "./other", ".", "--", "sed", "-i",
                       's/"domain": "api.github.com"/"domain": "example.com"/',
                       "agent/agent.yaml"], env=online, cwd=ws)
    assert rewrite.exit_code == 0, rewrite.stderr
    assert '"domain": "example.com"' in (ws / "agent" / "agent.yaml").read_text()
    internet.origin.clear()
    refused = sbx_cli(["run", "./agent", ".", *request], env=online, cwd=ws)
    assert refused.exit_code == 125, refused.stderr
    assert "(permission_widened)" in refused.stderr
    assert ("+ credentials.destinations: github runtime inject example.com header "
            "authorization") in refused.stderr
    assert internet.origin.requests() == []  # nothing started, nothing reached anyone
    assert any(e["event_type"] == audit.KIT_WIDENING_REFUSED
               for e in audit.read_events(state_home))
    # The fix, pasted as printed, approves it: and now the secret does go there.
    command = refused.stderr.rsplit("--accept: ", 1)[1].splitlines()[0]
    argv = shlex.split(command)
    assert argv[:3] == ["sbx", "run", "--accept"]
    accepted = sbx_cli(argv[1:], env=online, cwd=ws)
    assert accepted.exit_code == 0 and accepted.stdout == "200", accepted.stderr
    assert [r.header("authorization") for r in internet.origin.requests()] == [
        f"Bearer {SECRET}"]


def test_a_kit_author_edits_a_kit_outside_the_workspace_and_runs_it(
        sbx_cli: Any, env: dict[str, str], tmp_path: Path) -> None:
    kits, ws = tmp_path / "kits", tmp_path / "ws"
    kit = write_kit(kits, "agent", capabilities(network_policy(runtime=["example.com"])),
                    SHELL_RECIPE)
    ws.mkdir()
    _owned(ws)
    argv = ["run", str(kit), str(ws), "--", "sh", "-c", "echo ok"]
    assert sbx_cli(argv, env=env).stdout == "ok\n"
    descriptor = kit / "agent.yaml"
    text = descriptor.read_text(encoding="utf-8")
    # A change that asks for nothing more (the recipe) needs no approval.
    (kit / "agent.dockerfile").write_text(SHELL_RECIPE.replace("CMD", "LABEL a=b\nCMD"))
    assert sbx_cli(argv, env=env).stdout == "ok\n"
    descriptor.write_text(text.replace('"example.com"', '"example.com", "example.org"'))
    refused = sbx_cli(argv, env=env)
    assert refused.exit_code == 125 and "+ network.runtime.allow: example.org" in refused.stderr
    # doctor predicts the same refusal, with the same approval to paste.
    doctor = sbx_cli(["doctor", str(kit), "--json"], env=env)
    (workload,) = [c for c in json.loads(doctor.stdout)["data"]["checks"]
                   if c["id"] == "workload"]
    assert (workload["status"], workload["reason"]) == ("warn", "permission_widened"), workload
    assert "network.runtime.allow: example.org" in workload["detail"]
    assert workload["fix"].endswith(f"sbx run --accept {kit}")
    accepted = sbx_cli(["run", "--accept", *argv[1:]], env=env)
    assert accepted.exit_code == 0 and accepted.stdout == "ok\n", accepted.stderr
    descriptor.write_text(text)  # narrower again: runs, and is recorded
    assert sbx_cli(argv, env=env).stdout == "ok\n"
    explained = sbx_cli(["explain", str(kit)], env=env)
    assert f"permissions of {kit}: as approved at its last run" in explained.stdout


def test_a_cached_plan_does_not_skip_the_gate(sbx_cli: Any, env: dict[str, str],
                                              tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # A kit whose plan is cached (no network): an optional capability this sbx does not have
    # is still part of what it asks for.
    from sbx.usecases.run import start as run_module
    from sbx.usecases.run.fromcache import prepare_cached

    cached: list[bool] = []

    def watched(*args: Any, **kwargs: Any) -> Any:
        plan = prepare_cached(*args, **kwargs)
        cached.append(plan is not None)
        return plan

    monkeypatch.setattr(run_module, "prepare_cached", watched)
    extra = "  - type: com.example/thing@1\n    optional: true\n"
    kit = write_kit(tmp_path, "agent", "capabilities:\n" + extra, SHELL_RECIPE)
    wide = (kit / "agent.yaml").read_text(encoding="utf-8")
    argv = ["run", str(kit), "--", "true"]
    # Two requests (the environment is part of a cached plan's key), each cached.
    one, two = {**env, "VARIANT": "1"}, {**env, "VARIANT": "2"}
    assert sbx_cli(argv, env=one).exit_code == 0
    assert sbx_cli(argv, env=one).exit_code == 0
    assert cached == [True]
    (kit / "agent.yaml").write_text(wide.replace("capabilities:\n" + extra,
                                                 "capabilities: []\n"))
    assert sbx_cli(argv, env=two).exit_code == 0  # narrower: recorded as approved
    # The kit is back to exactly what the first request's cached plan was made from: the
    # cached path finds its approval no longer covers it and plans afresh, which refuses.
    (kit / "agent.yaml").write_text(wide)
    refused = sbx_cli(argv, env=one)
    assert cached == [True, False]
    assert refused.exit_code == 125 and "(permission_widened)" in refused.stderr
    assert "+ services: com.example/thing@1" in refused.stderr


def test_a_widening_is_shown_and_approved_on_a_terminal(
        pane: Pane, sbx_cli: Any, env: dict[str, str], tmp_path: Path,  # noqa: F811
        state_home: Path) -> None:
    if shutil.which("tmux") is None:
        pytest.skip("tmux is missing")
    kit = write_kit(tmp_path / "kits", "agent",
                    capabilities(network_policy(runtime=["example.com"])), SHELL_RECIPE)
    assert sbx_cli(["run", str(kit), "--", "true"], env=env).exit_code == 0
    descriptor = kit / "agent.yaml"
    text = descriptor.read_text(encoding="utf-8")
    descriptor.write_text(text.replace('"example.com"', '"example.com", "example.org"'))
    pane.sbx("yes", f"{shlex.quote(str(kit))} -- true")
    pane.wait(r"it changed since its last approved run and now asks for more")
    pane.wait(r"\+ network\.runtime\.allow: example\.org")
    pane.wait(r"Accept these permissions\? \[y/N\]")
    pane.type("y")
    assert pane.status("yes", timeout=120) == 0
    recorded = json.loads((state_home / "kits.approved.json").read_text())
    assert recorded["kits"][0]["via"] == "terminal"
    assert "example.org" in recorded["kits"][0]["permissions"]["networkRuntimeAllow"]
    descriptor.write_text(text.replace('"example.com"', '"example.com", "example.net"'))
    pane.sbx("no", f"{shlex.quote(str(kit))} -- true")
    pane.wait(r"\+ network\.runtime\.allow: example\.net")
    pane.wait(r"Accept these permissions\? \[y/N\] *$")
    pane.type("n")
    assert pane.status("no", timeout=120) == 125
    pane.wait(r"\(permission_widened\)")


@pytest.fixture
def named_cleanup(sbx_cli: Any, env: dict[str, str]) -> Iterator[Callable[[str], None]]:
    names: list[str] = []
    yield names.append
    for name in names:
        sbx_cli(["rm", "-f", name], env=env)


def test_a_named_sandbox_keeps_its_kit_read_only_across_restarts(
        sbx_cli: Any, env: dict[str, str], tmp_path: Path,
        named_cleanup: Callable[[str], None]) -> None:
    ws = tmp_path / "ws"
    kit = write_kit(ws, "agent", "", f'FROM {BUSYBOX}\nUSER agent\nWORKDIR /workspace\n'
                    'CMD ["sleep", "600"]\n')
    _owned(ws)
    named_cleanup("kitpin")
    created = sbx_cli(["run", "--name", "kitpin", "-d", "./agent", "."], env=env, cwd=ws)
    assert created.exit_code == 0, created.stderr
    for attempt in range(2):
        tried = sbx_cli(["exec", "kitpin", "--", "sh", "-c",
                         "echo x >> agent/agent.yaml && echo written; mv agent gone && "
                         "echo moved; echo y > note && echo note"], env=env)
        assert tried.stdout.split() == ["note"], (attempt, tried.stdout, tried.stderr)
        stopped = sbx_cli(["stop", "kitpin"], env=env)
        assert stopped.exit_code == 0, stopped.stderr
        restarted = sbx_cli(["run", "--name", "kitpin", "-d", "./agent", "."], env=env,
                            cwd=ws)
        assert restarted.exit_code == 0, restarted.stderr
    assert b"x\n" not in (kit / "agent.yaml").read_bytes()
