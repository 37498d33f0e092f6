"""sbx's own HTTP/1.1 client for the engine, over whatever byte stream a connector opens.

Plain exchanges reuse their connection (HTTP keep-alive): over ssh a new connection starts a
``docker system dial-stdio`` on the far host, which costs far more than the call, so an
:class:`EngineConnections` keeps the connections whose answer was read to its framed end and
hands them out again. A connection is never reused after an answer it did not read whole (a
wait that ran out of time, a bound exceeded, an error), nor one the engine said it closes. An
upgraded stream (attach, exec) or a progress stream gets a connection of its own.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator, Mapping
from contextlib import closing
from dataclasses import dataclass
from typing import Final

from sbx.seams.connectors import Connector
from sbx.seams.enginebounds import (
    MAX_ANSWER_BYTES,
    MAX_HEAD_BYTES,
    AnswerBound,
    AnswerExceeded,
    BoundedSocket,
    bounded,
)
from sbx.seams.http11 import parse_head

_READ_BYTES: Final = 64 * 1024
_SIZE_LINE_BYTES: Final = 4096  # a chunk's size line, extensions included
MAX_IDLE: Final = 4  # kept connections per engine


@dataclass(frozen=True)
class Response:
    status: int
    headers: Mapping[str, str]  # lower-case names
    body: bytes


class _ClosedBeforeAnswer(ValueError):
    """The connection ended before one byte of the answer: a kept one the engine had closed."""


class EngineConnections:
    """The connections of one engine: fresh from the connector, or kept from an earlier
    exchange."""

    def __init__(self, connector: Connector) -> None:
        self.connector = connector
        self._idle: list[BoundedSocket] = []
        self._lock = threading.Lock()

    def open(self, timeout: float) -> BoundedSocket:
        """A connection of the caller's own (never handed back)."""
        return self.connector.connect(timeout)

    def exchange(self, request: bytes, bound: AnswerBound, *,
                 expect_body: bool = True) -> Response:
        """One request and its whole answer, held to ``bound``; on a kept connection the
        engine had closed meanwhile, once more on a fresh one. Raises OSError, ValueError (an
        answer that is not HTTP) and AnswerExceeded."""
        with bounded(bound):
            while True:
                sock, kept = self._take(bound.idle_s)
                try:
                    response, reusable = _exchange_on(sock, request, expect_body)
                except (_ClosedBeforeAnswer, BrokenPipeError, ConnectionResetError):
                    sock.close()
                    if kept:
                        continue
                    raise
                except BaseException:
                    sock.close()
                    raise
                self._give_back(sock) if reusable else sock.close()
                return response

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for sock in idle:
            sock.close()

    def _take(self, timeout: float) -> tuple[BoundedSocket, bool]:
        with self._lock:
            if self._idle:
                sock = self._idle.pop()
                sock.settimeout(timeout)
                return sock, True
        return self.connector.connect(timeout), False

    def _give_back(self, sock: BoundedSocket) -> None:
        with self._lock:
            if len(self._idle) < MAX_IDLE:
                self._idle.append(sock)
                return
        sock.close()


def _exchange_on(sock: BoundedSocket, request: bytes,
                 expect_body: bool) -> tuple[Response, bool]:
    sock.sendall(request)
    status, headers = parse_head(read_head(sock, first=True))
    expected = expect_body and status not in (204, 304) and status >= 200
    body = bytearray()
    for piece in body_of(sock, headers, expected=expected):
        body += piece
    framed = not expected or is_chunked(headers) or headers.get("content-length", "").isdigit()
    reusable = framed and "close" not in headers.get("connection", "").lower()
    return Response(status, headers, bytes(body)), reusable


def one_exchange(sock: BoundedSocket, request: bytes, *, expect_body: bool = True) -> Response:
    """An exchange on a connection that is then closed (the engine's own close ends it)."""
    with closing(sock):
        return _exchange_on(sock, request, expect_body)[0]


def is_chunked(headers: Mapping[str, str]) -> bool:
    return headers.get("transfer-encoding", "").lower() == "chunked"


def body_of(sock: socket.socket, headers: Mapping[str, str], *,
          expected: bool = True) -> Iterator[bytes]:
    """A response body as it arrives: de-chunked, exactly its Content-Length, or everything up
    to the engine's close; nothing for an answer that has none (HEAD, 204, 304)."""
    if not expected:
        return
    if is_chunked(headers):
        yield from _dechunked(sock)
        return
    length = headers.get("content-length", "")
    if length.isdigit():
        left = int(length)
        if left > MAX_ANSWER_BYTES:
            # Refused before a byte is read: no call of sbx expects an answer this large.
            raise AnswerExceeded(f"declares {left} bytes, more than sbx reads", slow=False)
        while left:
            data = sock.recv(min(left, _READ_BYTES))
            if not data:
                raise ValueError("the engine's answer was cut short")
            left -= len(data)
            yield data
        return
    while data := sock.recv(_READ_BYTES):
        yield data


def _dechunked(sock: socket.socket) -> Iterator[bytes]:
    """A ``Transfer-Encoding: chunked`` body, piece by piece as it arrives (never a whole
    chunk held: one may be endless); the socket's bound limits the whole."""
    buffer = bytearray()
    while True:
        while (end := buffer.find(b"\r\n")) < 0:
            if len(buffer) > _SIZE_LINE_BYTES:
                raise ValueError("the engine sent a chunk size line without end")
            more = sock.recv(_READ_BYTES)
            if not more:
                raise ValueError("the stream ended inside a chunk's size line")
            buffer += more
        size_text = bytes(buffer[:end]).split(b";", 1)[0].strip() or b"0"
        del buffer[:end + 2]
        try:
            left = int(size_text, 16)
        except ValueError:
            raise ValueError(f"not a chunk size: {size_text[:20]!r}") from None
        if left == 0:
            return  # trailers, if any, are not read: the engine closes the connection
        while left:
            if not buffer:
                more = sock.recv(min(left, _READ_BYTES) + 2)
                if not more:
                    raise ValueError("a chunk cut short")
                buffer += more
            piece = bytes(buffer[:left])
            del buffer[:len(piece)]
            left -= len(piece)
            yield piece
        while len(buffer) < 2:
            more = sock.recv(_READ_BYTES)
            if not more:
                raise ValueError("a chunk cut short")
            buffer += more
        if buffer[:2] != b"\r\n":
            raise ValueError("a chunk without its line end")
        del buffer[:2]


def read_head(sock: socket.socket, *, first: bool = False) -> bytes:
    """The status line and headers of an HTTP response, consumed exactly (the bytes after
    them belong to an upgraded stream) and at most MAX_HEAD_BYTES. Each wait is the socket's:
    a bounded socket holds the whole head to the call's time. ``first``: the connection's end
    before any byte is :class:`_ClosedBeforeAnswer`."""
    head = bytearray()
    while True:
        room = MAX_HEAD_BYTES - len(head)
        if room <= 0:
            raise AnswerExceeded(f"sent a head longer than {MAX_HEAD_BYTES} bytes", slow=False)
        # Look at what has arrived without taking it, then take exactly what is head.
        peeked = sock.recv(min(room, 4096), socket.MSG_PEEK)
        if not peeked:
            if first and not head:
                raise _ClosedBeforeAnswer("the engine closed the connection")
            raise ValueError("the engine closed the connection")
        seen = bytes(head[-3:]) + peeked
        end = seen.find(b"\r\n\r\n")
        take = len(peeked) if end < 0 else end + 4 - min(len(head), 3)
        head += _recv_exactly(sock, take)
        if end >= 0:
            return bytes(head)


def _recv_exactly(sock: socket.socket, count: int) -> bytes:
    chunks = []
    while count:
        chunk = sock.recv(count)
        if not chunk:
            raise ValueError("the engine closed the connection")
        chunks.append(chunk)
        count -= len(chunk)
    return b"".join(chunks)


__all__ = ["MAX_IDLE", "EngineConnections", "Response", "body_of", "is_chunked",
           "one_exchange", "read_head"]
