"""One client connection: admitted (the run's token, a peer inside the run's network), then
absolute-form plain HTTP requests one by one, or one CONNECT — denied, tunnelled raw, or
intercepted — as :func:`sbx.domain.egress.policy.classify` says. Anything that goes wrong ends this
connection only, with an answer when one is still possible (fail closed, never a bypass)."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from urllib.parse import urlsplit

import h11

from sbx.base.reasons import EgressCode, Reason
from sbx.domain.egress import kitregistry, proxyauth
from sbx.domain.egress.hosts import normalize_host
from sbx.domain.egress.policy import Request, classify, decide
from sbx.proxy.context import ConnState, ProxyContext
from sbx.proxy.credentials import ProxyCredentials
from sbx.proxy.dialing import Dialer, Pool
from sbx.proxy.exchange import Forwarder
from sbx.proxy.intercept import Interceptor
from sbx.proxy.messages import bad_request, h11_server, parse_authority
from sbx.proxy.recorder import Traffic, mark_start
from sbx.proxy.refusals import (
    EgressRefusal,
    Refuser,
    clean,
    client_refusal,
    failure,
    kit_registry_refusal,
    refusal_for,
    refusal_response,
)
from sbx.proxy.relay import Tunnel
from sbx.proxy.streams import TcpStream, next_event

ESTABLISHED = b"HTTP/1.1 200 Connection established\r\n\r\n"


class ClientHandler:
    def __init__(self, ctx: ProxyContext, *, client_token: str | None,
                 credentials: ProxyCredentials, dialer: Dialer, forwarder: Forwarder,
                 interceptor: Interceptor,
                 tunnel: Tunnel, refuser: Refuser) -> None:
        self.ctx = ctx
        self.client_token = client_token
        self.credentials = credentials
        self.dialer = dialer
        self.forwarder = forwarder
        self.interceptor = interceptor
        self.tunnel = tunnel
        self.refuser = refuser

    async def on_client(self, reader: asyncio.StreamReader,
                        writer: asyncio.StreamWriter) -> None:
        """The asyncio server's callback: one task per client connection."""
        ctx = self.ctx
        client = TcpStream(reader, writer)
        peername = writer.get_extra_info("peername")
        peer = str(peername[0]) if isinstance(peername, tuple) and peername else "-"
        task = asyncio.current_task()
        if task is None or len(ctx.conns) >= ctx.limits.max_connections:
            with contextlib.suppress(OSError, ConnectionError):
                writer.write(refusal_response(failure(
                    503, EgressCode.TOO_MANY_CONNECTIONS,
                    f"more than {ctx.limits.max_connections} connections are open"),
                    ctx.explain_command))
            client.abort()
            return
        state = ConnState(ctx.phase, [client])
        ctx.conns[task] = state
        mark_start()
        try:
            await self._serve(client, state, peer)
        except EgressRefusal as refusal:
            await self.refuser.refuse(client, refusal)
        except (ConnectionError, OSError, TimeoutError, ssl.SSLError, h11.ProtocolError):
            pass  # the client or the origin went away or misbehaved: nothing more to say
        except Exception as error:  # fail closed: one connection fails, never the proxy
            ctx.stderr(f"internal error on a connection: {type(error).__name__}: {error}")
            with contextlib.suppress(Exception):
                await client.write(refusal_response(failure(
                    502, Reason.INTERNAL_ERROR, "the proxy hit an internal error; nothing was "
                    "sent"), ctx.explain_command))
        finally:
            ctx.conns.pop(task, None)
            for stream in state.streams:
                stream.abort()

    async def _serve(self, client: TcpStream, state: ConnState, peer: str) -> None:
        limits = self.ctx.limits
        conn = h11_server(limits)
        timeout = limits.head_timeout
        pool = Pool(self.dialer, state)
        try:
            while True:
                try:
                    event = await next_event(conn, client, timeout)
                except h11.RemoteProtocolError as error:
                    raise bad_request(error, "-", 0, "http") from None
                if not isinstance(event, h11.Request):
                    return  # ConnectionClosed (or PAUSED after a close)
                self._admit(event, peer)
                if event.method == b"CONNECT":
                    await self._connect(conn, client, event, state)
                    return
                if not await self.forwarder.exchange(conn, client, event, None, pool):
                    return
                conn.start_next_cycle()
                timeout = limits.idle_timeout
        finally:
            pool.close()

    def _admit(self, request: h11.Request, peer: str) -> None:
        """Refuse a request that is not the sandbox's: a peer outside the run's network
        (403), or without the run's proxy credentials (407). Every request is checked."""
        code: str | None = None
        config = self.ctx.config
        network = config.peer_network
        if network is not None and not proxyauth.peer_allowed(peer, network, config.listen_host):
            code = proxyauth.PEER
        elif self.client_token is not None:
            values = [v for n, v in request.headers if n == b"proxy-authorization"]
            code = proxyauth.check_authorization(values, self.client_token)
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
            path = clean(parts.path or "/", 300)
        if parsed is not None:
            host, port = normalize_host(parsed[0]) or clean(parsed[0], 300), parsed[1]
        raise client_refusal(code, client=peer, host=host, port=port, method=method,
                             path=path, scheme=scheme)

    async def _connect(self, conn: h11.Connection, client: TcpStream, request: h11.Request,
                       state: ConnState) -> None:
        target = request.target.decode("ascii", "replace")
        parsed = parse_authority(target, None)
        if parsed is None:
            raise failure(400, EgressCode.BAD_REQUEST,
                          f"CONNECT needs host:port, got {clean(target)!r}")
        host = normalize_host(parsed[0])
        port = parsed[1]
        if host is None:
            raise failure(400, EgressCode.BAD_REQUEST, f"{clean(parsed[0])!r} is not a host name",
                          host=clean(parsed[0], 300), port=port)
        ctx = self.ctx
        if host == kitregistry.HOST:  # the proxy answers it inside TLS, or refuses it
            if self.forwarder.registry is None:
                raise kit_registry_refusal(host=host, port=port)
            await client.write(ESTABLISHED)
            await self.interceptor.intercept(client, host, port, conn.trailing_data[0], state)
            return
        phase = ctx.phase
        handling = classify(ctx.network, phase, host, port)
        if handling == "denied":
            decision = decide(ctx.network, Request(phase, host, port))
            raise refusal_for(decision, host=host, port=port, scheme="https")
        initial = conn.trailing_data[0]
        if handling == "unbounded" and not self.credentials.intercepts(host, port):
            started = mark_start()
            upstream = await self.dialer.tunnel(host, port, state)
            await client.write(ESTABLISHED)
            traffic = Traffic()
            try:
                await self.tunnel.run(client, upstream, host, port, initial, traffic)
            finally:
                if not traffic.refused:
                    rule = decide(ctx.network, Request(phase, host, port)).deciding
                    ctx.recorder.tunnel(host=host, port=port, phase=phase, rule=rule,
                                        traffic=traffic, started=started)
            return
        await client.write(ESTABLISHED)
        await self.interceptor.intercept(client, host, port, initial, state)


__all__ = ["ESTABLISHED", "ClientHandler"]
