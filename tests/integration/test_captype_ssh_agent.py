"""ssh-agent@1 in a real sandbox, against a real ssh-agent on the host: the sandbox lists the
host's key and gets real signatures (verified inside), it cannot add, remove or export keys,
a bounded grant signs only its namespaces, and the hardened shape is untouched."""

from __future__ import annotations

import os
import signal
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.docker

AGENT_IMAGE = "sbx-base/agent:1"  # carries ssh-add, ssh-keygen and git
DOCKERFILE = f"FROM {AGENT_IMAGE}\nUSER agent\nWORKDIR /workspace\n"
Runner = Callable[..., Any]
KitMaker = Callable[..., Path]
SSH = "com.docker.sandbox/ssh-agent@1"

PROBE = r"""
echo "sock=$SSH_AUTH_SOCK"
echo "list=$(ssh-add -l 2>&1 | tr '\n' ' ')"
ssh-add -L > /tmp/key.pub 2>/dev/null
echo hello > /tmp/msg
for ns in git file; do
  if ssh-keygen -Y sign -q -f /tmp/key.pub -n $ns /tmp/msg >/dev/null 2>&1; then
    echo "me $(cat /tmp/key.pub)" > /tmp/allowed
    ssh-keygen -Y verify -f /tmp/allowed -I me -n $ns -s /tmp/msg.sig < /tmp/msg \
      >/dev/null 2>&1 && echo "sign_$ns=verified" || echo "sign_$ns=bad"
    rm -f /tmp/msg.sig
  else
    echo "sign_$ns=refused"
  fi
done
ssh-keygen -q -t ed25519 -N '' -f /tmp/new >/dev/null
ssh-add /tmp/new >/dev/null 2>&1 && echo add=accepted || echo add=refused
ssh-add -D >/dev/null 2>&1 && echo remove=accepted || echo remove=refused
rm -f "$SSH_AUTH_SOCK" 2>/dev/null && echo unlink=done || echo unlink=refused
touch /root-write 2>/dev/null && echo root=writable || echo root=readonly
echo "capeff=$(grep CapEff /proc/self/status | cut -f2)"
echo "nnp=$(grep NoNewPrivs /proc/self/status | cut -f2)"
"""


@pytest.fixture
def host_agent(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A real ssh-agent on its own socket, holding one fresh key: (socket, fingerprint)."""
    home = tmp_path / "agent"
    home.mkdir(mode=0o700)
    sock = home / "a.sock"
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):  # bounded: the agent binds in milliseconds
            if sock.exists():
                break
            subprocess.run(["sleep", "0.05"], check=True)
        key = home / "id"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "host-key", "-f",
                        str(key)], check=True, timeout=30)
        env = {**os.environ, "SSH_AUTH_SOCK": str(sock)}
        subprocess.run(["ssh-add", "-q", str(key)], check=True, env=env, timeout=30)
        fingerprint = subprocess.run(["ssh-keygen", "-lf", f"{key}.pub"], check=True,
                                     capture_output=True, text=True, timeout=30
                                     ).stdout.split()[1]
        yield sock, fingerprint
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(10)


def _env(state_home: Path, sock: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}
    env.update({"SBX_HOME": str(state_home), "SBX_CONFIG": os.devnull})
    if sock is not None:
        env["SSH_AUTH_SOCK"] = str(sock)
    return env


def _kit(kit_factory: KitMaker, config: str = "phase: runtime", optional: bool = False) -> Path:
    flag = "\n    optional: true" if optional else ""
    body = "\n".join(f"      {line}" for line in config.splitlines())
    return kit_factory("sshkit", DOCKERFILE,
                       f"capabilities:\n  - type: {SSH}{flag}\n    config:\n{body}\n")


def _values(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def _host_keys(sock: Path) -> str:
    env = {**os.environ, "SSH_AUTH_SOCK": str(sock)}
    return subprocess.run(["ssh-add", "-l"], check=False, env=env, capture_output=True,
                          text=True, timeout=30).stdout


def test_the_sandbox_signs_with_the_host_key_and_cannot_change_the_agent(
        kit_factory: KitMaker, sbx_cli: Runner, state_home: Path,
        host_agent: tuple[Path, str]) -> None:
    sock, fingerprint = host_agent
    result = sbx_cli(["run", "--json", str(_kit(kit_factory)), "--", "sh", "-c", PROBE],
                     env=_env(state_home, sock))
    envelope = result.envelope()
    assert envelope["status"] == "ok", (envelope, result.stderr)
    seen = _values(envelope["data"]["stdout"])
    assert seen["sock"] == "/run/sbx-ssh-agent/agent.sock"
    assert fingerprint in seen["list"] and "host-key" in seen["list"]
    assert seen["sign_git"] == "verified" and seen["sign_file"] == "verified"  # unrestricted
    assert seen["add"] == "refused" and seen["remove"] == "refused"
    assert seen["unlink"] == "refused"  # the socket's directory is read-only
    # The host's agent still holds exactly its key: nothing was added or removed.
    held = _host_keys(sock)
    assert fingerprint in held and len(held.strip().splitlines()) == 1
    assert seen["root"] == "readonly"
    assert seen["capeff"] == "0000000000000000" and seen["nnp"] == "1"


def test_a_bounded_grant_signs_only_its_namespaces(
        kit_factory: KitMaker, sbx_cli: Runner, state_home: Path,
        host_agent: tuple[Path, str]) -> None:
    sock, fingerprint = host_agent
    kit = _kit(kit_factory, "phase: runtime\nunrestricted: false\nsign: [git]")
    result = sbx_cli(["run", "--json", str(kit), "--", "sh", "-c", PROBE],
                     env=_env(state_home, sock))
    envelope = result.envelope()
    assert envelope["status"] == "ok", (envelope, result.stderr)
    seen = _values(envelope["data"]["stdout"])
    assert fingerprint in seen["list"]
    assert seen["sign_git"] == "verified"
    assert seen["sign_file"] == "refused"
    assert seen["add"] == "refused" and seen["remove"] == "refused"


def test_an_install_only_grant_is_closed_for_the_workload(
        kit_factory: KitMaker, sbx_cli: Runner, state_home: Path,
        host_agent: tuple[Path, str]) -> None:
    sock, fingerprint = host_agent
    kit = kit_factory("sshinstall", DOCKERFILE, f"""capabilities:
  - type: {SSH}
    config:
      phase: install
  - type: com.docker.sandbox/lifecycle@1
    config:
      install:
        - command: ["sh", "-c", "echo install-list; ssh-add -l"]
""")
    result = sbx_cli(["run", "--json", str(kit), "--", "sh", "-c", "ssh-add -l 2>&1; echo rc=$?"],
                     env=_env(state_home, sock))
    envelope = result.envelope()
    assert envelope["status"] == "ok", (envelope, result.stderr)
    # Install hooks' output is shown on stderr: the hook listed the key.
    assert "install-list" in result.stderr and fingerprint in result.stderr
    runtime = envelope["data"]["stdout"]
    assert fingerprint not in runtime and "rc=0" not in runtime, runtime


def test_required_without_a_host_agent_refuses_and_explain_says_the_same(
        kit_factory: KitMaker, sbx_cli: Runner, state_home: Path, tmp_path: Path) -> None:
    result = sbx_cli(["run", str(_kit(kit_factory)), "--", "echo", "workload-ran"],
                     env=_env(state_home, tmp_path / "no-agent.sock"))
    assert result.exit_code == 125, result.stderr
    assert "(ssh_agent_missing)" in result.stderr and "ssh-agent -s" in result.stderr
    assert "workload-ran" not in result.stdout
    explained = sbx_cli(["explain", "ssh_agent_missing"], env=_env(state_home, None))
    assert explained.exit_code == 0 and "ssh-add" in explained.stdout


def test_optional_without_a_host_agent_runs_without_one_and_records_it(
        kit_factory: KitMaker, sbx_cli: Runner, state_home: Path) -> None:
    result = sbx_cli(["run", "--json", str(_kit(kit_factory, optional=True)), "--", "sh", "-c",
                      "echo sock=${SSH_AUTH_SOCK:-unset}"], env=_env(state_home, None))
    envelope = result.envelope()
    assert envelope["status"] == "ok", (envelope, result.stderr)
    assert envelope["data"]["stdout"] == "sock=unset\n"
    skipped = [s for s in envelope["data"]["selection"]["skipped"] if s["type"] == SSH]
    assert skipped and "SSH_AUTH_SOCK is not set" in skipped[0]["reason"]


# A ProxyCommand for ssh inside the sandbox: one CONNECT through the sandbox's egress proxy
# (HTTPS_PROXY, with its credentials), then bytes both ways.
CONNECT = r"""
import base64, os, select, socket, sys, urllib.parse
host, port = sys.argv[1], sys.argv[2]
proxy = urllib.parse.urlsplit(os.environ.get("HTTPS_PROXY") or os.environ["https_proxy"])
sock = socket.create_connection((proxy.hostname, proxy.port or 80), timeout=30)
head = f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n"
if proxy.username:
    pair = f"{urllib.parse.unquote(proxy.username)}:{urllib.parse.unquote(proxy.password or '')}"
    head += f"Proxy-Authorization: Basic {base64.b64encode(pair.encode()).decode()}\r\n"
sock.sendall((head + "\r\n").encode())
data = b""
while b"\r\n\r\n" not in data:
    chunk = sock.recv(4096)
    if not chunk:
        sys.exit("the proxy closed the tunnel")
    data += chunk
status, _, rest = data.partition(b"\r\n\r\n")
if status.split(b"\r\n")[0].split()[1:2] != [b"200"]:
    sys.exit("the proxy refused: " + " | ".join(status.decode(errors="replace").splitlines()))
sock.settimeout(None)
if rest:
    os.write(1, rest)
sources = [0, sock]
while True:
    ready, _, _ = select.select(sources, [], [])
    if 0 in ready:
        data = os.read(0, 65536)
        if data:
            sock.sendall(data)
        else:
            sources.remove(0)
            sock.shutdown(socket.SHUT_WR)
    if sock in ready:
        data = sock.recv(65536)
        if not data:
            break
        os.write(1, data)
"""

LOGINS = r"""
cat > /tmp/connect.py <<'PY'
{connect}
PY
printf '%s\n' 'git.test {hostkey}' 'unknown.test {other_hostkey}' > /tmp/known_hosts
SSH="ssh -F /dev/null -v -o BatchMode=yes -o ConnectTimeout=30 -o StrictHostKeyChecking=yes"
SSH="$SSH -o UserKnownHostsFile=/tmp/known_hosts -o ProxyCommand='python3 /tmp/connect.py %h %p'"
login() {{
  eval "$SSH $1 echo logged-in" > /tmp/out 2> /tmp/err
  echo "$2=rc$? $(tr '\n' ' ' < /tmp/out)"
  grep -q 'agent refused operation' /tmp/err && echo "$2_agent=refused" || echo "$2_agent=-"
  echo "$2_err=$(grep -v '^debug' /tmp/err | tail -3 | tr '\n' ' ')"
}}
login git@git.test granted
login other@git.test other_user
login git@unknown.test unknown_host
cd /tmp && git init -q -b main work && cd work
git -c user.name=t -c user.email=t@example.com commit -q --allow-empty -m pushed-from-sandbox
GIT_SSH_COMMAND="$SSH -q" git push -q git@git.test:{repo} main 2>/tmp/push-err
echo "push=rc$?"
"""


@pytest.fixture
def sshd(tmp_path: Path, host_agent: tuple[Path, str]) -> Iterator[tuple[Any, Any]]:
    """Two real sshds on loopback, each with its own host key, that take the host agent's key
    for users git and other."""
    from tests.support.sshd import TestSSHD

    if os.geteuid() != 0 or not Path("/usr/sbin/sshd").exists():
        pytest.skip("needs root and /usr/sbin/sshd (sshd switches to the login's user)")
    sock, _ = host_agent
    keys = _host_keys_public(sock)
    with TestSSHD(tmp_path / "sshd", keys) as server, \
            TestSSHD(tmp_path / "sshd-other", keys) as other:
        yield server, other


def _host_keys_public(sock: Path) -> str:
    env = {**os.environ, "SSH_AUTH_SOCK": str(sock)}
    return subprocess.run(["ssh-add", "-L"], check=True, env=env, capture_output=True,
                          text=True, timeout=30).stdout


def _hashed(name: str) -> str:
    import base64
    import hashlib
    import hmac

    salt = os.urandom(20)
    digest = hmac.new(salt, name.encode(), hashlib.sha1).digest()
    return f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"


def test_a_login_bound_grant_logs_in_and_pushes_only_where_granted(
        kit_factory: KitMaker, sbx_cli: Runner, state_home: Path, tmp_path: Path,
        host_agent: tuple[Path, str], sshd: tuple[Any, Any], internet: Any) -> None:
    from tests.support.kits import capabilities, network_policy

    sock, fingerprint = host_agent
    server, unknown = sshd
    repo = tmp_path / "repo.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(repo)], check=True,
                   timeout=30)
    # The host user's known_hosts (hashed, as HashKnownHosts writes it) knows git.test's key
    # only; the sandbox's own known_hosts (which sbx does not read) trusts both servers.
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "known_hosts").write_text(f"{_hashed('git.test')} {server.host_key_line}\n")
    internet.upstream.tunnel("git.test:22", server.port)
    internet.upstream.tunnel("unknown.test:22", unknown.port)
    kit = kit_factory("sshlogin", DOCKERFILE, capabilities(
        network_policy(runtime=["git.test:22", "unknown.test:22"]), f"""
- type: {SSH}
  config:
    phase: runtime
    unrestricted: false
    authenticate: [git@git.test, git@unknown.test]
"""))
    env = {**_env(state_home, sock), "HOME": str(home),
           "SBX_CONFIG": str(internet.sbx_config(tmp_path / "config.toml"))}
    script = LOGINS.format(connect=CONNECT.strip(), hostkey=server.host_key_line,
                           other_hostkey=unknown.host_key_line, repo=repo)
    try:
        result = sbx_cli(["run", "--json", str(kit), "--timeout", "180", "--", "bash", "-c",
                          script], env=env)
    finally:
        for name in ("git.test", "unknown.test"):
            internet.upstream.tunnel(f"{name}:22", None)
    envelope = result.envelope()
    assert envelope["status"] == "ok", (envelope, result.stderr)
    seen = _values(envelope["data"]["stdout"])
    log = server.text()
    # The granted user at the granted, known host: a real login through the relay.
    assert seen["granted"] == "rc0 logged-in ", (seen, log)
    assert seen["granted_agent"] == "-"
    assert "Accepted publickey for git from 127.0.0.1" in log and fingerprint in log
    # Another user at the same server: sshd took the key and asked for the signature, and the
    # relay refused to sign it; sshd never accepted that user.
    assert seen["other_user"].startswith("rc255"), seen
    assert seen["other_user_agent"] == "refused", seen
    assert "Postponed publickey for other" in log
    assert "Accepted publickey for other" not in log
    # A granted destination whose server's host key the host's known_hosts does not know.
    assert seen["unknown_host"].startswith("rc255") and seen["unknown_host_agent"] == "refused"
    assert "Postponed publickey for git" in unknown.text()
    assert "Accepted publickey" not in unknown.text()
    # git over ssh, through the egress proxy's CONNECT tunnel, into the server's bare repo.
    assert seen["push"] == "rc0", seen
    pushed = subprocess.run(["git", "-C", str(repo), "log", "--format=%s", "main"], check=True,
                            capture_output=True, text=True, timeout=30).stdout
    assert pushed == "pushed-from-sandbox\n"
    assert len(_host_keys(sock).strip().splitlines()) == 1


def test_a_named_sandbox_keeps_its_relay_without_the_cli_and_fails_closed(
        kit_factory: KitMaker, state_home: Path, host_agent: tuple[Path, str]) -> None:
    from tests.support.sbxproc import run_sbx

    sock, fingerprint = host_agent
    env = _env(state_home, sock)
    name = f"ssh-{uuid.uuid4().hex[:10]}"
    kit = _kit(kit_factory)

    def sbx(*args: str) -> Any:
        return run_sbx(list(args), env=env, timeout=180)

    try:
        started = sbx("run", "--name", name, "-d", str(kit), "--", "sleep", "600")
        assert started.returncode == 0, started.stderr.decode()
        # Every command below is a new CLI process: the relay lives with the keeper.
        listed = sbx("exec", name, "--", "ssh-add", "-l")
        assert fingerprint in listed.stdout.decode(), listed.stderr.decode()
        assert sbx("stop", name).returncode == 0
        assert sbx("run", "--name", name, "-d", str(kit)).returncode == 0
        again = sbx("exec", name, "--", "ssh-add", "-l")
        assert fingerprint in again.stdout.decode(), again.stderr.decode()  # every boot
        added = sbx("exec", name, "--", "sh", "-c", "ssh-keygen -q -t ed25519 -N '' -f "
                    "/tmp/k >/dev/null && ssh-add /tmp/k")
        assert added.returncode != 0
        [keeper] = list((state_home / "runs").glob("*/ssh-agent"))
        assert (keeper / "agent.sock").exists()
        assert sbx("stop", name).returncode == 0
        # Stopped: the keeper and its proxy are gone, and so is the relay's socket.
        assert not (keeper / "agent.sock").exists()
    finally:
        run_sbx(["rm", "-f", name], env=env, timeout=120)
    assert len(_host_keys(sock).strip().splitlines()) == 1
