"""The OAuth half of ``credential@1`` at the boundary (KIT-SPEC-V3 §3.5): the decisions.

The egress proxy (:mod:`sbx.proxy`) does the I/O; everything it decides about a
credential bound in its OAuth mode is here and in :mod:`sbx.domain.egress.oauth_answers`
(what the sandbox gets back), pure and unit-tested:

- **Which requests are the token endpoint** (:meth:`OAuthRoutes.token_endpoint`): any method
  to ``oauth.tokenEndpoint``'s host, and to its path when declared, matched after the
  policy's own normalisation (:func:`sbx.domain.egress.paths.normalize_path`) the way
  lenient origins read a path: case-insensitively, without ``;`` parameters, with a trailing
  ``/`` or a format suffix (``token.json``). A path the policy cannot normalise (an encoded
  ``/``, ``%00``) on the token host is ambiguous and refused (:class:`AmbiguousEndpoint`), and
  so is one the most lenient origin (decoding twice, or before it cuts off the query) would
  route to the endpoint (``token%252f``, ``token%3f``).
- **What goes upstream for a token request** (:func:`parse_token_request`,
  :func:`upstream_token_body`): a refresh-token grant carrying the refresh *sentinel* is sent
  with the real refresh token; one carrying any other refresh token is a credential sbx did
  not issue and is refused; every other grant (an authorization-code or device-code login
  inside the sandbox) goes as it is. A field named twice (in the body, or in the body and the
  query), a refresh token in the URL, or a refresh grant that also carries another grant's
  fields is ambiguous and refused: sbx and the origin must read the same grant.
- **Resource hosts** (:func:`swap_credential_headers`): on ``resourceHosts`` and the apiKey
  inject domains, the access sentinel in ``Authorization`` (or an apiKey inject header) becomes
  the real access token; a non-empty value there that is not the sentinel is a credential sbx
  did not issue, and the request is refused rather than forwarded with it (Docker's v0.43
  hardening, DOCKER-SBX.md).
- **What is masked** (:func:`mask_needles`): every real token value the proxy knows, in the
  forms an echoing origin may write it back.

No value computed here is ever logged: :class:`ForeignCredential` names the header, not its
value.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import re
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal
from urllib.parse import parse_qsl, quote, unquote, urlencode

from sbx.domain.egress.hosts import host_matches
from sbx.domain.egress.paths import normalize_path, without_parameters
from sbx.domain.egress.proxycreds import CredentialSpec, OAuthSpec
from sbx.seams.host.private import ensure_private_dir

TOKEN_BODY_LIMIT: Final = 64 * 1024  # a token request is a few hundred bytes
TOKEN_RESPONSE_LIMIT: Final = 1024 * 1024  # a token answer (with an id_token) is a few KiB
LOCK_TIMEOUT_S: Final = 30.0
REFRESH_GRANT: Final = "refresh_token"
# Fields of other grants: a refresh grant carrying one is read differently by some origins.
OTHER_GRANT_FIELDS: Final = frozenset({"code", "code_verifier", "device_code", "assertion",
                                       "subject_token", "actor_token", "password", "username"})
_LOCK_POLL_S: Final = 0.05


class ForeignCredential(Exception):
    """A request to an OAuth host carries a credential sbx did not issue (``where``: the
    header or body field; never the value)."""

    def __init__(self, service: str, where: str) -> None:
        super().__init__(f"{where} carries a credential for {service} that sbx did not issue")
        self.service = service
        self.where = where


class NoStoredToken(Exception):
    """The sandbox used a sentinel while the host store holds no token for the service."""

    def __init__(self, service: str) -> None:
        super().__init__(f"no OAuth token of {service} is stored on the host")
        self.service = service


class UnreadableTokenRequest(ValueError):
    """A token-endpoint request sbx cannot read with certainty: its body is neither a form
    nor a JSON object, or a field is named twice, or a grant is mixed with another's."""


class AmbiguousEndpoint(Exception):
    """A request to a token host whose path cannot be normalised: it might be the token
    endpoint to the origin, so it is refused rather than forwarded unread."""

    def __init__(self, service: str) -> None:
        super().__init__(f"the path cannot be read safely on the OAuth token host of {service}")
        self.service = service


# -- routing ---------------------------------------------------------------------------------


def _covers(pattern: str, host: str, port: int, *, connect: bool) -> bool:
    if not host_matches(pattern, host, port):
        return False
    # A port-less host is an HTTPS (443) host: other ports' tunnels stay tunnels.
    return not (connect and ":" not in pattern.rsplit("]", 1)[-1] and port != 443)


def _segment_key(segment: str) -> str:
    """A path segment as a lenient origin compares it: parameters dropped, escapes decoded,
    case folded, trailing dots and spaces gone."""
    return unquote(without_parameters(segment)).lower().rstrip(". ")


def token_path_match(declared: str | None, raw_path: str) -> bool | None:
    """Whether ``raw_path`` (as sent) may be the declared token path to some origin: True,
    False, or None when it cannot be normalised (ambiguous). No declared path: every path."""
    if declared is None:
        return True
    path = normalize_path(raw_path)
    if path is None:
        return None
    want = [_segment_key(s) for s in (normalize_path(declared) or declared).split("/") if s]
    got = [_segment_key(s) for s in path.split("/") if s]
    if _same_endpoint(got, want):
        return True
    # An origin that decodes once more (%252f), or before it cuts the query or at a NUL
    # (%3f, %23, %2500), may route this to the endpoint: ambiguous, never passed on unread.
    return None if _same_endpoint(_loose_keys(path), want) else False


def _same_endpoint(got: list[str], want: list[str]) -> bool:
    if len(got) != len(want) or got[:-1] != want[:-1]:
        return False
    if not want:
        return True
    last, wanted = got[-1], want[-1]
    return last == wanted or last.startswith(wanted + ".")  # a format suffix: token.json


def _loose_keys(path: str) -> list[str]:
    """The segments of a normalised path as the most lenient origin reads them: decoded twice,
    cut at the first ``?``, ``#`` or NUL that decoding reveals, ``\\`` read as ``/``."""
    text = unquote(unquote(path))
    for mark in "?#\x00":
        text = text.split(mark, 1)[0]
    keys: list[str] = []
    for segment in text.replace("\\", "/").split("/"):
        key = without_parameters(segment).lower().rstrip(" ")
        if key == "..":
            if keys:
                keys.pop()
        elif key.rstrip(". "):
            keys.append(key.rstrip(". "))
    return keys


@dataclass(frozen=True)
class OAuthRoutes:
    """The OAuth credentials of one proxy, and which of them a request concerns."""

    credentials: tuple[CredentialSpec, ...]

    def active(self, phase: str) -> list[CredentialSpec]:
        return [c for c in self.credentials if c.oauth is not None and c.phase == phase]

    def token_endpoint(self, phase: str, host: str, port: int,
                       raw_path: str) -> CredentialSpec | None:
        """The credential whose token endpoint this request may be, whatever its method (a
        token request is a POST, RFC 6749 §3.2, but origins that answer other methods must
        not be a way around the rewriting), else None; raises :class:`AmbiguousEndpoint`
        for an unreadable path on a token host."""
        for credential in self.active(phase):
            oauth = credential.oauth
            if oauth is None or oauth.token_host is None \
                    or not _covers(oauth.token_host, host, port, connect=False):
                continue
            match = token_path_match(oauth.token_path, raw_path)
            if match is None:
                raise AmbiguousEndpoint(credential.service)
            if match:
                return credential
        return None

    def resource(self, phase: str, host: str, port: int) -> CredentialSpec | None:
        """The credential whose access token this host takes (resourceHosts + inject domains)."""
        for credential in self.active(phase):
            oauth = credential.oauth
            if oauth is not None and any(_covers(h, host, port, connect=False)
                                         for h in oauth.hosts):
                return credential
        return None

    def services_for(self, phase: str, host: str, port: int) -> list[str]:
        """Services whose real tokens may travel to or from this host (resource or token
        host): its answers are masked for them."""
        found: list[str] = []
        for credential in self.active(phase):
            oauth = credential.oauth
            if oauth is None:
                continue
            hosts = [*oauth.hosts, *([oauth.token_host] if oauth.token_host else [])]
            if any(_covers(h, host, port, connect=False) for h in hosts):
                found.append(credential.service)
        return list(dict.fromkeys(found))

    def intercepts(self, phase: str, host: str, port: int) -> bool:
        """Whether a CONNECT to host:port must be intercepted (TLS terminated) for OAuth: a
        resource host on 443 unless its pattern names a port, the token host on any port."""
        for credential in self.active(phase):
            oauth = credential.oauth
            if oauth is None:
                continue
            if any(_covers(h, host, port, connect=True) for h in oauth.hosts):
                return True
            # The token host on every port its pattern covers: a tunnel to another port of
            # it would carry token answers unread.
            if oauth.token_host and _covers(oauth.token_host, host, port, connect=False):
                return True
        return False

    def sentinels(self) -> list[bytes]:
        return [s.encode("utf-8") for c in self.credentials if c.oauth is not None
                for s in (c.oauth.access_sentinel, c.oauth.refresh_sentinel)]


# -- token requests --------------------------------------------------------------------------


@dataclass(frozen=True)
class TokenRequest:
    kind: Literal["form", "json"]
    fields: tuple[tuple[str, Any], ...]  # the body's, in their order; JSON values as parsed
    query: tuple[tuple[str, str], ...] = ()  # the URL's (never a refresh token)

    def get(self, name: str) -> Any:
        return next((v for k, v in (*self.fields, *self.query) if k == name), None)

    @property
    def grant(self) -> str | None:
        value = self.get("grant_type")
        return value if isinstance(value, str) else None


def parse_token_request(body: bytes, content_type: str | None,
                        query: str | None = None) -> TokenRequest:
    """A token request's fields: JSON when the type says so (Claude Code, Codex send JSON), a
    form otherwise (RFC 6749 §4.1.3, §6); the query's fields are read too (origins merge
    them), and a name given twice anywhere is refused, as is a refresh token in the URL."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise UnreadableTokenRequest("the token request is not UTF-8") from None
    kind = (content_type or "").split(";", 1)[0].strip().lower()
    request: TokenRequest
    if kind.endswith("json") or (not kind and text.lstrip().startswith("{")):
        def pairs_hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
            if len({k for k, _ in pairs}) != len(pairs):
                raise UnreadableTokenRequest("the token request names a field twice")
            return dict(pairs)

        try:
            data = json.loads(text, object_pairs_hook=pairs_hook)
        except UnreadableTokenRequest:
            raise
        except ValueError:
            raise UnreadableTokenRequest("the token request is not JSON") from None
        if not isinstance(data, dict):
            raise UnreadableTokenRequest("the token request is not a JSON object")
        request = TokenRequest("json", tuple(data.items()))
    else:
        request = TokenRequest("form", _form_fields(text, "body"))
    from_query = _form_fields(query or "", "query")
    if any(re.sub(r"[^a-z0-9]", "", k.lower()) == "refreshtoken" for k, _ in from_query):
        raise UnreadableTokenRequest("the token request carries a refresh token in its URL")
    names = [k for k, _ in (*request.fields, *from_query)]
    # Twice, or in two spellings origins may read as one (refresh_token, refreshToken,
    # Refresh-Token, refresh_token[]): sbx could swap one while the origin reads the other.
    squashed = [re.sub(r"[^a-z0-9]", "", k.lower()) for k in names]
    if len(set(squashed)) != len(squashed):
        raise UnreadableTokenRequest("the token request names a field twice")
    merged = TokenRequest(request.kind, request.fields, from_query)
    grant = merged.grant
    if grant is not None and grant != REFRESH_GRANT and grant.strip().lower() == REFRESH_GRANT:
        raise UnreadableTokenRequest("the grant_type is a variant of refresh_token")
    if grant == REFRESH_GRANT and OTHER_GRANT_FIELDS & set(names):
        raise UnreadableTokenRequest("the refresh grant also carries another grant's fields")
    return merged


def _form_fields(text: str, where: str) -> tuple[tuple[str, str], ...]:
    try:
        return tuple(parse_qsl(text, keep_blank_values=True, strict_parsing=bool(text)))
    except ValueError:
        raise UnreadableTokenRequest(f"the token request's {where} is not a form") from None


def upstream_token_body(request: TokenRequest, raw: bytes, oauth: OAuthSpec, service: str,
                        real_refresh: str | None) -> bytes | None:
    """The body to send upstream: the refresh sentinel replaced by ``real_refresh`` for a
    refresh grant; the body as it is for any other grant. None: a refresh grant with the
    sentinel while no real refresh token is stored (the caller answers ``credential_unbound``).
    Raises :class:`ForeignCredential` for a refresh grant with a token sbx did not issue."""
    if request.grant != REFRESH_GRANT:
        return raw
    presented = request.get("refresh_token")
    if presented != oauth.refresh_sentinel:
        raise ForeignCredential(service, "the refresh_token of the token request")
    if real_refresh is None:
        return None
    fields = [(k, real_refresh if k == "refresh_token" else v) for k, v in request.fields]
    if request.kind == "json":
        return json.dumps(dict(fields), separators=(",", ":")).encode("utf-8")
    return urlencode([(k, str(v)) for k, v in fields]).encode("ascii")


# -- resource hosts --------------------------------------------------------------------------


def swap_credential_headers(headers: Sequence[tuple[bytes, bytes]], credential: CredentialSpec,
                            access_token: str | None) -> tuple[list[tuple[bytes, bytes]], bool]:
    """The headers with the access sentinel replaced by ``access_token`` in the credential
    headers (Authorization and the apiKey inject headers), and whether any was swapped.

    A credential header holding anything else (a refresh sentinel, a token of its own) raises
    :class:`ForeignCredential`; a sentinel while no access token is stored (``access_token``
    None) raises :class:`NoStoredToken` — never forwarded as it is. Headers without a
    credential pass."""
    oauth = credential.oauth
    if oauth is None:
        return list(headers), False
    names = {h.lower().encode("ascii") for h in oauth.headers}
    sentinel = oauth.access_sentinel.encode("utf-8")
    out: list[tuple[bytes, bytes]] = []
    swapped = False
    for name, value in headers:
        if name not in names:
            out.append((name, value))
            continue
        if sentinel in value:
            if access_token is None:
                raise NoStoredToken(credential.service)
            out.append((name, value.replace(sentinel, access_token.encode("utf-8"))))
            swapped = True
        elif _credential_value(value):
            raise ForeignCredential(credential.service, f"the {name.decode()} header")
        else:
            out.append((name, value))
    return out, swapped


def _credential_value(value: bytes) -> bool:
    """Whether a credential header holds a credential (not empty, not a bare scheme)."""
    parts = value.strip().split(None, 1)
    return bool(parts) and not (len(parts) == 1 and parts[0].lower() in (b"bearer", b"basic"))


# -- masking ---------------------------------------------------------------------------------


def mask_needles(values: Iterable[str]) -> list[bytes]:
    """Every real token, as it is, percent-encoded (both hex cases) and JSON-escaped."""
    import re

    needles: list[bytes] = []
    for value in values:
        if len(value) < 4:
            continue
        percent = quote(value, safe="")
        needles += [value.encode("utf-8"), percent.encode("ascii"),
                    re.sub(r"%[0-9A-F]{2}", lambda m: m[0].lower(), percent).encode("ascii"),
                    json.dumps(value)[1:-1].encode("ascii")]
    return list(dict.fromkeys(needles))


# -- the host store's lock, from asyncio ------------------------------------------------------


@contextlib.asynccontextmanager
async def store_lock(directory: Path, service: str,
                     timeout: float = LOCK_TIMEOUT_S) -> AsyncIterator[None]:
    """``sbx.domain.credentials.oauthstore.OAuthStore.locked`` without blocking the event loop: two
    sandboxes (or two
    requests of one) refreshing one rotating refresh token take turns, so the second sends the
    token the first one received. Raises TimeoutError after ``timeout`` seconds."""
    ensure_private_dir(directory)
    fd = os.open(directory / f".{service}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the token store of {service} stayed locked") from None
                await asyncio.sleep(_LOCK_POLL_S)
        yield
    finally:
        os.close(fd)


def header_value(headers: Iterable[tuple[bytes, bytes]], name: bytes) -> str | None:
    for key, value in headers:
        if key == name:
            return value.decode("latin-1")
    return None


__all__ = [
    "LOCK_TIMEOUT_S",
    "TOKEN_BODY_LIMIT",
    "TOKEN_RESPONSE_LIMIT",
    "OTHER_GRANT_FIELDS",
    "AmbiguousEndpoint",
    "ForeignCredential",
    "NoStoredToken",
    "OAuthRoutes",
    "TokenRequest",
    "UnreadableTokenRequest",
    "header_value",
    "mask_needles",
    "parse_token_request",
    "store_lock",
    "swap_credential_headers",
    "token_path_match",
    "upstream_token_body",
]
