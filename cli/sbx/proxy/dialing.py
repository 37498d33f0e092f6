"""Outbound connections: which addresses may be reached, resolving names (and refusing internal
answers), dialing the exact address checked, chaining through an upstream (corporate) proxy,
TLS to origins, and the per-client pool of keep-alive connections to origins."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import socket
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import unquote, urlsplit

import h11

from sbx.base.reasons import EgressCode, Reason
from sbx.domain.egress.configfields import ProxyConfigError
from sbx.domain.egress.destination import (
    Address,
    Blocked,
    blocked_address,
    check_addresses,
    check_name,
)
from sbx.proxy.context import ConnState, ProxyContext
from sbx.proxy.messages import h11_client
from sbx.proxy.refusals import EgressRefusal, clean, failure, proxy_refusal
from sbx.proxy.streams import READ_SIZE, Stream, TcpStream, TlsStream, next_event

Resolver = Callable[[str, int], Awaitable[list[str]]]


async def system_resolver(host: str, port: int) -> list[str]:
    """The addresses of ``host`` from the system resolver (getaddrinfo, in a thread)."""
    infos = await asyncio.get_running_loop().getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    return [str(info[4][0]) for info in infos]


def origin_context(extra_ca: Path | None) -> ssl.SSLContext:
    """Verifies origins (and an https:// upstream proxy) with the system trust store plus
    ``upstream_ca_file``; HTTP/1.1 only, TLS 1.2 or newer."""
    context = ssl.create_default_context()
    if extra_ca is not None:
        context.load_verify_locations(cafile=str(extra_ca))
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_alpn_protocols(["http/1.1"])
    return context


@dataclass(frozen=True)
class Site:
    """Where requests on a connection go: fixed for an intercepted CONNECT, per request for
    absolute-form plain HTTP."""

    scheme: Literal["http", "https"]
    host: str  # normalised
    port: int

    @property
    def authority(self) -> str:
        """``host[:port]`` as a Host header names it (the scheme's default port left out)."""
        shown = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return shown if self.port == default else f"{shown}:{self.port}"


@dataclass
class Upstream:
    site: Site
    stream: Stream
    conn: h11.Connection
    absolute_form: bool  # plain HTTP through the upstream proxy
    raw: TcpStream  # the socket under ``stream`` (which may be TLS on it)


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


class Dialer:
    """Opens the proxy's outbound connections, each to an address it checked (or through the
    upstream proxy, which then resolves names; internal literals and names are still refused
    here). Every stream it opens is added to the client connection's ``state``."""

    def __init__(self, ctx: ProxyContext, *, resolver: Resolver | None = None) -> None:
        self.ctx = ctx
        config = ctx.config
        self.resolver = resolver or system_resolver
        self.upstream = None if config.upstream_proxy is None \
            else UpstreamProxy.parse(config.upstream_proxy)
        self.origin_context = origin_context(config.upstream_ca_file)

    async def tunnel(self, host: str, port: int, state: ConnState) -> Stream:
        """A byte stream to host:port, for a CONNECT tunnel."""
        if self.upstream is not None:
            return (await self.via_upstream(host, port, state, tunnel=True))[0]
        return await self.dial(host, port, state)

    async def http(self, site: Site, state: ConnState) -> Upstream:
        """A connection for HTTP requests to ``site`` (TLS to it for https)."""
        conn = h11_client(self.ctx.limits)
        if self.upstream is not None:
            stream, raw = await self.via_upstream(site.host, site.port, state,
                                                  tunnel=site.scheme == "https")
            if site.scheme == "http":
                return Upstream(site, stream, conn, absolute_form=True, raw=raw)
        else:
            raw = await self.dial(site.host, site.port, state)
            stream = raw
        if site.scheme == "http":
            return Upstream(site, stream, conn, absolute_form=False, raw=raw)
        tls = await self.tls_to(stream, site.host, site.port)
        return Upstream(site, tls, conn, absolute_form=False, raw=raw)

    async def tls_to(self, raw: Stream, host: str, port: int) -> TlsStream:
        tls = TlsStream.wrap(raw, self.origin_context, server_side=False, server_hostname=host)
        try:
            await tls.handshake(timeout=self.ctx.limits.handshake_timeout)
            return tls
        except ssl.SSLCertVerificationError as error:
            raise failure(502, EgressCode.ORIGIN_UNTRUSTED, f"the certificate of {host}:{port} "
                          f"is not trusted ({clean(error.verify_message or str(error), 200)})",
                          host=host, port=port) from None
        except (ssl.SSLError, ConnectionError, OSError, TimeoutError) as error:
            raise failure(502, EgressCode.ORIGIN_TLS_FAILED, f"TLS to {host}:{port} failed "
                          f"({clean(type(error).__name__ + ': ' + str(error), 200)})",
                          host=host, port=port) from None

    # -- which addresses ---------------------------------------------------------------------------

    def check_literal(self, host: str, port: int) -> list[Address] | None:
        """For an IP literal: the address if it may be reached (refusal otherwise); None for a
        name. ``localhost`` names, cloud metadata names and other internal-only names are
        refused here too, resolver (or upstream proxy) or not, unless a rule names them
        (:func:`sbx.domain.egress.destination.check_name`, which ``sbx explain`` uses too)."""
        literal, blocked = check_name(self.ctx.network, self.ctx.phase, host, port,
                                      upstream=self.upstream is not None)
        if blocked is not None:
            raise _refusal(blocked)
        return literal

    async def resolve(self, host: str, port: int) -> list[Address]:
        literal = self.check_literal(host, port)
        if literal is not None:
            return literal
        try:
            async with asyncio.timeout(self.ctx.limits.connect_timeout):
                answers = await self.resolver(host, port)
        except (OSError, TimeoutError, ValueError) as error:
            raise failure(502, EgressCode.DNS_FAILED, f"cannot resolve {host}: "
                          f"{clean(str(error), 200)}", host=host, port=port) from None
        addresses, blocked = check_addresses(self.ctx.network, self.ctx.phase, host, port,
                                             answers)
        if not addresses:
            raise failure(502, EgressCode.DNS_FAILED, f"{host} has no address", host=host,
                          port=port)
        if blocked is not None:
            raise _refusal(blocked)
        return addresses

    # -- connecting --------------------------------------------------------------------------------

    async def dial(self, host: str, port: int, state: ConnState) -> TcpStream:
        addresses = await self.resolve(host, port)
        last: Exception | None = None
        for address in addresses:
            try:
                async with asyncio.timeout(self.ctx.limits.connect_timeout):
                    reader, writer = await asyncio.open_connection(str(address), port,
                                                                   limit=READ_SIZE)
            except (OSError, TimeoutError) as error:
                last = error
                continue
            stream = TcpStream(reader, writer)
            state.streams.append(stream)
            return stream
        raise failure(502, EgressCode.CONNECT_FAILED, f"cannot connect to {host}:{port} "
                      f"({clean(str(last), 200)})", host=host, port=port)

    async def via_upstream(self, host: str, port: int, state: ConnState, *,
                           tunnel: bool) -> tuple[Stream, TcpStream]:
        """A connection through the upstream proxy (TLS to it for an https:// one): a CONNECT
        tunnel to host:port, or (``tunnel=False``) a connection for absolute-form requests.
        Returns the stream to use and the TCP connection under it."""
        upstream = self.upstream
        if upstream is None:  # pragma: no cover - callers check
            raise failure(502, Reason.INTERNAL_ERROR, "no upstream proxy", host=host, port=port)
        self.check_literal(host, port)  # names are left to the upstream; internal literals not
        limits = self.ctx.limits
        try:
            async with asyncio.timeout(limits.connect_timeout):
                reader, writer = await asyncio.open_connection(upstream.host, upstream.port,
                                                               limit=READ_SIZE)
        except (OSError, TimeoutError) as error:
            raise failure(502, EgressCode.UPSTREAM_PROXY_UNREACHABLE, "cannot reach the upstream "
                          f"proxy {upstream.host}:{upstream.port} ({clean(str(error), 200)})",
                          host=host, port=port) from None
        raw = TcpStream(reader, writer)
        state.streams.append(raw)
        stream: Stream = raw
        if upstream.scheme == "https":
            stream = await self.tls_to(raw, upstream.host, upstream.port)
        if not tunnel:
            return stream, raw
        authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        conn = h11_client(limits)
        headers = [(b"host", authority.encode("ascii"))]
        if upstream.authorization is not None:
            headers.append((b"proxy-authorization", upstream.authorization))
        await stream.write(conn.send(h11.Request(method="CONNECT", target=authority,
                                                 headers=headers)) or b"")
        await raw.flush()
        try:
            event = await next_event(conn, stream, limits.connect_timeout)
        except (h11.ProtocolError, TimeoutError, ConnectionError) as error:
            raise failure(502, EgressCode.UPSTREAM_PROXY_FAILED, "the upstream proxy did not "
                          f"answer CONNECT {authority} ({clean(str(error), 200)})",
                          host=host, port=port) from None
        if not isinstance(event, h11.Response) or not 200 <= event.status_code < 300:
            status = getattr(event, "status_code", "no answer")
            raise failure(502, EgressCode.UPSTREAM_PROXY_REFUSED, f"the upstream proxy answered "
                          f"{status} to CONNECT {authority}", host=host, port=port)
        if conn.trailing_data[0]:
            raise failure(502, EgressCode.UPSTREAM_PROXY_FAILED, "the upstream proxy sent bytes "
                          "before the tunnel was used", host=host, port=port)
        return stream, raw


def _refusal(blocked: Blocked) -> EgressRefusal:
    refusal = proxy_refusal(EgressCode.DESTINATION_BLOCKED, blocked.reason, host=blocked.host,
                            port=blocked.port, suggestion=blocked.suggestion)
    refusal.destination = blocked
    return refusal


class Pool:
    """One client connection's connections to origins, one at a time: kept alive for the next
    request to the same site, dropped when the site changes or a message was cut short."""

    def __init__(self, dialer: Dialer, state: ConnState) -> None:
        self.dialer = dialer
        self.state = state
        self._open: dict[Site, Upstream] = {}

    async def get(self, site: Site, method: str, path: str) -> Upstream:
        existing = self._open.get(site)
        if existing is not None and existing.conn.our_state is h11.IDLE:
            return existing
        for old in list(self._open.values()):
            self.drop(old)
        try:
            upstream = await self.dialer.http(site, self.state)
        except EgressRefusal as refusal:
            refusal.method, refusal.path = method, path
            raise
        self._open[site] = upstream
        return upstream

    def release(self, upstream: Upstream) -> None:
        """After an exchange: keep it for the next request when both messages completed."""
        if upstream.conn.our_state is h11.DONE and upstream.conn.their_state is h11.DONE:
            upstream.conn.start_next_cycle()
        else:
            self.drop(upstream)

    def drop(self, upstream: Upstream) -> None:
        """Close it and forget it (a long keep-alive connection opens many, one at a time)."""
        if self._open.get(upstream.site) is upstream:
            del self._open[upstream.site]
        upstream.raw.abort()
        with contextlib.suppress(ValueError):
            self.state.streams.remove(upstream.raw)

    def close(self) -> None:
        for upstream in self._open.values():
            upstream.stream.abort()


__all__ = ["Address", "Dialer", "Pool", "Resolver", "Site", "Upstream", "UpstreamProxy",
           "blocked_address", "origin_context", "system_resolver"]
