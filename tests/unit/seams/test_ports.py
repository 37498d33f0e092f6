"""The port forwarder on real loopback sockets: asked-for and free host ports, a held port
refused as port_taken, nothing served before the target is known."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.seams.ports import KIT, PUBLISH, Binding, PortForwarder, check_free


@pytest.fixture
def echo() -> Iterator[int]:
    """A loopback service answering one line per connection (the sandbox's stand-in)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(5)

    def serve() -> None:
        for _ in range(4):  # bounded: the tests connect at most this often
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.sendall(b"hello " + conn.recv(64))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield int(server.getsockname()[1])
    server.close()
    thread.join(6)


def _free() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _ask(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall(b"there")
        conn.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := conn.recv(64):
            data += chunk
        return data


def test_an_asked_for_port_and_a_free_one_reach_the_target(echo: int) -> None:
    fixed = _free()
    forwarder = PortForwarder("127.0.0.1")
    try:
        published = forwarder.start([Binding(echo, PUBLISH, "127.0.0.1", fixed),
                                     Binding(echo, KIT)])
        assert [(p.source, p.host) for p in published] == [(PUBLISH, "127.0.0.1"),
                                                           (KIT, "127.0.0.1")]
        assert published[0].host_port == fixed and published[1].host_port not in (0, fixed)
        assert published[0].as_dict()["source"] == "publish"
        assert _ask(fixed) == b"hello there"
        assert _ask(published[1].host_port) == b"hello there"
    finally:
        forwarder.stop()


def test_a_held_host_port_is_port_taken_with_the_way_out() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        taken = int(holder.getsockname()[1])
        with pytest.raises(SbxError) as early:
            check_free([Binding(8080, PUBLISH, "127.0.0.1", taken)])
        forwarder = PortForwarder("127.0.0.1")
        with pytest.raises(SbxError) as caught:
            forwarder.start([Binding(8080, KIT), Binding(8080, PUBLISH, "127.0.0.1", taken)])
        forwarder.stop()
    for error in (early.value, caught.value):
        assert error.reason is Reason.PORT_TAKEN
        assert error.hint is not None and "`-p 127.0.0.1::8080`" in error.hint
        assert f"ss -ltnp 'sport = :{taken}'" in error.hint
    assert all(listener.fileno() == -1 for listener in forwarder._listeners)


def test_a_free_host_port_passes_the_check() -> None:
    check_free([Binding(8080, PUBLISH, "127.0.0.1", _free()), Binding(8080, KIT)])


def test_nothing_is_served_before_the_target_is_known() -> None:
    forwarder = PortForwarder("")  # a keeper's, before the container runs
    try:
        port = forwarder.start([Binding(8080, KIT)])[0].host_port
        try:
            answer = _ask(port)
        except ConnectionRefusedError:
            raise  # not listening at all: that is not "accepted and closed"
        except OSError:
            answer = b""  # closed before our bytes were read or our half-close was sent
        assert answer == b""  # accepted and closed: no target to reach
    finally:
        forwarder.stop()
