"""ProxyCredentials at the boundary: which secret is injected where (``credential@1``), the
sentinels that never leave, the OAuth access-token swap on resource hosts, and masking every
secret out of the answers of the hosts it went to (across chunk boundaries, in its escaped
forms, after decoding the body)."""

from __future__ import annotations

import base64
import contextlib
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote

import h11

from sbx.base.errors import SbxError
from sbx.base.reasons import EgressCode, Reason
from sbx.domain.credentials.oauthstore import OAuthStore
from sbx.domain.egress import oauth_intercept
from sbx.domain.egress.encoding import BodyDecoder, UnsupportedEncoding, content_codings
from sbx.domain.egress.hosts import host_matches
from sbx.domain.egress.proxycreds import CredentialSpec, Inject
from sbx.proxy.context import ProxyContext
from sbx.proxy.dialing import Site
from sbx.proxy.messages import HOP_BY_HOP, connection_listed
from sbx.proxy.refusals import EgressRefusal, failure, proxy_refusal

# Not forwarded to inject domains: a range of an echo could cut the secret into pieces no mask
# recognises; and bodies must come back in an encoding the proxy can read.
INJECT_DROPPED: Final = frozenset({b"range", b"if-range", b"accept-encoding"})
# Validators of the encoded representation: wrong once the proxy decoded the body.
DECODED_DROPPED: Final = frozenset({b"content-encoding", b"content-length", b"content-md5",
                                    b"digest", b"content-digest", b"repr-digest",
                                    b"accept-ranges", b"content-range"})


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


def escaped_forms(value: bytes) -> list[bytes]:
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


def masking_decoder(response: h11.Response, method: str, site: Site) -> BodyDecoder | None:
    """How to read an inject domain's encoded body (None: identity, or no body); an encoding
    the proxy cannot undo refuses the response before any of it is sent."""
    if method == "HEAD" or response.status_code in (204, 304):
        return None
    codings = content_codings(response.headers)
    if not codings:
        return None
    try:
        return BodyDecoder(codings)
    except UnsupportedEncoding as error:
        refusal = failure(
            502, EgressCode.ENCODED_RESPONSE, f"{site.host} answered with {error}, which sbx "
            "cannot decode to mask the injected secret out of it (it asked for identity); the "
            "response is refused", host=site.host, port=site.port, method=method,
            scheme=site.scheme, sbx_reason=Reason.RESPONSE_UNMASKABLE)
        refusal.audited = True
        refusal.explain = f"sbx explain {Reason.RESPONSE_UNMASKABLE}"
        raise refusal from None


def inbound_headers(headers: Iterable[tuple[bytes, bytes]], masker: Masker | None, *,
                    decoded: bool = False) -> list[tuple[bytes, bytes]]:
    """An answer's headers for the client: hop-by-hop ones dropped, secrets masked, and with
    ``decoded`` the validators of the encoded body dropped (h11 frames the body anew)."""
    headers = list(headers)
    listed = connection_listed(headers)
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


class ProxyCredentials:
    """The run's credentials as the proxy applies them, in the current phase: values of
    ``credential@1`` secrets (``secrets``: service → value; a configured credential without
    a value refuses its requests) and OAuth tokens read from the host store at each use.
    Every real OAuth token seen is kept in ``oauth_seen``: masked in answers, redacted from
    stderr."""

    def __init__(self, ctx: ProxyContext, secrets: Mapping[str, str]) -> None:
        self.ctx = ctx
        config = ctx.config
        self.secrets = dict(secrets)
        self.oauth = oauth_intercept.OAuthRoutes(config.credentials)
        self.sentinels = [c.sentinel.encode("utf-8") for c in config.credentials if c.sentinel]
        self.sentinels += self.oauth.sentinels()
        self.oauth_seen: set[str] = set()
        self._logins: dict[str, Any] = {}  # logins made inside the sandbox (no login_dir)

    def load_oauth(self) -> None:
        """Read every OAuth service's tokens once, so they are redacted from the start."""
        for credential in self.oauth.credentials:
            if credential.oauth is not None:
                with contextlib.suppress(SbxError):
                    self.user_tokens(credential.service)
                    self.sandbox_login(credential.service)

    def redactor(self, report: Callable[[str], None]) -> Callable[[str], None]:
        return lambda message: report(redact(message, self.oauth_seen))

    def intercepts(self, host: str, port: int) -> bool:
        """Whether a tunnel to host:port must be intercepted to set or swap a credential."""
        return bool(self.injections_for(host, port, connect=True)) \
            or self.oauth.intercepts(self.ctx.phase, host, port)

    # -- credential@1 --------------------------------------------------------------------------

    def injections_for(self, host: str, port: int, *, connect: bool = False,
                       ) -> list[tuple[str, Inject]]:
        found: list[tuple[str, Inject]] = []
        seen: set[bytes] = set()
        for credential in self._active():
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

    def _active(self) -> list[CredentialSpec]:
        return [c for c in self.ctx.config.credentials if c.phase == self.ctx.phase]

    def for_request(self, site: Site, method: str, path: str) -> list[Injection]:
        """What to inject into this request (refused over plain HTTP, or without a secret)."""
        injections = self.injections_for(site.host, site.port)
        if injections and site.scheme != "https":
            raise proxy_refusal(
                EgressCode.CREDENTIAL_NEEDS_TLS, f"a credential is injected for {site.host}, "
                "and sbx sends secrets only over HTTPS", host=site.host, port=site.port,
                method=method, path=path, scheme=site.scheme,
                suggestion=f"use https://{site.host}/…")
        return [self._value(service, inject, site.host, site.port, method, path)
                for service, inject in injections]

    def _value(self, service: str, inject: Inject, host: str, port: int, method: str,
               path: str) -> Injection:
        secret = self.secrets.get(service)
        if secret is None:
            refusal = failure(502, Reason.CREDENTIAL_UNBOUND, f"the credential {service!r} "
                              f"injected for {host} has no stored secret (`sbx secret set "
                              f"{service}`), and sbx never sends the sentinel instead",
                              host=host, port=port, method=method, path=path,
                              sbx_reason=Reason.CREDENTIAL_UNBOUND)
            refusal.audited = True
            refusal.suggestion = f"sbx secret set {service}"
            raise refusal
        return Injection(service, inject.header.lower().encode("ascii"),
                         injected_value(inject, secret))

    def mask_needles(self, injections: Sequence[Injection]) -> list[bytes]:
        needles: list[bytes] = []
        for injection in injections:
            secret = self.secrets.get(injection.service, "")
            plain: list[bytes] = []
            if len(secret) >= 4:
                plain.append(secret.encode("utf-8"))
            plain.append(injection.value)
            if injection.value.startswith(b"Basic "):
                plain.append(injection.value[len(b"Basic "):])
            for value in plain:
                needles.extend(escaped_forms(value))
        return needles

    def outbound_headers(self, headers: Sequence[tuple[bytes, bytes]],
                         injections: Sequence[Injection], *, masking: bool = False,
                         ) -> list[tuple[bytes, bytes]]:
        """The request's headers for the origin: hop-by-hop and sentinel-bearing ones
        dropped, the injections set; with ``masking`` (the answer is masked: an inject
        domain, an OAuth host) whole identity bodies are asked for."""
        listed = connection_listed(list(headers))
        replaced = {i.header for i in injections}
        out: list[tuple[bytes, bytes]] = []
        for name, value in headers:
            if name in HOP_BY_HOP or name in listed or name in replaced:
                continue
            if any(sentinel in value for sentinel in self.sentinels):
                continue  # a sentinel never leaves the proxy
            if masking and name in INJECT_DROPPED:
                continue  # whole, readable bodies, so the secret can be masked in the answer
            out.append((name, value))
        if masking:
            out.append((b"accept-encoding", b"identity"))
        out.extend((i.header, i.value) for i in injections)
        return out

    # -- OAuth (sbx.domain.egress.oauth_intercept decides)
    # --------------------------------------------

    @property
    def oauth_store(self) -> Any:
        """The user's own logins (``sbx secret login``), shared by every sandbox."""
        return OAuthStore(self.ctx.config.state_home)

    def user_tokens(self, service: str) -> Any:
        """The user's stored tokens of the service (``sbx.domain.credentials.oauth.Tokens``),
        read at each use so a login or a refresh by another sandbox applies at once; None when
        none are stored or the record is unsafe (said on stderr, never a value)."""
        try:
            tokens = self.oauth_store.get(service)
        except SbxError as error:
            self.ctx.stderr(f"OAuth tokens of {service!r}: {error.message}")
            return None
        if tokens is not None:
            self.oauth_seen.update(tokens.secrets())
        return tokens

    def sandbox_login(self, service: str) -> Any:
        """The tokens of a login made inside this sandbox (kept apart from the user's), or
        None."""
        directory = self.ctx.config.login_dir
        if directory is None:
            tokens = self._logins.get(service)
        else:
            try:
                tokens = OAuthStore.at(directory).get(service)
            except SbxError as error:
                self.ctx.stderr(f"the sandbox's OAuth login of {service!r}: {error.message}")
                return None
        if tokens is not None:
            self.oauth_seen.update(tokens.secrets())
        return tokens

    def keep_sandbox_login(self, service: str, tokens: Any) -> None:
        """Keep a login made inside this sandbox (or its refresh) for this sandbox only."""
        self.oauth_seen.update(tokens.secrets())
        directory = self.ctx.config.login_dir
        if directory is None:
            self._logins[service] = tokens
            return
        OAuthStore.at(directory).set(service, tokens)

    def oauth_tokens(self, service: str) -> Any:
        """The tokens this sandbox uses: its own login when it made one, else the user's."""
        login = self.sandbox_login(service)
        return login if login is not None else self.user_tokens(service)

    def oauth_headers(self, site: Site, method: str, path: str,
                      headers: Sequence[tuple[bytes, bytes]]) -> Sequence[tuple[bytes, bytes]]:
        """On a resource host, the access sentinel swapped for the real access token; a
        credential sbx did not issue refuses the request (403)."""
        credential = self.oauth.resource(self.ctx.phase, site.host, site.port)
        if credential is None:
            return headers
        tokens = self.oauth_tokens(credential.service)
        try:
            out, swapped = oauth_intercept.swap_credential_headers(
                headers, credential, tokens.access_token if tokens is not None else None)
        except oauth_intercept.ForeignCredential as error:
            raise self.not_issued(error, site, method, path) from None
        except oauth_intercept.NoStoredToken:
            raise self.oauth_unbound(credential.service, site, method, path) from None
        if swapped and site.scheme != "https":
            raise proxy_refusal(
                EgressCode.CREDENTIAL_NEEDS_TLS, f"the OAuth token of {credential.service} is "
                f"sent to {site.host} only over HTTPS", host=site.host, port=site.port,
                method=method, path=path, scheme=site.scheme,
                suggestion=f"use https://{site.host}/…")
        return out

    def oauth_needles(self, site: Site) -> list[bytes]:
        """What to mask in the answers of an OAuth host: every real token this proxy knows."""
        services = self.oauth.services_for(self.ctx.phase, site.host, site.port)
        for service in services:
            self.user_tokens(service)
            self.sandbox_login(service)
        return oauth_intercept.mask_needles(sorted(self.oauth_seen)) if services else []

    def not_issued(self, error: oauth_intercept.ForeignCredential, site: Site, method: str,
                   path: str) -> EgressRefusal:
        code = EgressCode.FOREIGN_CREDENTIAL
        return EgressRefusal(
            403, code, f"{error} (sbx forwards only the sentinel it put in the sandbox, "
            "swapped for the token it keeps on the host)", site.host, site.port, method, path,
            site.scheme, code.replace("_", "-"), f"none: refused by the proxy ({code})",
            f"use the credential file or variable sbx put in the sandbox; to use another "
            f"account, log in on the host: sbx secret login {error.service}",
            Reason.CREDENTIAL_NOT_ISSUED, explain=f"sbx explain {Reason.CREDENTIAL_NOT_ISSUED}")

    def oauth_unbound(self, service: str, site: Site, method: str, path: str) -> EgressRefusal:
        refusal = failure(502, Reason.CREDENTIAL_UNBOUND, f"no OAuth token of {service!r} is "
                          f"stored on the host (`sbx secret login {service}`), and sbx never "
                          "sends the sentinel instead", host=site.host, port=site.port,
                          method=method, path=path, scheme=site.scheme,
                          sbx_reason=Reason.CREDENTIAL_UNBOUND)
        refusal.audited = True
        refusal.suggestion = f"sbx secret login {service}"
        return refusal


__all__ = ["DECODED_DROPPED", "INJECT_DROPPED", "ProxyCredentials", "Injection", "Masker",
           "escaped_forms", "inbound_headers", "injected_value", "masking_decoder", "redact"]
