"""Undoing the content codings of responses from credential-injection domains.

The proxy masks the secret out of what an inject domain sends back, and it can only mask bytes
it can read: a gzip body that echoes the request headers would carry the real token past a mask
that looks at the compressed bytes. So on inject domains the proxy asks for identity bodies
(``Accept-Encoding: identity``), and when an origin answers with a ``Content-Encoding`` anyway
it either decodes the body here (``gzip``/``x-gzip``, ``deflate`` — zlib-wrapped or raw, as
origins send both — in any chain of up to :data:`MAX_CODINGS`) and sends it on as identity, or
refuses it (:class:`UnsupportedEncoding`: ``br``, ``zstd``, ``compress`` or anything unknown).
An encoded body from an inject domain never passes through undecoded.

Decoding streams: each input chunk yields pieces of at most :data:`PIECE` bytes, so a
decompression bomb costs time, never memory. A body that does not decode
(:class:`CorruptBody`) ends the response mid-stream: nothing undecoded is sent after it.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Final

PIECE: Final = 256 * 1024
MAX_CODINGS: Final = 4
SUPPORTED: Final = frozenset({"gzip", "x-gzip", "deflate"})
_GZIP_MAGIC: Final = b"\x1f\x8b"


class UnsupportedEncoding(ValueError):
    """A content coding the proxy cannot undo (``str()`` names it)."""


class CorruptBody(ValueError):
    """The body does not decode as its Content-Encoding says."""


def content_codings(headers: Iterable[tuple[bytes, bytes]]) -> list[str]:
    """The codings applied to a body, in order, from every Content-Encoding field
    (``identity`` and empty members left out)."""
    out: list[str] = []
    for name, value in headers:
        if name.lower() != b"content-encoding":
            continue
        for member in value.decode("latin-1").split(","):
            coding = member.strip().lower()
            if coding and coding != "identity":
                out.append(coding)
    return out


class _Inflate:
    """One gzip (several members allowed) or deflate layer."""

    def __init__(self, coding: str) -> None:
        self.gzip = coding in ("gzip", "x-gzip")
        self._obj: zlib._Decompress | None = None
        self._head = b""  # deflate: the first bytes, until the format is known
        self._after = b""  # gzip: bytes after a member, until they show another one starts
        self._ended = False  # bytes after the stream that start no member: all dropped

    def _start(self, data: bytes) -> bytes | None:
        if self.gzip:
            self._obj = zlib.decompressobj(16 + zlib.MAX_WBITS)
            return data
        self._head += data
        if len(self._head) < 2:
            return None
        data, self._head = self._head, b""
        # RFC 9110 "deflate" is the zlib format; some origins send raw deflate instead.
        wrapped = (data[0] & 0x0F) == 8 and ((data[0] << 8) | data[1]) % 31 == 0
        self._obj = zlib.decompressobj(zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS)
        return data

    def feed(self, data: bytes) -> Iterator[bytes]:
        if self._obj is None:
            started = self._start(data)
            if started is None:
                return
            data = started
        obj = self._obj
        assert obj is not None  # noqa: S101 - set by _start
        while data:
            if obj.eof:
                if self._ended or not self.gzip:
                    return  # bytes after the end of the stream are dropped, never passed
                data, self._after = self._after + data, b""
                if len(data) < len(_GZIP_MAGIC):
                    self._after = data  # too short to tell yet
                    return
                if not data.startswith(_GZIP_MAGIC):
                    self._ended = True
                    return
                obj = self._obj = zlib.decompressobj(16 + zlib.MAX_WBITS)  # another member
            try:
                out = obj.decompress(data, PIECE)
            except zlib.error as error:
                raise CorruptBody(f"the body does not decode: {error}") from None
            data = obj.unconsumed_tail or (obj.unused_data if obj.eof else b"")
            if out:
                yield out

    def finish(self) -> Iterator[bytes]:
        if self._head:
            raise CorruptBody("the deflate body is one byte long")
        if self._obj is None:
            return  # an empty body
        try:
            tail = self._obj.flush()
        except zlib.error as error:
            raise CorruptBody(f"the body does not decode: {error}") from None
        if tail:
            yield tail
        if not self._obj.eof:
            raise CorruptBody("the encoded body is truncated")


class BodyDecoder:
    """Undoes a chain of codings (the last one applied is undone first)."""

    def __init__(self, codings: Sequence[str]) -> None:
        if len(codings) > MAX_CODINGS:
            raise UnsupportedEncoding(f"{len(codings)} content codings in a row")
        unknown = [c for c in codings if c not in SUPPORTED]
        if unknown:
            raise UnsupportedEncoding(f"the content encoding {unknown[0]!r}")
        self._stages = [_Inflate(c) for c in reversed(codings)]

    def _through(self, index: int, pieces: Iterable[bytes]) -> Iterator[bytes]:
        if index == len(self._stages):
            yield from pieces
            return
        stage = self._stages[index]

        def produced() -> Iterator[bytes]:
            for piece in pieces:
                yield from stage.feed(piece)

        yield from self._through(index + 1, produced())

    def feed(self, data: bytes) -> Iterator[bytes]:
        """The decoded pieces of the next chunk of the encoded body."""
        return self._through(0, (data,))

    def finish(self) -> Iterator[bytes]:
        """What is left once the body ended; raises :class:`CorruptBody` if it was cut."""
        for index, stage in enumerate(self._stages):
            yield from self._through(index + 1, stage.finish())


__all__ = ["MAX_CODINGS", "SUPPORTED", "BodyDecoder", "CorruptBody", "UnsupportedEncoding",
           "content_codings"]
