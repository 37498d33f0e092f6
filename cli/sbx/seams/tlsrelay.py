"""tcp+TLS to an engine, handed to the client as a kernel socket.

The TLS session is verified (the CA of ``DOCKER_CERT_PATH`` or the context, the engine's name
or address in its certificate, a client certificate when one is given) and then relayed by one
thread per connection between it and one end of a socket pair; the client holds the other end.
So the one HTTP/1.1 client reads heads exactly (``MSG_PEEK``), a session waits on a descriptor
that is readable exactly when bytes are there (no record left buffered inside the TLS layer),
and the end of the workload's stdin is a TLS ``close_notify`` as the docker CLI sends it.
"""

from __future__ import annotations

import contextlib
import select
import socket
import ssl
import threading
from typing import Final

from sbx.base.errors import EngineUnavailable, SbxError
from sbx.seams.connectors import Connector
from sbx.seams.engine import EngineLocation, short_error
from sbx.seams.enginebounds import BoundedSocket
from sbx.seams.enginehost import TlsFiles

_PIECE: Final = 256 * 1024
_LINGER_S: Final = 5.0  # after sbx closed its end: how long the engine may take to close


class TlsConnector(Connector):
    def __init__(self, host: str, port: int, files: TlsFiles, *, local: bool) -> None:
        self._host, self._port = host, port
        self.location = EngineLocation(f"tcp://{host}:{port}", local=local)
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH,
                                             cafile=str(files.ca) if files.ca else None)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        if files.cert is not None and files.key is not None:
            context.load_cert_chain(str(files.cert), str(files.key))
        self._context = context

    def connect(self, timeout: float) -> BoundedSocket:
        plain = socket.create_connection((self._host, self._port), timeout=timeout)
        try:
            tls = self._context.wrap_socket(plain, server_hostname=self._host)
        except BaseException:
            plain.close()
            raise
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        threading.Thread(target=_relay, args=(tls, theirs), daemon=True,
                         name=f"sbx-tls-{self._host}").start()
        sock = BoundedSocket(fileno=ours.detach())
        sock.settimeout(timeout)
        return sock

    def unreachable(self, action: str, detail: str, *, reached: bool) -> SbxError | None:
        where = self.location.host
        if "certificate" in detail.lower() or "ssl" in detail.lower():
            return EngineUnavailable(
                f"{action}: {where}: the TLS handshake failed (verifying the engine's "
                f"certificate): {short_error(detail)}",
                hint="Point DOCKER_CERT_PATH at the directory with the engine's ca.pem and "
                     "your cert.pem/key.pem, and check `docker --tlsverify version`.")
        if reached:
            return None
        return EngineUnavailable(f"{action}: cannot reach the Docker engine at {where} "
                                 f"(connecting): {short_error(detail)}",
                                 hint="Check that the engine listens there: "
                                      "`docker --tlsverify version`.")


def _relay(tls: ssl.SSLSocket, inner: socket.socket) -> None:
    """Bytes both ways until the engine ends the connection, or sbx closed its end and the
    engine did not follow within a few seconds."""
    sending = True  # sbx's side still open for writing
    try:
        tls.setblocking(False)
        poller = select.poll()
        poller.register(tls, select.POLLIN)
        poller.register(inner, select.POLLIN)
        while True:
            if tls.pending():
                events = [(tls.fileno(), select.POLLIN)]
            else:
                events = poller.poll(None if sending else _LINGER_S * 1000)
                if not events:
                    return
            for fd, event in events:
                if fd == tls.fileno():
                    if not _from_engine(tls, inner):
                        return
                elif event & select.POLLIN:
                    data = inner.recv(_PIECE)
                    if data:
                        _send(tls, data)
                    else:  # sbx's end: stdin ended, or the connection closed
                        sending = False
                        poller.unregister(inner)
                        _close_notify(tls)
                else:  # POLLHUP without data: sbx closed its end
                    sending = False
                    poller.unregister(inner)
                    _close_notify(tls)
    except (OSError, ValueError):
        return
    finally:
        with contextlib.suppress(OSError):
            inner.close()
        with contextlib.suppress(OSError):
            tls.close()


def _from_engine(tls: ssl.SSLSocket, inner: socket.socket) -> bool:
    """Pass on what the engine sent; False at its end."""
    try:
        data = tls.recv(_PIECE)
    except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
        return True
    except ssl.SSLZeroReturnError:
        data = b""
    if not data:
        with contextlib.suppress(OSError):
            inner.shutdown(socket.SHUT_WR)
        return False
    inner.sendall(data)
    return True


def _send(tls: ssl.SSLSocket, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            sent = tls.send(view)
        except ssl.SSLWantWriteError:
            select.select([], [tls], [], 30)
            continue
        except ssl.SSLWantReadError:
            select.select([tls], [], [], 30)
            continue
        view = view[sent:]


def _close_notify(tls: ssl.SSLSocket) -> None:
    """The TLS end of sbx's writing (a half-close: the engine's answer may still come)."""
    with contextlib.suppress(ssl.SSLError, OSError, ValueError):
        tls.unwrap()


__all__ = ["TlsConnector"]
