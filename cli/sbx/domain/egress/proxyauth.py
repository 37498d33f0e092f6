"""Who may use a run's egress proxy: the sandbox, and nobody else.

Two independent checks, both made by the proxy on every connection and request:

- **Credentials.** ``sbx run`` draws a random token per run (:func:`new_token`, 256 bits; never
  the credential secret) and hands it to the proxy over its owner pipe (never argv, never a
  file) and to the sandbox inside the proxy URL, ``http://sbx:<token>@gateway:port``, in
  ``HTTP_PROXY``/``HTTPS_PROXY`` (both spellings). curl, Python requests/urllib and Node send it
  as ``Proxy-Authorization: Basic ...``; every CONNECT and every plain request must carry it.
  :func:`check_authorization` compares in constant time and says only *missing* or *invalid*.
- **The peer address.** The proxy listens on the gateway of the run's internal network, and
  the host reaches that address too. A connection counts as the sandbox's only when it comes
  from inside the run's network (:func:`peer_allowed`): not from the gateway itself (that is
  where every host process appears to come from when it connects to the gateway address),
  not from the network or broadcast address, and not from any other network (another
  container, another run). Only containers attached to the run's network have such an
  address, and sbx attaches only the sandbox (the install step, then the workload) to it.
  An unprivileged host process cannot take such an address either: with a free-bind socket
  the replies go out on the bridge and the handshake never completes (measured).

Either failure is refused (407 with ``Proxy-Authenticate`` for credentials, 403 for the peer)
with reason ``proxy_client_refused``, audited without the token.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import ipaddress
import re
import secrets
from collections.abc import Sequence
from typing import Final

from sbx.base.reasons import EgressCode

USERNAME: Final = "sbx"
TOKEN_BYTES: Final = 32
MISSING: Final = EgressCode.PROXY_AUTH_MISSING
INVALID: Final = EgressCode.PROXY_AUTH_INVALID
PEER: Final = EgressCode.PEER_NOT_SANDBOX
_TOKEN: Final = re.compile(r"[0-9a-f]{32,128}")


def new_token() -> str:
    """A fresh per-run proxy token: 64 hex digits (safe in a URL's userinfo as is)."""
    return secrets.token_hex(TOKEN_BYTES)


def valid_token(text: str) -> bool:
    return _TOKEN.fullmatch(text) is not None


def proxy_url(host: str, port: int, token: str | None) -> str:
    """The URL the sandbox gets; with a token it carries the run's proxy credentials."""
    shown = f"[{host}]" if ":" in host else host
    userinfo = f"{USERNAME}:{token}@" if token else ""
    return f"http://{userinfo}{shown}:{port}"


def authorization(token: str) -> bytes:
    """The ``Proxy-Authorization`` value a client sends for the URL :func:`proxy_url` gives."""
    return b"Basic " + base64.b64encode(f"{USERNAME}:{token}".encode("ascii"))


def check_authorization(values: Sequence[bytes], token: str) -> str | None:
    """None when the ``Proxy-Authorization`` header values hold the run's credentials, else
    :data:`MISSING` or :data:`INVALID`. One value only; ``Basic`` (any case); the user must be
    ``sbx`` and the password the token, compared in constant time."""
    if not values:
        return MISSING
    if len(values) > 1:
        return INVALID
    scheme, _, rest = values[0].strip().partition(b" ")
    if scheme.lower() != b"basic":
        return INVALID
    try:
        decoded = base64.b64decode(rest.strip(), validate=True)
    except (binascii.Error, ValueError):
        return INVALID
    user, sep, password = decoded.partition(b":")
    expected = token.encode("ascii")
    # Both comparisons always run: the time taken says nothing about which part was wrong.
    good_user = hmac.compare_digest(user, USERNAME.encode("ascii"))
    good_password = hmac.compare_digest(password, expected)
    return None if sep and good_user and good_password else INVALID


def peer_allowed(peer: str, network: str, gateway: str) -> bool:
    """Whether a client at ``peer`` is inside the run's ``network`` (CIDR) and is neither its
    gateway (the host) nor its network or broadcast address."""
    try:
        address = ipaddress.ip_address(peer.split("%", 1)[0])
        net = ipaddress.ip_network(network, strict=False)
        host = ipaddress.ip_address(gateway)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address.version != net.version or address not in net or address == host:
        return False
    edges = (net.network_address, net.broadcast_address) if net.num_addresses > 2 else ()
    return address not in edges


__all__ = ["INVALID", "MISSING", "PEER", "USERNAME", "authorization", "check_authorization",
           "new_token", "peer_allowed", "proxy_url", "valid_token"]
