"""A named sandbox's egress across its starts, on a real engine with the local "internet":
secrets from a host variable, a host command and the OS keyring reach the origin (resolved by
the CLI at every start, handed to the keeper over its pipe); a recorded proxy port another
local user (sbx-tester, uid 4321) took while the sandbox was stopped does not stop it from
starting, and that user's listener never sees the sandbox's traffic; an OAuth login made
inside the sandbox is the sandbox's until the user promotes it.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sbx.base import labels
from sbx.domain.credentials.oauth import Tokens
from sbx.domain.credentials.oauthstore import OAuthStore
from sbx.domain.sandbox import runrecord
from sbx.seams.driver import SdkEngine
from tests.support.agent_api import OAuthServer, TokenState
from tests.support.kits import api_key_credential, capabilities, network_policy, rule
from tests.support.origin import Internet
from tests.support.sbxproc import Finished, run_sbx

from .conftest import make_kit, owned

pytestmark = pytest.mark.docker

SECRET = "ghp_named_secret_from_a_source_" + "y" * 12
OTHER = "ghp_named_secret_changed_later_" + "z" * 12
TESTER_UID = 4321
SUPPORT = Path(__file__).resolve().parents[1] / "support"
EGRESS_KIT = capabilities(
    network_policy(version=2, runtime=[rule(["api.github.com"], methods=["GET"])]),
    api_key_credential("github", "GH_TOKEN", "api.github.com", value_format="token %s"))
CURL = 'curl -sS -m 20 -o /dev/null -w "%{http_code}" https://api.github.com/user'


@pytest.fixture(scope="module")
def egress_kit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_kit(tmp_path_factory.mktemp("kits"), "netagent",
                    "FROM sbx-base/bookworm:1\nUSER agent\nWORKDIR /workspace\n"
                    "CMD [\"bash\"]\n", EGRESS_KIT)


@pytest.fixture
def env(tmp_path: Path, state_home: Path, internet: Internet) -> dict[str, str]:
    internet.origin.clear()
    config = internet.sbx_config(tmp_path / "config.toml")
    return {**os.environ, "SBX_HOME": str(state_home), "SBX_CONFIG": str(config),
            "PYTHON_KEYRING_BACKEND": "keyring.backends.fail.Keyring"}


@pytest.fixture
def name(env: dict[str, str]) -> Iterator[str]:
    chosen = f"ne-{uuid.uuid4().hex[:10]}"
    yield chosen
    run_sbx(["rm", "-f", chosen], env=env, timeout=120)


def sbx(env: dict[str, str], *args: str, data: bytes | None = None) -> Finished:
    return run_sbx(list(args), env=env, data=data, timeout=180)


def _authorizations(internet: Internet) -> list[str | None]:
    return [r.header("authorization") for r in internet.origin.requests() if r.path == "/user"]


def _run_dir(state_home: Path) -> Path:
    [directory] = [p.parent for p in (state_home / "runs").glob("*/proxy.json")]
    return directory


def _start_and_call(env: dict[str, str], name: str, kit: Path, internet: Internet,
                    *, create: bool) -> str | None:
    """Create (or start) the sandbox detached, call the API from inside; what the origin got."""
    internet.origin.clear()
    args = ["run", "--name", name, "-d", str(kit)] + (["--", "sleep", "600"] if create else [])
    started = sbx(env, *args)
    assert started.returncode == 0, started.stderr.decode()
    done = sbx(env, "exec", name, "--", "bash", "-c", CURL)
    assert done.stdout.decode() == "200", done.stderr.decode()
    [authorization] = _authorizations(internet)
    return authorization


@pytest.mark.parametrize("source", ["env", "command", "keyring"])
def test_a_secret_from_each_dynamic_source_reaches_the_origin_on_every_start(
        egress_kit: Path, env: dict[str, str], name: str, internet: Internet,
        tmp_path: Path, source: str) -> None:
    value_file = tmp_path / "value"
    value_file.write_text(SECRET, encoding="utf-8")
    if source == "env":
        env["SBX_TEST_GH_VALUE"] = SECRET
        stored = sbx(env, "secret", "set", "github", "--from-env", "SBX_TEST_GH_VALUE")
    elif source == "command":
        stored = sbx(env, "secret", "set", "github", "--from-command", f"cat {value_file}")
    else:
        env.update({"PYTHON_KEYRING_BACKEND": "fakekeyring.FileKeyring",
                    "SBX_TEST_KEYRING_FILE": str(tmp_path / "keyring.json"),
                    "PYTHONPATH": os.pathsep.join(filter(None, [
                        str(SUPPORT), os.environ.get("PYTHONPATH")]))})
        stored = sbx(env, "secret", "set", "github", data=SECRET.encode())
        assert b"OS keyring" in stored.stdout
    assert stored.returncode == 0, stored.stderr.decode()
    assert _start_and_call(env, name, egress_kit, internet, create=True) == f"token {SECRET}"
    # stop, change the source's value, start again: this start resolved it afresh
    assert sbx(env, "stop", name).returncode == 0
    if source == "env":
        env["SBX_TEST_GH_VALUE"] = OTHER
    elif source == "command":
        value_file.write_text(OTHER, encoding="utf-8")
    else:
        assert sbx(env, "secret", "set", "github", data=OTHER.encode()).returncode == 0
    assert _start_and_call(env, name, egress_kit, internet, create=False) == f"token {OTHER}"
    # never written down: not in the run directory, the keeper's log or the proxy's
    for path in _run_dir(Path(env["SBX_HOME"])).rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert SECRET.encode() not in data and OTHER.encode() not in data, path
    if source == "env":  # the variable gone at the next start: refused by name, not a 502
        assert sbx(env, "stop", name).returncode == 0
        del env["SBX_TEST_GH_VALUE"]
        refused = sbx(env, "run", "--name", name, "-d", str(egress_kit))
        assert refused.returncode == 125 and b"(credential_unbound)" in refused.stderr
        assert b"SBX_TEST_GH_VALUE" in refused.stderr


def _hold_port(address: str, port: int) -> subprocess.Popen[bytes]:
    """A listener of the non-root user sbx-tester on address:port that reports every
    connection it accepts (bounded: it exits after 300 s)."""
    script = ("import socket, sys, time\n"
              "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
              "s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(8)\n"
              "s.settimeout(0.5); print('listening', flush=True); end = time.time() + 300\n"
              "while time.time() < end:\n"
              "    try:\n        c, _ = s.accept()\n    except TimeoutError:\n        continue\n"
              "    print('accepted', flush=True); c.close()\n")
    holder = subprocess.Popen(
        ["setpriv", f"--reuid={TESTER_UID}", f"--regid={TESTER_UID}", "--init-groups",
         "/usr/bin/python3", "-c", script, address, str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd="/")
    assert holder.stdout is not None
    assert holder.stdout.readline() == b"listening\n", holder.stderr.read() if \
        holder.stderr else b""
    return holder


def _until_no_proxy(state_home: Path, timeout: float = 60.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    cmdline = (entry / "cmdline").read_bytes()
                except OSError:
                    continue
                if b"sbx.proxy" in cmdline and str(state_home).encode() in cmdline:
                    alive.append(entry.name)
        if not alive:
            return
        time.sleep(0.2)
    raise AssertionError("the stopped sandbox's proxy never exited")


def _nat_rules(run_id: str) -> list[str]:
    listing = subprocess.run(["iptables", "-w", "5", "-t", "nat", "-S", "PREROUTING"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    return [line for line in listing.splitlines() if f"sbx-run-{run_id}" in line]


@pytest.mark.skipif(os.geteuid() != 0, reason="another user and the host firewall need root")
def test_a_recorded_proxy_port_another_user_took_does_not_stop_the_start(
        egress_kit: Path, env: dict[str, str], name: str, internet: Internet,
        engine: SdkEngine, state_home: Path) -> None:
    from sbx.domain.credentials.secrets import SecretStore

    SecretStore(state_home, keyring=None).set("github", SECRET)
    assert _start_and_call(env, name, egress_kit, internet, create=True) == f"token {SECRET}"
    assert sbx(env, "stop", name).returncode == 0
    _until_no_proxy(state_home)  # the keeper stops its proxy just after `sbx stop` returns
    run_dir = _run_dir(state_home)
    port = json.loads((run_dir / "proxy.json").read_text(encoding="utf-8"))["listen_port"]
    [network] = [o for o in owned(engine, state_home)
                 if o.kind == "network" and o.labels.get(labels.NAME) == name]
    gateway = engine.network_gateway(network.id)
    holder = _hold_port(gateway, port)
    try:
        # the start goes on: the proxy on a free port, the recorded one redirected to it
        assert _start_and_call(env, name, egress_kit, internet,
                               create=False) == f"token {SECRET}"
        refused = sbx(env, "exec", name, "--", "bash", "-c",
                      'curl -sS -m 20 -o /dev/null -w "%{http_code}" http://evil.example/')
        assert refused.stdout.decode() == "403"  # the policy still holds on the new port
        moved = json.loads((run_dir / "proxy.moved.json").read_text(encoding="utf-8"))
        assert moved["listen_port"] == 0
        [nat] = _nat_rules(run_dir.name)
        assert f"--dport {port}" in nat and "DNAT" in nat
    finally:
        holder.terminate()
        out, _ = holder.communicate(timeout=30)
    assert b"accepted" not in out  # the other user's listener never saw the sandbox
    # the next start on a free port is back on the recorded one, the redirect gone
    assert sbx(env, "stop", name).returncode == 0
    assert _start_and_call(env, name, egress_kit, internet, create=False) == f"token {SECRET}"
    assert _nat_rules(run_dir.name) == []
    run_id = run_dir.name
    assert sbx(env, "rm", "-f", name).returncode == 0
    assert _nat_rules(run_id) == []


GH_POLICY = """
capabilities:
  - type: com.docker.sandbox/network-policy@1
    config:
      runtime:
        allow: [api.github.com, github.com]
  - type: com.docker.sandbox/credential@1
    config:
      service: github
      phase: runtime
      oauth:
        tokenEndpoint: {host: github.com, path: /login/oauth/access_token}
        resourceHosts: [api.github.com]
        sentinels: {accessToken: gho_sbx-access, refreshToken: ghr_sbx-refresh}
"""
USER_ACCESS = "real-access-token-0-the-users-own-login"
USER_REFRESH = "real-refresh-token-0-the-users-own-login"


@pytest.fixture
def github(internet: Internet) -> Iterator[OAuthServer]:
    server = OAuthServer("github.com", "/login/oauth/access_token",
                         TokenState(USER_ACCESS, USER_REFRESH), answer_as="form")
    server.install(internet.origin)
    yield server
    internet.origin.unroute("github.com")


def test_a_login_inside_a_named_sandbox_is_its_own_until_the_user_promotes_it(
        kit_factory: Callable[..., Path], env: dict[str, str], name: str,
        internet: Internet, github: OAuthServer, state_home: Path) -> None:
    kit = kit_factory("ghlogin", "FROM sbx-base/bookworm:1\nUSER agent\nWORKDIR /workspace\n",
                      GH_POLICY)
    OAuthStore(state_home).set("github", Tokens(USER_ACCESS, USER_REFRESH))
    started = sbx(env, "run", "--name", name, "-d", str(kit), "--", "sleep", "600")
    assert started.returncode == 0, started.stderr.decode()
    login = sbx(env, "exec", name, "--", "bash", "-c",
                "curl -sS -m 20 -X POST -d 'grant_type=authorization_code&code="
                f"{github.code}' https://github.com/login/oauth/access_token")
    assert b"access_token=gho_sbx-access" in login.stdout, login
    assert b"real-" not in login.stdout
    login_access = github.state.access_token
    # the user's login is untouched; `secret ls` shows the sandbox's as the sandbox's
    user = OAuthStore(state_home).get("github")
    assert user is not None and user.access_token == USER_ACCESS
    listed = json.loads(sbx(env, "secret", "ls", "--json").stdout.decode().splitlines()[-1])
    assert [(e["service"], e["sandbox"]) for e in listed["data"]["oauth"]] == [
        ("github", None), ("github", name)]

    def api_token() -> str | None:
        internet.origin.clear()
        done = sbx(env, "exec", name, "--", "bash", "-c", 'curl -sS -m 20 -o /dev/null -w '
                   '"%{http_code}" -H "Authorization: Bearer gho_sbx-access" '
                   "https://api.github.com/user")
        assert done.stdout == b"200", done
        [authorization] = _authorizations(internet)
        return authorization

    assert api_token() == f"Bearer {login_access}"  # the sandbox uses its own login
    # it survives a stop/start (kept in its run directory), still the sandbox's alone
    assert sbx(env, "stop", name).returncode == 0
    assert sbx(env, "run", "--name", name, "-d", str(kit)).returncode == 0
    assert api_token() == f"Bearer {login_access}"
    promoted = sbx(env, "secret", "login", "github", "--from-sandbox", name)
    assert promoted.returncode == 0, promoted.stderr.decode()
    user = OAuthStore(state_home).get("github")
    assert user is not None and user.access_token == login_access
    assert api_token() == f"Bearer {login_access}"  # now through the user's store
    assert OAuthStore.at(runrecord.login_dir(state_home, _run_dir(state_home).name)).get(
        "github") is None
