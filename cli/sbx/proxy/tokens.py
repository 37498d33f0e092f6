"""The OAuth token endpoint, answered with sentinels: the real refresh token goes upstream in
place of the sentinel (or a login goes as it is), every answer is rewritten
(:mod:`sbx.domain.egress.oauth_answers`) or refused, and the real tokens it held are kept on
the host — a refresh of the user's login in the user's store (under its lock), a login made
inside the sandbox (and its refreshes) in the sandbox's own (``login_dir``), never the user's.
The decisions are :mod:`sbx.domain.egress.oauth_intercept`'s; this is the I/O."""

from __future__ import annotations

import ssl
from typing import Any

import h11

from sbx.base.errors import SbxError
from sbx.base.reasons import EgressCode, Reason
from sbx.domain.egress import oauth_answers, oauth_intercept
from sbx.domain.egress.encoding import CorruptBody
from sbx.domain.egress.proxycreds import CredentialSpec
from sbx.proxy.context import ProxyContext
from sbx.proxy.credentials import (
    Masker,
    ProxyCredentials,
    inbound_headers,
    masking_decoder,
)
from sbx.proxy.dialing import Pool, Site, Upstream
from sbx.proxy.refusals import EgressRefusal, clean, failure, proxy_refusal
from sbx.proxy.streams import Stream, flush, next_event


class TokenExchange:
    def __init__(self, ctx: ProxyContext, credentials: ProxyCredentials) -> None:
        self.ctx = ctx
        self.credentials = credentials

    async def answer(self, conn: h11.Connection, client: Stream, request: h11.Request,
                     site: Site, pool: Pool, credential: CredentialSpec, method: str, path: str,
                     query: str | None) -> bool:
        """One request to the token endpoint; True when the client connection may carry
        another one."""
        oauth = credential.oauth
        service = credential.service
        creds = self.credentials
        if oauth is None:  # pragma: no cover - token_endpoint() returns OAuth credentials
            raise failure(502, Reason.INTERNAL_ERROR, "not an OAuth credential")
        if site.scheme != "https":
            raise proxy_refusal(
                EgressCode.CREDENTIAL_NEEDS_TLS, f"{site.host}{path} is the OAuth token "
                f"endpoint of {service}, and sbx sends tokens only over HTTPS", host=site.host,
                port=site.port, method=method, path=path, scheme=site.scheme,
                suggestion=f"use https://{site.host}{path}")
        if conn.they_are_waiting_for_100_continue:
            await client.write(conn.send(h11.InformationalResponse(status_code=100,
                                                                   headers=[])) or b"")
        body = await self._request_body(conn, client, site, method, path)
        parsed = self._parse(request, body, query, service, site, method, path)
        target = path + (("?" + query) if query is not None else "")
        refresh = parsed.grant == oauth_intercept.REFRESH_GRANT
        try:
            async with oauth_intercept.store_lock(creds.oauth_store.directory, service):
                login = creds.sandbox_login(service)
                source = login if login is not None else creds.user_tokens(service)
                try:
                    out_body = oauth_intercept.upstream_token_body(
                        parsed, body, oauth, service,
                        source.refresh_token if source is not None else None)
                except oauth_intercept.ForeignCredential as error:
                    raise creds.not_issued(error, site, method, path) from None
                if out_body is None:
                    raise creds.oauth_unbound(service, site, method, path)
                headers = [(n, v) for n, v in creds.outbound_headers(request.headers, [],
                                                                     masking=True)
                           if n not in (b"content-length", b"transfer-encoding")]
                headers.append((b"content-length", str(len(out_body)).encode("ascii")))
                upstream = await pool.get(site, method, path)
                response, answer = await self._roundtrip(upstream, pool, method, target,
                                                         headers, out_body)
                try:
                    rewritten = oauth_answers.rewrite_token_answer(
                        response.status_code, response.headers, answer, oauth,
                        previous=source if refresh else None)
                except oauth_answers.UnrewritableAnswer as error:
                    raise self._unrewritable(error, response, site, method, path) from None
                if rewritten.tokens is not None:
                    self._keep(service, rewritten.tokens, user=refresh and login is None,
                               site=site, method=method, path=path)
        except TimeoutError:
            raise failure(502, EgressCode.TOKEN_STORE_LOCKED, f"the OAuth token store of "
                          f"{service} stayed locked", host=site.host, port=site.port,
                          method=method, path=path) from None
        creds.oauth_seen.update(rewritten.withheld)
        masker = Masker(oauth_intercept.mask_needles(sorted(creds.oauth_seen)))
        out = masker.mask(rewritten.body)
        headers = [(n, v) for n, v in inbound_headers(rewritten.headers, masker, decoded=True)
                   if n not in (b"transfer-encoding", b"content-length")]
        headers.append((b"content-length", str(len(out)).encode("ascii")))
        await client.write(conn.send(h11.Response(status_code=response.status_code,
                                                  reason=response.reason,
                                                  headers=headers)) or b"")
        if out and method != "HEAD":
            await client.write(conn.send(h11.Data(data=out)) or b"")
        await client.write(conn.send(h11.EndOfMessage()) or b"")
        await flush(client)
        return conn.our_state is h11.DONE and conn.their_state is h11.DONE

    @staticmethod
    def _parse(request: h11.Request, body: bytes, query: str | None, service: str, site: Site,
               method: str, path: str) -> oauth_intercept.TokenRequest:
        """The grant sbx and the origin will both read, or a 400 (never forwarded unread)."""
        try:
            coding = oauth_intercept.header_value(request.headers, b"content-encoding")
            if coding is not None and coding.strip().lower() not in ("", "identity"):
                raise oauth_intercept.UnreadableTokenRequest("its body is content-encoded")
            return oauth_intercept.parse_token_request(
                body, oauth_intercept.header_value(request.headers, b"content-type"), query)
        except oauth_intercept.UnreadableTokenRequest as error:
            raise failure(400, EgressCode.TOKEN_REQUEST_UNREADABLE, f"the request to the OAuth "
                          f"token endpoint of {service} cannot be read ({error}); sbx must see "
                          "its grant", host=site.host, port=site.port, method=method,
                          path=path) from None

    def _keep(self, service: str, tokens: Any, *, user: bool, site: Site, method: str,
              path: str) -> None:
        """A refresh of the user's login goes to the user's store (its old refresh token is
        spent); any other answer's tokens are this sandbox's alone."""
        creds = self.credentials
        try:
            if user:
                creds.oauth_seen.update(tokens.secrets())
                creds.oauth_store.set(service, tokens)
            else:
                creds.keep_sandbox_login(service, tokens)
        except (SbxError, OSError) as error:
            self.ctx.stderr(f"cannot store the OAuth tokens of {service!r}: {error}")
            raise failure(502, EgressCode.TOKEN_STORE_FAILED, "the new OAuth tokens "
                          f"of {service} could not be stored on the host",
                          host=site.host, port=site.port, method=method,
                          path=path) from None

    def _unrewritable(self, error: Exception, response: h11.Response, site: Site,
                      method: str, path: str) -> EgressRefusal:
        refusal = failure(
            502, EgressCode.UNREWRITABLE_TOKEN_ANSWER, f"the OAuth token endpoint answered "
            f"{response.status_code} with an answer sbx cannot rewrite ({error}); it may carry "
            "real tokens, so it is refused, never forwarded", host=site.host, port=site.port,
            method=method, path=path, sbx_reason=Reason.TOKEN_ANSWER_UNREWRITABLE)
        refusal.audited = True
        refusal.explain = f"sbx explain {Reason.TOKEN_ANSWER_UNREWRITABLE}"
        return refusal

    async def _request_body(self, conn: h11.Connection, client: Stream, site: Site,
                            method: str, path: str) -> bytes:
        """A whole (small) request body, bounded."""
        body = b""
        while True:
            event = await next_event(conn, client, self.ctx.limits.idle_timeout)
            if isinstance(event, h11.Data):
                body += bytes(event.data)
                if len(body) > oauth_intercept.TOKEN_BODY_LIMIT:
                    raise failure(413, EgressCode.TOKEN_REQUEST_TOO_LARGE, "a token request is "
                                  f"larger than {oauth_intercept.TOKEN_BODY_LIMIT} bytes",
                                  host=site.host, port=site.port, method=method, path=path)
            elif isinstance(event, h11.EndOfMessage):
                return body
            else:
                raise ConnectionError("the client went away during the request body")

    async def _roundtrip(self, upstream: Upstream, pool: Pool, method: str, target: str,
                         headers: list[tuple[bytes, bytes]],
                         body: bytes) -> tuple[h11.Response, bytes]:
        """One whole request and its whole (bounded, decoded) answer on ``upstream``."""
        site = upstream.site
        up = upstream.conn
        if not any(name == b"host" for name, _ in headers):
            headers.insert(0, (b"host", site.authority.encode("ascii")))
        try:
            await upstream.stream.write(up.send(h11.Request(
                method=method, target=target, headers=headers, http_version="1.1")) or b"")
            await upstream.stream.write(up.send(h11.Data(data=body)) or b"")
            await upstream.stream.write(up.send(h11.EndOfMessage()) or b"")
            idle = self.ctx.limits.idle_timeout
            while True:
                event = await next_event(up, upstream.stream, idle)
                if isinstance(event, h11.Response):
                    response = event
                    break
                if not isinstance(event, h11.InformationalResponse):
                    raise ConnectionError("the origin closed before answering")
            answer = b""
            while True:
                event = await next_event(up, upstream.stream, idle)
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
            pool.drop(upstream)
            raise failure(502, EgressCode.UPSTREAM_FAILED, f"the token endpoint {site.host} "
                          f"failed: {clean(type(error).__name__ + ': ' + str(error), 300)}",
                          host=site.host, port=site.port, method=method) from None
        pool.release(upstream)
        decoder = masking_decoder(response, method, site)
        if decoder is not None:
            try:
                answer = b"".join([*decoder.feed(answer), *decoder.finish()])
            except CorruptBody as error:
                raise failure(502, EgressCode.UPSTREAM_FAILED, "the token endpoint's encoded "
                              f"answer is malformed ({error})", host=site.host, port=site.port,
                              method=method) from None
        return response, answer


__all__ = ["TokenExchange"]
