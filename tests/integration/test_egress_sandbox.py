"""Attacks on the egress boundary from inside a real sandbox; each must fail to get through.

The "internet" is local (TESTING.md): an origin on 127.0.0.1 answering for any host name over
HTTP and HTTPS with a test CA, reached through sbx's `[network] upstream_proxy` setting (a test
forward proxy on loopback). Refusals are proven by the proxy's 403 and by what the origin (or a
loopback listener) did not see; nothing is ever sent to another address.
"""

from __future__ import annotations

import json
import os
import re
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.kits import api_key_credential, capabilities, network_policy, rule
from tests.support.origin import Internet

pytestmark = pytest.mark.docker

BOOKWORM = "sbx-base/bookworm:1"
SECRET = "ghp-real-secret-value-must-stay-on-the-host"  # noqa: S105 - a test value
SENTINEL = "sbx-proxy-managed-github"
GH_POLICY = capabilities(
    network_policy(version=2, install=["example.org"], runtime=[
        "github.com",
        rule(["api.github.com"], methods=["GET", "HEAD", "POST", "PATCH", "PUT", "DELETE"]),
    ], deny=[rule(["api.github.com"], methods=["DELETE"], paths=["/repos/**"])]),
    api_key_credential("github", "GH_TOKEN", "api.github.com"), """
  - type: com.docker.sandbox/lifecycle@1
    config:
      install:
        - command: >-
            curl -sS -m 10 -o /dev/null -w '%{http_code}' http://example.org/install
            > /var/tmp/install-egress || echo failed > /var/tmp/install-egress
""")


@pytest.fixture
def egress_env(tmp_path: Path, state_home: Path, internet: Internet) -> dict[str, str]:
    config = internet.sbx_config(tmp_path / "config.toml")
    internet.origin.clear()
    return {**os.environ, "SBX_HOME": str(state_home), "SBX_CONFIG": str(config),
            "NO_COLOR": "1"}


@pytest.fixture
def gh_kit(kit_factory: Callable[..., Path]) -> Path:
    return kit_factory("egress", f"FROM {BOOKWORM}\nUSER agent\nWORKDIR /home/agent/work\n",
                       GH_POLICY)


def _bind_secret(sbx_cli: Any, env: dict[str, str]) -> None:
    stdin_env = dict(env)
    from sbx.domain.credentials.secrets import SecretStore

    SecretStore(Path(stdin_env["SBX_HOME"])).set("github", SECRET)


def _run(sbx_cli: Any, env: dict[str, str], kit: Path, script: str) -> dict[str, Any]:
    result = sbx_cli(["run", "--json", str(kit), "--timeout", "120", "--", "bash", "-c", script],
                     env=env)
    envelope: dict[str, Any] = result.envelope()
    assert envelope["status"] in ("ok", "workload_exit"), envelope
    assert SECRET not in result.stdout + result.stderr
    return envelope["data"]  # type: ignore[no-any-return]


def _values(stdout: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in stdout.splitlines() if "=" in line)


def test_required_credential_unbound_refuses_before_anything_starts(
        gh_kit: Path, sbx_cli: Any, egress_env: dict[str, str]) -> None:
    result = sbx_cli(["run", str(gh_kit), "--", "true"], env=egress_env)
    assert result.exit_code == 125 and "(credential_unbound)" in result.stderr
    assert "sbx secret set github" in result.stderr


def test_allowed_request_gets_the_real_secret_and_the_sandbox_never_sees_it(
        gh_kit: Path, sbx_cli: Any, egress_env: dict[str, str], internet: Internet,
        state_home: Path) -> None:
    _bind_secret(sbx_cli, egress_env)
    script = (
        'echo "token=$GH_TOKEN"; '
        'echo "code=$(curl -sS -m 10 -o /tmp/body -w "%{http_code}" '
        'https://api.github.com/user)"; '
        f'echo "env_has_secret=$(env | grep -c {SECRET})"; '
        f'echo "files_with_secret=$(grep -rls {SECRET} / --exclude-dir=proc --exclude-dir=sys '
        '2>/dev/null | wc -l)"'
    )
    values = _values(_run(sbx_cli, egress_env, gh_kit, script)["stdout"])
    assert values["token"] == SENTINEL
    assert values["code"] == "200"
    assert (values["env_has_secret"], values["files_with_secret"]) == ("0", "0")
    seen = [r for r in internet.origin.requests() if r.path.startswith("/user")]
    assert len(seen) == 1
    assert seen[0].header("authorization") == f"Bearer {SECRET}"
    assert SENTINEL not in json.dumps(seen[0].headers)
    # Nothing of the secret in the state sbx keeps: audit log, run files.
    for path in state_home.rglob("*"):
        if path.is_file() and "secrets" not in path.parts:
            assert SECRET.encode() not in path.read_bytes(), path


def test_denied_method_and_path_tricks_are_refused_with_403(
        gh_kit: Path, sbx_cli: Any, egress_env: dict[str, str], internet: Internet) -> None:
    _bind_secret(sbx_cli, egress_env)
    attempts = {
        "plain": "/repos/o/r",
        "dotdot": "/gists/../repos/o/r",
        "encoded": "/%2e%2e/repos/o/r",
        "double": "//repos/o/r",
        "encslash": "/repos%2fo/r",
    }
    script = "; ".join(
        f'echo "{name}=$(curl -sS -m 10 --path-as-is -o /tmp/{name} -w "%{{http_code}}" '
        f'-X DELETE "https://api.github.com{path}")"'
        for name, path in attempts.items())
    script += ('; echo "gist=$(curl -sS -m 10 -o /dev/null -w "%{http_code}" -X DELETE '
               'https://api.github.com/gists/1)"; echo "body=$(tr -d "\\n" < /tmp/plain)"')
    values = _values(_run(sbx_cli, egress_env, gh_kit, script)["stdout"])
    for name in attempts:
        assert values[name] == "403", (name, values)
    assert values["gist"] == "200"
    assert "sbx explain" in values["body"] and "DELETE" in values["body"]
    deletes = [r for r in internet.origin.requests() if r.method == "DELETE"]
    assert [r.path for r in deletes] == ["/gists/1"], "a refused DELETE reached the origin"


def test_denied_host_host_header_mismatch_and_metadata_addresses(
        gh_kit: Path, sbx_cli: Any, egress_env: dict[str, str], internet: Internet,
        state_home: Path) -> None:
    _bind_secret(sbx_cli, egress_env)
    script = (
        'echo "other=$(curl -sS -m 10 -o /dev/null -w "%{http_code}" https://example.net/ '
        '2>&1 | tail -c 3)"; '
        'echo "mismatch=$(curl -sS -m 10 -o /dev/null -w "%{http_code}" '
        '-H "Host: example.net" https://api.github.com/user)"; '
        'echo "metadata=$(curl -sS -m 10 -o /dev/null -w "%{http_code}" '
        'http://169.254.169.254/latest/meta-data/)"; '
        'echo "loopback=$(curl -sS -m 10 -o /dev/null -w "%{http_code}" '
        '--proxy "$HTTP_PROXY" --noproxy "" http://127.0.0.1:9/)"; '
        # NO_PROXY names the sandbox's own loopback: that goes nowhere near the proxy or host.
        'echo "own_loopback=$(curl -sS -m 10 -o /dev/null -w "%{http_code}" '
        'http://127.0.0.1:9/ 2>/dev/null)"'
    )
    values = _values(_run(sbx_cli, egress_env, gh_kit, script)["stdout"])
    # A refused CONNECT makes curl print its own error; the status it saw is the proxy's 403.
    assert values["other"].endswith("403") or values["other"] == "000"
    assert values["mismatch"] in ("403", "421", "400")
    assert values["metadata"] == "403"
    assert values["loopback"] == "403"  # asked of the proxy: refused
    assert values["own_loopback"] == "000"  # the sandbox's own port 9: nothing listens
    hosts = {r.header("host") for r in internet.origin.requests()}
    assert "example.net" not in hosts and "169.254.169.254" not in hosts
    audit = (state_home / "audit.jsonl").read_text(encoding="utf-8")
    denied = [json.loads(line) for line in audit.splitlines() if "egress_denied" in line]
    assert {d["details"]["host"] for d in denied} >= {"example.net", "169.254.169.254"}


def test_no_way_around_the_proxy(gh_kit: Path, sbx_cli: Any, egress_env: dict[str, str],
                                 internet: Internet) -> None:
    _bind_secret(sbx_cli, egress_env)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("0.0.0.0", 0))  # noqa: S104 - a host service on all interfaces
    listener.listen(4)
    listener.settimeout(0.1)
    port = listener.getsockname()[1]
    name = _host_resolvable_name()
    script = (
        'echo "direct=$(curl -sS -m 5 --noproxy "*" https://api.github.com/ >/dev/null 2>&1 '
        '&& echo reached || echo failed)"; '
        f'echo "dns=$(getent hosts {name} >/dev/null && echo resolved || echo failed)"; '
        'gw=$(echo "$HTTPS_PROXY" | sed -E "s#http://([^@]*@)?([^:@]+):[0-9]+\\$#\\2#"); '
        f'echo "hostsvc=$(curl -sS -m 3 --noproxy "*" http://$gw:{port}/ >/dev/null 2>&1 '
        '&& echo reached || echo failed)"'
    )
    try:
        values = _values(_run(sbx_cli, egress_env, gh_kit, script)["stdout"])
        try:
            listener.accept()
            accepted = True
        except OSError:
            accepted = False
    finally:
        listener.close()
    assert values["direct"] == "failed"
    assert values["dns"] == "failed"
    assert values["hostsvc"] == "failed" and not accepted


def test_install_phase_host_is_closed_once_install_finished(
        gh_kit: Path, sbx_cli: Any, egress_env: dict[str, str], internet: Internet) -> None:
    _bind_secret(sbx_cli, egress_env)
    script = ('echo "install=$(cat /var/tmp/install-egress)"; '
              'echo "runtime=$(curl -sS -m 10 -o /dev/null -w "%{http_code}" '
              'http://example.org/runtime 2>&1 | tail -c 3)"; '
              'echo "runtime_tls=$(curl -sS -m 10 -o /dev/null -w "%{http_code}" '
              'https://example.org/runtime 2>&1 | tail -c 3)"')
    values = _values(_run(sbx_cli, egress_env, gh_kit, script)["stdout"])
    assert values["install"] == "200"
    assert values["runtime"] == "403"
    assert values["runtime_tls"].endswith("403") or values["runtime_tls"] == "000"
    paths = [r.path for r in internet.origin.requests() if r.header("host") == "example.org"]
    # Plain HTTP reaches the origin in absolute form through the upstream proxy.
    assert [p.rsplit("example.org", 1)[-1] for p in paths] == ["/install"]


def _host_resolvable_name() -> str:
    """A name this host's own resolver answers, read from the machine's package sources."""
    for source in (Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list")):
        try:
            text = source.read_text(encoding="utf-8")
        except OSError:
            continue
        match = re.search(r"https?://([A-Za-z0-9.-]+)", text)
        if match:
            name = match.group(1)
            try:
                socket.getaddrinfo(name, None)
            except OSError:
                break
            return name
    # No name resolves on this host: a kit host is still a name the sandbox must not resolve.
    return "api.github.com"


REPO = Path(__file__).resolve().parents[2]


def test_bundled_gh_example_enforces_its_policy_and_injects_the_token(
        sbx_cli: Any, egress_env: dict[str, str], internet: Internet, tmp_path: Path) -> None:
    _bind_secret(sbx_cli, egress_env)
    script = ('echo "list=$(gh api /user/repos | head -c 200 | tr -d "\\n" | wc -c)"; '
              'echo "delete_repo=$(gh api -X DELETE /repos/o/r | head -1)"; '
              'echo "delete_gist=$(gh api -X DELETE /gists/1 | head -c 20 | wc -c)"')
    result = sbx_cli(["run", "--json", "examples/hello", "--kit", "examples/gh", "--timeout",
                      "120", "--", "bash", "-c", script], env=egress_env, cwd=REPO)
    data = result.envelope()["data"]
    values = _values(data["stdout"])
    assert int(values["list"]) > 0 and int(values["delete_gist"]) > 0
    assert values["delete_repo"].startswith("blocked by sbx egress policy (403")
    seen = {(r.method, r.path) for r in internet.origin.requests()}
    assert ("GET", "/user/repos") in seen and ("DELETE", "/gists/1") in seen
    assert ("DELETE", "/repos/o/r") not in seen
    tokens = {r.header("authorization") for r in internet.origin.requests()}
    assert tokens == {f"Bearer {SECRET}"}
    assert SECRET not in result.stdout + result.stderr


def test_egress_stops_when_the_proxy_dies(gh_kit: Path, sbx_cli: Any,
                                         egress_env: dict[str, str], tmp_path: Path,
                                         state_home: Path) -> None:
    """Fail closed: kill the run's proxy mid-run; the sandbox has no other way out."""
    import signal
    import subprocess
    import sys
    import time

    _bind_secret(sbx_cli, egress_env)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    os.chown(workspace, 1000, 1000) if os.geteuid() == 0 else None
    script = (
        'first=$(curl -sS -m 5 -o /dev/null -w "%{http_code}" https://api.github.com/user); '
        'touch "$SBX_WORKSPACE/first-done"; '
        'for i in $(seq 1 100); do [ -e "$SBX_WORKSPACE/proxy-killed" ] && break; sleep 0.1; '
        'done; '
        'second=$(curl -sS -m 5 -o /dev/null -w "%{http_code}" https://api.github.com/user '
        '2>/dev/null); echo "first=$first"; echo "second=$second"'
    )
    sbx = str(Path(sys.executable).parent / "sbx")
    process = subprocess.Popen([sbx, "run", str(gh_kit), str(workspace), "--timeout", "60",
                                "--", "bash", "-c", script], env=egress_env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (workspace / "first-done").exists():
            time.sleep(0.1)
        runs = [json.loads(p.read_text()) for p in (state_home / "runs").glob("*/run.json")]
        proxy_pids = [r["proxy_pid"] for r in runs if r.get("proxy_pid")]
        assert proxy_pids, "the run recorded no proxy"
        os.kill(proxy_pids[0], signal.SIGKILL)
        (workspace / "proxy-killed").touch()
        out, err = process.communicate(timeout=90)
    finally:
        if process.poll() is None:
            process.kill()
    values = _values(out)
    assert values["first"] == "200"
    assert values["second"] in ("000", ""), (values, err)
