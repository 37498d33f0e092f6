"""`port@1` and `-p`: publish sandbox ports on loopback, through an sbx process, with no egress.

A sandbox with ports joins a per-run Docker network created ``internal`` (nothing beyond the
host is routed) and sbx forwards an ephemeral loopback port on the host to each declared
container port. Nothing listens beyond loopback, and the engine's own port publishing (which
needs a non-internal, routed network) is never used. The forwarder lives as long as the
sandbox: a one-shot run's stops with it; a named sandbox's lives in its keeper
(:mod:`sbx.keeper`), so its ports stay reachable with no ``sbx`` attached.
"""

from __future__ import annotations

import contextlib
import errno
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


KIT: Final = "kit"  # a kit's port@1
PUBLISH: Final = "publish"  # a -p/--publish


@dataclass(frozen=True)
class Binding:
    """What to publish: a container port on ``host:host_port`` (0: any free port)."""

    container_port: int
    source: str  # KIT or PUBLISH
    host: str = "127.0.0.1"
    host_port: int = 0

    def as_dict(self) -> dict[str, object]:
        return {"container": self.container_port, "source": self.source, "host": self.host,
                "host_port": self.host_port}

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> Binding:
        container, port = data.get("container"), data.get("host_port", 0)
        if not isinstance(container, int) or not isinstance(port, int):
            raise ValueError("a binding's ports are numbers")
        return cls(container, str(data.get("source", KIT)), str(data.get("host", "127.0.0.1")),
                   port)


@dataclass(frozen=True)
class PublishedPort:
    container_port: int
    transport: str
    host: str
    host_port: int
    source: str = KIT

    @property
    def key(self) -> str:
        return f"{self.container_port}/{self.transport}"

    def as_dict(self) -> dict[str, object]:
        return {"container": self.container_port, "transport": self.transport,
                "host": self.host, "host_port": self.host_port, "source": self.source}


@dataclass
class PortForwarder:
    """TCP forwarders from a loopback address's port (asked for, or ephemeral) to
    <container ip>:<port>."""

    target_ip: str  # "" until known (a keeper learns it once the container runs)
    published: list[PublishedPort] = field(default_factory=list)
    _listeners: list[socket.socket] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self, bindings: Sequence[Binding]) -> list[PublishedPort]:
        """Listen for each binding; ``port_taken`` when an asked-for host port is held,
        ``start_failed`` when the host cannot listen otherwise."""
        for binding in bindings:
            try:
                self._listen(binding)
            except OSError as error:
                raise _refusal(binding, error) from error
        return list(self.published)

    def _listen(self, binding: Binding) -> None:
        port = binding.container_port
        family = socket.AF_INET6 if ":" in binding.host else socket.AF_INET
        listener = socket.socket(family, socket.SOCK_STREAM)
        self._listeners.append(listener)  # before bind: stop() closes it if bind fails
        # Past connections in TIME_WAIT must not keep a restart off its port; on Linux this
        # never lets two listeners share one.
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((binding.host, binding.host_port))
        listener.listen(64)
        listener.settimeout(ACCEPT_POLL_S)
        host_port = int(listener.getsockname()[1])
        self.published.append(PublishedPort(port, "tcp", binding.host, host_port,
                                            binding.source))
        thread = threading.Thread(target=self._accept, args=(listener, port),
                                  name=f"sbx-port-{port}", daemon=True)
        thread.start()
        self._threads.append(thread)

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
        target = self.target_ip
        if not target:
            client.close()
            return
        try:
            upstream = socket.create_connection((target, port), CONNECT_TIMEOUT_S)
        except OSError:
            client.close()
            return
        upstream.settimeout(None)
        pump = threading.Thread(target=_copy, args=(upstream, client), daemon=True)
        pump.start()
        try:
            _copy(client, upstream)
            pump.join()
        finally:  # both directions are done: only now are both ends released
            client.close()
            upstream.close()


def check_free(bindings: Sequence[Binding]) -> None:
    """Refuse (``port_taken``) an asked-for host port that something holds, before anything of
    the sandbox is made; the forwarder's own bind is the check that counts."""
    for binding in bindings:
        if binding.host_port == 0:
            continue
        family = socket.AF_INET6 if ":" in binding.host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the forwarder
            try:
                probe.bind((binding.host, binding.host_port))
            except OSError as error:
                raise _refusal(binding, error) from error


def _refusal(binding: Binding, error: OSError) -> SbxError:
    host = f"[{binding.host}]" if ":" in binding.host else binding.host
    where = f"{host}:{binding.host_port or 'any'}"
    if error.errno == errno.EADDRINUSE and binding.host_port:
        return SbxError(Reason.PORT_TAKEN,
                        f"host port {binding.host_port} on {binding.host} is already taken, so "
                        f"container port {binding.container_port} cannot be published there",
                        hint=f"Pick another host port (`-p {host}::"
                             f"{binding.container_port}` picks a free one); `ss -ltnp "
                             f"'sport = :{binding.host_port}'` names who holds it.",
                        details={"host": binding.host, "host_port": binding.host_port})
    return SbxError(Reason.START_FAILED,
                    f"could not publish container port {binding.container_port} on {where}: "
                    f"{error}",
                    hint="Free a loopback port (or close what holds them), then run again.")


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
        # Half-close, so the other direction still finishes: a client that sent all it had
        # (shutdown of its side) still gets the whole answer.
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


__all__ = ["KIT", "PUBLISH", "Binding", "PortForwarder", "PublishedPort", "check_free"]
