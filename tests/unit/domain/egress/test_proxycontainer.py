"""The proxy in a container: its locked shape, the config it sees there, the state it reads on
stdin (unpacked by the real boot code), and the lines both sides exchange."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

import pytest

from sbx.domain.egress import proxycontainer, proxycontrol, proxystream
from sbx.domain.egress.proxyconfig import ProxyConfig
from sbx.proxy import boot


def _config(**fields: object) -> ProxyConfig:
    base: dict[str, object] = {
        "run_id": "r1", "state_home": Path("/home/u/.local/state/sbx"),
        "audit_log": Path("/home/u/.local/state/sbx/audit.jsonl"), "network": None,
        "listen_host": "127.0.0.1", "phase_file": Path("/home/u/run/proxy.phase"),
        "login_dir": Path("/home/u/run/logins"), "request_log": Path("/home/u/req.jsonl"),
        "user_policy": Path("/home/u/.local/state/sbx/policy/rules.json"),
        "upstream_ca_file": Path("/etc/corp.pem")}
    return ProxyConfig(**{**base, **fields})  # type: ignore[arg-type]


def test_the_proxy_container_is_locked_as_a_sandbox_is() -> None:
    spec = proxycontainer.proxy_spec("sbx-runtime/x:1", run_id="r1", network="sbx-r1",
                                     labels={"dev.sbx.run": "r1"}, runtime="crun")
    assert spec.read_only and spec.cap_drop == ("ALL",) and not spec.privileged
    assert any("no-new-privileges" in o for o in spec.security_opt)
    assert spec.user == "65534:65534" and spec.env == {}
    assert spec.network_mode == "sbx-r1" and spec.runtime == "crun"
    assert spec.stdin_open and spec.stdin_once  # stdin is the owner pipe: its end stops it
    assert spec.log_driver == "none"  # what it says goes to its owner only
    assert "noexec" in spec.tmpfs[str(proxycontainer.HOME)]
    assert spec.memory_bytes > 0 and spec.pids_limit > 0
    assert spec.sysctls["net.ipv4.ip_forward"] == "0"  # on two networks, it routes nothing


def test_inside_its_container_every_path_is_under_the_tmpfs_and_records_stream() -> None:
    inside = proxycontainer.in_container(_config(), peer_network="172.30.0.0/16",
                                         upstream_ca=True)
    home = str(proxycontainer.HOME)
    for path in (inside.state_home, inside.audit_log, inside.user_policy,
                 inside.upstream_ca_file):
        assert str(path).startswith(home + "/"), path
    assert inside.stream_records and inside.request_log is None and inside.phase_file is None
    assert inside.login_dir is None and inside.ssh_agent is None and inside.kit_registry is None
    assert (inside.listen_host, inside.listen_port) == ("0.0.0.0", proxycontainer.PORT)  # noqa: S104
    assert inside.peer_network == "172.30.0.0/16"
    assert ProxyConfig.from_dict(inside.as_dict()) == inside  # stream_records round-trips


def test_the_state_message_unpacks_private_with_the_real_boot(tmp_path: Path) -> None:
    config = proxycontainer.in_container(_config(), peer_network="10.0.0.0/8",
                                         upstream_ca=False)
    message = proxycontainer.state_message(
        config, {"state/ca/ca.key": b"KEY", "state/policy.json": b"{}"}, b"token|s\n")
    read, write = os.pipe()
    os.write(write, message)
    os.close(write)
    home = tmp_path / "home"
    home.mkdir()
    umask = os.umask(0o022)
    try:
        assert boot.read_state(read, home) is None
        assert os.read(read, 100) == b"token|s\n"  # the owner line is left for the proxy
    finally:
        os.umask(umask)  # the boot's own is for its process
        os.close(read)
    assert ProxyConfig.load(home / "proxy.json") == config
    assert (home / "state/ca/ca.key").read_bytes() == b"KEY"
    for path in (home / "state", home / "state/ca", home / "state/ca/ca.key"):
        assert path.stat().st_mode & 0o077 == 0, path


def test_the_state_tar_holds_no_link_or_foreign_owner() -> None:
    message = proxycontainer.state_message(_config(), {"a/b": b"x"}, b"\n")
    size, _, rest = message.partition(b"\n")
    import io

    with tarfile.open(fileobj=io.BytesIO(rest[:int(size)])) as tar:
        members = tar.getmembers()
    assert {m.name for m in members} == {"proxy.json", "a", "a/b"}
    assert all(m.isfile() or m.isdir() for m in members)


@pytest.mark.parametrize("value", [{"host": "x"}, "runtime"])
def test_stream_lines_round_trip(value: object) -> None:
    tag = proxystream.PHASE if isinstance(value, str) else proxystream.RECORD
    assert proxystream.decode(proxystream.encode(tag, value)) == (tag, value)


@pytest.mark.parametrize("line", [
    b"SBX-RECORD [1]\n", b"SBX-PHASE \"sideways\"\n", b"SBX-AUDIT not json\n",
    b"OTHER {}\n", b"SBX-RECORD " + b"1" * proxystream.MAX_LINE_BYTES + b"\n",
])
def test_stream_lines_that_are_not_the_proxys_are_dropped(line: bytes) -> None:
    assert proxystream.decode(line) is None


def test_control_lines_carry_the_policy_text_and_nothing_else() -> None:
    text = b'{"format": 1, "rules": []}\n'
    assert proxycontrol.decode_policy(proxycontrol.encode_policy(text)) == text
    assert proxycontrol.decode_policy(b"SBX-POLICY !!notbase64\n") is None
    assert proxycontrol.decode_policy(b"SBX-SECRET eA==\n") is None


def test_the_proxy_in_a_container_replaces_its_policy_file_from_its_owner(
        tmp_path: Path) -> None:
    from sbx.proxy import process

    policy = tmp_path / "policy.json"
    config = proxycontainer.in_container(_config(user_policy=policy), peer_network="10.0.0.0/8",
                                         upstream_ca=False)
    config = ProxyConfig.from_dict({**config.as_dict(), "user_policy": str(policy)})
    said: list[str] = []
    write = process._policy_writer(config, said.append)
    assert write is not None
    write(proxycontrol.encode_policy(b'{"format": 1, "rules": []}'))
    assert policy.read_bytes() == b'{"format": 1, "rules": []}'
    assert policy.stat().st_mode & 0o077 == 0
    write(b"SBX-OTHER eA==\n")  # not a policy: the file stays
    assert policy.read_bytes() == b'{"format": 1, "rules": []}' and said == []
    host = ProxyConfig.from_dict({**config.as_dict(), "stream_records": False})
    assert process._policy_writer(host, said.append) is None  # a host's proxy reads the file
