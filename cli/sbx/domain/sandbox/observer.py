"""The browser observer's one-time URL (examples/browser-observer).

A kit that publishes a ``port@1`` named :data:`OBSERVER_PORT` (noVNC behind a gate inside the
sandbox) gets its URL printed by sbx with a token both sides derive from the run's proxy token,
which only sbx and that sandbox know: ``HMAC-SHA256(proxy token, "sbx-browser-observer")``.
The gate in the sandbox accepts it once and then only the session cookie it set; another user
of the host's loopback, who can connect to the published port, knows neither.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Final
from urllib.parse import unquote, urlsplit

OBSERVER_PORT: Final = "browser-observer"
_CONTEXT: Final = b"sbx-browser-observer"


def observer_token(proxy_url: str | None) -> str | None:
    """The observer token for the run whose sandbox proxy URL is ``proxy_url``."""
    if not proxy_url:
        return None
    password = urlsplit(proxy_url).password
    if not password:
        return None
    return hmac.new(unquote(password).encode("utf-8"), _CONTEXT, hashlib.sha256).hexdigest()[:32]


def observer_url(host: str, port: int, token: str) -> str:
    return f"http://{host}:{port}/?token={token}"


__all__ = ["OBSERVER_PORT", "observer_token", "observer_url"]
