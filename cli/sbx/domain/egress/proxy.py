"""The egress proxy: the only way out of a sandbox with a network policy (SPEC §8).

Run as its own process (``python -m sbx.domain.egress.proxy CONFIG_PATH RUN_ID``), it prints one
line,
``SBX-PROXY-READY <port>``, once it listens, writes to stderr only on errors, switches from the
install phase to the runtime phase on SIGUSR1 (never back; ``phase_file`` then says
``runtime``), re-reads the secret store on SIGHUP and exits on SIGTERM.

Its stdin is its **owner's pipe**: the first line is the run's client token (empty for none),
followed, after a ``|``, by the secrets ``sbx`` resolved itself (keyring, host variable, host
command: :func:`sbx.domain.credentials.secrets.encode_provided`) when there are any, and the write
end stays with
the ``sbx`` process that started it. When that process ends — even
by SIGKILL, when no cleanup code runs — the kernel closes the pipe, the proxy reads EOF and
exits, so a one-shot run's proxy never outlives its owner (a pipe, not ``PR_SET_PDEATHSIG``,
which fires on the death of the parent *thread* and is lost across a re-parenting).

Who may use it (:mod:`sbx.domain.egress.proxyauth`): with a token, every CONNECT and plain request
must
carry ``Proxy-Authorization`` with the run's credentials (else 407); with ``peer_network``,
clients must come from inside the run's network and not from its gateway (else 403). A proxy
listening on anything but loopback refuses to start without both.

What it does with each client connection:

- ``CONNECT host:port``: :func:`sbx.domain.egress.policy.classify` says *denied* (403 and close),
  *unbounded* (a byte tunnel, no interception — unless a credential is injected for that host,
  then it is intercepted so the secret can be set; the client's first bytes are held until
  judged: a TLS ClientHello must name the CONNECT host or no host, and must not hide it with
  Encrypted Client Hello, else the tunnel ends with a TLS alert; the server's bytes flow at once
  so server-first protocols work) or *bounded* (TLS is terminated with the state
  home CA's leaf for the CONNECT host; the client's SNI must name that host and every request's
  ``Host`` must too; each HTTP/1.1 request is judged by :func:`~sbx.domain.egress.policy.decide` on
  its
  method and normalised path and forwarded — with the normalised path — only when allowed).
- Absolute-form plain HTTP requests (``GET http://host/path``) are judged per request the same way.
- Destinations: names are resolved here and every address checked: loopback, link-local (cloud
  metadata), private, shared, multicast, reserved and unspecified addresses are refused unless an
  allow rule names that address literally; the proxy connects to the exact address it checked,
  so a second DNS answer cannot rebind it. With ``upstream_proxy`` every outbound connection goes
  through the corporate proxy (``CONNECT`` for TLS, absolute-form for HTTP) and names are left to
  it, but internal address literals, ``localhost`` names, single-label names and special-use
  suffixes (``.internal``, ``.local``...) are still refused here
  (:func:`sbx.domain.egress.policy.internal_name`) unless a rule names that exact host. Cloud
  metadata
  names (``metadata.google.internal``, ``instance-data``...) are refused that way with or without
  an upstream, before any resolution.
- Credentials (``credential@1``): on requests to an inject domain in the current phase the
  configured header is *replaced* with ``format % secret`` (or basic auth); any header carrying a
  sentinel is dropped everywhere, so a sentinel never leaves; the secret (and its percent- and
  JSON-escaped forms) is masked out of the response an inject domain sends back, across chunk
  boundaries: headers and bodies — the proxy asks for ``Accept-Encoding: identity`` and drops
  ``Range``/``If-Range`` there (a range could cut the secret in pieces no mask recognises),
  decodes gzip/deflate bodies itself (:mod:`sbx.domain.egress.encoding`) and refuses any other
  encoding
  (502 ``response_unmaskable``); a credential whose secret is not stored refuses its requests
  (502 ``credential_unbound``) instead of silently sending the sentinel. Injection is refused
  over plain HTTP.
- OAuth credentials (:mod:`sbx.domain.egress.oauth_intercept` decides, the I/O is here): the token
  endpoint is answered with sentinels while the real refresh token goes upstream and the new
  real tokens go to the host store (under its lock); on resource hosts the access sentinel
  becomes the real access token, and any other credential there is refused (403
  ``credential_not_issued``); the real tokens are masked out of those hosts' answers and
  redacted from stderr.
- Refusals are HTTP 403 with ``X-Sbx-Reason: egress_denied``, ``X-Sbx-Rule`` and a text body that
  names host, method, path, the deciding rule (kit, capability index, phase) and the exact
  ``sbx explain … METHOD URL`` command; each is audited as ``egress_denied``. Any internal error
  answers 502 (or closes the connection) — never a bypass.

Engine choice. ``mitmproxy`` was evaluated first and rejected: its releases since 11.1 require
Python ≥ 3.12, and the last one for 3.11 (11.0.2, 2024) pins ``cryptography<44.1`` (sbx needs a
current one), ``h11<=0.14`` (before the 0.16 fix for the chunked-encoding request-smuggling flaw,
CVE-2025-43859) and ``ruamel.yaml<=0.18.6``, and pulls in 24 dependencies (Flask, tornado, urwid,
ldap3, aioquic, a Rust extension; 132 MB installed) for an interactive tool whose addon API we
would bend into a policy engine. Start-up was fine (~0.45 s). What we need is narrow — an HTTP/1.1
forward proxy with CONNECT, per-request decisions, header rewriting and TLS termination — so it
is written here on asyncio, ``h11`` (a small, pure-Python, well-kept HTTP/1.1 state machine that
does the parsing and framing, the part that is easy to get dangerously wrong) and the standard
library's ``ssl`` (through ``MemoryBIO`` so the proxy controls handshakes, SNI and timeouts).
HTTP/2 and WebSockets to intercepted hosts are not offered (ALPN advertises only http/1.1 and
``Upgrade`` is stripped); tunnelled hosts carry any protocol.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ipaddress
import json
import os
import re
import shlex
import signal
import socket
import ssl
import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal, Protocol
from urllib.parse import quote, unquote, urlsplit

import h11

from sbx.base.errors import SbxError
from sbx.domain.egress import clienthello, oauth_intercept, proxyauth
from sbx.domain.egress.encoding import (
    BodyDecoder,
    CorruptBody,
    UnsupportedEncoding,
    content_codings,
)
from sbx.domain.egress.policy import (
    METADATA_ADDRESSES,
    Decision,
    Request,
    classify,
    decide,
    describe_rule,
    host_matches,
    internal_name,
    is_metadata_name,
    names_address,
    normalize_host,
)
from sbx.domain.egress.proxyconfig import (
    CredentialSpec,
    Inject,
    Limits,
    ProxyConfig,
    ProxyConfigError,
)
from sbx.domain.kits.compose import Network, Phase
from sbx.seams import audit

READY_PREFIX: Final = "SBX-PROXY-READY"
READ_SIZE: Final = 256 * 1024
WRITE_HIGH_WATER: Final = 1024 * 1024
SBX_REASON: Final = "X-Sbx-Reason"
SBX_RULE: Final = "X-Sbx-Rule"
DENIED: Final = "egress_denied"
FAILED: Final = "proxy_failed"
UNBOUND: Final = "credential_unbound"
CLIENT_REFUSED: Final = "proxy_client_refused"
UNMASKABLE: Final = "response_unmaskable"
NOT_ISSUED: Final = "credential_not_issued"
# Proxy-side refusal codes (the policy's own codes come from Decision.code).
DESTINATION_BLOCKED: Final = "destination_blocked"
SNI_MISMATCH: Final = "sni_mismatch"
SNI_HIDDEN: Final = "sni_hidden"
BAD_CLIENT_HELLO: Final = "bad_client_hello"
ENCODED_RESPONSE: Final = "encoded_response"
HOST_MISMATCH: Final = "host_mismatch"
NOT_TLS: Final = "not_tls"
NOT_HTTP: Final = "not_http"
PLAINTEXT_CREDENTIAL: Final = "credential_needs_tls"
METHOD_OVERRIDE: Final = "method_override"
PHASE_CLOSED: Final = "phase_closed"
FOREIGN_CREDENTIAL: Final = "foreign_credential"
TOKEN_REQUEST: Final = "token_request_unreadable"  # noqa: S105 - a code, not a secret
HOP_BY_HOP: Final = frozenset({
    b"connection", b"keep-alive", b"proxy-connection", b"proxy-authenticate",
    b"proxy-authorization", b"te", b"trailer", b"upgrade", b"expect",
})
# Listed in Connection, these are still never dropped: framing and the target are not optional.
NEVER_HOP: Final = frozenset({b"host", b"content-length", b"transfer-encoding"})
METHOD_OVERRIDES: Final = (b"x-http-method-override", b"x-http-method", b"x-method-override")
# Not forwarded to inject domains: a range of an echo could cut the secret into pieces no mask
# recognises; and bodies must come back in an encoding the proxy can read.
INJECT_DROPPED: Final = frozenset({b"range", b"if-range", b"accept-encoding"})
# Validators of the encoded representation: wrong once the proxy decoded the body.
DECODED_DROPPED: Final = frozenset({b"content-encoding", b"content-length", b"content-md5",
                                    b"digest", b"content-digest", b"repr-digest",
                                    b"accept-ranges", b"content-range"})
CLIENT_AUDIT_LIMIT: Final = 1000  # client refusals recorded per proxy (outsiders may flood)
_LOCAL_NAMES: Final = ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback")
_NAT64: Final = ipaddress.IPv6Network("64:ff9b::/96")
_IETF_PROTOCOL: Final = ipaddress.IPv4Network("192.0.0.0/24")  # RFC 6890; not all non-global
_NAT64_LOCAL: Final = ipaddress.IPv6Network("64:ff9b:1::/48")


# -- refusals --------------------------------------------------------------------------------------


@dataclass(eq=False)
class Refusal(Exception):
    """A request or connection the proxy will not carry, and how to tell the client."""

    status: int
    code: str
    reason: str
    host: str
    port: int
    method: str | None = None
    path: str | None = None
    scheme: str = "https"
    rule: str = "default-deny"  # the X-Sbx-Rule value
    rule_text: str = "no allow rule (deny by default)"
    suggestion: str | None = None
    sbx_reason: str = DENIED
    audited: bool = True
    client: str | None = None  # the client's address, on refusals of the client itself
    explain: str | None = None  # the explain command, when not the request's decision

    def __str__(self) -> str:
        return f"{self.status} {self.code}: {self.reason}"


def refusal_for(decision: Decision, *, host: str, port: int, scheme: str) -> Refusal:
    """The refusal of a request the policy denied."""
    rule = decision.deciding
    if rule is not None:
        rule_id = describe_rule(rule)
        text = (f"{rule_id} (kit {rule.kit}, capability {rule.index}, phase {rule.phase}, "
                f"{rule.action})")
    elif decision.code == "default_deny":
        rule_id, text = "default-deny", "no allow rule (deny by default)"
    else:
        rule_id, text = decision.code.replace("_", "-"), f"no rule decided ({decision.code})"
    return Refusal(403, decision.code, decision.reason, decision.host or host, port,
                   decision.request.method, decision.request.path, scheme, rule_id, text,
                   decision.suggestion)


def proxy_refusal(code: str, reason: str, *, host: str, port: int, method: str | None = None,
                  path: str | None = None, scheme: str = "https", suggestion: str | None = None,
                  status: int = 403) -> Refusal:
    """A refusal decided by the proxy itself (destination safety, SNI, Host, protocol)."""
    rule = code.replace("_", "-")
    return Refusal(status, code, reason, host, port, method, path, scheme, rule,
                   f"none: refused by the proxy ({code})", suggestion)


def client_refusal(code: str, *, client: str, host: str = "-", port: int = 0,
                   method: str | None = None, path: str | None = None,
                   scheme: str = "https") -> Refusal:
    """The refusal of a client that is not the run's sandbox (407 credentials, 403 peer)."""
    if code == proxyauth.PEER:
        status, reason = 403, (f"the client {client} is not inside the sandbox's network; only "
                               "the sandbox may use its egress proxy")
    else:
        status = 407
        reason = ("the request carries no Proxy-Authorization with this run's proxy "
                  "credentials" if code == proxyauth.MISSING else
                  "the Proxy-Authorization does not hold this run's proxy credentials")
    return Refusal(status, code, reason, host, port, method, path, scheme,
                   code.replace("_", "-"), "none: refused by the proxy (its client)",
                   "use the proxy URL of HTTP_PROXY/HTTPS_PROXY as given inside the sandbox "
                   "(it carries the run's credentials); nothing else may use this proxy",
                   CLIENT_REFUSED, client=client, explain=f"sbx explain {CLIENT_REFUSED}")


def failure(status: int, code: str, reason: str, *, host: str = "-", port: int = 0,
            method: str | None = None, path: str | None = None, scheme: str = "https",
            sbx_reason: str = FAILED) -> Refusal:
    """Not a policy decision: the proxy could not carry the request (never a bypass)."""
    return Refusal(status, code, reason, host, port, method, path, scheme, code.replace("_", "-"),
                   f"none: the proxy could not carry it ({code})", None, sbx_reason,
                   audited=False)


def _url(scheme: str, host: str, port: int, path: str | None) -> str:
    shown = f"[{host}]" if ":" in host else host
    default = {"https": 443, "http": 80}.get(scheme)
    authority = shown if port == default else f"{shown}:{port}"
    return f"{scheme}://{authority}{path or '/'}"


def explain_line(command: str, refusal: Refusal) -> str:
    """The exact ``sbx explain`` command that shows this decision."""
    if refusal.explain is not None:
        return refusal.explain
    if refusal.method is None or refusal.method == "CONNECT":
        shown = f"[{refusal.host}]" if ":" in refusal.host else refusal.host
        return f"{command} {shlex.quote(f'{shown}:{refusal.port}')}"
    url = _url(refusal.scheme, refusal.host, refusal.port, refusal.path)
    return f"{command} {refusal.method} {shlex.quote(url)}"


def _clean(text: str, limit: int = 2000) -> str:
    """One line of printable text: refusal bodies and headers never carry raw client bytes."""
    out = "".join(c if c.isprintable() else "?" for c in text)
    return out if len(out) <= limit else out[:limit] + "..."


def refusal_body(refusal: Refusal, explain_command: str) -> str:
    what = {DENIED: "blocked by sbx egress policy",
            CLIENT_REFUSED: "refused by the sbx egress proxy: only its sandbox may use it",
            NOT_ISSUED: "refused by the sbx egress proxy: a credential sbx did not issue"}.get(
        refusal.sbx_reason, "not carried by the sbx egress proxy")
    lines = [
        f"{what} ({refusal.status}, {refusal.sbx_reason}: {refusal.code})",
        f"host: {refusal.host}:{refusal.port}",
        f"method: {refusal.method or 'CONNECT'}",
        f"path: {refusal.path or '-'}",
        f"rule: {refusal.rule_text}",
        f"reason: {refusal.reason}",
    ]
    if refusal.suggestion:
        lines.append(f"fix: {refusal.suggestion}")
    lines.append(f"explain: {explain_line(explain_command, refusal)}")
    return "\n".join(_clean(line) for line in lines) + "\n"


_STATUS_TEXT: Final = {400: "Bad Request", 403: "Forbidden", 407: "Proxy Authentication Required",
                       413: "Content Too Large", 414: "URI Too Long",
                       431: "Request Header Fields Too Large", 502: "Bad Gateway",
                       503: "Service Unavailable", 504: "Gateway Timeout"}


def refusal_response(refusal: Refusal, explain_command: str) -> bytes:
    """The complete HTTP/1.1 response for a refusal (the connection is closed after it)."""
    body = refusal_body(refusal, explain_command).encode("utf-8")
    rule = _clean(refusal.rule, 500).encode("ascii", "replace")
    head = (f"HTTP/1.1 {refusal.status} {_STATUS_TEXT.get(refusal.status, 'Error')}\r\n"
            f"Content-Type: text/plain; charset=utf-8\r\n"
            f"{SBX_REASON}: {refusal.sbx_reason}\r\n").encode("ascii")
    head += SBX_RULE.encode("ascii") + b": " + rule + b"\r\n"
    if refusal.status == 407:
        head += b'Proxy-Authenticate: Basic realm="sbx egress proxy"\r\n'
    head += (f"Content-Length: {len(body)}\r\nConnection: close\r\n"
             "Cache-Control: no-store\r\n\r\n").encode("ascii")
    return head + body


# -- byte streams ----------------------------------------------------------------------------------


class Stream(Protocol):
    async def read(self, size: int) -> bytes: ...
    async def write(self, data: bytes) -> None: ...
    def abort(self) -> None: ...


class TcpStream:
    """An asyncio stream pair; ``read`` returns b"" at EOF."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    async def read(self, size: int) -> bytes:
        return await self.reader.read(size)

    async def write(self, data: bytes) -> None:
        self.writer.write(data)
        if self.writer.transport.get_write_buffer_size() > WRITE_HIGH_WATER:
            await self.writer.drain()

    async def flush(self) -> None:
        await self.writer.drain()

    def abort(self) -> None:
        self.writer.transport.abort()


class TlsStream:
    """TLS over any :class:`Stream`, through ``ssl.MemoryBIO``: the proxy feeds the bytes it
    already read (the ClientHello behind a CONNECT), bounds the handshake and sees the SNI."""

    def __init__(self, raw: Stream, obj: ssl.SSLObject, incoming: ssl.MemoryBIO,
                 outgoing: ssl.MemoryBIO) -> None:
        self.raw = raw
        self.obj = obj
        self._in = incoming
        self._out = outgoing

    @classmethod
    def wrap(cls, raw: Stream, context: ssl.SSLContext, *, server_side: bool,
             server_hostname: str | None = None) -> TlsStream:
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        obj = context.wrap_bio(incoming, outgoing, server_side=server_side,
                               server_hostname=server_hostname)
        return cls(raw, obj, incoming, outgoing)

    async def handshake(self, *, timeout: float, initial: bytes = b"") -> None:
        if initial:
            self._in.write(initial)
        async with asyncio.timeout(timeout):
            while True:
                try:
                    self.obj.do_handshake()
                    break
                except ssl.SSLWantReadError:
                    await self._flush()
                    data = await self.raw.read(READ_SIZE)
                    if not data:
                        raise ConnectionError("the peer closed the connection during the "
                                              "TLS handshake") from None
                    self._in.write(data)
            await self._flush()

    async def _flush(self) -> None:
        data = self._out.read()
        if data:
            await self.raw.write(data)

    async def read(self, size: int) -> bytes:
        while True:
            try:
                return self.obj.read(size)
            except ssl.SSLWantReadError:
                await self._flush()
                data = await self.raw.read(READ_SIZE)
                if data:
                    self._in.write(data)
                else:
                    self._in.write_eof()
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                return b""

    async def write(self, data: bytes) -> None:
        self.obj.write(data)
        await self._flush()

    def abort(self) -> None:
        self.raw.abort()


# -- addresses -------------------------------------------------------------------------------------


def blocked_address(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    """Why the proxy must not connect to ``address`` by default, or None for a public address.

    IPv6 forms that carry an IPv4 address (mapped, 6to4, NAT64, Teredo) are judged by it too.
    """
    if isinstance(address, ipaddress.IPv6Address):
        embedded: list[ipaddress.IPv4Address] = []
        if address.ipv4_mapped is not None:
            embedded.append(address.ipv4_mapped)
        if address.sixtofour is not None:
            embedded.append(address.sixtofour)
        if address.teredo is not None:
            embedded.extend(address.teredo)
        if address in _NAT64 or address in _NAT64_LOCAL:
            embedded.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
        for inner in embedded:
            why = blocked_address(inner)
            if why is not None:
                return why
    checks: tuple[tuple[bool, str], ...] = (
        (address.is_unspecified, "an unspecified address"),
        (address.is_loopback, "a loopback address"),
        (address.is_link_local, "a link-local address (cloud metadata lives there)"),
        (address.is_multicast, "a multicast address"),
        (address.is_private, "a private address"),
        (address.is_reserved, "a reserved address"),
        (address in METADATA_ADDRESSES, "a cloud metadata address"),
        (address in _IETF_PROTOCOL, "an IETF protocol assignment (not a public host)"),
        (not address.is_global, "not a public address"),
    )
    for hit, why in checks:
        if hit:
            return why
    return None


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


# -- credentials -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Injection:
    service: str
    header: bytes  # lower-case name
    value: bytes


def injected_value(inject: Inject, secret: str) -> bytes:
    if inject.scheme == "basic":
        token = base64.b64encode(f"{inject.username}:{secret}".encode()).decode("ascii")
        return f"Basic {token}".encode()
    return inject.format.replace("%s", secret, 1).encode("utf-8")


class Masker:
    """Replaces every occurrence of the secrets in a byte stream with ``*`` of the same length
    (so Content-Length still holds), across chunk boundaries."""

    def __init__(self, needles: Iterable[bytes]) -> None:
        self.needles = sorted({n for n in needles if n}, key=len, reverse=True)
        self._keep = max((len(n) for n in self.needles), default=1) - 1
        self._tail = b""

    def mask(self, data: bytes) -> bytes:
        for needle in self.needles:
            if needle in data:
                data = data.replace(needle, b"*" * len(needle))
        return data

    def feed(self, chunk: bytes) -> bytes:
        data = self.mask(self._tail + chunk)
        if self._keep == 0:
            self._tail = b""
            return data
        self._tail = data[-self._keep:] if len(data) > self._keep else data
        return data[:-self._keep] if len(data) > self._keep else b""

    def flush(self) -> bytes:
        tail, self._tail = self._tail, b""
        return tail


def _escaped_forms(value: bytes) -> list[bytes]:
    """``value`` as an echoing origin may write it back: as is, percent-encoded (either hex
    case) and JSON-escaped."""
    text = value.decode("utf-8", "replace")
    percent = quote(text, safe="")
    forms = [value, percent.encode("ascii"),
             re.sub(r"%[0-9A-F]{2}", lambda m: m[0].lower(), percent).encode("ascii"),
             json.dumps(text)[1:-1].encode("ascii")]
    return list(dict.fromkeys(forms))


def redact(text: str, secrets: Iterable[str]) -> str:
    for value in secrets:
        if value:
            text = text.replace(value, "*" * 8)
    return text


# -- the proxy -------------------------------------------------------------------------------------


Resolver = Callable[[str, int], Awaitable[list[str]]]


async def system_resolver(host: str, port: int) -> list[str]:
    """The addresses of ``host`` from the system resolver (getaddrinfo, in a thread)."""
    infos = await asyncio.get_running_loop().getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    return [str(info[4][0]) for info in infos]


@dataclass(frozen=True)
class Site:
    """Where requests on a connection go: fixed for an intercepted CONNECT, per request for
    absolute-form plain HTTP."""

    scheme: Literal["http", "https"]
    host: str  # normalised
    port: int


@dataclass
class Upstream:
    site: Site
    stream: Stream
    conn: h11.Connection
    absolute_form: bool  # plain HTTP through the upstream proxy
    raw: TcpStream  # the socket under ``stream`` (which may be TLS on it)

    def drop(self, pool: dict[Site, Upstream], state: _Conn) -> None:
        """Close it and forget it (a long keep-alive connection opens many, one at a time)."""
        if pool.get(self.site) is self:
            del pool[self.site]
        self.raw.abort()
        with contextlib.suppress(ValueError):
            state.streams.remove(self.raw)


@dataclass(frozen=True)
class UpstreamProxy:
    scheme: str
    host: str
    port: int
    authorization: bytes | None

    @classmethod
    def parse(cls, url: str) -> UpstreamProxy:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ProxyConfigError("upstream_proxy must be an http:// or https:// URL")
        auth = None
        if parts.username is not None:
            pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
            auth = b"Basic " + base64.b64encode(pair.encode("utf-8"))
        default = 443 if parts.scheme == "https" else 80
        return cls(parts.scheme, parts.hostname, parts.port or default, auth)


@dataclass
class _Conn:
    phase: Phase
    streams: list[Stream] = field(default_factory=list)


class EgressProxy:
    """One run's egress proxy. ``secrets`` maps service → value (read by :func:`main` from the
    secret store); a configured credential without a value refuses its requests.
    ``client_token``: the run's proxy token every request must carry (None: no credentials
    asked, for loopback-only use)."""

    def __init__(self, config: ProxyConfig, *, server_context: Callable[[str], ssl.SSLContext],
                 secrets: Mapping[str, str], stderr: Callable[[str], None] | None = None,
                 resolver: Resolver | None = None, client_token: str | None = None) -> None:
        self.config = config
        self._client_token = client_token
        self._client_audited = 0
        self.limits: Limits = config.limits
        self.network: Network | None = config.network
        self.phase: Phase = config.phase
        self._server_context = server_context
        self._secrets = dict(secrets)
        self._oauth = oauth_intercept.OAuthRoutes(config.credentials)
        self._sentinels = [c.sentinel.encode("utf-8") for c in config.credentials if c.sentinel]
        self._sentinels += self._oauth.sentinels()
        # Every real OAuth token this proxy has held: masked in answers, redacted from logs.
        self._oauth_seen: set[str] = set()
        report = stderr or _write_stderr
        self._stderr: Callable[[str], None] = lambda m: report(redact(m, self._oauth_seen))
        for credential in self._oauth.credentials:
            if credential.oauth is not None:
                with contextlib.suppress(SbxError):
                    self._oauth_tokens(credential.service)
        self._resolver = resolver or system_resolver
        self._upstream = None if config.upstream_proxy is None \
            else UpstreamProxy.parse(config.upstream_proxy)
        self._origin_context = origin_context(config.upstream_ca_file)
        self._contexts: dict[str, ssl.SSLContext] = {}
        self._conns: dict[asyncio.Task[Any], _Conn] = {}
        self._server: asyncio.Server | None = None
        self._audited = 0
        self._stopping = asyncio.Event()
        self.port = 0

    # -- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> int:
        self._server = await asyncio.start_server(
            self._on_client, self.config.listen_host, self.config.listen_port,
            limit=READ_SIZE, backlog=256, reuse_address=True)
        sockets = self._server.sockets
        self.port = int(sockets[0].getsockname()[1]) if sockets else 0
        self._write_phase_file()
        return self.port

    def switch_to_runtime(self) -> None:
        """install → runtime, irreversibly: install rules and credentials stop applying, and
        every connection opened during install is closed."""
        if self.phase == "runtime":
            return
        self.phase = "runtime"
        for task, conn in list(self._conns.items()):
            if conn.phase == "install":
                for stream in conn.streams:
                    stream.abort()
                task.cancel()
        self._write_phase_file()

    def stop(self) -> None:
        self._stopping.set()

    def replace_secrets(self, secrets: Mapping[str, str]) -> None:
        """Use these values from now on (SIGHUP re-reads the store: a rotated or removed secret
        takes effect on the next request, without restarting the sandbox)."""
        self._secrets = dict(secrets)

    async def serve(self, ready: Callable[[int], None] | None = None) -> None:
        """Listen until :meth:`stop` (or SIGTERM/SIGINT when run by :func:`main`)."""
        port = await self.start()
        if ready is not None:
            ready(port)
        await self._stopping.wait()
        await self.close()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        tasks = list(self._conns)
        for task, conn in list(self._conns.items()):
            for stream in conn.streams:
                stream.abort()
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=self.limits.shutdown_timeout)
        if self._server is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                async with asyncio.timeout(self.limits.shutdown_timeout):
                    await self._server.wait_closed()

    def _write_phase_file(self) -> None:
        path = self.config.phase_file
        if path is None:
            return
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        try:
            tmp.write_text(f"{self.phase}\n", encoding="utf-8")
            os.replace(tmp, path)
        except OSError as error:
            self._stderr(f"cannot write the phase file {path}: {error.strerror}")

    # -- connections -----------------------------------------------------------------------------

    async def _on_client(self, reader: asyncio.StreamReader,
                         writer: asyncio.StreamWriter) -> None:
        client = TcpStream(reader, writer)
        peername = writer.get_extra_info("peername")
        peer = str(peername[0]) if isinstance(peername, tuple) and peername else "-"
        task = asyncio.current_task()
        if task is None or len(self._conns) >= self.limits.max_connections:
            with contextlib.suppress(OSError, ConnectionError):
                writer.write(refusal_response(failure(
                    503, "too_many_connections",
                    f"more than {self.limits.max_connections} connections are open"),
                    self.config.explain_command))
            client.abort()
            return
        state = _Conn(self.phase, [client])
        self._conns[task] = state
        try:
            await self._serve_client(client, state, peer)
        except Refusal as refusal:
            await self._refuse(client, refusal)
        except (ConnectionError, OSError, TimeoutError, ssl.SSLError, h11.ProtocolError):
            pass  # the client or the origin went away or misbehaved: nothing more to say
        except Exception as error:  # fail closed: one connection fails, never the proxy
            self._stderr(f"internal error on a connection: {type(error).__name__}: {error}")
            with contextlib.suppress(Exception):
                await client.write(refusal_response(failure(
                    502, "internal_error", "the proxy hit an internal error; nothing was sent"),
                    self.config.explain_command))
        finally:
            self._conns.pop(task, None)
            for stream in state.streams:
                stream.abort()

    async def _refuse(self, stream: Stream, refusal: Refusal) -> None:
        self._audit(refusal)
        with contextlib.suppress(Exception):
            async with asyncio.timeout(5):
                await stream.write(refusal_response(refusal, self.config.explain_command))
                if isinstance(stream, TcpStream):
                    await stream.flush()

    def _audit(self, refusal: Refusal) -> None:
        if not refusal.audited:
            return
        # Refusals of outsiders have their own budget: they cannot crowd out the sandbox's.
        if refusal.client is not None:
            if self._client_audited >= CLIENT_AUDIT_LIMIT:
                return
            self._client_audited += 1
            last = self._client_audited == CLIENT_AUDIT_LIMIT
        else:
            if self._audited >= self.limits.max_audit_records:
                return
            self._audited += 1
            last = self._audited == self.limits.max_audit_records
        details: dict[str, Any] = {
            "host": refusal.host, "port": refusal.port, "method": refusal.method or "CONNECT",
            "path": refusal.path, "scheme": refusal.scheme, "rule": refusal.rule,
            "code": refusal.code, "phase": self.phase, "status": refusal.status}
        if refusal.client is not None:
            details["client"] = refusal.client
        if last:
            details["last"] = "audit limit reached: later refusals are not recorded"
        try:
            audit.record_at(self.config.audit_log, audit.EGRESS_DENIED, run_id=self.config.run_id,
                            severity="warning", details=details)
        except OSError as error:
            self._stderr(f"cannot write the audit log: {error.strerror}")

    async def _next(self, conn: h11.Connection, stream: Stream, timeout: float) -> Any:
        async with asyncio.timeout(timeout):
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    conn.receive_data(await stream.read(READ_SIZE))
                    continue
                return event

    async def _serve_client(self, client: TcpStream, state: _Conn, peer: str) -> None:
        conn = self._h11_server()
        timeout = self.limits.head_timeout
        pool: dict[Site, Upstream] = {}
        try:
            while True:
                try:
                    event = await self._next(conn, client, timeout)
                except h11.RemoteProtocolError as error:
                    raise self._bad_request(error, "-", 0, "http") from None
                if not isinstance(event, h11.Request):
                    return  # ConnectionClosed (or PAUSED after a close)
                self._admit(event, peer)
                if event.method == b"CONNECT":
                    await self._connect(conn, client, event, state)
                    return
                if not await self._exchange(conn, client, event, None, pool, state):
                    return
                conn.start_next_cycle()
                timeout = self.limits.idle_timeout
        finally:
            for upstream in pool.values():
                upstream.stream.abort()

    def _admit(self, request: h11.Request, peer: str) -> None:
        """Refuse a request that is not the sandbox's: a peer outside the run's network
        (403), or without the run's proxy credentials (407). Every request is checked."""
        code: str | None = None
        network = self.config.peer_network
        if network is not None and not proxyauth.peer_allowed(peer, network,
                                                               self.config.listen_host):
            code = proxyauth.PEER
        elif self._client_token is not None:
            values = [v for n, v in request.headers if n == b"proxy-authorization"]
            code = proxyauth.check_authorization(values, self._client_token)
        if code is None:
            return
        method = request.method.decode("ascii", "replace").upper()
        target = request.target.decode("ascii", "replace")
        host, port, path, scheme = "-", 0, None, "http"
        if method == "CONNECT":
            parsed = parse_authority(target, None)
            scheme = "https"
        else:
            parts = urlsplit(target)
            parsed = parse_authority(parts.netloc, 80) if parts.netloc else None
            path = _clean(parts.path or "/", 300)
        if parsed is not None:
            host, port = normalize_host(parsed[0]) or _clean(parsed[0], 300), parsed[1]
        raise client_refusal(code, client=peer, host=host, port=port, method=method,
                             path=path, scheme=scheme)

    def _h11_server(self) -> h11.Connection:
        return h11.Connection(h11.SERVER, max_incomplete_event_size=self.limits.max_head_bytes)

    def _bad_request(self, error: h11.RemoteProtocolError, host: str, port: int,
                     scheme: str) -> Refusal:
        status = error.error_status_hint if error.error_status_hint in (400, 414, 431) else 400
        return failure(status, "bad_request", f"the request is not valid HTTP/1.1 ({error})",
                       host=host, port=port, scheme=scheme)

    # -- CONNECT ---------------------------------------------------------------------------------

    async def _connect(self, conn: h11.Connection, client: TcpStream, request: h11.Request,
                       state: _Conn) -> None:
        target = request.target.decode("ascii", "replace")
        parsed = parse_authority(target, None)
        if parsed is None:
            raise failure(400, "bad_request", f"CONNECT needs host:port, got {_clean(target)!r}")
        host = normalize_host(parsed[0])
        port = parsed[1]
        if host is None:
            raise failure(400, "bad_request", f"{_clean(parsed[0])!r} is not a host name",
                          host=_clean(parsed[0], 300), port=port)
        phase = self.phase
        handling = classify(self.network, phase, host, port)
        if handling == "denied":
            decision = decide(self.network, Request(phase, host, port))
            raise refusal_for(decision, host=host, port=port, scheme="https")
        initial = conn.trailing_data[0]
        inject = bool(self._injections_for(host, port, connect=True)) \
            or self._oauth.intercepts(phase, host, port)
        if handling == "unbounded" and not inject:
            upstream = await self._open_tunnel(host, port, state)
            await client.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            first = await self._hold_first_bytes(client, upstream, host, port, initial)
            if first is not None:
                await self._pipe(client, upstream, first)
            return
        await client.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await self._intercept(client, host, port, initial, state)

    async def _hold_first_bytes(self, client: TcpStream, upstream: Stream, host: str, port: int,
                                initial: bytes) -> bytes | None:
        """The client's first bytes into a raw tunnel, once judged by :meth:`_judge_first`;
        meanwhile the upstream's bytes flow to the client (server-first protocols). None when
        the tunnel ended first, or was refused (a TLS alert to the client, the refusal
        audited); nothing of the client's has then reached the upstream."""
        buffered = initial
        copier: asyncio.Task[None] | None = None
        try:
            while True:
                try:
                    if self._judge_first(buffered, host, port):
                        return buffered
                except Refusal as refusal:
                    self._audit(refusal)
                    with contextlib.suppress(ConnectionError, OSError):
                        await client.write(clienthello.alert(_ALERTS.get(
                            refusal.code, clienthello.ALERT_HANDSHAKE_FAILURE)))
                        await client.flush()
                    return None
                if copier is None:
                    copier = asyncio.create_task(_copy(upstream, client))
                reading = asyncio.ensure_future(client.read(READ_SIZE))
                timeout = self.limits.handshake_timeout if buffered else self.limits.idle_timeout
                done, _ = await asyncio.wait({reading, copier}, timeout=timeout,
                                             return_when=asyncio.FIRST_COMPLETED)
                if reading not in done:  # the upstream ended, or nothing came in time
                    reading.cancel()
                    await asyncio.gather(reading, return_exceptions=True)
                    with contextlib.suppress(ConnectionError, OSError):
                        await client.flush()
                    return None
                data = reading.result()
                if not data:
                    return None
                buffered += data
        finally:
            if copier is not None:
                copier.cancel()
                await asyncio.gather(copier, return_exceptions=True)

    def _judge_first(self, data: bytes, host: str, port: int) -> bool:
        """True once the first bytes of a raw tunnel may go (not TLS, or a ClientHello naming
        the CONNECT host or no host); False while a ClientHello is incomplete; raises the
        refusal of a hidden, mismatched or unreadable server name."""
        if not data:
            return False
        if not clienthello.looks_like_tls(data):
            return True  # tunnels carry any protocol; only TLS names a server here
        try:
            hello = clienthello.parse_client_hello(data)
        except clienthello.NotAClientHello as error:
            raise proxy_refusal(
                BAD_CLIENT_HELLO, f"the TLS handshake sent into the tunnel to {host}:{port} "
                f"cannot be read ({error}), so its server name cannot be checked (fail "
                "closed)", host=host, port=port) from None
        if hello is None:
            if len(data) > clienthello.MAX_HELLO_BYTES + 8192:
                raise proxy_refusal(BAD_CLIENT_HELLO, "the TLS ClientHello is too large",
                                    host=host, port=port)
            return False
        if hello.hidden_name:
            raise proxy_refusal(
                SNI_HIDDEN, f"the TLS handshake into the tunnel to {host}:{port} hides its "
                "server name (Encrypted Client Hello), so sbx cannot check it is the CONNECT "
                "host", host=host, port=port,
                suggestion="disable Encrypted Client Hello for egress through sbx")
        name = hello.server_name
        if name is not None and normalize_host(name) != host:
            raise proxy_refusal(
                SNI_MISMATCH, f"the TLS server name {_clean(name, 200)!r} is not the CONNECT "
                f"host {host}", host=host, port=port,
                suggestion="open the tunnel to the host the TLS handshake names (the policy "
                           "judges that host)")
        return True

    async def _intercept(self, client: TcpStream, host: str, port: int, initial: bytes,
                         state: _Conn) -> None:
        if not initial:
            async with asyncio.timeout(self.limits.handshake_timeout):
                initial = await client.read(READ_SIZE)
            if not initial:
                return
        if initial[0] != 0x16:  # not a TLS handshake record
            raise proxy_refusal(
                NOT_TLS, f"{host}:{port} is checked per HTTPS request, and the bytes sent "
                "through the tunnel are not TLS (fail closed)", host=host, port=port,
                suggestion="send HTTPS requests through the proxy; raw tunnels to a host "
                           "bounded by methods/paths are refused")
        context = await self._context_for(host)
        tls = TlsStream.wrap(client, context, server_side=True)
        try:
            await tls.handshake(timeout=self.limits.handshake_timeout, initial=initial)
        except ssl.SSLError:
            sni = getattr(tls.obj, "sbx_sni", None)
            if sni is None or normalize_host(sni) == host:
                raise
            # The client named another host than it asked to CONNECT to: the handshake was
            # aborted with an unrecognized_name alert (no HTTP answer is possible without TLS).
            self._audit(proxy_refusal(
                SNI_MISMATCH, f"the TLS server name {_clean(sni, 200)!r} is not the CONNECT "
                f"host {host}", host=host, port=port))
            return
        site = Site("https", host, port)
        conn = self._h11_server()
        pool: dict[Site, Upstream] = {}
        timeout = self.limits.head_timeout
        first = True
        try:
            while True:
                try:
                    event = await self._next(conn, tls, timeout)
                except h11.RemoteProtocolError as error:
                    if first:
                        raise proxy_refusal(
                            NOT_HTTP, f"{host}:{port} is checked per HTTP request, and what was "
                            "sent inside TLS is not HTTP/1.1 (fail closed)", host=host,
                            port=port) from None
                    raise self._bad_request(error, host, port, "https") from None
                first = False
                if not isinstance(event, h11.Request):
                    return
                try:
                    keep = await self._exchange(conn, tls, event, site, pool, state)
                except Refusal as refusal:
                    await self._refuse(tls, refusal)
                    return
                if not keep:
                    return
                conn.start_next_cycle()
                timeout = self.limits.idle_timeout
        except Refusal as refusal:
            await self._refuse(tls, refusal)
        except (ConnectionError, OSError, TimeoutError, ssl.SSLError, h11.ProtocolError):
            pass
        except Exception as error:  # fail closed, and answer inside the client's TLS
            self._stderr(f"internal error on a connection: {type(error).__name__}: {error}")
            if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                await self._refuse(tls, failure(
                    502, "internal_error", "the proxy hit an internal error; nothing was sent",
                    host=host, port=port))
        finally:
            for upstream in pool.values():
                upstream.stream.abort()

    async def _context_for(self, host: str) -> ssl.SSLContext:
        context = self._contexts.get(host)
        if context is not None:
            return context
        try:
            context = await asyncio.to_thread(self._server_context, host)
        except SbxError as error:
            raise failure(502, "certificate_failed",
                          f"cannot issue a certificate for {host}: {error.message}",
                          host=host) from None
        context.set_alpn_protocols(["http/1.1"])

        def check_sni(obj: Any, name: str | None, _ctx: ssl.SSLContext) -> int | None:
            if name is None:
                return None
            obj.sbx_sni = name
            if normalize_host(name) != host:
                return ssl.ALERT_DESCRIPTION_UNRECOGNIZED_NAME
            return None

        context.sni_callback = check_sni
        if len(self._contexts) > 4096:
            self._contexts.clear()
        self._contexts[host] = context
        return context

    # -- one HTTP request ------------------------------------------------------------------------

    async def _exchange(self, conn: h11.Connection, client: Stream, request: h11.Request,
                        site: Site | None, pool: dict[Site, Upstream], state: _Conn) -> bool:
        """Judge, forward and answer one request; True when the client connection may carry
        another one."""
        method = request.method.decode("ascii").upper()
        target = request.target.decode("ascii", "replace")
        scheme = site.scheme if site is not None else "http"
        if len(request.target) > self.limits.max_target_bytes:
            raise failure(414, "target_too_long",
                          f"the request target is longer than {self.limits.max_target_bytes} "
                          "bytes", host=site.host if site else "-", port=site.port if site else 0,
                          method=method, scheme=scheme)
        if len(request.headers) > self.limits.max_headers \
                or head_size(request) > self.limits.max_head_bytes:
            raise failure(431, "head_too_large",
                          f"more than {self.limits.max_headers} header fields or "
                          f"{self.limits.max_head_bytes} bytes of request head",
                          host=site.host if site else "-", port=site.port if site else 0,
                          method=method, scheme=scheme)
        names = {name for name, _ in request.headers}
        if b"transfer-encoding" in names and b"content-length" in names:
            # RFC 9112 §6.3: both framings at once is how requests are smuggled; refuse.
            raise failure(400, "ambiguous_framing", "the request has both Transfer-Encoding "
                          "and Content-Length", host=site.host if site else "-",
                          port=site.port if site else 0, method=method, scheme=scheme)
        site, raw_path, query = self._locate(site, method, target, request.headers)
        host, port = site.host, site.port
        shown_path = raw_path
        decision = self._authorize(site, method, raw_path, request.headers)
        path = decision.path if decision.path is not None else raw_path
        token_for = self._oauth.token_endpoint(self.phase, host, port, method, path)
        if token_for is not None:
            return await self._token_exchange(conn, client, request, site, pool, state,
                                              token_for, method, path, query)
        inject_values = self._credentials_for(site, method, shown_path)
        request_headers = self._oauth_headers(site, method, shown_path, request.headers)
        needles = self._mask_needles(inject_values) if inject_values else []
        needles += self._oauth_needles(site)
        forward_target = path + (("?" + query) if query is not None else "")
        headers = self._outbound_headers(request_headers, inject_values,
                                         masking=bool(needles))
        upstream = await self._upstream_for(site, pool, state, method, shown_path)
        if upstream.absolute_form:
            authority = f"[{host}]" if ":" in host else host
            authority += "" if port == 80 else f":{port}"
            forward_target = f"http://{authority}{forward_target}"
            if self._upstream is not None and self._upstream.authorization is not None:
                headers.append((b"proxy-authorization", self._upstream.authorization))
        if conn.they_are_waiting_for_100_continue:
            await client.write(conn.send(h11.InformationalResponse(status_code=100,
                                                                   headers=[])) or b"")
        masker = Masker(needles) if needles else None
        try:
            await self._forward(conn, client, request, upstream, method, forward_target,
                                headers, masker)
        except Refusal:
            raise
        except (ConnectionError, OSError, TimeoutError, ssl.SSLError, h11.ProtocolError) as error:
            upstream.drop(pool, state)
            if conn.our_state is h11.SEND_RESPONSE:
                raise failure(502, "upstream_failed", f"the origin {host}:{port} failed: "
                              f"{_clean(type(error).__name__ + ': ' + str(error), 300)}",
                              host=host, port=port, method=method, path=shown_path,
                              scheme=site.scheme) from None
            raise
        if upstream.conn.our_state is h11.DONE and upstream.conn.their_state is h11.DONE:
            upstream.conn.start_next_cycle()
        else:
            upstream.drop(pool, state)
        return conn.our_state is h11.DONE and conn.their_state is h11.DONE

    def _authorize(self, site: Site, method: str, path: str,
                   headers: Sequence[tuple[bytes, bytes]]) -> Decision:
        """The policy's verdict on the request, and on any method it asks the origin to use
        instead (``X-HTTP-Method-Override`` and friends); raises the refusal."""
        host, port = site.host, site.port
        decision = decide(self.network, Request(self.phase, host, port, method, path,
                                                site.scheme))
        if not decision.allowed:
            raise refusal_for(decision, host=host, port=port, scheme=site.scheme)
        for name, value in headers:
            if name in METHOD_OVERRIDES:
                other = value.decode("ascii", "replace").strip().upper()
                override = decide(self.network, Request(self.phase, host, port, other, path,
                                                        site.scheme))
                if not override.allowed:
                    refusal = refusal_for(override, host=host, port=port, scheme=site.scheme)
                    refusal.code = METHOD_OVERRIDE
                    refusal.reason = (f"{name.decode()} asks the origin to treat {method} as "
                                      f"{_clean(other, 40)}, which is refused: {override.reason}")
                    raise refusal
        return decision

    def _credentials_for(self, site: Site, method: str, path: str) -> list[Injection]:
        injections = self._injections_for(site.host, site.port)
        if injections and site.scheme != "https":
            raise proxy_refusal(
                PLAINTEXT_CREDENTIAL, f"a credential is injected for {site.host}, and sbx "
                "sends secrets only over HTTPS", host=site.host, port=site.port, method=method,
                path=path, scheme=site.scheme, suggestion=f"use https://{site.host}/…")
        return [self._inject_value(service, inject, site.host, site.port, method, path)
                for service, inject in injections]

    def _locate(self, site: Site | None, method: str, target: str,
                headers: Sequence[tuple[bytes, bytes]]) -> tuple[Site, str, str | None]:
        """The site, path and query of a request; refuses a Host that disagrees with the
        target (or, inside an intercepted CONNECT, with the CONNECT host)."""
        hosts = [v for n, v in headers if n == b"host"]
        if site is None:
            parts = urlsplit(target)
            if parts.scheme.lower() != "http" or not target.lower().startswith("http://"):
                raise failure(400, "not_a_proxy_request",
                              "send absolute-form http:// requests, or CONNECT for https "
                              f"(got {_clean(target, 200)!r})", method=method, scheme="http")
            authority = target[len("http://"):].split("/", 1)[0].split("?", 1)[0]
            parsed = parse_authority(authority, 80)
            name = normalize_host(parsed[0]) if parsed is not None else None
            if parsed is None or name is None:
                raise failure(400, "bad_request", f"{_clean(authority, 200)!r} is not a host",
                              method=method, scheme="http")
            site = Site("http", name, parsed[1])
            rest = target[len("http://") + len(authority):]
            if rest.startswith("?"):
                rest = "/" + rest
            path_and_query = rest or "/"
        elif target.startswith("/"):
            path_and_query = target
        elif target == "*" and method == "OPTIONS":
            path_and_query = "*"
        else:
            lowered = target.lower()
            if not lowered.startswith("https://"):
                raise proxy_refusal(HOST_MISMATCH, f"the request target {_clean(target, 200)!r} "
                                    f"is not for {site.host}", host=site.host, port=site.port,
                                    method=method)
            authority = target[len("https://"):].split("/", 1)[0].split("?", 1)[0]
            parsed = parse_authority(authority, 443)
            if parsed is None or normalize_host(parsed[0]) != site.host \
                    or parsed[1] != site.port:
                raise proxy_refusal(HOST_MISMATCH, f"the request target names "
                                    f"{_clean(authority, 200)!r}, not the CONNECT target "
                                    f"{site.host}:{site.port}", host=site.host, port=site.port,
                                    method=method)
            path_and_query = target[len("https://") + len(authority):] or "/"
        path, sep, query = path_and_query.partition("?")
        path = path.split("#", 1)[0]
        if len(hosts) > 1:
            raise proxy_refusal(HOST_MISMATCH, "the request has more than one Host header",
                                host=site.host, port=site.port, method=method, path=path,
                                scheme=site.scheme)
        if hosts:
            text = hosts[0].decode("ascii", "replace")
            parsed = parse_authority(text, 443 if site.scheme == "https" else 80)
            if parsed is None or normalize_host(parsed[0]) != site.host \
                    or parsed[1] != site.port:
                where = "CONNECT target" if site.scheme == "https" else "request URL"
                raise proxy_refusal(
                    HOST_MISMATCH, f"the Host header {_clean(text, 200)!r} does not name the "
                    f"{where} {site.host}:{site.port}", host=site.host, port=site.port,
                    method=method, path=path, scheme=site.scheme,
                    suggestion="send each request to the host its connection was opened for")
        return site, path, (query if sep else None)

    def _injections_for(self, host: str, port: int, *, connect: bool = False,
                        ) -> list[tuple[str, Inject]]:
        found: list[tuple[str, Inject]] = []
        seen: set[bytes] = set()
        for credential in self._active_credentials():
            for inject in credential.domains:
                if not host_matches(inject.domain, host, port):
                    continue
                if connect and ":" not in inject.domain.rsplit("]", 1)[-1] and port != 443:
                    continue  # a port-less inject domain intercepts HTTPS (443) tunnels only
                header = inject.header.lower().encode("ascii")
                if header not in seen:
                    seen.add(header)
                    found.append((credential.service, inject))
        return found

    def _active_credentials(self) -> list[CredentialSpec]:
        return [c for c in self.config.credentials if c.phase == self.phase]

    def _inject_value(self, service: str, inject: Inject, host: str, port: int, method: str,
                      path: str) -> Injection:
        secret = self._secrets.get(service)
        if secret is None:
            refusal = failure(502, UNBOUND, f"the credential {service!r} injected for {host} "
                              f"has no stored secret (`sbx secret set {service}`), and sbx "
                              "never sends the sentinel instead", host=host, port=port,
                              method=method, path=path, sbx_reason=UNBOUND)
            refusal.audited = True
            refusal.suggestion = f"sbx secret set {service}"
            raise refusal
        return Injection(service, inject.header.lower().encode("ascii"),
                         injected_value(inject, secret))

    def _mask_needles(self, injections: Sequence[Injection]) -> list[bytes]:
        needles: list[bytes] = []
        for injection in injections:
            secret = self._secrets.get(injection.service, "")
            plain: list[bytes] = []
            if len(secret) >= 4:
                plain.append(secret.encode("utf-8"))
            plain.append(injection.value)
            if injection.value.startswith(b"Basic "):
                plain.append(injection.value[len(b"Basic "):])
            for value in plain:
                needles.extend(_escaped_forms(value))
        return needles

    # -- OAuth (sbx.domain.egress.oauth_intercept decides; this is the I/O)
    # ---------------------------

    @property
    def _oauth_store(self) -> Any:
        from sbx.domain.credentials.oauth import OAuthStore

        return OAuthStore(self.config.state_home)

    def _oauth_tokens(self, service: str) -> Any:
        """The service's stored tokens (``sbx.domain.credentials.oauth.Tokens``), read at each use
        so a login or
        a refresh by another sandbox applies at once; None when none are stored or the record
        is unsafe (said on stderr, never a value)."""
        try:
            tokens = self._oauth_store.get(service)
        except SbxError as error:
            self._stderr(f"OAuth tokens of {service!r}: {error.message}")
            return None
        if tokens is not None:
            self._oauth_seen.update(tokens.secrets())
        return tokens

    def _oauth_headers(self, site: Site, method: str, path: str,
                       headers: Sequence[tuple[bytes, bytes]]) -> Sequence[tuple[bytes, bytes]]:
        """On a resource host, the access sentinel swapped for the real access token; a
        credential sbx did not issue refuses the request (403)."""
        credential = self._oauth.resource(self.phase, site.host, site.port)
        if credential is None:
            return headers
        tokens = self._oauth_tokens(credential.service)
        try:
            out, swapped = oauth_intercept.swap_credential_headers(
                headers, credential, tokens.access_token if tokens is not None else None)
        except oauth_intercept.ForeignCredential as error:
            raise self._not_issued(error, site, method, path) from None
        except oauth_intercept.NoStoredToken:
            raise self._oauth_unbound(credential.service, site, method, path) from None
        if swapped and site.scheme != "https":
            raise proxy_refusal(
                PLAINTEXT_CREDENTIAL, f"the OAuth token of {credential.service} is sent to "
                f"{site.host} only over HTTPS", host=site.host, port=site.port, method=method,
                path=path, scheme=site.scheme, suggestion=f"use https://{site.host}/…")
        return out

    def _oauth_needles(self, site: Site) -> list[bytes]:
        """What to mask in the answers of an OAuth host: every real token this proxy knows."""
        services = self._oauth.services_for(self.phase, site.host, site.port)
        for service in services:
            self._oauth_tokens(service)
        return oauth_intercept.mask_needles(sorted(self._oauth_seen)) if services else []

    def _not_issued(self, error: oauth_intercept.ForeignCredential, site: Site, method: str,
                    path: str) -> Refusal:
        return Refusal(
            403, FOREIGN_CREDENTIAL, f"{error} (sbx forwards only the sentinel it put in the "
            "sandbox, swapped for the token it keeps on the host)", site.host, site.port,
            method, path, site.scheme, FOREIGN_CREDENTIAL.replace("_", "-"),
            f"none: refused by the proxy ({FOREIGN_CREDENTIAL})",
            f"use the credential file or variable sbx put in the sandbox; to use another "
            f"account, log in on the host: sbx secret login {error.service}",
            NOT_ISSUED, explain=f"sbx explain {NOT_ISSUED}")

    def _oauth_unbound(self, service: str, site: Site, method: str, path: str) -> Refusal:
        refusal = failure(502, UNBOUND, f"no OAuth token of {service!r} is stored on the host "
                          f"(`sbx secret login {service}`), and sbx never sends the sentinel "
                          "instead", host=site.host, port=site.port, method=method, path=path,
                          scheme=site.scheme, sbx_reason=UNBOUND)
        refusal.audited = True
        refusal.suggestion = f"sbx secret login {service}"
        return refusal

    async def _token_exchange(self, conn: h11.Connection, client: Stream, request: h11.Request,
                              site: Site, pool: dict[Site, Upstream], state: _Conn,
                              credential: CredentialSpec, method: str, path: str,
                              query: str | None) -> bool:
        """A request to the token endpoint, answered with sentinels: the real refresh token
        goes upstream in place of the sentinel (or a login goes as it is), the real tokens of
        the answer are stored on the host, and the sandbox gets the sentinels."""
        oauth = credential.oauth
        service = credential.service
        if oauth is None:  # pragma: no cover - token_endpoint() returns OAuth credentials
            raise failure(502, "internal_error", "not an OAuth credential")
        if site.scheme != "https":
            raise proxy_refusal(
                PLAINTEXT_CREDENTIAL, f"{site.host}{path} is the OAuth token endpoint of "
                f"{service}, and sbx sends tokens only over HTTPS", host=site.host,
                port=site.port, method=method, path=path, scheme=site.scheme,
                suggestion=f"use https://{site.host}{path}")
        if conn.they_are_waiting_for_100_continue:
            await client.write(conn.send(h11.InformationalResponse(status_code=100,
                                                                   headers=[])) or b"")
        body = await self._request_body(conn, client, site, method, path)
        try:
            parsed = oauth_intercept.parse_token_request(
                body, oauth_intercept.header_value(request.headers, b"content-type"))
        except oauth_intercept.UnreadableTokenRequest as error:
            raise failure(400, TOKEN_REQUEST, f"the request to the OAuth token endpoint of "
                          f"{service} cannot be read ({error}); sbx must see its grant",
                          host=site.host, port=site.port, method=method, path=path) from None
        target = path + (("?" + query) if query is not None else "")
        try:
            async with oauth_intercept.store_lock(self._oauth_store.directory, service):
                stored = self._oauth_tokens(service)
                try:
                    out_body = oauth_intercept.upstream_token_body(
                        parsed, body, oauth, service,
                        stored.refresh_token if stored is not None else None)
                except oauth_intercept.ForeignCredential as error:
                    raise self._not_issued(error, site, method, path) from None
                if out_body is None:
                    raise self._oauth_unbound(service, site, method, path)
                headers = [(n, v) for n, v in self._outbound_headers(request.headers, [],
                                                                      masking=True)
                           if n not in (b"content-length", b"transfer-encoding")]
                headers.append((b"content-length", str(len(out_body)).encode("ascii")))
                upstream = await self._upstream_for(site, pool, state, method, path)
                response, answer = await self._roundtrip(upstream, pool, state, method, target,
                                                         headers, out_body)
                tokens = None
                if 200 <= response.status_code < 300:
                    answer, tokens = oauth_intercept.rewrite_token_response(answer, oauth,
                                                                            previous=stored)
                if tokens is not None:
                    self._oauth_seen.update(tokens.secrets())
                    try:
                        self._oauth_store.set(service, tokens)
                    except (SbxError, OSError) as error:
                        self._stderr(f"cannot store the OAuth tokens of {service!r}: {error}")
                        raise failure(502, "token_store_failed", "the new OAuth tokens of "
                                      f"{service} could not be stored on the host",
                                      host=site.host, port=site.port, method=method,
                                      path=path) from None
        except TimeoutError:
            raise failure(502, "token_store_locked", f"the OAuth token store of {service} "
                          "stayed locked", host=site.host, port=site.port, method=method,
                          path=path) from None
        masker = Masker(oauth_intercept.mask_needles(sorted(self._oauth_seen)))
        answer = masker.mask(answer)
        headers = [(n, v) for n, v in self._inbound_headers(response.headers, masker,
                                                             decoded=True)
                   if n not in (b"transfer-encoding", b"content-length")]
        headers.append((b"content-length", str(len(answer)).encode("ascii")))
        await client.write(conn.send(h11.Response(status_code=response.status_code,
                                                  reason=response.reason,
                                                  headers=headers)) or b"")
        if answer:
            await client.write(conn.send(h11.Data(data=answer)) or b"")
        await client.write(conn.send(h11.EndOfMessage()) or b"")
        if isinstance(client, TcpStream):
            await client.flush()
        return conn.our_state is h11.DONE and conn.their_state is h11.DONE

    async def _request_body(self, conn: h11.Connection, client: Stream, site: Site,
                            method: str, path: str) -> bytes:
        """A whole (small) request body, bounded."""
        body = b""
        while True:
            event = await self._next(conn, client, self.limits.idle_timeout)
            if isinstance(event, h11.Data):
                body += bytes(event.data)
                if len(body) > oauth_intercept.TOKEN_BODY_LIMIT:
                    raise failure(413, "token_request_too_large", "a token request is larger "
                                  f"than {oauth_intercept.TOKEN_BODY_LIMIT} bytes",
                                  host=site.host, port=site.port, method=method, path=path)
            elif isinstance(event, h11.EndOfMessage):
                return body
            else:
                raise ConnectionError("the client went away during the request body")

    async def _roundtrip(self, upstream: Upstream, pool: dict[Site, Upstream], state: _Conn,
                         method: str, target: str, headers: list[tuple[bytes, bytes]],
                         body: bytes) -> tuple[h11.Response, bytes]:
        """One whole request and its whole (bounded, decoded) answer on ``upstream``."""
        site = upstream.site
        up = upstream.conn
        authority = f"[{site.host}]" if ":" in site.host else site.host
        if not any(name == b"host" for name, _ in headers):
            headers.insert(0, (b"host", (authority if site.port == 443
                                         else f"{authority}:{site.port}").encode("ascii")))
        try:
            await upstream.stream.write(up.send(h11.Request(
                method=method, target=target, headers=headers, http_version="1.1")) or b"")
            await upstream.stream.write(up.send(h11.Data(data=body)) or b"")
            await upstream.stream.write(up.send(h11.EndOfMessage()) or b"")
            idle = self.limits.idle_timeout
            while True:
                event = await self._next(up, upstream.stream, idle)
                if isinstance(event, h11.Response):
                    response = event
                    break
                if not isinstance(event, h11.InformationalResponse):
                    raise ConnectionError("the origin closed before answering")
            answer = b""
            while True:
                event = await self._next(up, upstream.stream, idle)
                if isinstance(event, h11.Data):
                    answer += bytes(event.data)
                    if len(answer) > oauth_intercept.TOKEN_RESPONSE_LIMIT:
                        raise ConnectionError("the token endpoint's answer is too large")
                elif isinstance(event, h11.EndOfMessage):
                    break
                else:
                    raise ConnectionError("the origin closed during the answer")
        except (ConnectionError, OSError, TimeoutError, ssl.SSLError,
                h11.ProtocolError) as error:
            upstream.drop(pool, state)
            raise failure(502, "upstream_failed", f"the token endpoint {site.host} failed: "
                          f"{_clean(type(error).__name__ + ': ' + str(error), 300)}",
                          host=site.host, port=site.port, method=method) from None
        if up.our_state is h11.DONE and up.their_state is h11.DONE:
            up.start_next_cycle()
        else:
            upstream.drop(pool, state)
        decoder = self._decoder_for(response, method, site)
        if decoder is not None:
            try:
                answer = b"".join([*decoder.feed(answer), *decoder.finish()])
            except CorruptBody as error:
                raise failure(502, "upstream_failed", f"the token endpoint's encoded answer is "
                              f"malformed ({error})", host=site.host, port=site.port,
                              method=method) from None
        return response, answer

    def _outbound_headers(self, headers: Sequence[tuple[bytes, bytes]],
                          injections: Sequence[Injection], *, masking: bool = False,
                          ) -> list[tuple[bytes, bytes]]:
        """The request's headers for the origin: hop-by-hop and sentinel-bearing ones
        dropped, the injections set; with ``masking`` (the answer is masked: an inject domain,
        an OAuth host) whole identity bodies are asked for."""
        listed = {token.strip().lower() for name, value in headers if name == b"connection"
                  for token in value.split(b",")} - NEVER_HOP
        replaced = {i.header for i in injections}
        out: list[tuple[bytes, bytes]] = []
        for name, value in headers:
            if name in HOP_BY_HOP or name in listed or name in replaced:
                continue
            if any(sentinel in value for sentinel in self._sentinels):
                continue  # a sentinel never leaves the proxy
            if masking and name in INJECT_DROPPED:
                continue  # whole, readable bodies, so the secret can be masked in the answer
            out.append((name, value))
        if masking:
            out.append((b"accept-encoding", b"identity"))
        out.extend((i.header, i.value) for i in injections)
        return out

    async def _forward(self, conn: h11.Connection, client: Stream, request: h11.Request,
                       upstream: Upstream, method: str, target: str,
                       headers: list[tuple[bytes, bytes]], masker: Masker | None) -> None:
        up = upstream.conn
        if not any(name == b"host" for name, _ in headers):
            site = upstream.site
            authority = f"[{site.host}]" if ":" in site.host else site.host
            default = 443 if site.scheme == "https" else 80
            headers.insert(0, (b"host", (authority if site.port == default
                                         else f"{authority}:{site.port}").encode("ascii")))
        await upstream.stream.write(up.send(h11.Request(
            method=method, target=target, headers=headers, http_version="1.1")) or b"")
        idle = self.limits.idle_timeout
        while True:  # the request body
            event = await self._next(conn, client, idle)
            if isinstance(event, h11.Data):
                await upstream.stream.write(up.send(event) or b"")
            elif isinstance(event, h11.EndOfMessage):
                await upstream.stream.write(up.send(h11.EndOfMessage()) or b"")
                break
            else:
                raise ConnectionError("the client went away during the request body")
        if isinstance(upstream.stream, TcpStream):
            await upstream.stream.flush()
        decoder: BodyDecoder | None = None
        while True:  # the response
            event = await self._next(up, upstream.stream, idle)
            if isinstance(event, h11.InformationalResponse):
                if event.status_code == 101:
                    raise h11.RemoteProtocolError("the origin switched protocols unasked")
                await client.write(conn.send(h11.InformationalResponse(
                    status_code=event.status_code, headers=self._inbound_headers(
                        event.headers, masker), reason=event.reason)) or b"")
            elif isinstance(event, h11.Response):
                if len(event.headers) > self.limits.max_headers \
                        or head_size(event) > self.limits.max_head_bytes:
                    raise h11.RemoteProtocolError("the origin sent too large a response head")
                decoder = self._decoder_for(event, method, upstream.site) if masker else None
                await client.write(conn.send(h11.Response(
                    status_code=event.status_code, reason=event.reason,
                    headers=self._inbound_headers(event.headers, masker,
                                                  decoded=decoder is not None))) or b"")
                break
            else:
                raise ConnectionError("the origin closed before answering")
        while True:  # the response body
            event = await self._next(up, upstream.stream, idle)
            if isinstance(event, h11.Data):
                await self._send_body(conn, client, bytes(event.data), decoder, masker)
            elif isinstance(event, h11.EndOfMessage):
                await self._send_body(conn, client, None, decoder, masker)
                await client.write(conn.send(h11.EndOfMessage()) or b"")
                break
            else:
                raise ConnectionError("the origin closed during the response body")
        if isinstance(client, TcpStream):
            await client.flush()

    def _decoder_for(self, response: h11.Response, method: str,
                     site: Site) -> BodyDecoder | None:
        """How to read an inject domain's encoded body (None: identity, or no body); an
        encoding the proxy cannot undo refuses the response before any of it is sent."""
        if method == "HEAD" or response.status_code in (204, 304):
            return None
        codings = content_codings(response.headers)
        if not codings:
            return None
        try:
            return BodyDecoder(codings)
        except UnsupportedEncoding as error:
            refusal = failure(
                502, ENCODED_RESPONSE, f"{site.host} answered with {error}, which sbx cannot "
                "decode to mask the injected secret out of it (it asked for identity); the "
                "response is refused", host=site.host, port=site.port, method=method,
                scheme=site.scheme, sbx_reason=UNMASKABLE)
            refusal.audited = True
            refusal.explain = f"sbx explain {UNMASKABLE}"
            raise refusal from None

    async def _send_body(self, conn: h11.Connection, client: Stream, data: bytes | None,
                         decoder: BodyDecoder | None, masker: Masker | None) -> None:
        """One chunk of a response body to the client (``None``: the body ended), decoded and
        masked on inject domains; a body that does not decode ends the response here."""
        try:
            if decoder is not None:
                pieces = list(decoder.feed(data)) if data is not None else list(decoder.finish())
            else:
                pieces = [data] if data else []
        except CorruptBody as error:
            raise ConnectionError(f"the origin's encoded body is malformed ({error})") from None
        for piece in pieces:
            out = piece if masker is None else masker.feed(piece)
            if out:
                await client.write(conn.send(h11.Data(data=out)) or b"")
        if data is None and masker is not None:
            tail = masker.flush()
            if tail:
                await client.write(conn.send(h11.Data(data=tail)) or b"")

    def _inbound_headers(self, headers: Iterable[tuple[bytes, bytes]],
                         masker: Masker | None, *, decoded: bool = False,
                         ) -> list[tuple[bytes, bytes]]:
        headers = list(headers)
        listed = {token.strip().lower() for name, value in headers if name == b"connection"
                  for token in value.split(b",")} - NEVER_HOP
        if any(name == b"transfer-encoding" for name, _ in headers):
            listed.add(b"content-length")  # chunked wins (as h11 read it); never send both
        if decoded:
            listed |= DECODED_DROPPED  # the body is sent decoded, framed by h11 anew
        out: list[tuple[bytes, bytes]] = []
        for name, value in headers:
            if name in HOP_BY_HOP or name in listed:
                continue
            out.append((name, value if masker is None else masker.mask(bytes(value))))
        return out

    # -- outbound connections --------------------------------------------------------------------

    async def _upstream_for(self, site: Site, pool: dict[Site, Upstream], state: _Conn,
                            method: str, path: str) -> Upstream:
        existing = pool.get(site)
        if existing is not None and existing.conn.our_state is h11.IDLE:
            return existing
        for old in list(pool.values()):
            old.drop(pool, state)
        try:
            upstream = await self._open_http(site, state)
        except Refusal as refusal:
            refusal.method, refusal.path = method, path
            raise
        pool[site] = upstream
        return upstream

    async def _open_http(self, site: Site, state: _Conn) -> Upstream:
        conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=self.limits.max_head_bytes)
        if self._upstream is not None:
            stream, raw = await self._via_upstream(site.host, site.port, state,
                                                   tunnel=site.scheme == "https")
            if site.scheme == "http":
                return Upstream(site, stream, conn, absolute_form=True, raw=raw)
        else:
            raw = await self._dial(site.host, site.port, state)
            stream = raw
        if site.scheme == "http":
            return Upstream(site, stream, conn, absolute_form=False, raw=raw)
        tls = await self._tls_to(stream, site.host, site.port)
        return Upstream(site, tls, conn, absolute_form=False, raw=raw)

    async def _tls_to(self, raw: Stream, host: str, port: int) -> TlsStream:
        tls = TlsStream.wrap(raw, self._origin_context, server_side=False,
                             server_hostname=host)
        try:
            await tls.handshake(timeout=self.limits.handshake_timeout)
            return tls
        except ssl.SSLCertVerificationError as error:
            raise failure(502, "origin_untrusted", f"the certificate of {host}:{port} is not "
                          f"trusted ({_clean(error.verify_message or str(error), 200)})",
                          host=host, port=port) from None
        except (ssl.SSLError, ConnectionError, OSError, TimeoutError) as error:
            raise failure(502, "origin_tls_failed", f"TLS to {host}:{port} failed "
                          f"({_clean(type(error).__name__ + ': ' + str(error), 200)})",
                          host=host, port=port) from None

    async def _open_tunnel(self, host: str, port: int, state: _Conn) -> Stream:
        if self._upstream is not None:
            return (await self._via_upstream(host, port, state, tunnel=True))[0]
        return await self._dial(host, port, state)

    def _check_literal(self, host: str, port: int) -> list[ipaddress.IPv4Address
                                                          | ipaddress.IPv6Address] | None:
        """For an IP literal: the address if it may be reached (refusal otherwise); None for a
        name. ``localhost`` names, cloud metadata names and other internal-only names are
        refused here too, resolver (or upstream proxy) or not, unless a rule names them."""
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            if (host in _LOCAL_NAMES or host.endswith(".localhost")) \
                    and names_address(self.network, self.phase, host, port) is None:
                raise self._blocked(host, port, host, "a loopback name") from None
            # Metadata names always; other internal-only names when an upstream proxy resolves
            # them (resolved here, the addresses they resolve to are checked instead).
            why = internal_name(host) \
                if self._upstream is not None or is_metadata_name(host) else None
            if why is not None and names_address(self.network, self.phase, host, port) is None:
                raise proxy_refusal(
                    DESTINATION_BLOCKED, f"{host} is {why}; the proxy does not connect there, "
                    "whoever resolves it, unless an allow rule names that exact host",
                    host=host, port=port,
                    suggestion=f"if this is intended, add the exact host `{host}` to "
                               "network-policy allow") from None
            return None
        why = blocked_address(address)
        if why is not None and names_address(self.network, self.phase, str(address),
                                             port) is None:
            raise self._blocked(host, port, str(address), why)
        return [address]

    def _blocked(self, host: str, port: int, address: str, why: str) -> Refusal:
        return proxy_refusal(
            DESTINATION_BLOCKED, f"{host} resolves to {address}, {why}; the proxy does not "
            "connect there unless an allow rule names that address", host=host, port=port,
            suggestion=f"if this is intended, add the literal address `{address}:{port}` to "
                       "network-policy allow")

    async def _resolve(self, host: str, port: int) -> list[ipaddress.IPv4Address
                                                           | ipaddress.IPv6Address]:
        literal = self._check_literal(host, port)
        if literal is not None:
            return literal
        try:
            async with asyncio.timeout(self.limits.connect_timeout):
                answers = await self._resolver(host, port)
        except (OSError, TimeoutError, ValueError) as error:
            raise failure(502, "dns_failed", f"cannot resolve {host}: "
                          f"{_clean(str(error), 200)}", host=host, port=port) from None
        addresses: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = []
        for text in answers:
            address = ipaddress.ip_address(text.split("%", 1)[0])
            if address.version == 6 and address.ipv4_mapped is not None:
                address = address.ipv4_mapped
            if address not in addresses:
                addresses.append(address)
        if not addresses:
            raise failure(502, "dns_failed", f"{host} has no address", host=host, port=port)
        for address in addresses:
            why = blocked_address(address)
            if why is not None and names_address(self.network, self.phase, str(address),
                                                 port) is None:
                # One internal answer taints the name: it may be a rebinding attempt.
                raise self._blocked(host, port, str(address), why)
        return addresses

    async def _dial(self, host: str, port: int, state: _Conn) -> TcpStream:
        addresses = await self._resolve(host, port)
        last: Exception | None = None
        for address in addresses:
            try:
                async with asyncio.timeout(self.limits.connect_timeout):
                    reader, writer = await asyncio.open_connection(str(address), port,
                                                                   limit=READ_SIZE)
            except (OSError, TimeoutError) as error:
                last = error
                continue
            stream = TcpStream(reader, writer)
            state.streams.append(stream)
            return stream
        raise failure(502, "connect_failed", f"cannot connect to {host}:{port} "
                      f"({_clean(str(last), 200)})", host=host, port=port)

    async def _via_upstream(self, host: str, port: int, state: _Conn, *,
                            tunnel: bool) -> tuple[Stream, TcpStream]:
        """A connection through the upstream proxy (TLS to it for an https:// one): a CONNECT
        tunnel to host:port, or (``tunnel=False``) a connection for absolute-form requests.
        Returns the stream to use and the TCP connection under it."""
        upstream = self._upstream
        if upstream is None:  # pragma: no cover - callers check
            raise failure(502, "internal_error", "no upstream proxy", host=host, port=port)
        self._check_literal(host, port)  # names are left to the upstream; internal literals not
        try:
            async with asyncio.timeout(self.limits.connect_timeout):
                reader, writer = await asyncio.open_connection(upstream.host, upstream.port,
                                                               limit=READ_SIZE)
        except (OSError, TimeoutError) as error:
            raise failure(502, "upstream_proxy_unreachable", "cannot reach the upstream proxy "
                          f"{upstream.host}:{upstream.port} ({_clean(str(error), 200)})",
                          host=host, port=port) from None
        raw = TcpStream(reader, writer)
        state.streams.append(raw)
        stream: Stream = raw
        if upstream.scheme == "https":
            stream = await self._tls_to(raw, upstream.host, upstream.port)
        if not tunnel:
            return stream, raw
        authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=self.limits.max_head_bytes)
        headers = [(b"host", authority.encode("ascii"))]
        if upstream.authorization is not None:
            headers.append((b"proxy-authorization", upstream.authorization))
        await stream.write(conn.send(h11.Request(method="CONNECT", target=authority,
                                                 headers=headers)) or b"")
        await raw.flush()
        try:
            event = await self._next(conn, stream, self.limits.connect_timeout)
        except (h11.ProtocolError, TimeoutError, ConnectionError) as error:
            raise failure(502, "upstream_proxy_failed", "the upstream proxy did not answer "
                          f"CONNECT {authority} ({_clean(str(error), 200)})",
                          host=host, port=port) from None
        if not isinstance(event, h11.Response) or not 200 <= event.status_code < 300:
            status = getattr(event, "status_code", "no answer")
            raise failure(502, "upstream_proxy_refused", f"the upstream proxy answered "
                          f"{status} to CONNECT {authority}", host=host, port=port)
        leftover = conn.trailing_data[0]
        if leftover:
            raise failure(502, "upstream_proxy_failed", "the upstream proxy sent bytes before "
                          "the tunnel was used", host=host, port=port)
        return stream, raw

    async def _pipe(self, client: TcpStream, upstream: Stream, initial: bytes) -> None:
        if not isinstance(upstream, TcpStream):
            await self._pump(client, upstream, initial)
            return
        await self._relay(client, upstream, initial)

    async def _pump(self, client: TcpStream, upstream: Stream, initial: bytes) -> None:
        """A tunnel inside TLS to an https:// upstream proxy: copied chunk by chunk; it ends
        when either side ends (TLS has no half-close) or after ``idle_timeout`` of silence."""
        loop = asyncio.get_running_loop()
        activity = [loop.time()]

        async def copy(src: Stream, dst: Stream, first: bytes) -> None:
            if first:
                await dst.write(first)
            while data := await src.read(READ_SIZE):
                activity[0] = loop.time()
                await dst.write(data)

        tasks = [asyncio.create_task(copy(client, upstream, initial + _buffered(client.reader))),
                 asyncio.create_task(copy(upstream, client, b""))]
        idle = self.limits.idle_timeout
        try:
            while True:
                done, _ = await asyncio.wait(tasks, timeout=min(idle, 5.0),
                                             return_when=asyncio.FIRST_COMPLETED)
                if done or loop.time() - activity[0] > idle:
                    return
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _relay(self, client: TcpStream, upstream: TcpStream, initial: bytes) -> None:
        """Relay bytes both ways until both sides are done, either side fails, or nothing moved
        for ``idle_timeout``. The transports are handed to :class:`_Relay` protocols, so each
        chunk the kernel hands over is written straight to the other socket (no stream buffer,
        no task switch). Measured on loopback: ~0.3 s of proxy CPU per GiB; ``os.splice``
        (zero-copy) saved a fifth of that and no throughput, so the portable path stays."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        activity = [loop.time()]
        left, right = client.writer.transport, upstream.writer.transport
        if not isinstance(left, asyncio.Transport) or not isinstance(right, asyncio.Transport):
            raise TypeError("tunnels need stream transports")  # pragma: no cover
        left.pause_reading()
        right.pause_reading()
        pending_client = initial + _buffered(client.reader)
        pending_upstream = _buffered(upstream.reader)
        to_upstream = _Relay(right, activity, done)
        to_client = _Relay(left, activity, done)
        to_upstream.partner, to_client.partner = to_client, to_upstream
        left.set_protocol(to_upstream)
        right.set_protocol(to_client)
        to_upstream.connection_made(left)
        to_client.connection_made(right)
        if pending_client:
            right.write(pending_client)
        if pending_upstream:
            left.write(pending_upstream)
        left.resume_reading()
        right.resume_reading()
        idle = self.limits.idle_timeout
        while not done.done():
            await asyncio.wait([done], timeout=min(idle, 5.0))
            if loop.time() - activity[0] > idle:
                return


_ALERTS: Final = {SNI_MISMATCH: clienthello.ALERT_UNRECOGNIZED_NAME,
                  SNI_HIDDEN: clienthello.ALERT_ACCESS_DENIED,
                  BAD_CLIENT_HELLO: clienthello.ALERT_HANDSHAKE_FAILURE}


async def _copy(src: Stream, dst: TcpStream) -> None:
    """Copy ``src`` to ``dst`` until ``src`` ends (cancelled by the caller before that, when
    the tunnel proper takes over)."""
    while data := await src.read(READ_SIZE):
        await dst.write(data)
    await dst.flush()


def _buffered(reader: asyncio.StreamReader) -> bytes:
    """What a stream reader holds but nobody read yet (before its transport changes hands)."""
    buffer = getattr(reader, "_buffer", None)
    if not buffer:
        return b""
    data = bytes(buffer)
    buffer.clear()
    return data


class _Relay(asyncio.Protocol):
    """One direction of a tunnel: what its transport receives is written to ``out``. Reading
    pauses while ``out`` is over its high-water mark (asyncio's flow control), so a slow side
    never makes the proxy buffer without bound."""

    def __init__(self, out: asyncio.BaseTransport, activity: list[float],
                 done: asyncio.Future[None]) -> None:
        self.out = out
        self.activity = activity
        self.done = done
        self.transport: asyncio.Transport | None = None
        self.partner: _Relay | None = None
        self.eof = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if isinstance(transport, asyncio.Transport):
            self.transport = transport
            transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)

    def data_received(self, data: bytes) -> None:
        self.activity[0] = asyncio.get_running_loop().time()
        out = self.out
        if isinstance(out, asyncio.WriteTransport) and not out.is_closing():
            out.write(data)

    def eof_received(self) -> bool:
        self.eof = True
        out = self.out
        if isinstance(out, asyncio.WriteTransport) and out.can_write_eof() \
                and not out.is_closing():
            with contextlib.suppress(OSError, RuntimeError):
                out.write_eof()
        if self.partner is not None and self.partner.eof:
            self._finish()
        return True  # keep the other direction open (half-close)

    def connection_lost(self, exc: Exception | None) -> None:
        self._finish()

    def pause_writing(self) -> None:  # our socket is backed up: stop reading the other one
        if self.partner is not None and self.partner.transport is not None:
            self.partner.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.partner is not None and self.partner.transport is not None:
            self.partner.transport.resume_reading()

    def _finish(self) -> None:
        if not self.done.done():
            self.done.set_result(None)


def origin_context(extra_ca: Path | None) -> ssl.SSLContext:
    """Verifies origins (and an https:// upstream proxy) with the system trust store plus
    ``upstream_ca_file``; HTTP/1.1 only, TLS 1.2 or newer."""
    context = ssl.create_default_context()
    if extra_ca is not None:
        context.load_verify_locations(cafile=str(extra_ca))
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_alpn_protocols(["http/1.1"])
    return context


# -- entry point -----------------------------------------------------------------------------------


def _write_stderr(message: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(f"sbx-proxy: {message}\n")
        sys.stderr.flush()


def load_secrets(config: ProxyConfig, report: Callable[[str], None], *,
                 provided: Mapping[str, str] | None = None) -> dict[str, str]:
    """The values of the configured credentials (never read from the environment): those
    ``provided`` over the owner pipe, and the file store's for the rest."""
    from sbx.domain.credentials.secrets import SecretStore

    store = SecretStore(config.state_home)
    values: dict[str, str] = {}
    values.update(provided or {})
    for service in dict.fromkeys(c.service for c in config.credentials):
        if service in values:
            continue
        try:
            value = store.get(service)
        except SbxError as error:
            report(f"credential {service!r}: {error.message}; its requests are refused")
            continue
        if value is None:
            report(f"credential {service!r} has no stored secret; its requests are refused")
            continue
        values[service] = value
    return values


def proxy_argv(config_path: Path, run_id: str) -> list[str]:
    """The command line ``sbx run`` starts the proxy with (the run id in it lets gc find it)."""
    return [sys.executable, "-m", "sbx.domain.egress.proxy", str(config_path), run_id]


# The token (a few dozen characters) plus the encoded secrets resolved by sbx: room for a
# handful of values at their 64 KiB limit.
OWNER_LINE_LIMIT: Final = 1024 * 1024


def read_owner_line(fd: int) -> str | None:
    """The first line of the owner's pipe (the client token, maybe empty); None at EOF before
    a newline (the owner went away). Read byte by byte, so nothing after it is consumed."""
    line = b""
    while len(line) <= OWNER_LINE_LIMIT:
        byte = os.read(fd, 1)
        if not byte:
            return None
        if byte == b"\n":
            return line.decode("ascii", "replace").strip()
        line += byte
    return None


def startable(config: ProxyConfig, token: str | None) -> str | None:
    """Why this proxy must not start (None: it may). Listening anywhere but loopback means
    other hosts' and containers' reach: then the run's token and peer network are required."""
    if token is not None and not proxyauth.valid_token(token):
        return "the client token on the owner pipe is malformed"
    try:
        loopback = ipaddress.ip_address(config.listen_host).is_loopback
    except ValueError:
        loopback = False
    if not loopback and (token is None or config.peer_network is None):
        return (f"listening on {config.listen_host} needs the run's client token (owner pipe) "
                "and peer_network; refusing to serve anyone who can reach it")
    return None


def _watch_owner(loop: asyncio.AbstractEventLoop, fd: int, stop: Callable[[], None]) -> None:
    """Stop when the owner's pipe reaches EOF: the sbx process that started us is gone."""
    os.set_blocking(fd, False)

    def readable() -> None:
        try:
            data = os.read(fd, 4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            loop.remove_reader(fd)
            stop()

    loop.add_reader(fd, readable)


def _owner_token(config: ProxyConfig, fd: int) -> tuple[str, dict[str, str]] | int:
    """The client token ("" for none) and the provided secrets from the owner's pipe, or the
    exit status to end with."""
    try:
        line = read_owner_line(fd)
    except OSError as error:
        _write_stderr(f"cannot read the owner's pipe: {error.strerror}")
        return 1
    if line is None:
        _write_stderr("the owner's pipe ended before the first line: nobody owns this proxy")
        return 1
    token, _, payload = line.partition("|")
    provided: dict[str, str] = {}
    if payload:
        from sbx.domain.credentials.secrets import decode_provided

        try:
            provided = decode_provided(payload)
        except ValueError:
            _write_stderr("the owner's pipe carried malformed secrets")
            return 2
    refused = startable(config, token or None)
    if refused is not None:
        _write_stderr(refused)
        return 2
    return token, provided


def main(argv: Sequence[str] | None = None, *, owner_fd: int | None = None) -> int:
    """The proxy process. ``owner_fd`` (default: stdin) is the owner's pipe: its first line is
    the client token (empty: none), and its EOF ends the proxy."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) not in (1, 2):
        _write_stderr("usage: python -m sbx.domain.egress.proxy CONFIG_PATH [RUN_ID] "
                      "(stdin: the owner's pipe)")
        return 2
    try:
        config = ProxyConfig.load(Path(args[0]))
        if len(args) == 2 and args[1] != config.run_id:
            _write_stderr(f"run id {args[1]!r} does not match the config's {config.run_id!r}")
            return 2
    except SbxError as error:
        _write_stderr(str(error))
        return 1
    fd = sys.stdin.fileno() if owner_fd is None else owner_fd
    owned = _owner_token(config, fd)
    if isinstance(owned, int):
        return owned
    token = owned[0] or None
    provided = owned[1]
    try:
        from sbx.domain.egress.ca import CertificateAuthority

        ca = CertificateAuthority.load_or_create(config.state_home)
    except SbxError as error:
        _write_stderr(str(error))
        return 1
    notes: list[str] = []
    secrets = load_secrets(config, notes.append, provided=provided)
    values = list(secrets.values())  # every value ever loaded: redacted from what is logged

    def report(message: str) -> None:
        _write_stderr(redact(message, values))

    for note in notes:
        report(note)
    proxy = EgressProxy(config, server_context=ca.ssl_context_for, secrets=secrets,
                        stderr=report, client_token=token)

    def reload() -> None:
        fresh = load_secrets(config, report, provided=provided)
        values.extend(v for v in fresh.values() if v not in values)
        proxy.replace_secrets(fresh)

    def ready(port: int) -> None:
        sys.stdout.write(f"{READY_PREFIX} {port}\n")
        sys.stdout.flush()

    async def run() -> None:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, proxy.stop)
        loop.add_signal_handler(signal.SIGINT, proxy.stop)
        loop.add_signal_handler(signal.SIGUSR1, proxy.switch_to_runtime)
        loop.add_signal_handler(signal.SIGHUP, reload)
        _watch_owner(loop, fd, proxy.stop)
        await proxy.serve(ready)

    try:
        asyncio.run(run())
    except OSError as error:
        report(f"cannot listen on {config.listen_host}:{config.listen_port}: {error.strerror}")
        return 1
    return 0


__all__ = [
    "READY_PREFIX",
    "EgressProxy",
    "Masker",
    "Refusal",
    "TlsStream",
    "blocked_address",
    "explain_line",
    "injected_value",
    "load_secrets",
    "client_refusal",
    "main",
    "origin_context",
    "parse_authority",
    "proxy_argv",
    "read_owner_line",
    "redact",
    "refusal_body",
    "refusal_for",
    "refusal_response",
    "startable",
]


if __name__ == "__main__":
    from sbx.domain.egress.proxy import main as _main

    sys.exit(_main())
