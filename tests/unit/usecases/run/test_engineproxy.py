"""The owner's side of a proxy in a container, over a real socket pair standing in for the
engine's attach stream: the ready line, records, audit events and the phase as the proxy
writes them, its stderr kept in a bounded log, and the user policy followed."""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sbx.domain.egress import proxycontrol, proxystream
from sbx.seams.host.handshake import PROXY
from sbx.seams.session.stream import AttachedStream
from sbx.usecases.run import engineproxy
from sbx.usecases.run.engineproxy import PolicyFollower, ProxyOutput


def _frame(stream: int, data: bytes) -> bytes:
    return struct.pack(">BxxxL", stream, len(data)) + data


@pytest.fixture
def wire(tmp_path: Path) -> Iterator[tuple[socket.socket, ProxyOutput, Path]]:
    ours, theirs = socket.socketpair()
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    output = ProxyOutput(AttachedStream(ours), log=tmp_path / "proxy.log",
                         request_log=state / "requests" / "r1" / "requests.jsonl",
                         audit_log=state / "audit.jsonl", run_id="r1")
    output.start()
    yield theirs, output, state
    theirs.close()
    output.join(5)
    ours.close()


def _audit(run_id: str, event: str = "egress_denied") -> dict[str, object]:
    return {"timestamp": "t", "event_type": event, "run_id": run_id, "severity": "warning",
            "details": {"host": "x"}}


def test_what_the_proxy_says_lands_where_this_host_keeps_it(
        wire: tuple[socket.socket, ProxyOutput, Path], tmp_path: Path) -> None:
    theirs, output, state = wire
    lines = (PROXY.ready_line(3128).encode()
             + proxystream.encode(proxystream.RECORD, {"host": "a.example", "v": 1})
             + proxystream.encode(proxystream.AUDIT, _audit("r1"))
             + proxystream.encode(proxystream.AUDIT, _audit("someone-else"))
             + proxystream.encode(proxystream.AUDIT, _audit("r1", "sandbox_started"))
             + proxystream.encode(proxystream.PHASE, "runtime"))
    # Cut at every awkward place: inside a frame header, inside a line.
    data = _frame(1, lines[:7]) + _frame(2, b"a warning\n") + _frame(1, lines[7:])
    for start in range(0, len(data), 5):
        theirs.sendall(data[start:start + 5])
    assert output.ready.wait(5) and output.port == 3128
    with output.phase_seen:
        assert output.phase_seen.wait_for(lambda: output.phase == "runtime", 5)
    theirs.shutdown(socket.SHUT_WR)
    output.join(5)
    assert output.ended.is_set()
    records = (state / "requests" / "r1" / "requests.jsonl").read_text().splitlines()
    assert [json.loads(r)["host"] for r in records] == ["a.example"]
    audited = [json.loads(line) for line in (state / "audit.jsonl").read_text().splitlines()]
    assert [(a["run_id"], a["event_type"]) for a in audited] == [("r1", "egress_denied")]
    assert (tmp_path / "proxy.log").read_bytes() == b"a warning\n"


def test_a_proxy_that_ends_before_its_ready_line_wakes_the_waiter(
        wire: tuple[socket.socket, ProxyOutput, Path], tmp_path: Path) -> None:
    theirs, output, _state = wire
    theirs.sendall(_frame(2, b"cannot listen\n"))
    theirs.shutdown(socket.SHUT_WR)
    assert output.ready.wait(5) and output.port is None
    output.join(5)
    assert (tmp_path / "proxy.log").read_bytes() == b"cannot listen\n"


def test_the_proxys_stderr_is_kept_within_its_bound(
        wire: tuple[socket.socket, ProxyOutput, Path], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    theirs, output, _state = wire
    chunk = b"x" * 65536
    for _ in range(engineproxy.LOG_LIMIT_BYTES // len(chunk) + 4):
        theirs.sendall(_frame(2, chunk))
    theirs.shutdown(socket.SHUT_WR)
    output.join(10)
    assert (tmp_path / "proxy.log").stat().st_size == engineproxy.LOG_LIMIT_BYTES


def test_the_policy_follower_sends_each_change(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engineproxy, "POLICY_CHECK_S", 0.01)
    policy = tmp_path / "rules.json"
    sent: list[bytes] = []
    ended = threading.Event()
    follower = PolicyFollower(policy, sent.append, ended)
    assert follower.text() is None  # no file yet: none sent at start
    follower.start()
    try:
        policy.write_text('{"format": 1, "rules": []}')
        policy.chmod(0o600)
        deadline = time.monotonic() + 5
        while not sent and time.monotonic() < deadline:
            time.sleep(0.01)
        assert [proxycontrol.decode_policy(line) for line in sent] == [
            b'{"format": 1, "rules": []}']
        policy.unlink()
        while len(sent) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert json.loads(proxycontrol.decode_policy(sent[1]) or b"") == {"format": 1,
                                                                         "rules": []}
    finally:
        follower.stop()
