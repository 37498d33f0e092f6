"""Boundary holes of issue #10, attacked for real: running sandboxes, a host process of another
user (``sbx-tester``, uid 4321), a container on another Docker network that the test creates,
concurrent runs, and an ``sbx`` killed with SIGKILL.

The "internet" is local (TESTING.md): an origin on 127.0.0.1 answering for any host, reached
through sbx's ``[network] upstream_proxy``. Attackers only ever talk to the sandbox's proxy (on
the gateway of the run's network, which sbx created for the test); refusals are proven by the
proxy's answer and by what the origin and the upstream proxy did not see.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sbx.domain.credentials.secrets import SecretStore
from tests.support.kits import api_key_credential, capabilities, network_policy, rule
from tests.support.origin import Internet

from .conftest import TESTER_UID, owned, user_owned

pytestmark = pytest.mark.docker

BOOKWORM = "sbx-base/bookworm:1"
SBX = str(Path(sys.executable).parent / "sbx")
SECRET = "ghp-boundary-secret-value-stays-on-the-host"  # noqa: S105 - a test value
PROXY_URL = re.compile(r"^http://sbx:(?P<token>[0-9a-f]{64})@(?P<host>[0-9.]+):(?P<port>\d+)$")
POLICY = capabilities(
    network_policy(version=2, runtime=[
        "github.com", "example.org",
        rule(["api.github.com"], methods=["GET", "POST"], paths=["/v1/**"]),
    ], deny=[rule(["api.github.com"], methods=["ANY"], paths=["/v1/admin/**"])]),
    api_key_credential("github", "GH_TOKEN", "api.github.com"))
OPEN_POLICY = capabilities(network_policy(version=2, runtime=["*"]))



def _bridge(rule: str) -> str:
    """The interface an iptables rule matches (``-i NAME``)."""
    found = re.search(r"-i (\S+)", rule)
    assert found is not None, rule
    return found[1]

@pytest.fixture
def env(tmp_path: Path, state_home: Path, internet: Internet) -> dict[str, str]:
    config = internet.sbx_config(tmp_path / "config.toml")
    internet.origin.clear()
    SecretStore(state_home).set("github", SECRET)
    return {**os.environ, "SBX_HOME": str(state_home), "SBX_CONFIG": str(config),
            "NO_COLOR": "1"}


@pytest.fixture
def kit(kit_factory: Callable[..., Path]) -> Path:
    return kit_factory("boundary", f"FROM {BOOKWORM}\nUSER agent\nWORKDIR /home/agent/work\n",
                       POLICY)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return user_owned(path)


def wait_for(path: Path, seconds: float = 90.0, process: subprocess.Popen[Any] | None = None,
             ) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.exists():
            return
        if process is not None and process.poll() is not None:
            out, err = process.communicate()
            raise AssertionError(f"sbx ended before {path.name}: {out!r} {err!r}")
        time.sleep(0.05)
    raise AssertionError(f"{path.name} did not appear in {seconds} s")


def values(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def audit_denials(state_home: Path) -> list[dict[str, Any]]:
    path = state_home / "audit.jsonl"
    events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [e["details"] for e in events if e["event_type"] == "egress_denied"]


# What another host user runs against the sandbox's proxy (system python, no venv needed).
ATTACKER = r"""
import base64, json, socket, sys
host, port, token = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def ask(request):
    try:
        with socket.create_connection((host, port), timeout=10) as sock:
            sock.sendall(request)
            data = b""
            while b"\r\n" not in data:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                data += chunk
    except OSError as error:
        return "refused:" + type(error).__name__
    return data.split(b"\r\n", 1)[0].decode("latin-1") or "closed"
auth = b"Proxy-Authorization: Basic " + base64.b64encode(b"sbx:" + token.encode()) + b"\r\n"
print(json.dumps({
    "connect_no_token": ask(b"CONNECT api.github.com:443 HTTP/1.1\r\nHost: x\r\n\r\n"),
    "connect_stolen_token": ask(b"CONNECT api.github.com:443 HTTP/1.1\r\nHost: x\r\n" + auth
                                + b"\r\n"),
    "plain_stolen_token": ask(b"GET http://github.com/attacker-host HTTP/1.1\r\n"
                              b"Host: github.com\r\n" + auth + b"\r\n"),
}))
"""


def _status_code(line: str) -> str:
    return line.split(" ")[1] if line.startswith("HTTP/") else line


def test_only_the_sandbox_may_use_its_proxy(
        kit: Path, workspace: Path, env: dict[str, str], internet: Internet,
        state_home: Path) -> None:
    script = r'''
set -u
url="$HTTPS_PROXY"; bare="http://${url##*@}"
echo "$url" > "$SBX_WORKSPACE/proxy-url"
for name in HTTP_PROXY http_proxy https_proxy; do
  [ "${!name}" = "$url" ] || echo "differs=$name"
done
echo "ok=$(curl -sS -m 10 -o /dev/null -w '%{http_code}' https://api.github.com/v1/sandbox-ok)"
echo "bare_plain=$(curl -sS -m 10 -o "$SBX_WORKSPACE/bare-body" -w '%{http_code}' \
  --proxy "$bare" http://github.com/sandbox-bare)"
echo "bare_connect=$(curl -sS -m 10 -o /dev/null -w '%{http_connect}' --proxy "$bare" \
  https://api.github.com/v1/sandbox-bare 2>/dev/null)"
touch "$SBX_WORKSPACE/ready"
for i in $(seq 1 900); do [ -e "$SBX_WORKSPACE/done" ] && break; sleep 0.1; done
'''
    process = subprocess.Popen([SBX, "run", "--json", str(kit), str(workspace), "--timeout",
                                "150", "--", "bash", "-c", script], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    attacker_net = f"sbx-test-attacker-{uuid.uuid4().hex[:12]}"
    try:
        wait_for(workspace / "ready", process=process)
        match = PROXY_URL.match((workspace / "proxy-url").read_text().strip())
        assert match, (workspace / "proxy-url").read_text()
        token, gateway, port = match["token"], match["host"], match["port"]
        rules = _rules_of_the_run(state_home)
        during = [path for path in state_home.rglob("*")  # proxy.json, run.json, proxy.log...
                  if path.is_file() and token.encode() in path.read_bytes()]
        proxy_argv = Path(f"/proc/{_proxy_pid(state_home)}/cmdline").read_bytes()

        # another host user, with the address and even the stolen token
        host_user = subprocess.run(
            ["setpriv", f"--reuid={TESTER_UID}", f"--regid={TESTER_UID}", "--init-groups",
             "/usr/bin/python3", "-c", ATTACKER, gateway, port, token],
            capture_output=True, text=True, timeout=60, check=True, cwd="/")
        from_host = {k: _status_code(v) for k, v in json.loads(host_user.stdout).items()}

        # a container on another Docker network (created here), with the stolen token
        subprocess.run(["docker", "network", "create", attacker_net], check=True,
                       capture_output=True, timeout=60)
        container = subprocess.run(
            ["docker", "run", "--rm", "--network", attacker_net, BOOKWORM, "bash", "-c",
             f'echo "stolen=$(curl -sS -m 10 -o /dev/null -w "%{{http_code}}/%{{http_connect}}" '
             f'-x "http://sbx:{token}@{gateway}:{port}" https://api.github.com/v1/attacker '
             f'2>/dev/null)"; echo "plain=$(curl -sS -m 10 -o /dev/null -w "%{{http_code}}" '
             f'-x "http://sbx:{token}@{gateway}:{port}" http://github.com/attacker 2>/dev/null)"'],
            capture_output=True, text=True, timeout=120, check=False)
        from_container = values(container.stdout)
    finally:
        (workspace / "done").touch()
        try:
            out, err = process.communicate(timeout=120)
        finally:
            if process.poll() is None:
                process.kill()
            subprocess.run(["docker", "network", "rm", attacker_net], capture_output=True,
                           timeout=60, check=False)
    envelope = json.loads(out.strip().splitlines()[-1])
    inside = values(envelope["data"]["stdout"])
    assert inside["ok"] == "200", envelope
    assert "differs" not in inside
    # the sandbox itself without the credentials: 407, naming why
    assert inside["bare_plain"] == "407" and inside["bare_connect"] == "407"
    bare_body = (workspace / "bare-body").read_text()
    assert "proxy_client_refused" in bare_body and "proxy_auth_missing" in bare_body
    # the others: refused as not the sandbox (403), even holding the stolen token
    assert from_host == dict.fromkeys(("connect_no_token", "connect_stolen_token",
                                       "plain_stolen_token"), "403"), from_host
    assert from_container == {"stolen": "000/403", "plain": "403"}, from_container
    # nothing of theirs arrived; the sandbox's own request carried the secret
    paths = [r.path for r in internet.origin.requests()]
    assert paths == ["/v1/sandbox-ok"], paths
    assert internet.origin.requests()[0].header("authorization") == f"Bearer {SECRET}"
    # refusals audited, the token nowhere: audit log, --json, stderr, explain
    codes = [d["code"] for d in audit_denials(state_home)]
    assert codes.count("proxy_auth_missing") == 2
    assert "peer_not_sandbox" in codes
    explain = subprocess.run([SBX, "explain", "--last"], env=env, capture_output=True,
                             text=True, timeout=60, check=False)
    for text in ((state_home / "audit.jsonl").read_text(), out, err, explain.stdout,
                 explain.stderr):
        assert token not in text
    assert during == [], "the token was written to the state home"
    assert token.encode() not in proxy_argv  # argv is world-readable in /proc
    for path in state_home.rglob("*"):
        if path.is_file():
            assert token.encode() not in path.read_bytes(), path
    assert token != SECRET and SECRET not in out + err
    # the firewall: the run's bridge only, accept only the proxy's address and port
    accept = [r for r in rules if "ACCEPT" in r and "--dport" in r]
    assert accept and all(f"-d {gateway}/32" in r and f"--dport {port}" in r for r in accept)
    bridges = {_bridge(r) for r in rules}
    assert len(bridges) == 1 and len(rules) == 3, rules
    assert rules.index(accept[0]) < next(i for i, r in enumerate(rules) if r.endswith("DROP"))


def _proxy_pid(state_home: Path) -> int:
    [run_dir] = list((state_home / "runs").iterdir())
    return int(json.loads((run_dir / "run.json").read_text())["proxy_pid"])


def _rules_of_the_run(state_home: Path) -> list[str]:
    [run_dir] = list((state_home / "runs").iterdir())
    listing = subprocess.run(["iptables", "-w", "5", "-S", "INPUT"], capture_output=True,
                             text=True, timeout=30, check=True).stdout
    return [line for line in listing.splitlines() if f"sbx-run-{run_dir.name}" in line]


def test_curl_and_python_in_the_sandbox_use_the_proxy_credentials(
        kit: Path, workspace: Path, env: dict[str, str], internet: Internet, sbx_cli: Any,
        tmp_path: Path) -> None:
    # The corporate CA file as some are handed out: the CA and, carelessly, a private key.
    careless = tmp_path / "corp-ca.pem"
    careless.write_bytes(internet.pki.ca_file.read_bytes() + internet.pki.key_file.read_bytes())
    config = Path(env["SBX_CONFIG"])
    config.write_text(config.read_text().replace(str(internet.pki.ca_file), str(careless)))
    script = r'''
echo "$HTTPS_PROXY" > "$SBX_WORKSPACE/proxy-url"
echo "curl_https=$(curl -sS -m 10 -o /dev/null -w '%{http_code}' https://api.github.com/v1/curl)"
echo "curl_tunnel=$(curl -sS -m 10 -o /dev/null -w '%{http_code}' https://example.org/curl)"
echo "node_ca=$(grep -c 'BEGIN CERTIFICATE' "$NODE_EXTRA_CA_CERTS")"
echo "leaked_key=$(cat /etc/sbx/*.pem /etc/ssl/certs/ca-certificates.crt | grep -c PRIVATE)"
echo "curl_http=$(curl -sS -m 10 -o /dev/null -w '%{http_code}' http://github.com/curl)"
python3 - <<'EOF'
import urllib.request
# the tunnelled host shows a certificate of the TLS-intercepting upstream proxy's CA
# (upstream_ca_file), which sbx made the sandbox trust beside its own
for name, url in (("urllib_https", "https://api.github.com/v1/urllib"),
                  ("urllib_tunnel", "https://example.org/urllib"),
                  ("urllib_http", "http://github.com/urllib")):
    with urllib.request.urlopen(url, timeout=10) as answer:
        print(f"{name}={answer.status}")
EOF
'''
    result = sbx_cli(["run", "--json", str(kit), str(workspace), "--timeout", "120", "--",
                      "bash", "-c", script], env=env)
    data = result.envelope()["data"]
    got = values(data["stdout"])
    assert {k: got.get(k) for k in ("curl_https", "curl_tunnel", "curl_http", "urllib_https",
                                    "urllib_tunnel", "urllib_http")} == dict.fromkeys(
        ("curl_https", "curl_tunnel", "curl_http", "urllib_https", "urllib_tunnel",
         "urllib_http"), "200"), data
    assert got.get("node_ca") == "2" and got.get("leaked_key") == "0", data  # sbx's + upstream's
    match = PROXY_URL.match((workspace / "proxy-url").read_text().strip())
    assert match and match["token"] != SECRET
    assert match["token"] not in result.stdout + result.stderr
    seen = {r.path: r for r in internet.origin.requests()}
    assert seen["/v1/curl"].header("authorization") == f"Bearer {SECRET}"
    assert seen["/v1/urllib"].header("authorization") == f"Bearer {SECRET}"
    for request in internet.origin.requests():
        assert all(match["token"] not in value for _, value in request.headers)


SNI_PROBE = r'''
import base64, os, socket, ssl
url = os.environ["HTTPS_PROXY"][len("http://"):]
userinfo, hostport = url.rsplit("@", 1)
host, port = hostport.rsplit(":", 1)
auth = base64.b64encode(userinfo.encode()).decode()
sock = socket.create_connection((host, int(port)), timeout=10)
sock.sendall(("CONNECT example.org:443 HTTP/1.1\r\nHost: example.org:443\r\n"
              f"Proxy-Authorization: Basic {auth}\r\n\r\n").encode())
head = b""
while b"\r\n\r\n" not in head:
    head += sock.recv(1)
print("connect=" + head.split(b" ")[1].decode())
careless = ssl.create_default_context()
careless.check_hostname = False
careless.verify_mode = ssl.CERT_NONE
try:
    with careless.wrap_socket(sock, server_hostname="evil.example") as tls:
        print("sni=handshake")
except (ssl.SSLError, OSError) as error:
    print("sni=refused " + type(error).__name__)
'''


def test_boundary_tricks_from_inside_a_sandbox(
        kit: Path, workspace: Path, env: dict[str, str], internet: Internet, sbx_cli: Any,
        state_home: Path) -> None:
    tricks = {"dotdot_param": "/v1/..;/v2/x", "encoded_param": "/v1/%2e%2e;/v2/x",
              "encoded_semicolon": "/v1/..%3b/v2/x", "deny_param": "/v1/admin;x/users"}
    lines = [f'echo "{name}=$(curl -sS -m 10 --path-as-is -o /dev/null -w "%{{http_code}}" '
             f'"https://api.github.com{path}")"' for name, path in tricks.items()]
    lines += [
        'echo "gzip=$(curl -sS -m 10 --compressed -o "$SBX_WORKSPACE/gzip-body" '
        '-w "%{http_code}" https://api.github.com/v1/echo-encoded/gzip)"',
        'echo "br=$(curl -sS -m 10 -o "$SBX_WORKSPACE/br-body" -w "%{http_code}" '
        'https://api.github.com/v1/echo-encoded/br)"',
        f"python3 - <<'EOF'\n{SNI_PROBE}\nEOF",
    ]
    result = sbx_cli(["run", "--json", str(kit), str(workspace), "--timeout", "120", "--",
                      "bash", "-c", "\n".join(lines)], env=env)
    got = values(result.envelope()["data"]["stdout"])
    for name in tricks:
        assert got[name] == "403", (name, got)
    assert got["gzip"] == "200" and got["br"] == "502"
    for body in ("gzip-body", "br-body"):
        assert SECRET not in (workspace / body).read_text(errors="replace")
    assert "response_unmaskable" in (workspace / "br-body").read_text()
    assert got["connect"] == "200" and got["sni"].startswith("refused"), got
    assert "evil.example" not in internet.origin.server_names()
    paths = [r.path for r in internet.origin.requests()]
    assert paths == ["/v1/echo-encoded/gzip", "/v1/echo-encoded/br"], paths
    codes = {d["code"] for d in audit_denials(state_home)}
    assert {"deny_rule", "path_not_allowed", "sni_mismatch"} <= codes


def test_metadata_names_are_refused_from_a_sandbox_whatever_the_upstream(
        kit_factory: Callable[..., Path], workspace: Path, env: dict[str, str],
        internet: Internet, sbx_cli: Any) -> None:
    open_kit = kit_factory("open", f"FROM {BOOKWORM}\nUSER agent\n", OPEN_POLICY)
    targets = {"google": "http://metadata.google.internal/computeMetadata/v1/",
               "short": "http://metadata/computeMetadata/v1/",
               "aws": "http://instance-data/latest/meta-data/",
               "aws_fqdn": "http://instance-data.ec2.internal/latest/meta-data/",
               "azure": "https://metadata.azure.com/metadata/instance",
               "alibaba": "http://100.100.100.200/latest/meta-data/",
               "aws_v6": "http://[fd00:ec2::254]/latest/meta-data/",
               "public": "http://example.com/fine"}
    script = "\n".join(
        f'echo "{name}=$(curl -sS -m 10 -o /dev/null -w "%{{http_code}}/%{{http_connect}}" '
        f'-H "Metadata-Flavor: Google" "{url}" 2>/dev/null)"' for name, url in targets.items())
    before = len(internet.upstream.targets())
    result = sbx_cli(["run", "--json", str(open_kit), str(workspace), "--timeout", "120", "--",
                      "bash", "-c", script], env=env)
    got = values(result.envelope()["data"]["stdout"])
    for name in targets:
        if name == "public":
            assert got[name] == "200/000", got
        else:
            assert got[name] in ("403/000", "000/403"), (name, got)
    assert internet.upstream.targets()[before:] == ["http://example.com/fine"]


def _process_gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")  # a zombie has exited


def test_the_proxy_exits_when_sbx_is_killed(
        kit: Path, workspace: Path, env: dict[str, str], state_home: Path, sbx_cli: Any,
        engine: Any) -> None:
    script = ('curl -sS -m 10 -o /dev/null https://example.org/before; '
              'touch "$SBX_WORKSPACE/started"; '
              'for i in $(seq 1 600); do [ -e "$SBX_WORKSPACE/stop" ] && break; sleep 0.1; done')
    process = subprocess.Popen([SBX, "run", str(kit), str(workspace), "--timeout", "120",
                                "--", "bash", "-c", script], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(workspace / "started", process=process)
        [record] = [json.loads(p.read_text()) for p in (state_home / "runs").glob("*/run.json")]
        proxy_pid = record["proxy_pid"]
        assert not _process_gone(proxy_pid)
        process.kill()  # SIGKILL: no cleanup code of sbx runs
        process.wait(30)
        deadline = time.monotonic() + 20
        while not _process_gone(proxy_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _process_gone(proxy_pid), "the proxy outlived the sbx that started it"
    finally:
        (workspace / "stop").touch()
        if process.poll() is None:
            process.kill()
            process.wait(30)
        _wait_until_exited(engine, state_home)
        gc = sbx_cli(["gc", "--grace", "0"], env=env)
        assert gc.exit_code == 0, gc.stdout + gc.stderr


def _wait_until_exited(engine: Any, state_home: Path, seconds: float = 60.0) -> None:
    """The killed run's container ends by itself once its workload returns (bounded)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(o.kind == "container" and o.state == "running"
                   for o in owned(engine, state_home)):
            return
        time.sleep(0.2)


RUNS = 10


def test_ten_concurrent_networked_runs_all_reach_the_origin(
        kit_factory: Callable[..., Path], tmp_path: Path, env: dict[str, str],
        internet: Internet, sbx_cli: Any) -> None:
    """Every run's firewall rules are installed whole (accept before drop) however the
    installations of concurrent runs interleave: each sandbox reaches the origin."""
    busy = kit_factory("busy", f"FROM {BOOKWORM}\nUSER agent\n", OPEN_POLICY)
    warm = sbx_cli(["run", str(busy), "--", "true"], env=env)  # builds the kit image once
    assert warm.exit_code == 0, warm.stderr
    internet.origin.clear()

    def one(index: int) -> tuple[int, str, str]:
        done = subprocess.run(
            [SBX, "run", str(busy), "--timeout", "200", "--", "bash", "-c",
             f'curl -sS -m 30 -o /dev/null -w "code=%{{http_code}}" '
             f'http://example.com/concurrent/{index}'],
            env=env, capture_output=True, text=True, timeout=300, check=False)
        return done.returncode, done.stdout, done.stderr

    with concurrent.futures.ThreadPoolExecutor(max_workers=RUNS) as pool:
        outcomes = list(pool.map(one, range(RUNS)))
    for index, (code, out, err) in enumerate(outcomes):
        assert (code, out.strip()) == (0, "code=200"), (index, out, err)
    # plain HTTP reaches the origin in absolute form through the upstream proxy
    paths = sorted(r.path.rsplit("example.com", 1)[-1] for r in internet.origin.requests())
    assert paths == sorted(f"/concurrent/{i}" for i in range(RUNS))


def test_bridge_guards_installed_concurrently_keep_accept_before_drop() -> None:
    """The same race without the engine: many runs' rules installed at once on made-up
    bridges (no such interface exists, so the rules match nothing); each run's accept must
    precede its drop."""
    from sbx.seams.host.firewall import BridgeGuard

    if os.geteuid() != 0 or shutil.which("iptables") is None:
        pytest.skip("installing firewall rules needs root and iptables")
    guards = [BridgeGuard(f"sbxt{secrets.token_hex(5)}", secrets.token_hex(16),
                          allow_tcp_ports=(40000 + i,), proxy_address=f"10.254.{i}.1")
              for i in range(12)]
    barrier = threading.Barrier(len(guards))
    errors: list[BaseException] = []

    def install(guard: BridgeGuard) -> None:
        try:
            barrier.wait(30)
            assert guard.install() is None
        except BaseException as error:  # reported below, in the test's thread
            errors.append(error)

    threads = [threading.Thread(target=install, args=(g,)) for g in guards]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert not errors, errors
        listing = subprocess.run(["iptables", "-w", "5", "-S", "INPUT"], capture_output=True,
                                 text=True, timeout=30, check=True).stdout.splitlines()
        for guard in guards:
            mine = [line for line in listing if guard.comment in line]
            assert len(mine) == 3, mine
            accept = next(i for i, line in enumerate(mine) if "--dport" in line)
            drop = next(i for i, line in enumerate(mine) if line.endswith("-j DROP"))
            assert accept < drop, mine
    finally:
        for guard in guards:
            assert guard.remove() == []
