"""The pure parts of an interactive session: attach framing, detach keys, the mode decision."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.seams.session.escape import DEFAULT_DETACH_KEYS, EscapeDetector, parse_detach_keys
from sbx.seams.session.frames import FrameDecoder, FrameError
from sbx.seams.session.mode import HostStreams, decide_mode


def frame(stream_id: int, payload: bytes) -> bytes:
    return struct.pack(">BxxxL", stream_id, len(payload)) + payload


def decode_all(chunks: list[bytes]) -> dict[str, bytes]:
    decoder = FrameDecoder()
    out: dict[str, bytearray] = {"stdout": bytearray(), "stderr": bytearray()}
    for chunk in chunks:
        for stream, payload in decoder.feed(chunk):
            out[stream] += payload
    assert decoder.idle
    return {k: bytes(v) for k, v in out.items()}


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    pieces, start = [], 0
    for point in points:
        pieces.append(data[start:point])
        start = point
    pieces.append(data[start:])
    return pieces


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(frames=st.lists(st.tuples(st.sampled_from([1, 2]), st.binary(max_size=300)),
                       max_size=12),
       cuts=st.lists(st.integers(0, 10_000), max_size=20))
def test_frames_survive_any_chunking(frames: list[tuple[int, bytes]], cuts: list[int]) -> None:
    wire = b"".join(frame(s, p) for s, p in frames)
    decoded = decode_all(split(wire, cuts))
    assert decoded["stdout"] == b"".join(p for s, p in frames if s == 1)
    assert decoded["stderr"] == b"".join(p for s, p in frames if s == 2)


def test_header_split_byte_by_byte_and_empty_frames() -> None:
    wire = frame(1, b"") + frame(2, b"e") + frame(1, b"\x00\xffbinary")
    decoded = decode_all([wire[i:i + 1] for i in range(len(wire))])
    assert decoded == {"stdout": b"\x00\xffbinary", "stderr": b"e"}


def test_engine_error_stream_goes_to_stderr_and_unknown_ids_are_refused() -> None:
    assert decode_all([frame(3, b"engine says no")])["stderr"] == b"engine says no"
    with pytest.raises(FrameError, match="unknown stream id 7"):
        FrameDecoder().feed(frame(7, b"x"))


def test_payload_is_not_copied() -> None:
    chunk = bytearray(frame(1, b"abc"))
    [(stream, payload)] = FrameDecoder().feed(chunk)
    assert stream == "stdout" and isinstance(payload, memoryview) and payload.obj is chunk


@pytest.mark.parametrize(("text", "expected"), [
    ("ctrl-p,ctrl-q", b"\x10\x11"),
    ("ctrl-a", b"\x01"),
    ("CTRL-Z", b"\x1a"),
    ("ctrl-@,ctrl-[,ctrl-\\,ctrl-],ctrl-^,ctrl-_", b"\x00\x1b\x1c\x1d\x1e\x1f"),
    ("a, b ,~", b"ab~"),
])
def test_detach_keys_parse(text: str, expected: bytes) -> None:
    assert parse_detach_keys(text) == expected


@pytest.mark.parametrize("text", ["", "ctrl-", "ctrl-1", "ctrl-pp", "ab", "ctrl-p,,ctrl-q",
                                  " ", "é"])
def test_bad_detach_keys_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="invalid detach key"):
        parse_detach_keys(text)


def test_default_detach_keys_are_dockers() -> None:
    assert parse_detach_keys(DEFAULT_DETACH_KEYS) == b"\x10\x11"


def feed_all(sequence: bytes, chunks: list[bytes]) -> tuple[bytes, bool]:
    detector = EscapeDetector(sequence)
    out = bytearray()
    for chunk in chunks:
        forwarded, detached = detector.feed(chunk)
        out += forwarded
        if detached:
            return bytes(out), True
    return bytes(out), False


def test_escape_sequence_split_across_reads_is_found_and_not_forwarded() -> None:
    assert feed_all(b"\x10\x11", [b"ls\r\x10", b"\x11more"]) == (b"ls\r", True)


def test_a_lone_prefix_is_released_with_the_next_key() -> None:
    assert feed_all(b"\x10\x11", [b"\x10", b"x", b"\x10\x10", b"y"]) == (b"\x10x\x10\x10y", False)


def test_self_overlapping_sequence() -> None:
    assert feed_all(b"aab", [b"aaab"]) == (b"a", True)
    assert feed_all(b"aab", [b"a", b"a", b"a", b"c"]) == (b"aaac", False)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=200), cuts=st.lists(st.integers(0, 1000), max_size=10))
def test_escape_detector_matches_a_plain_search(data: bytes, cuts: list[int]) -> None:
    sequence = b"\x10\x11"
    forwarded, detached = feed_all(sequence, split(data, cuts))
    index = data.find(sequence)
    if index < 0:
        # Nothing lost, nothing reordered; a trailing prefix is still held back.
        assert detached is False
        assert data.startswith(forwarded) and len(data) - len(forwarded) <= 1
    else:
        assert detached is True and forwarded == data[:index]


def host(stdin: bool = True, stdin_tty: bool = False, stdout_tty: bool = False) -> HostStreams:
    return HostStreams(stdin_fd=0 if stdin else None, stdin_is_terminal=stdin_tty,
                       stdout_is_terminal=stdout_tty)


@pytest.mark.parametrize(("kwargs", "streams", "expected"), [
    # (flags, host, (stdin, tty, raw))
    ({}, host(stdin_tty=True, stdout_tty=True), (True, True, True)),  # a terminal session
    ({}, host(), (True, False, False)),  # piped stdin is forwarded
    ({}, host(stdin=False), (False, False, False)),  # no stdin at all
    ({}, host(stdin_tty=True), (False, False, False)),  # terminal in, pipe out: as docker
    ({}, host(stdout_tty=True), (True, False, False)),  # pipe in, terminal out
    ({"tty": False}, host(stdin_tty=True, stdout_tty=True), (False, False, False)),
    ({"tty": False, "interactive": True}, host(stdin_tty=True, stdout_tty=True),
     (True, False, False)),
    ({"tty": True}, host(), (False, True, False)),  # -t with a pipe: a TTY, no stdin
    ({"tty": True}, host(stdin_tty=True), (True, True, True)),
    ({"interactive": True}, host(stdin_tty=True), (True, False, False)),
    ({"capture": True}, host(stdin_tty=True, stdout_tty=True), (False, False, False)),
    ({"capture": True, "tty": True}, host(stdin_tty=True, stdout_tty=True), (True, True, True)),
])
def test_session_mode(kwargs: dict[str, bool], streams: HostStreams,
                      expected: tuple[bool, bool, bool]) -> None:
    mode = decide_mode(interactive=kwargs.get("interactive"), tty=kwargs.get("tty"),
                       capture=kwargs.get("capture", False), host=streams)
    assert (mode.stdin, mode.tty, mode.raw) == expected


@pytest.mark.parametrize(("kwargs", "streams", "message"), [
    ({"interactive": True}, host(stdin=False), "no standard input"),
    ({"interactive": True, "tty": True}, host(), "needs a terminal on stdin"),
])
def test_session_mode_refusals(kwargs: dict[str, bool], streams: HostStreams,
                               message: str) -> None:
    with pytest.raises(SbxError, match=message) as caught:
        decide_mode(interactive=kwargs.get("interactive"), tty=kwargs.get("tty"),
                    capture=False, host=streams)
    assert caught.value.reason is Reason.INVALID_ARGUMENT
