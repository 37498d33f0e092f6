"""Tokens from what a login hands over: a token endpoint's JSON answer (RFC 6749 §5.1, with the
kit's field names), or an agent's own credential file in a shape a kit names or sbx knows."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Mapping
from typing import Any

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.credentials.oauth import (
    KNOWN_SHAPES,
    PLACEHOLDER,
    OAuthConfig,
    Tokens,
)


def tokens_from_response(data: Mapping[str, Any], *, config: OAuthConfig | None = None,
                         previous: Tokens | None = None, now: float | None = None) -> Tokens:
    """Tokens from a token endpoint's JSON answer (RFC 6749 §5.1, field names as the kit's
    ``responseFields`` say); a refresh token or scope the answer leaves out is kept."""
    config = config or OAuthConfig(None, None, (), "", "", None)
    now = time.time() if now is None else now
    access = data.get(config.access_field)
    if not isinstance(access, str) or not access:
        raise ValueError(f"the answer has no {config.access_field}")
    refresh = data.get(config.refresh_field)
    refresh = refresh if isinstance(refresh, str) and refresh else (
        previous.refresh_token if previous else None)
    expires_in = data.get(config.expires_field)
    expires_at: float | None = None
    if (isinstance(expires_in, int | float) and not isinstance(expires_in, bool)) \
            or (isinstance(expires_in, str) and expires_in.isdigit()):
        expires_at = now + float(expires_in)
    scope = data.get("scope")
    scopes = tuple(scope.split()) if isinstance(scope, str) else (
        previous.scopes if previous else ())
    token_type = data.get("token_type")
    tokens = Tokens(access, refresh, expires_at, scopes,
                    token_type if isinstance(token_type, str) and token_type else "Bearer",
                    source=previous.source if previous else "",
                    refreshes=previous.refreshes + 1 if previous else 0,
                    refreshed_at=now if previous else None,
                    account=previous.account if previous else None,
                    identity=previous.identity if previous else None)
    return tokens.with_identity(data.get("id_token"))


def parse_login(text: str, *, structure: Any = None, now: float | None = None) -> Tokens:
    """The tokens ``sbx secret login`` stores, from one of:

    1. the agent's own credential file, read through a kit's ``credentialFile.structure``
       (``structure``): the values at the places of ``{{.AccessToken}}``, ``{{.RefreshToken}}``,
       ``{{.ExpiresAt}}`` (milliseconds, or seconds when small) and ``{{.Scopes}}``; without
       a structure, the shapes of :data:`KNOWN_SHAPES`;
    2. an OAuth token response (``access_token``, ``refresh_token``, ``expires_in``, or
       ``expires_at`` / ``expiry_date`` in seconds or milliseconds, ``scope``), which is also
       the shape of Gemini CLI's ``~/.gemini/oauth_creds.json``.
    Raises ``invalid_argument`` naming what is missing; never a value."""
    try:
        data = json.loads(text)
    except ValueError:
        data = None
        if structure is not None:
            with contextlib.suppress(ValueError):
                import tomllib

                data = tomllib.loads(text)
    if not isinstance(data, Mapping):
        raise SbxError(Reason.INVALID_ARGUMENT, "the login input is not a JSON object",
                       hint="Pipe a token response ({\"access_token\": ..., \"refresh_token\": "
                            "...}) or, with --kit, the agent's own credential file.")
    try:
        shapes = [structure] if structure is not None else [s for _, s in KNOWN_SHAPES]
        for shape in shapes:
            found = extract_by_structure(shape, data)
            if "AccessToken" in found:
                return _tokens_from_found(found)
        if "access_token" in data:
            tokens = tokens_from_response(data, now=now)
            expires_at = data.get("expires_at", data.get("expiry_date"))
            if tokens.expires_at is None and isinstance(expires_at, int | float) \
                    and not isinstance(expires_at, bool):
                tokens = Tokens(tokens.access_token, tokens.refresh_token, _seconds(expires_at),
                                tokens.scopes, tokens.token_type)
            return tokens
    except (ValueError, TypeError):
        pass
    where = "the kit's credentialFile structure" if structure is not None else \
        "an OAuth token response or " + ", ".join(name for name, _ in KNOWN_SHAPES)
    raise SbxError(Reason.INVALID_ARGUMENT,
                   f"no access token found in the login input (read as {where})",
                   hint="Pipe the token response of the provider, or name the kit whose "
                        "credentialFile describes the agent's credential file with --kit.")


def _seconds(value: float) -> float:
    """Epoch milliseconds (what agents such as Claude Code store) or seconds, as seconds."""
    return value / 1000 if value > 10_000_000_000 else float(value)


def _tokens_from_found(found: Mapping[str, Any]) -> Tokens:
    access = found.get("AccessToken")
    refresh = found.get("RefreshToken")
    expires = found.get("ExpiresAt")
    scopes = found.get("Scopes")
    if not isinstance(access, str):
        raise ValueError("no access token")
    return Tokens(
        access, refresh if isinstance(refresh, str) and refresh else None,
        _seconds(float(expires)) if isinstance(expires, int | float)
        and not isinstance(expires, bool) else None,
        tuple(s for s in scopes if isinstance(s, str)) if isinstance(scopes, list) else (),
    ).with_identity(found.get("IdToken"), found.get("AccountId"))


def extract_by_structure(structure: Any, document: Any) -> dict[str, Any]:
    """The values ``document`` holds where ``structure`` has a whole-leaf placeholder."""
    found: dict[str, Any] = {}

    def walk(shape: Any, value: Any) -> None:
        if isinstance(shape, str):
            match = PLACEHOLDER.fullmatch(shape.strip())
            if match:
                found.setdefault(match.group(1), value)
        elif isinstance(shape, Mapping) and isinstance(value, Mapping):
            for key, child in shape.items():
                if key in value:
                    walk(child, value[key])
        elif isinstance(shape, list) and isinstance(value, list):
            for child_shape, child in zip(shape, value, strict=False):
                walk(child_shape, child)

    walk(structure, document)
    return found
