"""Where a ``credential@1`` sends the user's secret: the destination atoms of the surface.

A credential's service name says *which* secret a kit asks for; these atoms say *where* the
proxy presents it, so the gate sees a move of an ``inject`` domain to another allowed host, or
of an OAuth ``tokenEndpoint``/``resourceHosts``, as a widening (one atom per destination, so
dropping one is a narrowing). Each atom starts ``<service> <phase>``:

- ``inject <domain> header <name>`` / ``inject <domain> basic <name>`` (API key injection);
- ``oauth-token <host><path>`` (``/**`` when no path is given: every path of the host);
- ``oauth-resource <host>`` (where the access sentinel becomes the real access token);
- ``oauth-fields <access>,<refresh>,<expires>`` (which answer fields sbx rewrites; a change
  could leave a real token in an answer the sandbox reads);
- ``oauth-passthrough`` (the real token handed to the sandbox).

Names are compared case-insensitively where HTTP does (hosts, header names), by lower-casing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def credential_destinations(service: str, phases: Sequence[str],
                            config: Mapping[str, Any]) -> list[str] | None:
    """The destination atoms of one credential entry; None when a part that names a
    destination does not decode (the caller then keeps the whole config as a service digest,
    which cannot under-state the request)."""
    own = _inject_atoms(config.get("apiKey"))
    oauth = _oauth_atoms(config.get("oauth"))
    if own is None or oauth is None:
        return None
    return [f"{service} {phase} {atom}" for phase in phases for atom in (*own, *oauth)]


def _inject_atoms(api_key: Any) -> list[str] | None:
    if api_key is None:
        return []
    if not isinstance(api_key, Mapping):
        return None
    entries = api_key.get("inject") or []
    if not isinstance(entries, list):
        return None
    atoms = []
    for entry in entries:
        if not isinstance(entry, Mapping) or not isinstance(entry.get("domain"), str):
            return None
        header = entry.get("header") or "Authorization"
        scheme = str(entry.get("scheme") or "header").lower()
        if not isinstance(header, str):
            return None
        kind = "basic" if scheme == "basic" else "header"
        atoms.append(f"inject {entry['domain'].lower()} {kind} {header.lower()}")
    return atoms


def _oauth_atoms(oauth: Any) -> list[str] | None:
    if oauth is None:
        return []
    if not isinstance(oauth, Mapping):
        return None
    atoms = []
    endpoint = oauth.get("tokenEndpoint")
    if endpoint is not None:
        if not isinstance(endpoint, Mapping) or not isinstance(endpoint.get("host"), str):
            return None
        path = endpoint.get("path")
        if path is not None and not isinstance(path, str):
            return None
        atoms.append(f"oauth-token {endpoint['host'].lower()}{path or '/**'}")
    hosts = oauth.get("resourceHosts") or []
    if not isinstance(hosts, list) or not all(isinstance(h, str) for h in hosts):
        return None
    atoms.extend(f"oauth-resource {host.lower()}" for host in hosts)
    fields = oauth.get("responseFields") or {}
    if not isinstance(fields, Mapping):
        return None
    names = [fields.get(key) or default for key, default in (
        ("accessToken", "access_token"), ("refreshToken", "refresh_token"),
        ("expiresIn", "expires_in"))]
    atoms.append("oauth-fields " + ",".join(str(name) for name in names))
    if oauth.get("passthrough") is True:
        atoms.append("oauth-passthrough")
    return atoms


__all__ = ["credential_destinations"]
