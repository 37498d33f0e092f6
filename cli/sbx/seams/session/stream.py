"""The engine's attach connection as sbx sees it: a socket carrying raw bytes both ways.

The driver opens it (an HTTP upgrade on the engine's socket) and hands it over as this type,
so nothing outside the driver touches the SDK.
"""

from __future__ import annotations

import contextlib
import socket
from typing import Any


class AttachedStream:
    def __init__(self, sock: socket.socket, *, keep: Any = None) -> None:
        self._sock = sock
        # The HTTP response object that owns the connection: kept alive with the stream, or
        # its finaliser would close the socket underneath us.
        self._keep = keep
        self._closed = False

    def fileno(self) -> int:
        return self._sock.fileno()

    def recv_into(self, buffer: bytearray | memoryview) -> int:
        return self._sock.recv_into(buffer)

    def sendall(self, data: bytes) -> None:
        self._sock.sendall(data)

    def close_write(self) -> None:
        """End of stdin: the engine closes the workload's stdin (it was created StdinOnce)."""
        try:
            self._sock.shutdown(socket.SHUT_WR)
        except OSError:
            return

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            # shutdown first: it wakes a thread blocked sending on this socket, close alone
            # does not.
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)
            self._sock.close()
        finally:
            close = getattr(self._keep, "close", None)
            if close is not None:
                with contextlib.suppress(OSError):
                    close()


__all__ = ["AttachedStream"]
