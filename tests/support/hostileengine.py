"""An engine on a unix socket (or loopback tcp) that answers every request in one hostile way
(or a plain one), for the tests of sbx's bounds on engine answers. Every connection is served by
its own thread, which stops when sbx hangs up, after :data:`SEND_LIMIT` bytes, or after
:data:`SERVE_LIMIT_S`."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

SEND_LIMIT: Final = 512 * 1024 * 1024
SERVE_LIMIT_S: Final = 60.0
DRIP_S: Final = 0.05

OK_HEAD: Final = b"HTTP/1.1 200 OK\r\nApi-Version: 1.41\r\nContent-Type: application/json\r\n"
VERSION: Final = json.dumps({"ApiVersion": "1.41", "Version": "20.10.99"}).encode()


def _drip(conn: socket.socket, data: Iterator[bytes], pause: float) -> None:
    sent = 0
    started = time.monotonic()
    for piece in data:
        conn.sendall(piece)
        sent += len(piece)
        if sent > SEND_LIMIT or time.monotonic() - started > SERVE_LIMIT_S:
            return
        if pause:
            time.sleep(pause)


def _forever(piece: bytes) -> Iterator[bytes]:
    while True:
        yield piece


def _head_then(body: Iterator[bytes], head: bytes, pause: float) -> Callable[[socket.socket],
                                                                                None]:
    def answer(conn: socket.socket) -> None:
        conn.sendall(head)
        _drip(conn, body, pause)
    return answer


def _plain(body: bytes) -> Callable[[socket.socket], None]:
    def answer(conn: socket.socket) -> None:
        conn.sendall(OK_HEAD + b"Content-Length: %d\r\n\r\n" % len(body) + body)
    return answer


# Each behaviour: how the engine answers any request.
BEHAVIOURS: Final[dict[str, Callable[[socket.socket], None]]] = {
    # a JSON body that never ends, one byte at a time: each read returns in time
    "slow_body": _head_then(_forever(b" "), OK_HEAD + b"Content-Length: 1000000\r\n\r\n{",
                            DRIP_S),
    # a body far larger than any answer sbx needs, as fast as the socket takes it
    "huge_body": _head_then(_forever(b" " * 65536), OK_HEAD + b"\r\n{", 0.0),
    # the same, declared
    "huge_declared": _head_then(_forever(b" " * 65536),
                                OK_HEAD + b"Content-Length: 134217728\r\n\r\n{", 0.0),
    # a header line without end
    "huge_header": _head_then(_forever(b"x" * 65536), OK_HEAD + b"X-Pad: ", 0.0),
    # headers without end, each short
    "endless_headers": _head_then(_forever(b"X-Pad: x\r\n"), OK_HEAD, 0.0),
    # one chunk that claims to be huge and never ends
    "endless_chunk": _head_then(_forever(b"x" * 65536),
                                OK_HEAD + b"Transfer-Encoding: chunked\r\n\r\nfffffffff\r\n", 0.0),
    # many small chunks that never end (a chunked body without its last chunk)
    "endless_chunks": _head_then(_forever(b"1\r\n \r\n"),
                                 OK_HEAD + b"Transfer-Encoding: chunked\r\n\r\n1\r\n{\r\n",
                                 DRIP_S),
    # the head itself, one byte at a time, never finished
    "slowloris": _head_then(_forever(b"x"), b"HTTP/1.1 200 OK\r\nX-Pad: ", DRIP_S),
    # a plain engine: a small JSON answer to everything
    "plain": _plain(VERSION),
}


class HostileEngine:
    """``with HostileEngine(path, "slow_body") as engine:`` serves until the block ends;
    ``engine.requests`` holds the request lines it saw."""

    def __init__(self, path: Path | None, behaviour: str | Callable[[socket.socket], None]
                 ) -> None:
        self.path = path  # None: on loopback tcp (``port`` once entered)
        self.port = 0
        self.answer = BEHAVIOURS[behaviour] if isinstance(behaviour, str) else behaviour
        self.requests: list[str] = []
        self._server = socket.socket(socket.AF_UNIX if path is not None else socket.AF_INET,
                                     socket.SOCK_STREAM)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def __enter__(self) -> HostileEngine:
        if self.path is not None:
            self._server.bind(str(self.path))
        else:
            self._server.bind(("127.0.0.1", 0))
            self.port = self._server.getsockname()[1]
        self._server.listen(16)
        self._server.settimeout(0.2)
        accepter = threading.Thread(target=self._accept, daemon=True)
        accepter.start()
        self._threads.append(accepter)
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._server.close()
        for thread in self._threads:
            thread.join(5)

    def _accept(self) -> None:
        deadline = time.monotonic() + 4 * SERVE_LIMIT_S
        while not self._stop.is_set() and time.monotonic() < deadline:
            try:
                conn, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            thread.start()
            self._threads.append(thread)

    def _serve(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            conn.settimeout(SERVE_LIMIT_S)
            head = b""
            while b"\r\n\r\n" not in head and len(head) < 65536:
                data = conn.recv(4096)
                if not data:
                    return
                head += data
            self.requests.append(head.split(b"\r\n", 1)[0].decode("latin-1"))
            self.answer(conn)


__all__ = ["BEHAVIOURS", "HostileEngine"]
