"""The host seams (firewall, port forwarder) end a failure with a reason code, never with the
subprocess or socket error they met: a run must fail closed with a reason, not exit 70."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.seams.host import firewall
from sbx.seams.host.firewall import BridgeGuard
from sbx.seams.ports import KIT, Binding, PortForwarder


def _refusing_iptables(directory: Path, status: int) -> Path:
    """An iptables (and iptables-restore) that refuses every call, as a host without the
    filter table's modules does; it records that it was asked."""
    directory.mkdir()
    for name in ("iptables", "iptables-restore"):
        tool = directory / name
        tool.write_text(f"#!/bin/sh\necho \"$0 $*\" >> {directory}/calls\n"
                        "echo 'iptables: No chain/target/match by that name.' >&2\n"
                        f"exit {status}\n")
        tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return directory / "iptables"


@pytest.mark.slow
@pytest.mark.parametrize("method", ["install", "ensure"])
def test_iptables_refusing_the_rules_is_create_failed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, method: str) -> None:
    tool = _refusing_iptables(tmp_path / "bin", 4)
    monkeypatch.setattr(firewall, "iptables_binary", lambda: str(tool))
    monkeypatch.setattr(os, "geteuid", lambda: 0)  # the path sbx takes as root
    guard = BridgeGuard("br-test0", "run1", allow_tcp_ports=(3128,), proxy_address="10.0.0.1")
    with pytest.raises(SbxError) as caught:
        getattr(guard, method)()
    assert caught.value.reason is Reason.CREATE_FAILED
    assert "br-test0" in caught.value.message and caught.value.hint
    assert (tmp_path / "bin" / "calls").read_text().strip()  # iptables really was asked
    assert guard.installed == []  # nothing is recorded as installed


def test_a_port_the_host_cannot_listen_on_is_start_failed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    class Unbindable(socket.socket):
        def bind(self, address: object) -> None:
            raise OSError(98, "Address already in use")

    monkeypatch.setattr(socket, "socket", Unbindable)  # the module ports.py binds through
    forwarder = PortForwarder("10.0.0.2")
    with pytest.raises(SbxError) as caught:
        forwarder.start([Binding(8080, KIT)])
    assert caught.value.reason is Reason.START_FAILED
    assert "Address already in use" in caught.value.message
    forwarder.stop()  # what the run's cleanup does: no thread or socket left
    assert all(listener.fileno() == -1 for listener in forwarder._listeners)


def test_the_forwarder_still_publishes_on_a_free_port() -> None:
    forwarder = PortForwarder("127.0.0.1")
    try:
        published = forwarder.start([Binding(8080, KIT)])
        assert [(p.container_port, p.host) for p in published] == [(8080, "127.0.0.1")]
        assert published[0].host_port > 0
    finally:
        forwarder.stop()
