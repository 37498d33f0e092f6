"""The browser observer's gate: noVNC behind a one-time token, inside the sandbox.

sbx publishes this port on the host's loopback and prints the URL with the token; both derive
it from the run's proxy token (HMAC-SHA256 of "sbx-browser-observer" keyed with it), which no
other user of the host knows. The first request carrying the token gets a session cookie and
is redirected to noVNC; the token is spent, and from then on only that cookie passes. Anything
else gets 403. Behind the gate: websockify (noVNC's files and its WebSocket) on 127.0.0.1.

    python3 observer-gate.py --listen 0.0.0.0:6080 --to 127.0.0.1:6081
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import hmac
import os
import secrets
import socket
import sys
import threading
from urllib.parse import parse_qs, unquote, urlsplit

MAX_HEAD = 64 * 1024
IDLE_S = 3600.0
LANDING = "/vnc.html?autoconnect=true&path=websockify&resize=scale&reconnect=true"
COOKIE = "sbx_observer"


class Gate:
    def __init__(self, token: str) -> None:
        self.token = token
        self.session: str | None = None
        self.lock = threading.Lock()

    def admit(self, target: str, cookies: dict[str, str]) -> tuple[str, str | None]:
        """("pass", None), ("login", session) or ("refuse", why)."""
        query = parse_qs(urlsplit(target).query)
        with self.lock:
            if "token" in query:
                given = query["token"][0]
                if self.session is None and hmac.compare_digest(given, self.token):
                    self.session = secrets.token_hex(32)
                    return "login", self.session
                return "refuse", "this observer URL was used already, or is not this one"
            if self.session is not None and hmac.compare_digest(
                    cookies.get(COOKIE, ""), self.session):
                return "pass", None
        return "refuse", "open the one-time observer URL sbx printed"


def token_from_env() -> str:
    password = urlsplit(os.environ.get("HTTPS_PROXY", "")).password
    if not password:
        sys.exit("observer-gate: HTTPS_PROXY names no proxy token")
    return hmac.new(unquote(password).encode(), b"sbx-browser-observer",
                    hashlib.sha256).hexdigest()[:32]


def answer(client: socket.socket, status: str, headers: list[str], body: str) -> None:
    data = body.encode()
    head = [f"HTTP/1.1 {status}", "Content-Type: text/plain; charset=utf-8",
            f"Content-Length: {len(data)}", "Connection: close", "Cache-Control: no-store",
            *headers]
    client.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + data)


def pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while True:
            chunk = src.recv(65536)
            if not chunk:
                break
            dst.sendall(chunk)
    except OSError:
        pass
    finally:
        for sock, how in ((dst, socket.SHUT_WR), (src, socket.SHUT_RD)):
            with contextlib.suppress(OSError):
                sock.shutdown(how)


def serve(client: socket.socket, gate: Gate, upstream: tuple[str, int]) -> None:
    client.settimeout(IDLE_S)
    try:
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = client.recv(4096)
            if not chunk or len(head) > MAX_HEAD:
                return
            head += chunk
        lines = head.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        target = parts[1] if len(parts) == 3 else "/"
        cookies: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "cookie":
                for pair in value.split(";"):
                    key, _, item = pair.strip().partition("=")
                    cookies[key] = item
        verdict, detail = gate.admit(target, cookies)
        if verdict == "login":
            answer(client, "302 Found", [
                f"Location: {LANDING}",
                f"Set-Cookie: {COOKIE}={detail}; HttpOnly; SameSite=Strict; Path=/"], "")
            return
        if verdict == "refuse":
            answer(client, "403 Forbidden", [], f"sbx browser observer: {detail}\n")
            return
        remote = socket.create_connection(upstream, timeout=30)
        remote.settimeout(IDLE_S)
        remote.sendall(head)
        back = threading.Thread(target=pipe, args=(remote, client), daemon=True)
        back.start()
        pipe(client, remote)
        back.join(IDLE_S)
        remote.close()
    except OSError:
        pass
    finally:
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", default="0.0.0.0:6080")
    parser.add_argument("--to", default="127.0.0.1:6081")
    args = parser.parse_args()
    gate = Gate(token_from_env())
    host, _, port = args.listen.rpartition(":")
    to_host, _, to_port = args.to.rpartition(":")
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((host, int(port)))
    server.listen(16)
    while True:
        client, _ = server.accept()
        threading.Thread(target=serve, args=(client, gate, (to_host, int(to_port))),
                         daemon=True).start()


if __name__ == "__main__":
    main()
