"""Docker's multiplexed attach framing, decoded incrementally and without copying payloads.

Without a TTY the engine sends each write of the container as one or more frames: an 8-byte
header (stream id, three pad bytes, a big-endian payload length) and the payload. A read from
the socket may end anywhere, mid-header or mid-payload, so the decoder keeps state between
chunks and hands back memoryview slices of the chunk it was given.
"""

from __future__ import annotations

import struct
from typing import Final

HEADER_BYTES: Final = 8
# Stream ids as the engine numbers them; 0 (stdin echoed back) is shown as stdout, 3 carries
# an error message from the engine itself and is shown on stderr.
_STREAM_NAMES: Final = {0: "stdout", 1: "stdout", 2: "stderr", 3: "stderr"}


class FrameError(ValueError):
    """The stream does not follow the framing (an unknown stream id)."""


class FrameDecoder:
    """Feed raw attach bytes in; get ``(stream, payload)`` pairs out, in order."""

    def __init__(self) -> None:
        self._header = bytearray()
        self._stream = "stdout"
        self._remaining = 0

    @property
    def idle(self) -> bool:
        """True between frames: nothing of a started frame is still owed."""
        return self._remaining == 0 and not self._header

    def feed(self, data: bytes | bytearray | memoryview) -> list[tuple[str, memoryview]]:
        view = memoryview(data)
        out: list[tuple[str, memoryview]] = []
        position, end = 0, len(view)
        while position < end:
            if self._remaining:
                take = min(self._remaining, end - position)
                out.append((self._stream, view[position:position + take]))
                self._remaining -= take
                position += take
                continue
            need = HEADER_BYTES - len(self._header)
            piece = view[position:position + need]
            self._header += piece
            position += len(piece)
            if len(self._header) < HEADER_BYTES:
                break
            stream_id, length = struct.unpack(">BxxxL", bytes(self._header))
            self._header.clear()
            name = _STREAM_NAMES.get(stream_id)
            if name is None:
                raise FrameError(f"unknown stream id {stream_id} in the engine's attach stream")
            self._stream, self._remaining = name, length
        return out


__all__ = ["HEADER_BYTES", "FrameDecoder", "FrameError"]
