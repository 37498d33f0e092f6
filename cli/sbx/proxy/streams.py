"""Byte streams the proxy reads and writes: plain TCP (asyncio streams) and TLS on top of any
stream through ``ssl.MemoryBIO`` (so the proxy feeds bytes it already read, bounds handshakes
and sees the SNI)."""

from __future__ import annotations

import asyncio
import ssl
from typing import Any, Final, Protocol

import h11

READ_SIZE: Final = 256 * 1024
WRITE_HIGH_WATER: Final = 1024 * 1024


class Stream(Protocol):
    async def read(self, size: int) -> bytes: ...
    async def write(self, data: bytes) -> None: ...
    def abort(self) -> None: ...


class TcpStream:
    """An asyncio stream pair; ``read`` returns b"" at EOF."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    async def read(self, size: int) -> bytes:
        return await self.reader.read(size)

    async def write(self, data: bytes) -> None:
        self.writer.write(data)
        if self.writer.transport.get_write_buffer_size() > WRITE_HIGH_WATER:
            await self.writer.drain()

    async def flush(self) -> None:
        await self.writer.drain()

    async def flush_all(self) -> None:
        """Wait until nothing of ours is left in the transport's buffer (before another
        writer, such as a splice, takes over the socket)."""
        transport = self.writer.transport
        if transport.get_write_buffer_size():
            transport.set_write_buffer_limits(high=0)
            try:
                await self.writer.drain()
            finally:
                transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)

    def take_buffered(self) -> bytes:
        """What the reader holds but nobody read yet (before the socket changes hands)."""
        return buffered(self.reader)

    def abort(self) -> None:
        self.writer.transport.abort()


def buffered(reader: asyncio.StreamReader) -> bytes:
    """What a stream reader holds but nobody read yet (before its transport changes hands)."""
    buffer = getattr(reader, "_buffer", None)
    if not buffer:
        return b""
    data = bytes(buffer)
    buffer.clear()
    return data


class TlsStream:
    """TLS over any :class:`Stream`, through ``ssl.MemoryBIO``: the proxy feeds the bytes it
    already read (the ClientHello behind a CONNECT), bounds the handshake and sees the SNI."""

    def __init__(self, raw: Stream, obj: ssl.SSLObject, incoming: ssl.MemoryBIO,
                 outgoing: ssl.MemoryBIO) -> None:
        self.raw = raw
        self.obj = obj
        self._in = incoming
        self._out = outgoing

    @classmethod
    def wrap(cls, raw: Stream, context: ssl.SSLContext, *, server_side: bool,
             server_hostname: str | None = None) -> TlsStream:
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        obj = context.wrap_bio(incoming, outgoing, server_side=server_side,
                               server_hostname=server_hostname)
        return cls(raw, obj, incoming, outgoing)

    async def handshake(self, *, timeout: float, initial: bytes = b"") -> None:
        if initial:
            self._in.write(initial)
        async with asyncio.timeout(timeout):
            while True:
                try:
                    self.obj.do_handshake()
                    break
                except ssl.SSLWantReadError:
                    await self._flush()
                    data = await self.raw.read(READ_SIZE)
                    if not data:
                        raise ConnectionError("the peer closed the connection during the "
                                              "TLS handshake") from None
                    self._in.write(data)
            await self._flush()

    async def _flush(self) -> None:
        data = self._out.read()
        if data:
            await self.raw.write(data)

    async def read(self, size: int) -> bytes:
        while True:
            try:
                return self.obj.read(size)
            except ssl.SSLWantReadError:
                await self._flush()
                data = await self.raw.read(READ_SIZE)
                if data:
                    self._in.write(data)
                else:
                    self._in.write_eof()
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                return b""

    async def write(self, data: bytes) -> None:
        self.obj.write(data)
        await self._flush()

    def abort(self) -> None:
        self.raw.abort()


async def flush(stream: Stream) -> None:
    """Push what a stream buffered (a TCP stream buffers; TLS writes through)."""
    if isinstance(stream, TcpStream):
        await stream.flush()


async def next_event(conn: h11.Connection, stream: Stream, timeout: float) -> Any:
    """The next h11 event of ``conn``, reading ``stream`` as needed, within ``timeout``."""
    async with asyncio.timeout(timeout):
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await stream.read(READ_SIZE))
                continue
            return event


__all__ = ["READ_SIZE", "WRITE_HIGH_WATER", "Stream", "TcpStream", "TlsStream", "buffered",
           "flush", "next_event"]
