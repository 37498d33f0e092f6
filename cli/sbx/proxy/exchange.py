"""One HTTP/1.1 request through the proxy: judged by the policy (method, normalised path, any
method override), located (the Host must name the connection's target), its credentials set,
forwarded to the origin and answered, the answer decoded and masked where a secret went."""

from __future__ import annotations

import ssl
from collections.abc import Sequence
from typing import Any, Final
from urllib.parse import urlsplit

import h11

from sbx.base.reasons import EgressCode, Reason
from sbx.domain.egress import kitregistry, oauth_intercept
from sbx.domain.egress.encoding import BodyDecoder, CorruptBody
from sbx.domain.egress.hosts import normalize_host
from sbx.domain.egress.policy import Decision, Request, decide
from sbx.proxy.context import ProxyContext
from sbx.proxy.credentials import (
    Masker,
    ProxyCredentials,
    inbound_headers,
    masking_decoder,
)
from sbx.proxy.dialing import Dialer, Pool, Site, Upstream
from sbx.proxy.kitregistry import KitRegistry
from sbx.proxy.messages import head_size, parse_authority
from sbx.proxy.recorder import Traffic, mark_start
from sbx.proxy.refusals import (
    EgressRefusal,
    clean,
    failure,
    kit_registry_refusal,
    proxy_refusal,
    refusal_for,
)
from sbx.proxy.streams import Stream, flush, next_event
from sbx.proxy.tokens import TokenExchange

METHOD_OVERRIDES: Final = (b"x-http-method-override", b"x-http-method", b"x-method-override")


class Forwarder:
    """Judges, forwards and answers requests, one at a time, for any client connection."""

    def __init__(self, ctx: ProxyContext, credentials: ProxyCredentials, dialer: Dialer,
                 registry: KitRegistry | None = None) -> None:
        self.ctx = ctx
        self.credentials = credentials
        self.dialer = dialer
        self.tokens = TokenExchange(ctx, credentials)
        self.registry = registry  # kit-registry@1's, when granted

    async def exchange(self, conn: h11.Connection, client: Stream, request: h11.Request,
                       site: Site | None, pool: Pool) -> bool:
        """Judge, forward and answer one request (``site``: the intercepted CONNECT's; None
        for absolute-form plain HTTP); True when the client connection may carry another."""
        started = mark_start()
        method = request.method.decode("ascii").upper()
        target = request.target.decode("ascii", "replace")
        self._check_head(request, site, method)
        site, raw_path, query = self._locate(site, method, target, request.headers)
        host, port, shown_path = site.host, site.port, raw_path
        if host == kitregistry.HOST:  # answered here or refused, never by the policy
            return await self._kit_registry(conn, client, request, site, method, raw_path, query)
        decision = self._authorize(site, method, raw_path, request.headers)
        path = decision.path if decision.path is not None else raw_path
        creds = self.credentials
        try:
            token_for = creds.oauth.token_endpoint(self.ctx.phase, host, port, raw_path)
        except oauth_intercept.AmbiguousEndpoint as error:
            raise self._ambiguous(error, site, method, raw_path) from None
        traffic = Traffic()

        def record(injected: Sequence[str]) -> None:
            self.ctx.recorder.request(
                scheme=site.scheme, host=host, port=port, method=method, path=shown_path,
                rule=decision.deciding, code=decision.code, credentials=injected,
                traffic=traffic, started=started)

        if token_for is not None:
            keep = await self.tokens.answer(conn, client, request, site, pool, token_for,
                                            method, path, query)
            record([token_for.service])
            return keep
        inject_values = creds.for_request(site, method, shown_path)
        request_headers = creds.oauth_headers(site, method, shown_path, request.headers)
        injected = self._injected(site, inject_values, request.headers, request_headers)
        needles = creds.mask_needles(inject_values) if inject_values else []
        needles += creds.oauth_needles(site)
        forward_target = path + (("?" + query) if query is not None else "")
        headers = creds.outbound_headers(request_headers, inject_values, masking=bool(needles))
        upstream = await pool.get(site, method, shown_path)
        if upstream.absolute_form:
            forward_target = f"http://{site.authority}{forward_target}"
            chained = self.dialer.upstream
            if chained is not None and chained.authorization is not None:
                headers.append((b"proxy-authorization", chained.authorization))
        if conn.they_are_waiting_for_100_continue:
            await client.write(conn.send(h11.InformationalResponse(status_code=100,
                                                                   headers=[])) or b"")
        masker = Masker(needles) if needles else None
        try:
            await self._forward(conn, client, upstream, method, forward_target, headers, masker,
                                traffic)
        except EgressRefusal:
            raise
        except (ConnectionError, OSError, TimeoutError, ssl.SSLError, h11.ProtocolError) as error:
            pool.drop(upstream)
            if conn.our_state is h11.SEND_RESPONSE:
                raise failure(502, EgressCode.UPSTREAM_FAILED, f"the origin {host}:{port} "
                              f"failed: {clean(type(error).__name__ + ': ' + str(error), 300)}",
                              host=host, port=port, method=method, path=shown_path,
                              scheme=site.scheme) from None
            record(injected)  # the answer had begun: allowed, and cut short
            raise
        record(injected)
        pool.release(upstream)
        return conn.our_state is h11.DONE and conn.their_state is h11.DONE

    async def _kit_registry(self, conn: h11.Connection, client: Stream, request: h11.Request,
                            site: Site, method: str, path: str, query: str | None) -> bool:
        if self.registry is None:
            raise kit_registry_refusal(host=site.host, port=site.port, method=method, path=path,
                                       scheme=site.scheme)
        return await self.registry.answer(conn, client, request, site, method, path, query)

    def _check_head(self, request: h11.Request, site: Site | None, method: str) -> None:
        """Refuse a request head over the bounds, or framed two ways."""
        limits = self.ctx.limits
        scheme = site.scheme if site is not None else "http"
        at_host, at_port = (site.host, site.port) if site is not None else ("-", 0)
        if len(request.target) > limits.max_target_bytes:
            raise failure(414, EgressCode.TARGET_TOO_LONG, "the request target is longer than "
                          f"{limits.max_target_bytes} bytes",
                          host=at_host, port=at_port, method=method, scheme=scheme)
        if len(request.headers) > limits.max_headers \
                or head_size(request) > limits.max_head_bytes:
            raise failure(431, EgressCode.HEAD_TOO_LARGE, f"more than {limits.max_headers} "
                          f"header fields or {limits.max_head_bytes} bytes of request head",
                          host=at_host, port=at_port, method=method, scheme=scheme)
        names = {name for name, _ in request.headers}
        if b"transfer-encoding" in names and b"content-length" in names:
            # RFC 9112 §6.3: both framings at once is how requests are smuggled; refuse.
            raise failure(400, EgressCode.AMBIGUOUS_FRAMING, "the request has both "
                          "Transfer-Encoding and Content-Length",
                          host=at_host, port=at_port, method=method, scheme=scheme)

    def _injected(self, site: Site, injections: Sequence[Any],
                  sent: Sequence[tuple[bytes, bytes]] | Any,
                  forwarded: Sequence[tuple[bytes, bytes]]) -> list[str]:
        """The services whose credential this request carries out (names only, for the log):
        the injected ones, and the OAuth service whose access sentinel was swapped."""
        services = [i.service for i in injections]
        resource = self.credentials.oauth.resource(self.ctx.phase, site.host, site.port)
        if resource is not None and list(forwarded) != list(sent):
            services.append(resource.service)
        return services

    @staticmethod
    def _ambiguous(error: oauth_intercept.AmbiguousEndpoint, site: Site, method: str,
                   path: str) -> EgressRefusal:
        refusal = proxy_refusal(
            EgressCode.AMBIGUOUS_TOKEN_PATH, f"{site.host} is the OAuth token host of "
            f"{error.service}, and the path {clean(path, 200)!r} cannot be normalised, so sbx "
            "cannot tell whether the origin reads it as the token endpoint (fail closed)",
            host=site.host, port=site.port, method=method, path=clean(path, 300),
            scheme=site.scheme, suggestion="send the request with a plain path (no encoded "
            "`/`, no %00)")
        refusal.sbx_reason = Reason.TOKEN_ENDPOINT_AMBIGUOUS
        refusal.explain = f"sbx explain {Reason.TOKEN_ENDPOINT_AMBIGUOUS}"
        return refusal

    def _authorize(self, site: Site, method: str, path: str,
                   headers: Sequence[tuple[bytes, bytes]]) -> Decision:
        """The policy's verdict on the request, and on any method it asks the origin to use
        instead (``X-HTTP-Method-Override`` and friends); raises the refusal."""
        host, port = site.host, site.port
        network, phase = self.ctx.network, self.ctx.phase
        decision = decide(network, Request(phase, host, port, method, path, site.scheme))
        if not decision.allowed:
            raise refusal_for(decision, host=host, port=port, scheme=site.scheme)
        for name, value in headers:
            if name in METHOD_OVERRIDES:
                other = value.decode("ascii", "replace").strip().upper()
                override = decide(network, Request(phase, host, port, other, path, site.scheme))
                if not override.allowed:
                    refusal = refusal_for(override, host=host, port=port, scheme=site.scheme)
                    refusal.code = EgressCode.METHOD_OVERRIDE
                    refusal.reason = (f"{name.decode()} asks the origin to treat {method} as "
                                      f"{clean(other, 40)}, which is refused: {override.reason}")
                    raise refusal
        return decision

    def _locate(self, site: Site | None, method: str, target: str,
                headers: Sequence[tuple[bytes, bytes]]) -> tuple[Site, str, str | None]:
        """The site, path and query of a request; refuses a Host that disagrees with the
        target (or, inside an intercepted CONNECT, with the CONNECT host)."""
        hosts = [v for n, v in headers if n == b"host"]
        if site is None:
            parts = urlsplit(target)
            if parts.scheme.lower() != "http" or not target.lower().startswith("http://"):
                raise failure(400, EgressCode.NOT_A_PROXY_REQUEST,
                              "send absolute-form http:// requests, or CONNECT for https "
                              f"(got {clean(target, 200)!r})", method=method, scheme="http")
            authority = target[len("http://"):].split("/", 1)[0].split("?", 1)[0]
            parsed = parse_authority(authority, 80)
            name = normalize_host(parsed[0]) if parsed is not None else None
            if parsed is None or name is None:
                raise failure(400, EgressCode.BAD_REQUEST,
                              f"{clean(authority, 200)!r} is not a host",
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
                raise proxy_refusal(EgressCode.HOST_MISMATCH, f"the request target "
                                    f"{clean(target, 200)!r} is not for {site.host}",
                                    host=site.host, port=site.port, method=method)
            authority = target[len("https://"):].split("/", 1)[0].split("?", 1)[0]
            parsed = parse_authority(authority, 443)
            if parsed is None or normalize_host(parsed[0]) != site.host \
                    or parsed[1] != site.port:
                raise proxy_refusal(EgressCode.HOST_MISMATCH, f"the request target names "
                                    f"{clean(authority, 200)!r}, not the CONNECT target "
                                    f"{site.host}:{site.port}", host=site.host, port=site.port,
                                    method=method)
            path_and_query = target[len("https://") + len(authority):] or "/"
        path, sep, query = path_and_query.partition("?")
        path = path.split("#", 1)[0]
        if len(hosts) > 1:
            raise proxy_refusal(EgressCode.HOST_MISMATCH, "the request has more than one Host "
                                "header", host=site.host, port=site.port, method=method, path=path,
                                scheme=site.scheme)
        if hosts:
            text = hosts[0].decode("ascii", "replace")
            parsed = parse_authority(text, 443 if site.scheme == "https" else 80)
            if parsed is None or normalize_host(parsed[0]) != site.host \
                    or parsed[1] != site.port:
                where = "CONNECT target" if site.scheme == "https" else "request URL"
                raise proxy_refusal(
                    EgressCode.HOST_MISMATCH, f"the Host header {clean(text, 200)!r} does not "
                    f"name the {where} {site.host}:{site.port}", host=site.host, port=site.port,
                    method=method, path=path, scheme=site.scheme,
                    suggestion="send each request to the host its connection was opened for")
        return site, path, (query if sep else None)

    async def _forward(self, conn: h11.Connection, client: Stream, upstream: Upstream,
                       method: str, target: str, headers: list[tuple[bytes, bytes]],
                       masker: Masker | None, traffic: Traffic) -> None:
        up = upstream.conn
        if not any(name == b"host" for name, _ in headers):
            headers.insert(0, (b"host", upstream.site.authority.encode("ascii")))
        await upstream.stream.write(up.send(h11.Request(
            method=method, target=target, headers=headers, http_version="1.1")) or b"")
        limits = self.ctx.limits
        idle = limits.idle_timeout
        while True:  # the request body
            event = await next_event(conn, client, idle)
            if isinstance(event, h11.Data):
                traffic.up += len(event.data)
                await upstream.stream.write(up.send(event) or b"")
            elif isinstance(event, h11.EndOfMessage):
                await upstream.stream.write(up.send(h11.EndOfMessage()) or b"")
                break
            else:
                raise ConnectionError("the client went away during the request body")
        await flush(upstream.stream)
        decoder: BodyDecoder | None = None
        while True:  # the response
            event = await next_event(up, upstream.stream, idle)
            if isinstance(event, h11.InformationalResponse):
                if event.status_code == 101:
                    raise h11.RemoteProtocolError("the origin switched protocols unasked")
                await client.write(conn.send(h11.InformationalResponse(
                    status_code=event.status_code, headers=inbound_headers(
                        event.headers, masker), reason=event.reason)) or b"")
            elif isinstance(event, h11.Response):
                if len(event.headers) > limits.max_headers \
                        or head_size(event) > limits.max_head_bytes:
                    raise h11.RemoteProtocolError("the origin sent too large a response head")
                traffic.status = event.status_code
                decoder = masking_decoder(event, method, upstream.site) if masker else None
                await client.write(conn.send(h11.Response(
                    status_code=event.status_code, reason=event.reason,
                    headers=inbound_headers(event.headers, masker,
                                            decoded=decoder is not None))) or b"")
                break
            else:
                raise ConnectionError("the origin closed before answering")
        while True:  # the response body
            event = await next_event(up, upstream.stream, idle)
            if isinstance(event, h11.Data):
                traffic.down += len(event.data)
                await self._send_body(conn, client, bytes(event.data), decoder, masker)
            elif isinstance(event, h11.EndOfMessage):
                await self._send_body(conn, client, None, decoder, masker)
                await client.write(conn.send(h11.EndOfMessage()) or b"")
                break
            else:
                raise ConnectionError("the origin closed during the response body")
        await flush(client)

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


__all__ = ["METHOD_OVERRIDES", "Forwarder"]
