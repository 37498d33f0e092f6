"""A local "internet" for egress tests: a test CA, an origin that answers for any host over HTTP
and HTTPS, a tiny upstream forward proxy that sends everything to that origin, and a loopback
listener that records whether anything connected.

Everything listens on 127.0.0.1 only, runs in daemon threads, bounds every socket operation with a
timeout and stops with ``close()`` (the classes are context managers). Nothing here resolves a
name or connects anywhere but loopback: the upstream proxy ignores the host it is asked for and
always dials the origin, which is how a proxy under test "reaches" api.github.com.

The origin records every request it receives (:class:`Seen`: method, target, headers, body size,
the TLS server name) and counts accepted connections, so tests can prove what crossed the
boundary — and that nothing did. Endpoints: ``/bytes/N`` answers N bytes (a large download);
``/status/NNN`` answers that status; ``/echo-headers`` answers the request headers as JSON (what a
hostile echo service would do); ``.../echo-encoded/<codings>[/chunk/<n>]`` (under any prefix)
answers the same JSON with ``Content-Encoding: <codings>`` whatever the request accepted
(``gzip``/``x-gzip`` and ``deflate`` really encode, in order; any other name, e.g. ``br``, is
declared but the bytes stay as they are, as a hostile origin would send them), chunked in
``n``-byte chunks when asked; anything else answers ``{"method", "path", "headers", "host",
"sni", "body_length"}`` as JSON.
A test can route one host name to a handler of its own (:meth:`Origin.route`, e.g. the agents'
APIs in ``tests/support/agent_api.py``); every other host keeps the endpoints above.
Every TLS server name a client offered (handshake finished or not) is kept:
:meth:`Origin.server_names`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import gzip
import ipaddress
import json
import socket
import ssl
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

TEST_HOSTS = ("api.github.com", "github.com", "uploads.github.com", "example.com",
              "www.example.com", "example.net", "example.org", "install.example.net",
              "localhost",
              # The agents' hosts (tests/support/agent_api.py answers for them).
              "api.anthropic.com", "platform.claude.com", "console.anthropic.com",
              "api.openai.com", "auth.openai.com", "chatgpt.com",
              "generativelanguage.googleapis.com", "oauth2.googleapis.com",
              "cloudcode-pa.googleapis.com", "www.googleapis.com",
              "accounts.google.com", "claude.com",
              "registry.npmjs.org")
TEST_ADDRESSES = ("127.0.0.1", "::1")
SOCKET_TIMEOUT = 30.0
_CHUNK = b"0123456789abcdef" * 65536  # 1 MiB


# -- the test PKI ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TestPKI:
    """A CA and one leaf for every test host (SANs), written under ``directory``."""

    directory: Path
    ca_file: Path  # the CA certificate (PEM): what clients and the proxy trust
    cert_file: Path  # the leaf followed by the CA
    key_file: Path

    __test__ = False  # not a pytest test class

    @classmethod
    def create(cls, directory: Path, hosts: Sequence[str] = TEST_HOSTS,
               addresses: Sequence[str] = TEST_ADDRESSES) -> TestPKI:
        directory.mkdir(parents=True, exist_ok=True)
        now = dt.datetime.now(dt.UTC)
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sbx test origin CA")])
        ca_cert = (
            x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
            .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(days=1))
            .not_valid_after(now + dt.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, key_cert_sign=True, crl_sign=True,
                                         encipher_only=False, decipher_only=False),
                           critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
                           critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        key = ec.generate_private_key(ec.SECP256R1())
        names: list[x509.GeneralName] = [x509.DNSName(h) for h in hosts]
        names += [x509.IPAddress(ipaddress.ip_address(a)) for a in addresses]
        leaf = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
            .issuer_name(ca_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(days=1))
            .not_valid_after(now + dt.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        pem = serialization.Encoding.PEM
        ca_file = directory / "test-ca.pem"
        cert_file = directory / "origin-chain.pem"
        key_file = directory / "origin-key.pem"
        ca_file.write_bytes(ca_cert.public_bytes(pem))
        cert_file.write_bytes(leaf.public_bytes(pem) + ca_cert.public_bytes(pem))
        key_file.write_bytes(key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
        key_file.chmod(0o600)
        return cls(directory, ca_file, cert_file, key_file)

    def server_context(self) -> ssl.SSLContext:
        """The origin's context; the server name a client sent lands on the socket's
        ``sbx_sni`` attribute."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert_file, self.key_file)
        context.set_alpn_protocols(["http/1.1"])

        def remember(sock: Any, name: str | None, _ctx: ssl.SSLContext) -> None:
            sock.sbx_sni = name

        context.sni_callback = remember
        return context


# -- small threaded servers ------------------------------------------------------------------------


class _Server:
    """Accepts on 127.0.0.1 in a daemon thread; one daemon thread per connection."""

    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(128)
        self._sock.settimeout(0.2)
        self.port: int = self._sock.getsockname()[1]
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.connections = 0
        self._open: set[socket.socket] = set()
        self._thread = threading.Thread(target=self._accept_loop, daemon=True)
        self._thread.start()

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self.connections += 1
                self._open.add(conn)
            conn.settimeout(SOCKET_TIMEOUT)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._run, args=(conn,), daemon=True).start()

    def _run(self, conn: socket.socket) -> None:
        try:
            self.handle(conn)
        except (OSError, ValueError, ssl.SSLError):
            pass
        finally:
            with self._lock:
                self._open.discard(conn)
            with contextlib.suppress(OSError):
                conn.close()

    def handle(self, conn: socket.socket) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self._stop.set()
        self._sock.close()
        self._thread.join(timeout=5)
        with self._lock:
            for conn in list(self._open):
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _read_head(rfile: Any, limit: int = 65536) -> list[bytes] | None:
    """The request/status line and header lines, or None at EOF before anything."""
    lines: list[bytes] = []
    total = 0
    while True:
        line = rfile.readline(limit + 1)
        if not line:
            return lines if lines else None
        total += len(line)
        if total > limit:
            raise ValueError("head too large")
        if line in (b"\r\n", b"\n"):
            return lines
        lines.append(line.rstrip(b"\r\n"))


def _headers(lines: Sequence[bytes]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for line in lines:
        name, _, value = line.partition(b":")
        out.append((name.decode("latin-1").strip(), value.decode("latin-1").strip()))
    return out


def _get(headers: Sequence[tuple[str, str]], name: str) -> str | None:
    for key, value in headers:
        if key.lower() == name.lower():
            return value
    return None


def _read_body(rfile: Any, headers: Sequence[tuple[str, str]]) -> bytes:
    if (_get(headers, "transfer-encoding") or "").lower() == "chunked":
        body = b""
        while True:
            size = int(rfile.readline(100).split(b";")[0], 16)
            if size == 0:
                while rfile.readline(65536) not in (b"\r\n", b"\n", b""):
                    pass
                return body
            body += rfile.read(size)
            rfile.readline(10)
    length = int(_get(headers, "content-length") or "0")
    return rfile.read(length) if length else b""


@dataclass(frozen=True)
class Seen:
    """One request as the origin received it."""

    method: str
    target: str
    headers: list[tuple[str, str]]
    body: bytes
    tls: bool
    sni: str | None

    def header(self, name: str) -> str | None:
        return _get(self.headers, name)

    def header_values(self, name: str) -> list[str]:
        return [v for k, v in self.headers if k.lower() == name.lower()]

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0]


@dataclass(frozen=True)
class Reply:
    """What a routed handler answers: status, headers (no Content-Length) and the whole body
    (with ``chunk``, sent chunked in pieces of that many bytes)."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes
    chunk: int = 0


Route = Callable[[Seen], "Reply | None"]


class _OriginListener(_Server):
    def __init__(self, origin: Origin, tls: ssl.SSLContext | None) -> None:
        self.origin = origin
        self.tls = tls
        super().__init__()

    def handle(self, conn: socket.socket) -> None:
        stream: socket.socket = conn
        sni: str | None = None
        if self.tls is not None:
            stream = self.tls.wrap_socket(conn, server_side=True)
            sni = getattr(stream, "sbx_sni", None)
        rfile = stream.makefile("rb")
        try:
            self._serve(stream, rfile, sni)
        finally:
            rfile.close()
            if stream is not conn:
                stream.close()

    def _serve(self, stream: socket.socket, rfile: Any, sni: str | None) -> None:
        while True:
            lines = _read_head(rfile)
            if not lines:
                return
            method, target, _version = lines[0].decode("latin-1").split(" ", 2)
            headers = _headers(lines[1:])
            body = _read_body(rfile, headers)
            seen = Seen(method, target, headers, body, self.tls is not None, sni)
            self.origin.record(seen)
            if not self.origin.respond(stream, seen):
                return
            if (_get(headers, "connection") or "").lower() == "close":
                return


class Origin:
    """The origin server: HTTP on ``http_port``, HTTPS on ``https_port`` (127.0.0.1), any host."""

    def __init__(self, pki: TestPKI) -> None:
        self.pki = pki
        self._lock = threading.Lock()
        self.seen: list[Seen] = []
        self.names: list[str | None] = []  # every TLS server name offered, in order
        self.routes: dict[str, Route] = {}  # host name -> its handler (see route())
        self.http = _OriginListener(self, None)
        context = pki.server_context()

        def remember(sock: Any, name: str | None, _ctx: ssl.SSLContext) -> None:
            sock.sbx_sni = name
            with self._lock:
                self.names.append(name)

        context.sni_callback = remember
        self.https = _OriginListener(self, context)

    @property
    def http_port(self) -> int:
        return self.http.port

    @property
    def https_port(self) -> int:
        return self.https.port

    @property
    def connections(self) -> int:
        return self.http.connections + self.https.connections

    def record(self, seen: Seen) -> None:
        with self._lock:
            self.seen.append(seen)

    def requests(self) -> list[Seen]:
        with self._lock:
            return list(self.seen)

    def clear(self) -> None:
        with self._lock:
            self.seen.clear()
            self.names.clear()

    def server_names(self) -> list[str | None]:
        """The TLS server names clients offered since the last :meth:`clear`."""
        with self._lock:
            return list(self.names)

    def route(self, host: str, handler: Route) -> None:
        """Answer requests for ``host`` (the Host header, without a port) with ``handler``;
        when it returns None the default endpoints answer."""
        with self._lock:
            self.routes[host.lower()] = handler

    def unroute(self, host: str) -> None:
        with self._lock:
            self.routes.pop(host.lower(), None)

    def respond(self, stream: socket.socket, seen: Seen) -> bool:
        host = (seen.header("host") or "").rsplit(":", 1)[0].strip("[]").lower()
        with self._lock:
            handler = self.routes.get(host)
        reply = handler(seen) if handler is not None else None
        if reply is not None:
            reply_head = f"HTTP/1.1 {reply.status} Test\r\n" + "".join(
                f"{name}: {value}\r\n" for name, value in reply.headers)
            if reply.chunk:
                stream.sendall((reply_head + "Transfer-Encoding: chunked\r\n\r\n")
                               .encode("latin-1"))
                for start in range(0, len(reply.body), reply.chunk):
                    piece = reply.body[start:start + reply.chunk]
                    stream.sendall(f"{len(piece):x}\r\n".encode("ascii") + piece + b"\r\n")
                    time.sleep(0.001)  # separate segments, so the proxy reads them apart
                stream.sendall(b"0\r\n\r\n")
                return True
            reply_head += f"Content-Length: {len(reply.body)}\r\n\r\n"
            stream.sendall(reply_head.encode("latin-1") + (b"" if seen.method == "HEAD"
                                                           else reply.body))
            return True
        path = seen.path
        if "://" in path:  # absolute-form (through a proxy that forwarded it as is)
            path = "/" + path.split("://", 1)[1].partition("/")[2]
        if path.startswith("/bytes/"):
            size = int(path.rsplit("/", 1)[1])
            head = (f"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                    f"Content-Length: {size}\r\n\r\n").encode("ascii")
            stream.sendall(head)
            if seen.method == "HEAD":
                return True
            remaining = size
            while remaining > 0:
                piece = _CHUNK if remaining >= len(_CHUNK) else _CHUNK[:remaining]
                stream.sendall(piece)
                remaining -= len(piece)
            return True
        if "/echo-encoded/" in path:
            return self._encoded_echo(stream, seen, path)
        status = 200
        if path.startswith("/status/"):
            status = int(path.rsplit("/", 1)[1])
        if path == "/echo-headers":
            payload: Any = dict(seen.headers)
        else:
            payload = {"method": seen.method, "path": seen.target, "headers": seen.headers,
                       "host": seen.header("host"), "sni": seen.sni,
                       "body_length": len(seen.body)}
        body = json.dumps(payload).encode("utf-8")
        extra = ""
        if path == "/set-header-echo":
            extra = f"X-Echo-Authorization: {seen.header('authorization') or ''}\r\n"
        head = (f"HTTP/1.1 {status} Test\r\nContent-Type: application/json\r\n{extra}"
                f"Content-Length: {len(body)}\r\n\r\n").encode("latin-1")
        stream.sendall(head + (b"" if seen.method == "HEAD" else body))
        return True

    @staticmethod
    def _encoded_echo(stream: socket.socket, seen: Seen, path: str) -> bool:
        """The request headers as JSON, content-coded as the path says (see the module doc)."""
        parts = path.split("/echo-encoded/", 1)[1].split("/")
        codings = [c for c in parts[0].split(",") if c]
        chunk = int(parts[2]) if len(parts) >= 3 and parts[1] == "chunk" else 0
        body = json.dumps(dict(seen.headers)).encode("utf-8")
        for coding in codings:
            if coding in ("gzip", "x-gzip"):
                body = gzip.compress(body)
            elif coding == "deflate":
                body = zlib.compress(body)
        head = "HTTP/1.1 200 Test\r\nContent-Type: application/json\r\n"
        if codings:
            head += f"Content-Encoding: {', '.join(codings)}\r\n"
        if not chunk:
            stream.sendall((head + f"Content-Length: {len(body)}\r\n\r\n").encode("latin-1")
                           + (b"" if seen.method == "HEAD" else body))
            return True
        stream.sendall((head + "Transfer-Encoding: chunked\r\n\r\n").encode("latin-1"))
        if seen.method != "HEAD":
            for start in range(0, len(body), chunk):
                piece = body[start:start + chunk]
                stream.sendall(f"{len(piece):x}\r\n".encode("ascii") + piece + b"\r\n")
                time.sleep(0.001)  # separate segments, so the proxy reads them separately
            stream.sendall(b"0\r\n\r\n")
        return True

    def close(self) -> None:
        self.http.close()
        self.https.close()

    def __enter__(self) -> Origin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- the upstream ("corporate") proxy --------------------------------------------------------------


def _relay(a: socket.socket, b: socket.socket) -> None:
    """Copy bytes both ways until both directions end (bounded by the sockets' timeouts)."""

    def copy(src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(262144)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)

    other = threading.Thread(target=copy, args=(b, a), daemon=True)
    other.start()
    copy(a, b)
    other.join(timeout=SOCKET_TIMEOUT)


def _relay_one_thread(a: ssl.SSLSocket, b: socket.socket) -> None:
    """The same for a TLS socket, from one thread: an SSL object must never be read and written
    by two threads at once. Ends at the first EOF (TLS has no half-close) or after a quiet
    SOCKET_TIMEOUT."""
    import select

    while True:
        ready = [a] if a.pending() else select.select([a, b], [], [], SOCKET_TIMEOUT)[0]
        if not ready:
            return
        for src in ready:
            dst = b if src is a else a
            try:
                data = src.recv(262144)
                if not data:
                    return
                dst.sendall(data)
            except (OSError, ssl.SSLError):
                return


@dataclass
class UpstreamRecord:
    method: str
    target: str
    headers: list[tuple[str, str]] = field(default_factory=list)


class UpstreamProxy(_Server):
    """Sends every CONNECT to the origin's HTTPS port (or a loopback port routed for that
    ``host:port`` by :meth:`tunnel`) and every absolute-form request to its HTTP port,
    whatever host was asked for. Records what it was asked."""

    def __init__(self, origin: Origin, tls: ssl.SSLContext | None = None) -> None:
        self.origin = origin
        self.tunnels: dict[str, int] = {}  # CONNECT target -> a loopback port
        self.tls = tls  # an https:// proxy: TLS first (the test PKI's leaf covers 127.0.0.1)
        self._records_lock = threading.Lock()
        self.records: list[UpstreamRecord] = []
        super().__init__()

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def targets(self) -> list[str]:
        with self._records_lock:
            return [r.target for r in self.records]

    def tunnel(self, target: str, port: int | None) -> None:
        """CONNECT ``target`` (``host:port``) reaches 127.0.0.1:``port`` (None: the origin)."""
        if port is None:
            self.tunnels.pop(target, None)
        else:
            self.tunnels[target] = port

    def handle(self, conn: socket.socket) -> None:
        if self.tls is None:
            self._proxy(conn)
            return
        with self.tls.wrap_socket(conn, server_side=True) as tls:
            self._proxy(tls)

    def _relay(self, conn: socket.socket, out: socket.socket) -> None:
        if isinstance(conn, ssl.SSLSocket):
            _relay_one_thread(conn, out)
        else:
            _relay(conn, out)

    def _proxy(self, conn: socket.socket) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk or len(data) > 65536:
                return
            data += chunk
        head, _, pending = data.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        method, target, version = lines[0].decode("latin-1").split(" ", 2)
        headers = _headers(lines[1:])
        with self._records_lock:
            self.records.append(UpstreamRecord(method, target, headers))
        if method == "CONNECT":
            port = self.tunnels.get(target, self.origin.https_port)
            out = socket.create_connection(("127.0.0.1", port), timeout=SOCKET_TIMEOUT)
            conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        else:
            out = socket.create_connection(("127.0.0.1", self.origin.http_port),
                                           timeout=SOCKET_TIMEOUT)
            head = f"{method} {target} {version}\r\n".encode("latin-1")
            head += b"".join(line + b"\r\n" for line in lines[1:]) + b"\r\n"
            out.sendall(head)
        out.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if pending:
            out.sendall(pending)
        try:
            self._relay(conn, out)
        finally:
            out.close()


# -- a listener that proves nothing connected ------------------------------------------------------


class LoopbackListener(_Server):
    """Accepts and immediately closes; ``connections`` counts who came."""

    def handle(self, conn: socket.socket) -> None:
        return


@contextlib.contextmanager
def local_internet(directory: Path) -> Iterator[tuple[TestPKI, Origin, UpstreamProxy]]:
    pki = TestPKI.create(directory)
    with Origin(pki) as origin, UpstreamProxy(origin) as upstream:
        yield pki, origin, upstream


# -- a client that talks to a proxy ----------------------------------------------------------------


@dataclass
class Response:
    status: int
    reason: str
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> str | None:
        return _get(self.headers, name)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def json(self) -> Any:
        return json.loads(self.body)


def read_response(rfile: Any, *, head_only: bool = False) -> Response:
    """One HTTP/1.1 response from a buffered binary file (Content-Length, chunked or close)."""
    lines = _read_head(rfile)
    if not lines:
        raise ConnectionError("the connection closed before a response")
    _version, status, *rest = lines[0].decode("latin-1").split(" ", 2)
    headers = _headers(lines[1:])
    if head_only or int(status) in (101, 204, 304) or 100 <= int(status) < 200:
        return Response(int(status), rest[0] if rest else "", headers, b"")
    if (_get(headers, "transfer-encoding") or "").lower() == "chunked" \
            or _get(headers, "content-length") is not None:
        body = _read_body(rfile, headers)
    else:
        body = rfile.read()
    return Response(int(status), rest[0] if rest else "", headers, body)


def _request_bytes(method: str, target: str, host: str | None,
                   headers: Sequence[tuple[str, str]], body: bytes) -> bytes:
    lines = [f"{method} {target} HTTP/1.1"]
    if host is not None:
        lines.append(f"Host: {host}")
    lines += [f"{k}: {v}" for k, v in headers]
    if body or method in ("POST", "PUT", "PATCH"):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class ProxyClient:
    """Speaks to a forward proxy on 127.0.0.1 the way curl would, with full control over the
    CONNECT target, the TLS server name and the Host header."""

    def __init__(self, proxy_port: int, ca_files: Sequence[Path] = (),
                 timeout: float = 15.0, *, proxy_auth: str | None = None,
                 proxy_host: str = "127.0.0.1") -> None:
        self.proxy_port = proxy_port
        self.proxy_host = proxy_host
        self.ca_files = list(ca_files)  # trusted: the sbx CA (intercepted) + the test CA
        self.timeout = timeout
        # The Proxy-Authorization value sent on every CONNECT and plain request (None: none).
        self.proxy_auth = proxy_auth

    def _auth(self) -> list[tuple[str, str]]:
        return [] if self.proxy_auth is None else [("Proxy-Authorization", self.proxy_auth)]

    def _dial(self) -> socket.socket:
        sock = socket.create_connection((self.proxy_host, self.proxy_port),
                                        timeout=self.timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def connect(self, host: str, port: int = 443) -> tuple[socket.socket | None, Response]:
        """Send CONNECT; the open socket on 2xx (the caller closes it), else None."""
        sock = self._dial()
        authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        extra = "".join(f"{k}: {v}\r\n" for k, v in self._auth())
        sock.sendall(f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n{extra}\r\n"
                     .encode("latin-1"))
        rfile = sock.makefile("rb", buffering=0)
        head = b""
        while b"\r\n\r\n" not in head:
            byte = rfile.read(1)
            if not byte:
                sock.close()
                raise ConnectionError("the proxy closed the connection after CONNECT")
            head += byte
        lines = head[:-4].split(b"\r\n")
        _version, status, *rest = lines[0].decode("latin-1").split(" ", 2)
        headers = _headers(lines[1:])
        if 200 <= int(status) < 300:
            return sock, Response(int(status), rest[0] if rest else "", headers, b"")
        length = int(_get(headers, "content-length") or "0")
        body = b""
        while len(body) < length:
            chunk = sock.recv(length - len(body))
            if not chunk:
                break
            body += chunk
        sock.close()
        return None, Response(int(status), rest[0] if rest else "", headers, body)

    def tls(self, sock: socket.socket, server_name: str | None) -> ssl.SSLSocket:
        context = ssl.create_default_context()
        for ca_file in self.ca_files:
            context.load_verify_locations(cafile=str(ca_file))
        if server_name is None:
            context.check_hostname = False
        return context.wrap_socket(sock, server_hostname=server_name)

    def https(self, host: str, requests: Sequence[tuple[str, str]], *, port: int = 443,
              headers: Sequence[tuple[str, str]] = (), body: bytes = b"",
              server_name: str | None = "", host_header: str | None = "",
              ) -> list[Response]:
        """CONNECT to host:port, TLS (SNI ``server_name``, default the host), then each
        (method, target) on one keep-alive connection. A refused CONNECT is returned as the only
        response."""
        sock, answer = self.connect(host, port)
        if sock is None:
            return [answer]
        name = host if server_name == "" else server_name
        shown = host if port == 443 else f"{host}:{port}"
        with self.tls(sock, name) as tls:
            rfile = tls.makefile("rb")
            out: list[Response] = []
            for method, target in requests:
                tls.sendall(_request_bytes(method, target,
                                           shown if host_header == "" else host_header,
                                           headers, body))
                response = read_response(rfile, head_only=method == "HEAD")
                out.append(response)
                if response.header("connection") == "close":
                    break
            rfile.close()
            return out

    def http(self, method: str, url: str, *, headers: Sequence[tuple[str, str]] = (),
             body: bytes = b"", host_header: str | None = "") -> Response:
        """One absolute-form plain HTTP request through the proxy."""
        with self._dial() as sock:
            authority = url.split("://", 1)[1].split("/", 1)[0]
            sock.sendall(_request_bytes(method, url,
                                        authority if host_header == "" else host_header,
                                        [*self._auth(), *headers], body))
            with sock.makefile("rb") as rfile:
                return read_response(rfile, head_only=method == "HEAD")


# -- the proxy under test, as a subprocess ---------------------------------------------------------


class ProxyProcess:
    """``python -m sbx.proxy CONFIG RUN_ID`` started the way ``sbx run`` starts it:
    stdin
    is the owner's pipe (its first line the client token, empty for none; the pipe stays open
    until :meth:`stop`), the ready line is read from stdout (bounded wait); stdout and stderr
    are kept for inspection. :meth:`client` sends the token's Proxy-Authorization."""

    def __init__(self, config: Any, config_path: Path, *, ready_timeout: float = 20.0,
                 client_token: str | None = None,
                 python_args: Sequence[str] = ("-m", "sbx.proxy")) -> None:
        import os
        import select
        import subprocess
        import sys
        import time

        self.config = config
        config.write(config_path)
        self.config_path = config_path
        env = {k: v for k, v in os.environ.items() if not k.startswith("SBX_")}
        self.client_token = client_token
        self.proc = subprocess.Popen(
            [sys.executable, *python_args, str(config_path), config.run_id],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{client_token or ''}\n".encode("ascii"))
        self.proc.stdin.flush()
        deadline = time.monotonic() + ready_timeout
        line = b""
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self.proc.stdout], [], [], max(0.0, left))
            if not ready:
                self.proc.kill()
                raise TimeoutError(f"the proxy did not get ready in {ready_timeout} s")
            byte = os.read(self.proc.stdout.fileno(), 1)
            if not byte:
                _, err = self.proc.communicate(timeout=10)
                raise RuntimeError(f"the proxy exited: {err.decode(errors='replace')}")
            line += byte
        from sbx.seams.host.handshake import PROXY

        self.ready_line = line.decode()
        numbers = PROXY.parse_ready(line)
        if numbers is None:
            self.proc.kill()
            raise RuntimeError(f"the proxy's first line is not its ready line: {line!r}")
        self.port = numbers[0]
        self.stdout = b""
        self.stderr = b""

    @property
    def ca_file(self) -> Path:
        return Path(self.config.state_home) / "ca" / "ca.pem"

    def client(self, timeout: float = 15.0) -> ProxyClient:
        extra = self.config.upstream_ca_file
        return ProxyClient(self.port, [self.ca_file, *([extra] if extra else [])], timeout,
                           proxy_auth=basic_proxy_auth(self.client_token))

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def audit(self) -> list[dict[str, Any]]:
        path = Path(self.config.audit_log)
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def denials(self) -> list[dict[str, Any]]:
        return [e["details"] for e in self.audit() if e.get("event_type") == "egress_denied"]

    def stop(self, timeout: float = 10.0) -> int:
        import signal as signals
        import subprocess

        if self.proc.poll() is None:
            self.proc.send_signal(signals.SIGTERM)
        try:  # communicate() also closes the owner's pipe (stdin)
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate(timeout=timeout)
        self.stdout += out
        self.stderr += err
        return self.proc.returncode

    def __enter__(self) -> ProxyProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def basic_proxy_auth(token: str | None, username: str = "sbx") -> str | None:
    """The Proxy-Authorization value a client sends for ``http://sbx:<token>@...`` (None
    without a token)."""
    if token is None:
        return None
    import base64

    return "Basic " + base64.b64encode(f"{username}:{token}".encode()).decode("ascii")


__all__ = ["TEST_HOSTS", "Internet", "LoopbackListener", "Origin", "ProxyClient", "ProxyProcess",
           "Reply", "Response", "Route", "Seen", "TestPKI", "UpstreamProxy", "UpstreamRecord",
           "basic_proxy_auth", "local_internet", "read_response"]


class Internet:
    """The tests' local "internet": a test CA, an origin answering for any host, and the
    upstream ("corporate") proxy that reaches it — what sbx's upstream_proxy setting points at."""

    def __init__(self, directory: Path) -> None:
        self.pki = TestPKI.create(directory)
        self.origin = Origin(self.pki)
        self.upstream = UpstreamProxy(self.origin)

    def close(self) -> None:
        self.upstream.close()
        self.origin.close()

    def sbx_config(self, path: Path) -> Path:
        """A config file that makes sbx reach this internet through its upstream proxy."""
        path.write_text(f'[network]\nupstream_proxy = "{self.upstream.url}"\n'
                        f'upstream_ca_file = "{self.pki.ca_file}"\n', encoding="utf-8")
        return path
