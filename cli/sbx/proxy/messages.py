"""HTTP/1.1 message helpers shared by the proxy's parts: authorities, head sizes, the headers a
proxy never forwards, and h11 connections bounded by the limits."""

from __future__ import annotations

from typing import Final

import h11

from sbx.base.reasons import EgressCode
from sbx.domain.egress.proxyconfig import ProxyLimits
from sbx.proxy.refusals import EgressRefusal, failure

HOP_BY_HOP: Final = frozenset({
    b"connection", b"keep-alive", b"proxy-connection", b"proxy-authenticate",
    b"proxy-authorization", b"te", b"trailer", b"upgrade", b"expect",
})
# Listed in Connection, these are still never dropped: framing and the target are not optional.
NEVER_HOP: Final = frozenset({b"host", b"content-length", b"transfer-encoding"})


def parse_authority(text: str, default_port: int | None) -> tuple[str, int] | None:
    """``host[:port]`` or ``[v6][:port]`` → (host as written, port); None if malformed.

    Userinfo, empty hosts, spaces and ports outside 1-65535 are malformed.
    """
    if not text or "@" in text or any(c.isspace() or ord(c) < 0x21 for c in text):
        return None
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            return None
        host, rest = text[1:end], text[end + 1:]
        if rest and not rest.startswith(":"):
            return None
        port_text = rest[1:] if rest else ""
    elif text.count(":") == 1:
        host, _, port_text = text.partition(":")
    elif ":" in text:
        return None
    else:
        host, port_text = text, ""
    if not host:
        return None
    if port_text:
        if not port_text.isascii() or not port_text.isdigit() or len(port_text) > 5:
            return None
        port = int(port_text)
    elif default_port is None:
        return None
    else:
        port = default_port
    if not 0 < port < 65536:
        return None
    return host, port


def head_size(event: h11.Request | h11.Response) -> int:
    """The size of a message head as received (h11 bounds only a head still incomplete)."""
    start = len(event.target) if isinstance(event, h11.Request) else len(event.reason)
    return start + 16 + sum(len(name) + len(value) + 4 for name, value in event.headers)


def connection_listed(headers: list[tuple[bytes, bytes]]) -> set[bytes]:
    """The header names ``Connection`` lists (hop-by-hop for this message), framing excepted."""
    return {token.strip().lower() for name, value in headers if name == b"connection"
            for token in value.split(b",")} - NEVER_HOP


def h11_server(limits: ProxyLimits) -> h11.Connection:
    return h11.Connection(h11.SERVER, max_incomplete_event_size=limits.max_head_bytes)


def h11_client(limits: ProxyLimits) -> h11.Connection:
    return h11.Connection(h11.CLIENT, max_incomplete_event_size=limits.max_head_bytes)


def bad_request(error: h11.RemoteProtocolError, host: str, port: int,
                scheme: str) -> EgressRefusal:
    status = error.error_status_hint if error.error_status_hint in (400, 414, 431) else 400
    return failure(status, EgressCode.BAD_REQUEST, f"the request is not valid HTTP/1.1 ({error})",
                   host=host, port=port, scheme=scheme)


__all__ = ["HOP_BY_HOP", "NEVER_HOP", "bad_request", "connection_listed", "h11_client",
           "h11_server", "head_size", "parse_authority"]
