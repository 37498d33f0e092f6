"""Reading the TLS ClientHello a client sends into a raw (not intercepted) CONNECT tunnel.

A tunnel is granted for its CONNECT host, but the bytes inside are the client's: a ClientHello
naming another server (the SNI) would let the sandbox reach a denied name behind an allowed
one — on a CDN, or through an upstream proxy that routes by SNI (domain fronting). So the proxy
holds the client's first bytes, and when they are TLS it reads the ClientHello with
:func:`parse_client_hello` and refuses the tunnel unless the server name is the CONNECT host
(or absent). A ClientHello that hides the real name (Encrypted Client Hello, or the older ESNI
draft) is refused too: sbx cannot see what it would reach. Bytes that are not TLS pass as they
are (tunnels carry any protocol).

Pure functions only; the handshake message may span several TLS records and TCP reads, and is
bounded (:data:`MAX_HELLO_BYTES`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

HANDSHAKE: Final = 0x16
CLIENT_HELLO: Final = 0x01
SERVER_NAME: Final = 0x0000
ENCRYPTED_CLIENT_HELLO: Final = 0xFE0D
ENCRYPTED_SERVER_NAME: Final = 0xFFCE  # the ESNI draft, still sent by some old clients
MAX_RECORD: Final = 1 << 14
MAX_HELLO_BYTES: Final = 1 << 16  # a ClientHello larger than this is refused
ALERT_HANDSHAKE_FAILURE: Final = 40
ALERT_ACCESS_DENIED: Final = 49
ALERT_UNRECOGNIZED_NAME: Final = 112


class NotAClientHello(ValueError):
    """Bytes that start like TLS but are not a well-formed ClientHello (``str()`` says why)."""


@dataclass(frozen=True)
class ClientHello:
    server_name: str | None  # the host_name of the server_name extension, as sent
    hidden_name: bool  # an Encrypted Client Hello (or ESNI) extension is present


def looks_like_tls(data: bytes) -> bool:
    """Whether a stream starts with a TLS handshake record (what every TLS client sends)."""
    return bool(data) and data[0] == HANDSHAKE


def parse_client_hello(data: bytes) -> ClientHello | None:
    """The ClientHello at the start of ``data`` (TLS records), or None while it is incomplete.

    Raises :class:`NotAClientHello` when the records or the message are malformed, when another
    record type comes before the message is complete, or when it grows past
    :data:`MAX_HELLO_BYTES`.
    """
    message = bytearray()
    offset = 0
    while True:
        if len(message) >= 4:
            if message[0] != CLIENT_HELLO:
                raise NotAClientHello("the first handshake message is not a ClientHello")
            length = int.from_bytes(message[1:4], "big")
            if length > MAX_HELLO_BYTES:
                raise NotAClientHello(f"the ClientHello is longer than {MAX_HELLO_BYTES} bytes")
            if len(message) >= 4 + length:
                return _hello(bytes(message[4:4 + length]))
        if len(data) - offset < 5:
            return None
        kind, major, minor = data[offset], data[offset + 1], data[offset + 2]
        size = int.from_bytes(data[offset + 3:offset + 5], "big")
        if kind != HANDSHAKE:
            raise NotAClientHello(f"a record of type {kind} came before the ClientHello ended")
        if major != 3 or minor > 4:
            raise NotAClientHello(f"record version {major}.{minor} is not TLS")
        if not 0 < size <= MAX_RECORD:
            raise NotAClientHello(f"a handshake record of {size} bytes")
        if len(data) - offset - 5 < size:
            return None
        message += data[offset + 5:offset + 5 + size]
        offset += 5 + size


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def take(self, count: int, what: str) -> bytes:
        if count < 0 or self.at + count > len(self.data):
            raise NotAClientHello(f"the ClientHello ends inside its {what}")
        out = self.data[self.at:self.at + count]
        self.at += count
        return out

    def number(self, size: int, what: str) -> int:
        return int.from_bytes(self.take(size, what), "big")

    def vector(self, size: int, what: str) -> bytes:
        return self.take(self.number(size, what), what)

    @property
    def left(self) -> int:
        return len(self.data) - self.at


def _hello(body: bytes) -> ClientHello:
    reader = _Reader(body)
    reader.take(2 + 32, "version and random")
    if len(reader.vector(1, "session id")) > 32:
        raise NotAClientHello("the session id is longer than 32 bytes")
    suites = reader.vector(2, "cipher suites")
    if not suites or len(suites) % 2:
        raise NotAClientHello("the cipher suite list is malformed")
    if not reader.vector(1, "compression methods"):
        raise NotAClientHello("the compression method list is empty")
    if reader.left == 0:
        return ClientHello(None, False)  # no extensions at all: no server name
    extensions = _Reader(reader.vector(2, "extensions"))
    if reader.left:
        raise NotAClientHello("bytes follow the extensions")
    seen: set[int] = set()
    name: str | None = None
    hidden = False
    while extensions.left:
        kind = extensions.number(2, "extension type")
        data = extensions.vector(2, "extension")
        if kind in seen:
            raise NotAClientHello(f"extension {kind} appears twice")
        seen.add(kind)
        if kind == SERVER_NAME:
            name = _server_name(data)
        elif kind in (ENCRYPTED_CLIENT_HELLO, ENCRYPTED_SERVER_NAME):
            hidden = True
    return ClientHello(name, hidden)


def _server_name(data: bytes) -> str | None:
    reader = _Reader(data)
    names = _Reader(reader.vector(2, "server name list"))
    if reader.left:
        raise NotAClientHello("bytes follow the server name list")
    host: str | None = None
    while names.left:
        kind = names.number(1, "server name type")
        value = names.vector(2, "server name")
        if kind != 0:
            continue  # only host_name (0) is defined; others name nothing sbx checks
        if host is not None:
            raise NotAClientHello("more than one host name in the server name extension")
        if not value or any(b < 0x21 or b > 0x7E for b in value):
            raise NotAClientHello("the server name is not a printable ASCII host name")
        host = value.decode("ascii")
    return host


def alert(description: int) -> bytes:
    """A fatal TLS alert record (what a client shows as e.g. "unrecognized name")."""
    return bytes([0x15, 0x03, 0x03, 0x00, 0x02, 0x02, description])


__all__ = ["ALERT_ACCESS_DENIED", "ALERT_HANDSHAKE_FAILURE", "ALERT_UNRECOGNIZED_NAME",
           "MAX_HELLO_BYTES", "ClientHello", "NotAClientHello", "alert", "looks_like_tls",
           "parse_client_hello"]
