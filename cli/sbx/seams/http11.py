"""What the small HTTP/1.1 clients (the engine's socket, the registry's manifest GET) share: the
one parser of a response head, and the unchunking of a complete body.

h11 is not used here: its import (its grammar's regular expressions) would be paid by every
cached run, whose engine calls are the hot path; the head of an answer is all that is parsed.
"""

from __future__ import annotations


def parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    """(status, headers) of a response's head (status line and header lines, with or without
    the final blank line). Names are lower-cased; a repeated header's values are joined with
    ``", "`` in order, as urllib3's HTTPHeaderDict (what requests and the docker SDK read)
    joins them. ValueError when the status line is not HTTP's."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise ValueError(f"not an HTTP answer: {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, _, value = line.partition(":")
        key, value = name.strip().lower(), value.strip()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return int(parts[1]), headers


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


__all__ = ["parse_head", "unchunk"]
