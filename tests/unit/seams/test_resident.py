"""The resident helper's wire (sbx.seams.resident): frames with descriptors over a real socket
pair, hostile frames, the private directory check, which helper a caller picks, and the
decisions of whether a helper may serve a caller."""

from __future__ import annotations

import contextlib
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sbx.seams import resident as wire


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with left, right:
        left.settimeout(5)
        right.settimeout(5)
        yield left, right


def open_fds() -> set[int]:
    return {int(name) for name in os.listdir("/proc/self/fd")}


def test_a_frame_carries_json_and_descriptors(pair: tuple[socket.socket, socket.socket],
                                              tmp_path: Path) -> None:
    left, right = pair
    target = tmp_path / "f"
    target.write_bytes(b"through the descriptor")
    fd = os.open(target, os.O_RDONLY)
    try:
        wire.send_frame(left, {"op": "run", "argv": ["ls", "--json"], "ü": "x"}, [fd])
    finally:
        os.close(fd)
    frame = wire.recv_frame(right)
    assert frame is not None
    body, fds = frame
    assert body == {"op": "run", "argv": ["ls", "--json"], "ü": "x"}
    assert len(fds) == 1
    with os.fdopen(fds[0], "rb") as received:
        assert received.read() == b"through the descriptor"


def test_a_clean_end_of_stream_is_none(pair: tuple[socket.socket, socket.socket]) -> None:
    left, right = pair
    left.shutdown(socket.SHUT_WR)
    assert wire.recv_frame(right) is None


@pytest.mark.parametrize("raw", [
    (wire.MAX_FRAME + 1).to_bytes(4, "big"),  # over the bound: refused before reading it
    b"\x00\x00",  # the length cut short
    (10).to_bytes(4, "big") + b"{}",  # the body cut short
])
def test_cut_or_oversized_frames_are_wire_errors(pair: tuple[socket.socket, socket.socket],
                                                 raw: bytes) -> None:
    left, right = pair
    left.sendall(raw)
    left.shutdown(socket.SHUT_WR)
    with pytest.raises(wire.WireError):
        wire.recv_frame(right)


@pytest.mark.parametrize("body", [b"[1, 2]", b'"text"', b"\xff\xfe"])
def test_a_frame_that_is_not_one_json_object_is_refused(
        pair: tuple[socket.socket, socket.socket], body: bytes) -> None:
    left, right = pair
    left.sendall(len(body).to_bytes(4, "big") + body)
    with pytest.raises((wire.WireError, ValueError)):
        wire.recv_frame(right)


def test_descriptors_of_a_refused_frame_are_closed(
        pair: tuple[socket.socket, socket.socket]) -> None:
    left, right = pair
    before = open_fds()
    body = b"[]"
    left.sendmsg([len(body).to_bytes(4, "big") + body],
                 [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                   b"".join(fd.to_bytes(4, sys.byteorder) for fd in (0, 1, 2)))])
    with pytest.raises(wire.WireError):
        wire.recv_frame(right)
    assert open_fds() == before


def test_the_peer_of_a_socket_pair_is_this_user(
        pair: tuple[socket.socket, socket.socket]) -> None:
    assert wire.peer_uid(pair[0]) == os.getuid()


def test_only_a_real_directory_of_the_user_closed_to_others_is_private(tmp_path: Path) -> None:
    uid = os.getuid()
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    assert wire.private_dir(private, uid)
    assert not wire.private_dir(private, uid + 1)
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o700)
    shared.chmod(0o750)
    assert not wire.private_dir(shared, uid)
    link = tmp_path / "link"
    link.symlink_to(private)
    assert not wire.private_dir(link, uid)
    assert not wire.private_dir(tmp_path / "missing", uid)
    assert not wire.private_dir("bad\0path", uid)


def test_the_directory_is_the_runtime_one_or_a_per_user_one_in_tmp() -> None:
    assert wire.socket_dir({"XDG_RUNTIME_DIR": "/run/user/7"}, 7) == "/run/user/7/sbx"
    assert wire.socket_dir({"XDG_RUNTIME_DIR": "relative"}, 7) == "/tmp/sbx-resident-7"
    assert wire.socket_dir({}, 7) == "/tmp/sbx-resident-7"


def test_the_helper_is_picked_by_interpreter_path_and_python_variables() -> None:
    env = {"HOME": "/root", "SBX_HOME": "/a"}
    key = wire.helper_key(env, ["/lib"])
    assert key == wire.helper_key({**env, "SBX_HOME": "/b"}, ["/lib"])
    assert key != wire.helper_key({**env, "PYTHONPATH": "/x"}, ["/lib"])
    assert key != wire.helper_key(env, ["/lib", "/other"])


def test_a_variable_read_at_import_that_differs_declines() -> None:
    helper = {"HOME": "/root", "TYPER_USE_RICH": "1", "SBX_HOME": "/a"}
    read = frozenset({"HOME", "TYPER_USE_RICH"})
    assert wire.env_differs(helper, {**helper, "SBX_HOME": "/b"}, read) is None
    assert wire.env_differs(helper, {**helper, "TYPER_USE_RICH": "0"}, read) == "TYPER_USE_RICH"
    missing = {k: v for k, v in helper.items() if k != "HOME"}
    assert wire.env_differs(helper, missing, read) == "HOME"
    # what the interpreter and C libraries read at start counts though Python never read it
    assert wire.env_differs(helper, {**helper, "LC_ALL": "C"}, read) == "LC_ALL"
    assert wire.env_differs(helper, {**helper, "LANG": "C"}, read) == "LANG"
    # a helper whose imports listed the whole environment serves only the same environment
    assert wire.env_differs(helper, {**helper, "SBX_HOME": "/b"}, None) == "SBX_HOME"


def test_a_process_that_runs_otherwise_is_not_served() -> None:
    facts = wire.process_facts()
    assert wire.facts_differ(facts, dict(facts)) is None
    assert wire.facts_differ(facts, {**facts, "umask": 0o077}) is None  # handed over
    assert wire.facts_differ(facts, {**facts, "groups": [*facts["groups"], 4242]}) == "groups"
    limits = {**facts["limits"], "RLIMIT_NOFILE": [16, 16]}
    assert wire.facts_differ(facts, {**facts, "limits": limits}) == "limits"
    assert wire.facts_differ(facts, {k: v for k, v in facts.items() if k != "cgroup"}) \
        == "cgroup"


def test_the_facts_name_this_process() -> None:
    facts = wire.process_facts()
    assert facts["uid"] == os.getuid() and facts["groups"] == sorted(os.getgroups())
    assert facts["namespaces"]["mnt"] == os.readlink("/proc/self/ns/mnt")
    umask = os.umask(0o027)
    try:
        assert wire.process_facts()["umask"] == 0o027
    finally:
        os.umask(umask)


def test_without_a_helper_nothing_is_served(tmp_path: Path) -> None:
    runtime = tmp_path / "rt"
    runtime.mkdir(mode=0o700)
    env = {"XDG_RUNTIME_DIR": str(runtime)}
    assert wire.hand_over(["ls"], env, sys.path[1:]) is None  # no directory sbx/ there
    (runtime / "sbx").mkdir(mode=0o700)
    assert wire.hand_over(["ls"], env, sys.path[1:]) is None  # no socket
    assert wire.ask(str(runtime / "sbx" / "none.sock"), "status") is None


def test_descriptors_sent_piece_by_piece_are_bounded_per_frame(
        pair: tuple[socket.socket, socket.socket]) -> None:
    left, right = pair
    before = open_fds()
    body = b'{"op": "run"}'
    payload = len(body).to_bytes(4, "big") + body
    fds = b"".join(fd.to_bytes(4, sys.byteorder) for fd in (0, 1, 2, 0, 1))
    for index in range(len(payload)):  # one byte per message, five descriptors with each
        left.sendmsg([payload[index:index + 1]], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
    with pytest.raises(wire.WireError):
        wire.recv_frame(right)
    right.settimeout(0.2)
    unread = 0
    with contextlib.suppress(OSError):  # drain what is left, closing what came with it
        while True:
            data, ancillary, _flags, _addr = right.recvmsg(64, socket.CMSG_SPACE(64))
            for fd in wire._descriptors(ancillary):
                os.close(fd)
            unread += len(data)
            if not data:
                break
    assert unread > 0  # refused as soon as the descriptors passed the bound, not at the end
    assert open_fds() == before


def test_waiting_reads_a_given_back_command_an_exit_and_a_signal() -> None:
    for frame, expected in (({"op": "decline", "why": "x"}, wire.DECLINED),
                            ({"op": "exit", "code": 7}, 7), ({"op": "signal", "signal": 9}, 137)):
        left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        pidfd = os.pidfd_open(os.getpid())
        with left:
            wire.send_frame(left, frame)
            assert wire.Served(right, pidfd).wait() == expected  # closes right and the pidfd
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    left.close()  # the helper and the command went away without a word
    assert wire.Served(right, os.pidfd_open(os.getpid())).wait() is None
