"""ssh-agent@1, decided without an engine: what the relay lets through, what the handler plans
and refuses, the relay's config, and the relay itself against a real ssh-agent."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sbx.base.errors import SbxError
from sbx.base.reasons import REGISTRY, Reason
from sbx.domain.egress.configfields import ProxyConfigError
from sbx.domain.egress.proxyconfig import ProxyConfig
from sbx.domain.egress.sshagent import (
    FAILURE,
    PhaseGrant,
    RelayConfig,
    judge,
    sshsig_namespace,
)
from sbx.domain.kits import captypes
from sbx.domain.kits.captypes.ssh_agent import SANDBOX_SOCKET
from sbx.domain.kits.compose import Contribution, compose
from sbx.domain.sandbox.capabilities import SUPPORTED, plan_capabilities
from sbx.domain.sandbox.hardening import Limits
from sbx.proxy.context import ProxyContext
from sbx.proxy.sshrelay import SSHAgentRelay
from sbx.seams.host.agent import host_agent

SSH = "com.docker.sandbox/ssh-agent@1"
MIB = 1024 * 1024
LIMITS = Limits(memory_bytes=4096 * MIB, pids=128, cpu_millis=1000, tmp_bytes=256 * MIB,
                workspace_bytes=512 * MIB, home_bytes=512 * MIB)
UNRESTRICTED = PhaseGrant("runtime", True)
GIT_ONLY = PhaseGrant("runtime", False, ("git",))


def _s(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def _sign(data: bytes) -> bytes:
    return bytes([13]) + _s(b"key-blob") + _s(data) + struct.pack(">I", 0)


def _sshsig(namespace: str) -> bytes:
    return b"SSHSIG" + _s(namespace.encode()) + _s(b"") + _s(b"sha512") + _s(b"h" * 64)


def test_the_type_is_supported_and_owned_by_its_module() -> None:
    assert SSH in SUPPORTED and captypes.handler(SSH).types == (SSH,)


def test_only_list_and_sign_are_forwarded() -> None:
    assert judge(bytes([11]), UNRESTRICTED, "runtime").forward
    assert judge(_sign(b"anything"), UNRESTRICTED, "runtime").forward
    for kind, name in ((17, "add-identity"), (18, "remove-identity"),
                       (19, "remove-all-identities"), (22, "lock"), (23, "unlock"),
                       (25, "add-identity-constrained"), (27, "extension"), (99, "type 99")):
        verdict = judge(bytes([kind]) + b"payload", UNRESTRICTED, "runtime")
        assert not verdict.forward and name in verdict.why


def test_nothing_is_forwarded_in_a_phase_without_a_grant() -> None:
    verdict = judge(bytes([11]), None, "runtime")
    assert not verdict.forward and "runtime phase" in verdict.why


def test_a_bounded_grant_signs_only_sshsig_blobs_of_its_namespaces() -> None:
    assert judge(_sign(_sshsig("git")), GIT_ONLY, "runtime").forward
    assert not judge(_sign(_sshsig("file")), GIT_ONLY, "runtime").forward
    login = _s(b"session") + bytes([50]) + _s(b"git") + _s(b"ssh-connection")
    assert not judge(_sign(login), GIT_ONLY, "runtime").forward
    # A namespace smuggled past the blob's end, or a truncated request, is not one.
    assert sshsig_namespace(_sshsig("git") + b"x") is None
    assert not judge(bytes([13]) + b"\x00\x00\x01", UNRESTRICTED, "runtime").forward


def test_the_relay_config_round_trips_through_the_proxy_config(tmp_path: Path) -> None:
    relay = RelayConfig(tmp_path / "d", Path("/tmp/agent.sock"),
                        (PhaseGrant("install", True), GIT_ONLY))
    config = ProxyConfig(run_id="r1", state_home=tmp_path, audit_log=tmp_path / "a",
                         network=None, ssh_agent=relay)
    assert ProxyConfig.from_json(config.to_json()).ssh_agent == relay
    data = config.as_dict()
    data["ssh_agent"] = {**relay.as_dict(), "grants": [{"phase": "both", "unrestricted": True,
                                                        "sign": []}]}
    with pytest.raises(ProxyConfigError):
        ProxyConfig.from_dict(data)


def _plan(config: dict[str, Any], missing: str | None, optional: bool = False) -> Any:
    entry: dict[str, Any] = {"type": SSH, "config": config}
    if optional:
        entry["optional"] = True
    return plan_capabilities(compose([Contribution("kit", [entry])]), limits=LIMITS,
                             allow_privileged=False, workspace_target="/workspace", kits={},
                             ssh_agent_missing=lambda: missing)


def test_a_grant_plans_the_relay_and_its_variable() -> None:
    plan = _plan({"phase": "runtime", "unrestricted": False, "sign": ["git"]}, None)
    assert plan.ssh_agent == (("runtime", False, ("git",), ()),)
    assert plan.env == {"SSH_AUTH_SOCK": SANDBOX_SOCKET}


def test_no_host_agent_refuses_a_required_grant_and_skips_an_optional_one() -> None:
    with pytest.raises(SbxError) as caught:
        _plan({"phase": "runtime"}, "SSH_AUTH_SOCK is not set")
    assert caught.value.reason is Reason.SSH_AGENT_MISSING
    assert caught.value.hint == REGISTRY[Reason.SSH_AGENT_MISSING].fix
    plan = _plan({"phase": "runtime"}, "SSH_AUTH_SOCK is not set", optional=True)
    assert plan.ssh_agent == () and "SSH_AUTH_SOCK" not in plan.env
    assert [s.type for s in plan.skipped] == [SSH]


def test_a_login_bound_grant_plans_its_destinations_for_the_relay() -> None:
    plan = _plan({"phase": "runtime", "unrestricted": False, "authenticate": ["git@github.com"]},
                 None)
    assert plan.ssh_agent == (("runtime", False, (), ("git@github.com",)),)
    assert "ssh_agent_unboundable" not in {r.value for r in Reason}


def test_the_host_agent_must_be_a_listening_socket(tmp_path: Path) -> None:
    assert host_agent({})[0] is None
    assert "not an absolute" in host_agent({"SSH_AUTH_SOCK": "rel.sock"})[1]
    (tmp_path / "file").write_text("x")
    assert "not a socket" in host_agent({"SSH_AUTH_SOCK": str(tmp_path / "file")})[1]


@pytest.fixture
def real_agent(tmp_path: Path) -> Iterator[Path]:
    if shutil.which("ssh-agent") is None:
        pytest.skip("no ssh-agent on this host")
    sock = tmp_path / "a.sock"
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            if sock.exists():
                break
            subprocess.run(["sleep", "0.05"], check=True)
        key = tmp_path / "id"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)],
                       check=True, timeout=30)
        subprocess.run(["ssh-add", "-q", str(key)], check=True, timeout=30,
                       env={**os.environ, "SSH_AUTH_SOCK": str(sock)})
        yield sock
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(10)


def test_the_relay_answers_from_the_host_agent_and_refuses_the_rest(
        real_agent: Path, tmp_path: Path) -> None:
    socket_dir = tmp_path / "relay"
    socket_dir.mkdir()
    relay_config = RelayConfig(socket_dir, real_agent, (UNRESTRICTED,))
    config = ProxyConfig(run_id="r1", state_home=tmp_path, audit_log=tmp_path / "a",
                         network=None, ssh_agent=relay_config)
    notes: list[str] = []

    async def scenario() -> list[int]:
        relay = SSHAgentRelay(ProxyContext(config, "runtime", notes.append), relay_config)
        await relay.start()
        try:
            reader, writer = await asyncio.open_unix_connection(str(socket_dir / "agent.sock"))
            kinds = []
            for body in (bytes([11]), bytes([19]), bytes([11])):
                writer.write(_s(body))
                await writer.drain()
                (length,) = struct.unpack(">I", await reader.readexactly(4))
                kinds.append((await reader.readexactly(length))[0])
            writer.close()
            return kinds
        finally:
            await relay.close()

    assert asyncio.run(asyncio.wait_for(scenario(), 30)) == [12, FAILURE, 12]
    assert any("remove-all-identities" in n for n in notes)
    listed = subprocess.run(["ssh-add", "-l"], check=False, capture_output=True, text=True,
                            timeout=30,
                            env={**os.environ, "SSH_AUTH_SOCK": str(real_agent)}).stdout
    assert len(listed.strip().splitlines()) == 1  # remove-all never reached the agent
    assert not (socket_dir / "agent.sock").exists()  # closed with its process


def _hashed(name: str) -> str:
    import base64
    import hashlib
    import hmac

    salt = os.urandom(20)
    digest = hmac.new(salt, name.encode(), hashlib.sha1).digest()
    return f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"


def test_the_relay_signs_logins_only_for_granted_users_of_known_servers(
        real_agent: Path, tmp_path: Path) -> None:
    """Real ssh on the host through the relay to two real sshds: the one the host's known_hosts
    knows as git.test takes user git; user other and the unknown server get no signature."""
    from tests.support.sshd import TestSSHD

    if os.geteuid() != 0 or not Path("/usr/sbin/sshd").exists() or shutil.which("ssh") is None:
        pytest.skip("needs root, ssh and /usr/sbin/sshd (sshd switches to the login's user)")
    keys = subprocess.run(["ssh-add", "-L"], check=True, capture_output=True, text=True,
                          timeout=30, env={**os.environ, "SSH_AUTH_SOCK": str(real_agent)}).stdout
    socket_dir = tmp_path / "relay"
    socket_dir.mkdir()
    known = tmp_path / "known_hosts"
    grant = PhaseGrant("runtime", False, (), ("git@git.test",))
    relay_config = RelayConfig(socket_dir, real_agent, (grant,), (known, tmp_path / "missing"))
    config = ProxyConfig(run_id="r1", state_home=tmp_path, audit_log=tmp_path / "a",
                         network=None, ssh_agent=relay_config)
    notes: list[str] = []
    with TestSSHD(tmp_path / "git", keys) as server, \
            TestSSHD(tmp_path / "elsewhere", keys) as unknown:
        known.write_text(f"{_hashed('git.test')} {server.host_key_line}\n")
        client_known = tmp_path / "client_known_hosts"
        client_known.write_text(f"[127.0.0.1]:{server.port} {server.host_key_line}\n"
                                f"[127.0.0.1]:{unknown.port} {unknown.host_key_line}\n")

        async def login(user: str, port: int) -> int:
            ssh = await asyncio.create_subprocess_exec(
                "ssh", "-F", "/dev/null", "-o", "BatchMode=yes", "-o", "IdentityFile=none",
                "-o", f"IdentityAgent={socket_dir / 'agent.sock'}",
                "-o", f"UserKnownHostsFile={client_known}", "-p", str(port),
                f"{user}@127.0.0.1", "true", stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            return await ssh.wait()

        async def scenario() -> list[int]:
            relay = SSHAgentRelay(ProxyContext(config, "runtime", notes.append), relay_config)
            await relay.start()
            try:
                return [await login("git", server.port), await login("other", server.port),
                        await login("git", unknown.port)]
            finally:
                await relay.close()

        assert asyncio.run(asyncio.wait_for(scenario(), 120)) == [0, 255, 255]
        assert "Accepted publickey for git" in server.text()
        assert "Accepted publickey for other" not in server.text()
        assert "Accepted publickey" not in unknown.text()
    refused = [n for n in notes if "refused" in n]
    assert any("login as 'other'" in n and "only as git@git.test" in n for n in refused), notes
    assert any("login as 'git'" in n and "knows for none of git.test" in n for n in refused)
    assert len(refused) == 2, notes  # the bindings were verified; only those two signatures
