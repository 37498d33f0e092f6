"""The browser's way out: a forwarder on the sandbox's own loopback in front of sbx's proxy.

Chromium takes no credentials in --proxy-server, and sbx's egress proxy admits only requests
that carry the run's proxy token (Proxy-Authorization, as HTTPS_PROXY spells it for curl). This
forwarder listens on 127.0.0.1 inside the sandbox, adds that header to the head of each
request (a CONNECT for HTTPS, or one plain HTTP request per connection), and then relays bytes
as they are. It decides nothing: sbx's proxy applies the policy, intercepts and refuses.

    python3 browser-proxy.py --listen 127.0.0.1:3128   (the upstream is $HTTPS_PROXY)
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import os
import socket
import sys
import threading
from urllib.parse import unquote, urlsplit

MAX_HEAD = 64 * 1024
IDLE_S = 300.0


def upstream_from_env() -> tuple[str, int, bytes]:
    url = os.environ.get("HTTPS_PROXY") or os.environ.get("https_proxy") or ""
    parts = urlsplit(url)
    if not parts.hostname or not parts.port:
        sys.exit("browser-proxy: HTTPS_PROXY names no proxy (is a network policy declared?)")
    credentials = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}"
    header = b"Proxy-Authorization: Basic " + base64.b64encode(credentials.encode()) + b"\r\n"
    return parts.hostname, parts.port, header


def read_head(sock: socket.socket) -> bytes | None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            return None
        data += chunk
        if len(data) > MAX_HEAD:
            return None
    return data


def rewrite(head: bytes, auth: bytes) -> bytes:
    """The request head with the proxy token in place of any Proxy-Authorization, and a plain
    request made the connection's last (its successor would go without the header)."""
    top, _, rest = head.partition(b"\r\n\r\n")
    lines = top.split(b"\r\n")
    connect = lines[0].upper().startswith(b"CONNECT ")
    kept = [line for line in lines[1:] if not line.lower().startswith(
        (b"proxy-authorization:", b"proxy-connection:")
        + (() if connect else (b"connection:",)))]
    extra = [] if connect else [b"Connection: close"]
    return b"\r\n".join([lines[0], *kept, *extra]) + b"\r\n" + auth + b"\r\n" + rest


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


def serve(client: socket.socket, upstream: tuple[str, int], auth: bytes) -> None:
    client.settimeout(IDLE_S)
    try:
        head = read_head(client)
        if head is None:
            return
        remote = socket.create_connection(upstream, timeout=30)
        remote.settimeout(IDLE_S)
        remote.sendall(rewrite(head, auth))
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
    parser.add_argument("--listen", default="127.0.0.1:3128")
    args = parser.parse_args()
    host, _, port = args.listen.rpartition(":")
    if host not in ("127.0.0.1", "localhost", "::1"):
        sys.exit("browser-proxy: listens on the sandbox's loopback only")
    proxy_host, proxy_port, auth = upstream_from_env()
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((host, int(port)))
    server.listen(64)
    while True:
        client, _ = server.accept()
        threading.Thread(target=serve, args=(client, (proxy_host, proxy_port), auth),
                         daemon=True).start()


if __name__ == "__main__":
    main()
