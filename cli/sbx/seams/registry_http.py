"""A small HTTP/1.1 client for the registry's bodiless GETs (a manifest, a bearer token), so
that `sbx pull` does not import requests (with urllib3 and charset detection, ~60 ms) for one
or two short exchanges; :mod:`sbx.seams.registry` uses it where it gives exactly what requests
would, and requests everywhere else (a manifest PUT, an identity-token POST).

It answers None — "ask requests" — whenever requests could behave differently: a proxy or a
``.netrc`` in the environment (requests honours both), a redirect, a compressed body.
Transport failures are :class:`TransportError`, named as requests names its own
(``ConnectionError``, ``ConnectTimeout``, ``ReadTimeout``, ``SSLError``,
``ChunkedEncodingError``), because the refusal quotes that name. One connection per request
(``Connection: close``), as the engine socket's client in :mod:`sbx.seams.driver`. HTTPS
verifies against the bundle requests would use: ``REQUESTS_CA_BUNDLE``, else
``CURL_CA_BUNDLE``, else certifi's. ``SBX_REGISTRY_HTTP=requests`` sends every request through
requests.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import urlencode, urlsplit

from sbx.seams.http11 import parse_head, unchunk

SWITCH_ENV: Final = "SBX_REGISTRY_HTTP"  # "requests": every registry request through requests
# What makes requests (trust_env) differ from a plain connection: a proxy, a netrc.
_REQUESTS_ENV: Final = ("http_proxy", "https_proxy", "all_proxy", "netrc")
# The CA bundle requests verifies against, in its order (else certifi's).
_CA_BUNDLE_ENV: Final = ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")
_MAX_HEAD: Final = 64 * 1024


class TransportError(Exception):
    """The exchange failed; ``name`` is what requests would have called it."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


@dataclass(frozen=True)
class Answer:
    """A response as :mod:`sbx.seams.registry` reads it (requests' attribute names)."""

    status_code: int
    headers: Mapping[str, str] = field(default_factory=dict)  # lower-case names
    content: bytes = b""

    def header(self, name: str, default: str = "") -> str:
        return self.headers.get(name.lower(), default)

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")


def usable(env: Mapping[str, str] | None) -> bool:
    """Whether this client gives what requests would for ``env`` (the process's environment,
    injected): no proxy or netrc setting, no ``.netrc`` file in the home."""
    if env is None or env.get(SWITCH_ENV) == "requests":
        return False
    if any(name.lower() in _REQUESTS_ENV and value for name, value in env.items()):
        return False
    home = env.get("HOME")
    if not home:
        return False  # requests would look in the password database's home: not worth it
    return not any(os.path.exists(os.path.join(home, name)) for name in (".netrc", "_netrc"))


def get(url: str, headers: Mapping[str, str], *, timeout: float, env: Mapping[str, str],
        params: Mapping[str, str] | None = None) -> Answer | None:
    """One GET of ``url``; None when requests should make it instead (a redirect, a
    compressed body, a scheme other than http and https)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.username:
        return None
    query = parts.query
    if params:
        query = f"{query}&{urlencode(params)}" if query else urlencode(params)
    target = (parts.path or "/") + (f"?{query}" if query else "")
    default_port = 443 if parts.scheme == "https" else 80
    try:
        port = parts.port or default_port
    except ValueError:
        return None
    host_header = parts.netloc.rsplit("@", 1)[-1]
    if port == default_port and host_header.endswith(f":{port}"):
        host_header = host_header[:-len(f":{port}")]
    lines = [f"GET {target} HTTP/1.1", f"Host: {host_header}", "User-Agent: sbx",
             "Accept-Encoding: identity", "Connection: close"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    bundle = next((env[name] for name in _CA_BUNDLE_ENV if env.get(name)), None)
    sock = _connect(parts.hostname, port, parts.scheme == "https", timeout, bundle)
    try:
        try:
            sock.sendall(request)
            raw = b"".join(_receive(sock))
        except TimeoutError:
            raise TransportError("ReadTimeout") from None
        except OSError as exc:
            raise TransportError(_os_error_name(exc)) from None
    finally:
        sock.close()
    answer = _parse(raw)
    if 300 <= answer.status_code < 400 or answer.header("content-encoding", "identity") \
            not in ("", "identity"):
        return None
    return answer


def _connect(hostname: str, port: int, tls: bool, timeout: float,
             bundle: str | None) -> socket.socket:
    try:
        sock = socket.create_connection((hostname, port), timeout=timeout)
    except TimeoutError:
        raise TransportError("ConnectTimeout") from None
    except OSError:
        raise TransportError("ConnectionError") from None
    if not tls:
        return sock
    import ssl

    try:
        if bundle is None:
            import certifi

            context = ssl.create_default_context(cafile=certifi.where())
        elif os.path.isdir(bundle):
            context = ssl.create_default_context(capath=bundle)
        else:
            context = ssl.create_default_context(cafile=bundle)
        return context.wrap_socket(sock, server_hostname=hostname)
    except TimeoutError:
        sock.close()
        raise TransportError("ConnectTimeout") from None
    except ssl.SSLError:
        sock.close()
        raise TransportError("SSLError") from None
    except OSError:
        sock.close()
        raise TransportError("ConnectionError") from None


def _os_error_name(exc: OSError) -> str:
    import ssl

    return "SSLError" if isinstance(exc, ssl.SSLError) else "ConnectionError"


def _receive(sock: socket.socket) -> Iterator[bytes]:
    while data := sock.recv(65536):
        yield data


def _parse(raw: bytes) -> Answer:
    """The response of a ``Connection: close`` exchange; a malformed one is the transport's
    failure (requests: ``ConnectionError``, from a bad status line or a broken chunk)."""
    head, separator, body = raw.partition(b"\r\n\r\n")
    if not separator or len(head) > _MAX_HEAD:
        raise TransportError("ConnectionError")
    try:
        status, headers = parse_head(head)
    except ValueError:
        raise TransportError("ConnectionError") from None
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = _unchunk(body)
    elif headers.get("content-length", "").isdigit():
        length = int(headers["content-length"])
        if len(body) < length:
            raise TransportError("ChunkedEncodingError")  # requests: an IncompleteRead
        body = body[:length]
    return Answer(status, headers, body)


def _unchunk(data: bytes) -> bytes:
    try:
        return unchunk(data)
    except ValueError:
        raise TransportError("ChunkedEncodingError") from None  # as requests names it


__all__ = ["SWITCH_ENV", "Answer", "TransportError", "get", "usable"]
