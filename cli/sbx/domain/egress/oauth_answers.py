"""What the sandbox gets back from an OAuth token endpoint: every answer rewritten, or refused.

The token endpoint is where real tokens are born, so nothing it answers reaches the sandbox
as it came (:func:`rewrite_token_answer`):

- **The body** is read as JSON (an object or an array, whatever the Content-Type says) or as
  a form (``access_token=...&token_type=bearer``, as GitHub answers unless asked for JSON). In
  either, every value under a token-named key (:func:`token_key`: ``access_token``,
  ``refresh_token``, ``id_token``, ``accessToken``, any ``*token`` or ``*_secret``, and the
  kit's ``responseFields``), at any depth, is replaced: the access field by the access
  sentinel, the refresh field by the refresh sentinel, an ``id_token`` by its claims without
  its signature (``unsigned_id_token``), anything else by :data:`WITHHELD`. A duplicate
  key, a body
  that is neither JSON nor a form (HTML, text, a
  bare JSON string) or a body that is not UTF-8 cannot be rewritten with certainty, and the
  whole answer is refused (:class:`UnrewritableAnswer`) — whatever its status, since an
  error answer can carry tokens too.
- **The headers**: cookies and any header whose name says token, secret, session, credential
  or authorization are dropped; a ``Location`` (or ``Content-Location``, ``Refresh``, ``Link``)
  whose query or fragment carries a token-named parameter refuses the answer.
- **What is stored**: only a 2xx answer's top-level tokens (the kit's access and refresh
  fields), for the caller to keep on the host (:attr:`RewrittenAnswer.tokens`); a 2xx answer
  whose access token cannot be stored (no header could carry it) is refused too.

Every replaced value is returned too (:attr:`RewrittenAnswer.withheld`), so the caller masks
it wherever else the answer repeats it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import parse_qsl, urlencode, urlsplit

from sbx.base.errors import SbxError
from sbx.domain.credentials.oauth import WITHHELD_ID_TOKEN, unsigned_id_token
from sbx.domain.credentials.oauthparse import tokens_from_response
from sbx.domain.egress.proxycreds import OAuthSpec

WITHHELD: Final = "sbx-oauth-withheld"  # what a token field other than access/refresh becomes
# Headers never passed from a token endpoint (by name, lower-case, or containing one of these).
DROPPED_HEADERS: Final = frozenset({b"set-cookie", b"set-cookie2"})
DROPPED_WORDS: Final = (b"token", b"secret", b"session", b"credential", b"authorization",
                        b"cookie")
REDIRECT_HEADERS: Final = frozenset({b"location", b"content-location", b"refresh", b"link"})
_SECRET_NAMES: Final = frozenset({"password", "passwd", "apikey", "apikeys", "privatekey",
                                  "bearer", "jwt", "assertion", "session", "sessionid",
                                  "sessionkey", "cookie", "rawkey"})
_SECRET_ENDINGS: Final = ("token", "tokens", "secret", "secrets", "credential", "credentials")
_FORM_KEY: Final = re.compile(r"[A-Za-z0-9_.\-\[\]]{1,128}")


class UnrewritableAnswer(Exception):
    """An answer of the token endpoint sbx cannot rewrite with certainty (``str()``: why,
    never a value); it is refused, never forwarded."""


def _squash(key: str) -> str:
    return re.sub(r"[^a-z0-9]", "", key.lower())


def token_key(key: str, oauth: OAuthSpec | None = None) -> bool:
    """Whether a field named ``key`` holds a credential: ``*token(s)`` in any spelling
    (``access_token``, ``accessToken``, ``id-token``, ``token``), ``*secret(s)``,
    ``*credential(s)``, a password, an API key, a session, or the kit's own access and refresh
    field names."""
    squashed = _squash(key)
    if not squashed:
        return False
    if oauth is not None and squashed in (_squash(oauth.access_field),
                                          _squash(oauth.refresh_field)):
        return True
    return squashed.endswith(_SECRET_ENDINGS) or squashed in _SECRET_NAMES


@dataclass
class RewrittenAnswer:
    body: bytes
    headers: list[tuple[bytes, bytes]]
    tokens: Any = None  # sbx.domain.credentials.oauth.Tokens of a 2xx answer, else None
    withheld: list[str] = field(default_factory=list)  # every value replaced (to mask)


def rewrite_token_answer(status: int, headers: Sequence[tuple[bytes, bytes]], body: bytes,
                         oauth: OAuthSpec, *, previous: Any = None,
                         now: float | None = None) -> RewrittenAnswer:
    """The answer for the sandbox (see the module docstring); raises
    :class:`UnrewritableAnswer`."""
    out_headers = _headers(headers, oauth)
    if not body.strip():
        return RewrittenAnswer(body, out_headers)
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise UnrewritableAnswer("the body is not UTF-8 text") from None
    withheld: list[str] = []
    parsed = _json(text)
    if parsed is not None:
        data = parsed[0]
        rewritten = _walk(data, oauth, withheld)
        new_body = json.dumps(rewritten).encode("utf-8")
    else:
        pairs = _form(text)
        if pairs is None:
            raise UnrewritableAnswer("the body is neither JSON nor a form")
        data = dict(pairs)
        new_body = urlencode([(k, _replace(k, v, oauth, withheld)) for k, v in pairs]
                             ).encode("ascii")
    tokens = None
    if 200 <= status < 300 and isinstance(data, dict) \
            and isinstance(data.get(oauth.access_field), str):
        try:
            tokens = tokens_from_response(data, config=oauth.config(), previous=previous,
                                          now=now)
        except (ValueError, SbxError):
            # A token no header could carry: the sandbox must not think it logged in (its
            # sentinel would go out as someone else's token).
            raise UnrewritableAnswer("its access token cannot be stored") from None
    return RewrittenAnswer(new_body, out_headers, tokens, withheld)


def _headers(headers: Sequence[tuple[bytes, bytes]],
             oauth: OAuthSpec) -> list[tuple[bytes, bytes]]:
    out: list[tuple[bytes, bytes]] = []
    for name, value in headers:
        lowered = name.lower()
        if lowered in DROPPED_HEADERS or any(word in lowered for word in DROPPED_WORDS):
            continue
        if lowered in REDIRECT_HEADERS and _carries_token(value, oauth):
            raise UnrewritableAnswer(f"its {lowered.decode('ascii', 'replace')} header "
                                     "carries a token")
        out.append((name, value))
    return out


def _carries_token(value: bytes, oauth: OAuthSpec) -> bool:
    """Whether a URL-bearing header names a token-named parameter in a query or fragment."""
    text = value.decode("latin-1")
    for url in re.split(r"[\s,;<>]+", text):
        if not url:
            continue
        parts = urlsplit(url.removeprefix("url=").removeprefix("URL="))
        for component in (parts.query, parts.fragment):
            for key, _ in parse_qsl(component, keep_blank_values=True):
                if token_key(key, oauth):
                    return True
    return False


def _json(text: str) -> tuple[Any] | None:
    """The JSON object or array of ``text`` (in a 1-tuple), None when it is not JSON; a
    duplicate key is unrewritable (which of the two would the client read?)."""

    def pairs_hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [k for k, _ in pairs]
        if len(set(keys)) != len(keys):
            raise UnrewritableAnswer("a JSON object names a key twice")
        return dict(pairs)

    try:
        data = json.loads(text, object_pairs_hook=pairs_hook)
    except ValueError:
        return None
    if not isinstance(data, dict | list):
        raise UnrewritableAnswer("the body is a bare JSON value, not an object")
    return (data,)


def _form(text: str) -> list[tuple[str, str]] | None:
    """The fields of a form body, None when ``text`` is not one (every key a plain name)."""
    try:
        pairs = parse_qsl(text.strip(), keep_blank_values=True, strict_parsing=True)
    except ValueError:
        return None
    if not pairs or not all(_FORM_KEY.fullmatch(k) for k, _ in pairs):
        return None
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise UnrewritableAnswer("the form names a field twice")
    return pairs


def _walk(value: Any, oauth: OAuthSpec, withheld: list[str], *, under: str | None = None,
          ) -> Any:
    """``value`` with every string under a token-named key replaced (``under``: the nearest
    token-named key above, whose whole value is withheld, however deep)."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            named = key if token_key(key, oauth) else under  # the nearest name decides
            out[key] = (_replace(named or key, item, oauth, withheld) if isinstance(item, str)
                        else _walk(item, oauth, withheld, under=named))
        return out
    if isinstance(value, list):
        return [_replace(under, item, oauth, withheld) if isinstance(item, str)
                and under is not None else _walk(item, oauth, withheld, under=under)
                for item in value]
    return value


def _replace(key: str, value: str, oauth: OAuthSpec, withheld: list[str]) -> str:
    if not value or not token_key(key, oauth):
        return value
    withheld.append(value)
    squashed = _squash(key)
    if squashed in (_squash(oauth.access_field), "accesstoken"):
        return oauth.access_sentinel
    if squashed in (_squash(oauth.refresh_field), "refreshtoken"):
        return oauth.refresh_sentinel
    if squashed == "idtoken":
        # Its claims without its signature: OpenID clients (Codex compares who the user is
        # across refreshes) read the same identity, and no verifier accepts it as a token.
        return unsigned_id_token(value) or WITHHELD_ID_TOKEN
    return WITHHELD


__all__ = ["DROPPED_HEADERS", "REDIRECT_HEADERS", "WITHHELD", "RewrittenAnswer",
           "UnrewritableAnswer", "rewrite_token_answer", "token_key"]
