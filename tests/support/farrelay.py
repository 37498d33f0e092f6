"""A listener on a far host's own address, relayed to a loopback server of this machine: how
a test "internet" on 127.0.0.1 is reached from containers on the second engine host.

The listening socket is made inside the far host's network namespace by a short child
(``nsenter --net``) and handed back over a unix socket (SCM_RIGHTS), so this process accepts
connections that arrive at the far host and dials only loopback here. Every socket operation
is bounded; :meth:`Relay.close` stops it.
"""

from __future__ import annotations

import array
import contextlib
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Self

TIMEOUT_S = 30.0

_CHILD = """
import array, socket, sys
address, path = sys.argv[1], sys.argv[2]
listener = socket.socket()
listener.bind((address, 0))
listener.listen(64)
channel = socket.socket(socket.AF_UNIX)
channel.connect(path)
channel.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                          array.array("i", [listener.fileno()]))])
"""


def listen_in_netns(netns: str, address: str) -> socket.socket:
    """A listening TCP socket on ``address`` (any port) inside network namespace ``netns``."""
    with tempfile.TemporaryDirectory() as directory:
        path = str(Path(directory, "fd.sock"))
        server = socket.socket(socket.AF_UNIX)
        server.bind(path)
        server.listen(1)
        server.settimeout(TIMEOUT_S)
        child = subprocess.Popen(["nsenter", f"--net=/var/run/netns/{netns}", sys.executable,
                                  "-c", _CHILD, address, path])
        try:
            conn, _ = server.accept()
            with conn:
                fds = array.array("i")
                _data, ancillary, _flags, _addr = conn.recvmsg(
                    1, socket.CMSG_SPACE(fds.itemsize))
                for level, kind, payload in ancillary:
                    if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                        fds.frombytes(payload[:fds.itemsize])
        finally:
            child.wait(timeout=TIMEOUT_S)
            server.close()
    if not fds:
        raise RuntimeError("the far host's listener did not arrive")
    return socket.socket(fileno=fds[0])


class Relay:
    """Connections to ``listener`` (a far host's address) carried to 127.0.0.1:``port``."""

    def __init__(self, listener: socket.socket, port: int) -> None:
        self.listener = listener
        self.address, self.port = listener.getsockname()[:2]
        self._target = port
        self.accepted = 0
        self._closed = False
        listener.settimeout(0.5)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._closed:
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.accepted += 1
            threading.Thread(target=self._carry, args=(conn,), daemon=True).start()

    def _carry(self, conn: socket.socket) -> None:
        conn.settimeout(TIMEOUT_S)
        try:
            out = socket.create_connection(("127.0.0.1", self._target), timeout=TIMEOUT_S)
        except OSError:
            conn.close()
            return

        def pump(source: socket.socket, sink: socket.socket) -> None:
            with contextlib.suppress(OSError):
                while data := source.recv(65536):
                    sink.sendall(data)
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_WR)

        back = threading.Thread(target=pump, args=(out, conn), daemon=True)
        back.start()
        pump(conn, out)
        back.join(TIMEOUT_S)
        conn.close()
        out.close()

    def close(self) -> None:
        self._closed = True
        self.listener.close()
        self._thread.join(TIMEOUT_S)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


__all__ = ["Relay", "listen_in_netns"]
