"""TLS interception of a CONNECT tunnel: the client's TLS is terminated with the state home CA's
leaf for the CONNECT host (its SNI must name that host), and every HTTP/1.1 request inside is
judged and forwarded on its own by the :class:`~sbx.proxy.exchange.Forwarder`."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from typing import Any, Final

import h11

from sbx.base.errors import SbxError
from sbx.base.reasons import EgressCode, Reason
from sbx.domain.egress.hosts import normalize_host
from sbx.proxy.context import ConnState, ProxyContext
from sbx.proxy.dialing import Pool, Site
from sbx.proxy.exchange import Forwarder
from sbx.proxy.messages import bad_request, h11_server
from sbx.proxy.refusals import EgressRefusal, Refuser, clean, failure, proxy_refusal
from sbx.proxy.streams import READ_SIZE, TcpStream, TlsStream, next_event

CONTEXT_CACHE: Final = 4096  # server contexts kept (one per intercepted host)


class Interceptor:
    def __init__(self, ctx: ProxyContext, *, server_context: Callable[[str], ssl.SSLContext],
                 forwarder: Forwarder, refuser: Refuser) -> None:
        self.ctx = ctx
        self._server_context = server_context
        self.forwarder = forwarder
        self.refuser = refuser
        self._contexts: dict[str, ssl.SSLContext] = {}

    async def intercept(self, client: TcpStream, host: str, port: int, initial: bytes,
                        state: ConnState) -> None:
        limits = self.ctx.limits
        if not initial:
            async with asyncio.timeout(limits.handshake_timeout):
                initial = await client.read(READ_SIZE)
            if not initial:
                return
        if initial[0] != 0x16:  # not a TLS handshake record
            raise proxy_refusal(
                EgressCode.NOT_TLS, f"{host}:{port} is checked per HTTPS request, and the bytes "
                "sent through the tunnel are not TLS (fail closed)", host=host, port=port,
                suggestion="send HTTPS requests through the proxy; raw tunnels to a host "
                           "bounded by methods/paths are refused")
        context = await self._context_for(host)
        tls = TlsStream.wrap(client, context, server_side=True)
        try:
            await tls.handshake(timeout=limits.handshake_timeout, initial=initial)
        except ssl.SSLError:
            sni = getattr(tls.obj, "sbx_sni", None)
            if sni is None or normalize_host(sni) == host:
                raise
            # The client named another host than it asked to CONNECT to: the handshake was
            # aborted with an unrecognized_name alert (no HTTP answer is possible without TLS).
            self.refuser.audit(proxy_refusal(
                EgressCode.SNI_MISMATCH, f"the TLS server name {clean(sni, 200)!r} is not the "
                f"CONNECT host {host}", host=host, port=port))
            return
        await self._serve(tls, Site("https", host, port), state)

    async def _serve(self, tls: TlsStream, site: Site, state: ConnState) -> None:
        """The requests inside an intercepted tunnel, until one side ends; refusals and
        internal errors are answered inside the client's TLS."""
        limits = self.ctx.limits
        host, port = site.host, site.port
        conn = h11_server(limits)
        pool = Pool(self.forwarder.dialer, state)
        timeout = limits.head_timeout
        first = True
        try:
            while True:
                try:
                    event = await next_event(conn, tls, timeout)
                except h11.RemoteProtocolError as error:
                    if first:
                        raise proxy_refusal(
                            EgressCode.NOT_HTTP, f"{host}:{port} is checked per HTTP request, "
                            "and what was sent inside TLS is not HTTP/1.1 (fail closed)",
                            host=host, port=port) from None
                    raise bad_request(error, host, port, "https") from None
                first = False
                if not isinstance(event, h11.Request):
                    return
                try:
                    keep = await self.forwarder.exchange(conn, tls, event, site, pool)
                except EgressRefusal as refusal:
                    await self.refuser.refuse(tls, refusal)
                    return
                if not keep:
                    return
                conn.start_next_cycle()
                timeout = limits.idle_timeout
        except EgressRefusal as refusal:
            await self.refuser.refuse(tls, refusal)
        except (ConnectionError, OSError, TimeoutError, ssl.SSLError, h11.ProtocolError):
            pass
        except Exception as error:  # fail closed, and answer inside the client's TLS
            self.ctx.stderr(f"internal error on a connection: {type(error).__name__}: {error}")
            if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                await self.refuser.refuse(tls, failure(
                    502, Reason.INTERNAL_ERROR, "the proxy hit an internal error; nothing was "
                    "sent", host=host, port=port))
        finally:
            pool.close()

    async def _context_for(self, host: str) -> ssl.SSLContext:
        context = self._contexts.get(host)
        if context is not None:
            return context
        try:
            context = await asyncio.to_thread(self._server_context, host)
        except SbxError as error:
            raise failure(502, EgressCode.CERTIFICATE_FAILED,
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
        if len(self._contexts) > CONTEXT_CACHE:
            self._contexts.clear()
        self._contexts[host] = context
        return context


__all__ = ["Interceptor"]
