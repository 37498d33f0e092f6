"""A raw Chrome DevTools Protocol client over a WebSocket, standard library only.

Copied into a sandbox and run there (the browser's DevTools listen on the sandbox's own
127.0.0.1:9222 and nowhere else), it loads each URL given in a new tab and prints one JSON line
per page: the main document's HTTP status (or the browser's network error), its title and the
text of its body.

    python3 cdp.py [--cdp http://127.0.0.1:9222] URL...
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import socket
import struct
import sys
import time
import urllib.request
from typing import Any
from urllib.parse import urlsplit

TIMEOUT_S = 60.0


class WebSocket:
    """The client side of RFC 6455, as much as CDP needs: text frames, masked, unfragmented
    sends; receives of any length, continuation frames joined, pings answered."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.sock = socket.create_connection((parts.hostname, parts.port or 80), TIMEOUT_S)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET {parts.path or '/'} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
                           "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                           f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n")
                          .encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("the DevTools closed the handshake")
            head += chunk
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise ConnectionError(head.split(b"\r\n", 1)[0].decode(errors="replace"))
        self.buffer = head.split(b"\r\n\r\n", 1)[1]

    def _read(self, n: int) -> bytes:
        while len(self.buffer) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("the DevTools closed the connection")
            self.buffer += chunk
        data, self.buffer = self.buffer[:n], self.buffer[n:]
        return data

    def send(self, text: str, opcode: int = 1) -> None:
        payload = text.encode()
        mask = os.urandom(4)
        size = len(payload)
        if size < 126:
            header = struct.pack("!BB", 0x80 | opcode, 0x80 | size)
        elif size < 65536:
            header = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, size)
        else:
            header = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, size)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(header + mask + masked)

    def receive(self) -> str:
        message = b""
        while True:
            first, second = self._read(2)
            size = second & 0x7F
            if size == 126:
                size = struct.unpack("!H", self._read(2))[0]
            elif size == 127:
                size = struct.unpack("!Q", self._read(8))[0]
            payload = self._read(size)
            opcode = first & 0x0F
            if opcode == 9:  # ping
                self.send(payload.decode(errors="replace"), opcode=10)
                continue
            if opcode == 8:
                raise ConnectionError("the DevTools closed the WebSocket")
            message += payload
            if first & 0x80:
                return message.decode()


class Session:
    def __init__(self, ws: WebSocket) -> None:
        self.ws = ws
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            message = json.loads(self.ws.receive())
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return dict(message.get("result") or {})
            self.events.append(message)
        raise TimeoutError(method)

    def wait_event(self, name: str) -> dict[str, Any]:
        return self.wait_event_of((name,))

    def wait_event_of(self, names: tuple[str, ...]) -> dict[str, Any]:
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            for event in self.events:
                if event.get("method") in names:
                    self.events.remove(event)
                    return event
            self.events.append(json.loads(self.ws.receive()))
        raise TimeoutError(" or ".join(names))


def load(cdp: str, url: str) -> dict[str, Any]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # its own loopback
    request = urllib.request.Request(f"{cdp}/json/new?about:blank",  # noqa: S310 - http only
                                     method="PUT")
    with opener.open(request, timeout=TIMEOUT_S) as answer:
        target = json.loads(answer.read())
    page = Session(WebSocket(target["webSocketDebuggerUrl"]))
    page.call("Network.enable")
    page.call("Page.enable")
    navigated = page.call("Page.navigate", url=url)
    status: int | None = None
    error = navigated.get("errorText")  # a navigation that failed outright (a refused tunnel)
    request_id = None
    while status is None and error is None:
        event = page.wait_event_of(("Network.requestWillBeSent", "Network.responseReceived",
                                    "Network.loadingFailed"))
        params = event["params"]
        if event["method"] == "Network.requestWillBeSent":
            if params.get("type") == "Document" and request_id is None:
                request_id = params["requestId"]
        elif params.get("requestId") == request_id:
            if event["method"] == "Network.responseReceived":
                status = params["response"]["status"]
            else:
                error = params.get("errorText")
    if status is not None:
        page.wait_event("Page.loadEventFired")
    result = page.call("Runtime.evaluate", returnByValue=True, expression=(
        "JSON.stringify({title: document.title, text: document.body ? "
        "document.body.innerText : ''})"))
    page.call("Page.close")
    return {"url": url, "status": status, "error": error,
            **json.loads(result["result"]["value"])}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cdp", default=os.environ.get("CHROME_CDP_URL", "http://127.0.0.1:9222"))
    parser.add_argument("urls", nargs="+")
    args = parser.parse_args()
    for url in args.urls:
        try:
            sys.stdout.write(json.dumps(load(args.cdp, url)) + "\n")
        except (OSError, RuntimeError, KeyError, ValueError) as error:
            sys.stdout.write(json.dumps({"url": url, "failed": f"{type(error).__name__}: "
                                                                f"{error}"}) + "\n")
            sys.exit(1)
        sys.stdout.flush()


if __name__ == "__main__":
    main()
