"""What the two small HTTP/1.1 clients (the engine's socket, the registry's manifest GET) share."""

from __future__ import annotations


def unchunk(data: bytes) -> bytes:
    """The body of a complete ``Transfer-Encoding: chunked`` message; ValueError when a size
    line is missing or not hex, or a chunk is cut short."""
    out: list[bytes] = []
    position = 0
    while True:
        end = data.find(b"\r\n", position)
        if end < 0:
            raise ValueError("a chunk without its size line")
        size = int(data[position:end].split(b";", 1)[0].strip() or b"0", 16)
        if size == 0:
            return b"".join(out)
        start = end + 2
        if start + size > len(data):
            raise ValueError("a chunk cut short")
        out.append(data[start:start + size])
        position = start + size + 2


__all__ = ["unchunk"]
