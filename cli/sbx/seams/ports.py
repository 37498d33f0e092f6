"""`port@1`: publish sandbox ports on 127.0.0.1, through the sbx process, with no egress.

A sandbox with ports joins a per-run Docker network created ``internal`` (nothing beyond the
host is routed) and sbx forwards an ephemeral loopback port on the host to each declared
container port. Nothing listens beyond loopback, and the engine's own port publishing (which
needs a non-internal, routed network) is never used. The forwarder lives exactly as long as the
run: it stops with the sandbox.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason

BUFFER: Final = 64 * 1024
ACCEPT_POLL_S: Final = 0.2
CONNECT_TIMEOUT_S: Final = 5.0


@dataclass(frozen=True)
class PublishedPort:
    container_port: int
    transport: str
    host: str
    host_port: int

    @property
    def key(self) -> str:
        return f"{self.container_port}/{self.transport}"

    def as_dict(self) -> dict[str, object]:
        return {"container": self.container_port, "transport": self.transport,
                "host": self.host, "host_port": self.host_port}


@dataclass
class PortForwarder:
    """TCP forwarders from 127.0.0.1:<ephemeral> to <container ip>:<port>."""

    target_ip: str
    published: list[PublishedPort] = field(default_factory=list)
    _listeners: list[socket.socket] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self, ports: Sequence[int]) -> list[PublishedPort]:
        """Listen on 127.0.0.1 for each port; ``start_failed`` when the host cannot."""
        try:
            return self._start(ports)
        except OSError as error:
            raise SbxError(Reason.START_FAILED,
                           f"could not publish the sandbox's ports on 127.0.0.1: {error}",
                           hint="Free a loopback port (or close what holds them), then run "
                                "again.") from error

    def _start(self, ports: Sequence[int]) -> list[PublishedPort]:
        for port in ports:
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self._listeners.append(listener)  # before bind: stop() closes it if bind fails
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", 0))
            listener.listen(64)
            listener.settimeout(ACCEPT_POLL_S)
            host_port = int(listener.getsockname()[1])
            self.published.append(PublishedPort(port, "tcp", "127.0.0.1", host_port))
            thread = threading.Thread(target=self._accept, args=(listener, port),
                                      name=f"sbx-port-{port}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return list(self.published)

    def stop(self) -> None:
        self._stop.set()
        for listener in self._listeners:
            listener.close()
        for thread in self._threads:
            thread.join(ACCEPT_POLL_S * 5)

    def _accept(self, listener: socket.socket, port: int) -> None:
        while not self._stop.is_set():
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # closed by stop()
            threading.Thread(target=self._serve, args=(client, port), daemon=True).start()

    def _serve(self, client: socket.socket, port: int) -> None:
        try:
            upstream = socket.create_connection((self.target_ip, port), CONNECT_TIMEOUT_S)
        except OSError:
            client.close()
            return
        upstream.settimeout(None)
        pump = threading.Thread(target=_copy, args=(upstream, client), daemon=True)
        pump.start()
        _copy(client, upstream)
        pump.join()


def _copy(source: socket.socket, sink: socket.socket) -> None:
    try:
        while True:
            data = source.recv(BUFFER)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass
    finally:
        # Half-close so the other direction can finish, then release both ends.
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)
        source.close()


__all__ = ["PortForwarder", "PublishedPort"]
