"""The registry's small HTTP client against a loopback server, side by side with requests:
the same status, headers and bytes, the same names for a failed exchange, and requests itself
wherever the two could differ (a redirect, a compressed body, a proxy or a .netrc)."""

from __future__ import annotations

import gzip
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from sbx.seams import registry_http
from sbx.seams.registry import _send
from sbx.seams.registry_http import SWITCH_ENV, Answer, TransportError, usable

BODY = b'{"schemaVersion": 2, "layers": []}' * 50


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    agents: ClassVar[list[str]] = []

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        Handler.agents.append(self.headers.get("User-Agent", ""))
        path = self.path.split("?")[0]
        if path == "/chunked":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for start in range(0, len(BODY), 333):
                piece = BODY[start:start + 333]
                self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")
            return
        if path == "/redirect":
            self.send_response(307)
            self.send_header("Location", "/plain")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if path == "/gzip":
            packed = gzip.compress(BODY)
            self.send_response(200)
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(packed)))
            self.end_headers()
            self.wfile.write(packed)
            return
        if path == "/short":
            self.send_response(200)
            self.send_header("Content-Length", str(len(BODY) + 10))
            self.end_headers()
            self.wfile.write(BODY)
            self.close_connection = True
            return
        self.send_response(404 if path == "/missing" else 200)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Docker-Content-Digest", "sha256:x")
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)


@pytest.fixture
def server() -> Iterator[str]:
    Handler.agents = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {"HOME": str(tmp_path)}


def exchange(url: str, env: dict[str, str]) -> Answer | str:
    try:
        answer = _send("GET", url, env, headers={"Accept": "application/json"},
                       params={"scope": "repository:a/b:pull"})
    except TransportError as error:
        return error.name
    keep = {"content-type", "docker-content-digest"}
    return Answer(answer.status_code, {k: v for k, v in answer.headers.items() if k in keep},
                  answer.content)


@pytest.mark.slow
@pytest.mark.parametrize("path", ["/plain", "/chunked", "/missing", "/redirect", "/gzip",
                                  "/short"])
def test_small_client_answers_as_requests(server: str, env: dict[str, str], path: str) -> None:
    small = exchange(server + path, env)
    by_requests = exchange(server + path, {**env, SWITCH_ENV: "requests"})
    assert small == by_requests
    if path in ("/plain", "/chunked", "/missing"):
        assert Handler.agents[0] == "sbx"  # the small client's own exchange
    if path in ("/redirect", "/gzip"):
        assert Handler.agents[0] == "sbx" and Handler.agents[1].startswith("python-requests")
    assert all(a.startswith("python-requests") for a in Handler.agents[-1:])


def test_a_closed_port_is_named_as_requests_names_it(env: dict[str, str]) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v2/"
    assert exchange(url, env) == exchange(url, {**env, SWITCH_ENV: "requests"}) == \
        "ConnectionError"


def test_a_silent_server_is_a_read_timeout(env: dict[str, str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        monkeypatch.setattr("sbx.seams.registry.TIMEOUT_S", 0.2)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/v2/"
        assert exchange(url, env) == "ReadTimeout"


def test_requests_is_asked_when_it_could_differ(tmp_path: Path) -> None:
    home = {"HOME": str(tmp_path)}
    assert usable(home)
    assert not usable(None) and not usable({})
    assert not usable({**home, SWITCH_ENV: "requests"})
    for name in ("HTTPS_PROXY", "http_proxy", "ALL_PROXY", "NETRC"):
        assert not usable({**home, name: "x"}), name
    assert usable({**home, "NO_PROXY": "*", "REQUESTS_CA_BUNDLE": "/etc/ssl/x.pem"})
    (tmp_path / ".netrc").write_text("machine x login a password b\n", encoding="utf-8")
    assert not usable(home)


def test_schemes_and_hosts_it_does_not_speak() -> None:
    assert registry_http.get("ftp://127.0.0.1/x", {}, timeout=1, env={}) is None
    assert registry_http.get("http://user@127.0.0.1/x", {}, timeout=1, env={}) is None
