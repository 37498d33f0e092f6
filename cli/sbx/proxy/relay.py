"""Raw CONNECT tunnels (hosts the policy does not bound, with no credential to set): the
client's first bytes are held until judged (a TLS ClientHello must name the CONNECT host or no
host, and must not hide it), meanwhile the server's bytes flow (server-first protocols); then
the bytes are relayed both ways until both sides are done, either fails, or nothing moved for
``idle_timeout``.

Two relays. The default hands both transports to asyncio protocols: each chunk the kernel
hands over (up to 256 KiB) is written straight to the other socket. The other splices
socket → pipe → socket (``splice(2)``, Linux), so the bytes never enter Python: it halves the
proxy's own CPU per byte, but measured end to end (``bench/proxy.py``, which runs both) the
*receiver* then pays more than the proxy saved — the spliced segments carry the sender's
pages, cold and in the sender's fragments, where a copy hands over fresh, coalesced ones
(curl ~1.6 s/GiB instead of ~1.0 s/GiB on loopback; over a NIC the fragments would be
MTU-sized). So splicing is off unless asked for (``use_splice``, ``SPLICE_BY_DEFAULT``). A
tunnel inside TLS to an ``https://`` upstream proxy is copied chunk by chunk.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import os
import socket
from typing import Final

from sbx.base.reasons import EgressCode
from sbx.domain.egress import clienthello
from sbx.domain.egress.hosts import normalize_host
from sbx.proxy.context import ProxyContext
from sbx.proxy.recorder import Traffic
from sbx.proxy.refusals import EgressRefusal, Refuser, clean, proxy_refusal
from sbx.proxy.streams import READ_SIZE, WRITE_HIGH_WATER, Stream, TcpStream

SPLICE_PIPE: Final = 1024 * 1024  # pipe capacity asked for, per direction (Linux's default max)
SPLICE_BY_DEFAULT = False  # measured: see the module's docstring and bench/README.md
_F_SETPIPE_SZ: Final = 1031
_F_GETPIPE_SZ: Final = 1032
_ALERTS: Final[dict[str, int]] = {EgressCode.SNI_MISMATCH: clienthello.ALERT_UNRECOGNIZED_NAME,
                  EgressCode.SNI_HIDDEN: clienthello.ALERT_ACCESS_DENIED,
                  EgressCode.BAD_CLIENT_HELLO: clienthello.ALERT_HANDSHAKE_FAILURE}


@functools.cache
def splice_available() -> bool:
    """Whether ``splice(2)`` moves socket bytes here: tried once on a socket pair, so a kernel
    or sandbox runtime without it (or with a partial one) gets the portable relay."""
    if not hasattr(os, "splice") or not hasattr(os, "SPLICE_F_NONBLOCK"):
        return False
    try:
        left, right = socket.socketpair()
        rpipe, wpipe = os.pipe()
    except OSError:
        return False
    try:
        left.sendall(b"x")
        flags = os.SPLICE_F_MOVE | os.SPLICE_F_NONBLOCK
        return os.splice(right.fileno(), wpipe, 1, flags=flags) == 1 \
            and os.splice(rpipe, left.fileno(), 1, flags=flags) == 1
    except OSError:
        return False
    finally:
        for sock in (left, right):
            sock.close()
        for fd in (rpipe, wpipe):
            os.close(fd)


def judge_first(data: bytes, host: str, port: int) -> bool:
    """True once the first bytes of a raw tunnel may go (not TLS, or a ClientHello naming
    the CONNECT host or no host); False while a ClientHello is incomplete; raises the
    refusal of a hidden, mismatched or unreadable server name."""
    if not data:
        return False
    if not clienthello.looks_like_tls(data):
        return True  # tunnels carry any protocol; only TLS names a server here
    try:
        hello = clienthello.parse_client_hello(data)
    except clienthello.NotAClientHello as error:
        raise proxy_refusal(
            EgressCode.BAD_CLIENT_HELLO, f"the TLS handshake sent into the tunnel to "
            f"{host}:{port} cannot be read ({error}), so its server name cannot be checked "
            "(fail closed)", host=host, port=port) from None
    if hello is None:
        if len(data) > clienthello.MAX_HELLO_BYTES + 8192:
            raise proxy_refusal(EgressCode.BAD_CLIENT_HELLO, "the TLS ClientHello is too large",
                                host=host, port=port)
        return False
    if hello.hidden_name:
        raise proxy_refusal(
            EgressCode.SNI_HIDDEN, f"the TLS handshake into the tunnel to {host}:{port} hides "
            "its server name (Encrypted Client Hello), so sbx cannot check it is the CONNECT "
            "host", host=host, port=port,
            suggestion="disable Encrypted Client Hello for egress through sbx")
    name = hello.server_name
    if name is not None and normalize_host(name) != host:
        raise proxy_refusal(
            EgressCode.SNI_MISMATCH, f"the TLS server name {clean(name, 200)!r} is not the "
            f"CONNECT host {host}", host=host, port=port,
            suggestion="open the tunnel to the host the TLS handshake names (the policy "
                       "judges that host)")
    return True


class Tunnel:
    """Runs raw tunnels. ``use_splice`` (default :data:`SPLICE_BY_DEFAULT`) picks the spliced
    relay where the OS has it; the default relay uses asyncio protocols."""

    def __init__(self, ctx: ProxyContext, refuser: Refuser, *,
                 use_splice: bool | None = None) -> None:
        self.ctx = ctx
        self.refuser = refuser
        wanted = SPLICE_BY_DEFAULT if use_splice is None else use_splice
        self.use_splice = wanted and splice_available()

    async def run(self, client: TcpStream, upstream: Stream, host: str, port: int,
                  initial: bytes, traffic: Traffic | None = None) -> None:
        """The tunnel, from the client's first bytes (``initial``: what came with the CONNECT)
        to its end; ``traffic`` counts the bytes each way (for the request log)."""
        counted = traffic if traffic is not None else Traffic()
        first = await self.hold_first_bytes(client, upstream, host, port, initial, counted)
        if first is None:
            return
        counted.up += len(first)
        if not isinstance(upstream, TcpStream):
            await self._pump(client, upstream, first, counted)
        elif self.use_splice:
            await self._splice(client, upstream, first, counted)
        else:
            await self._relay(client, upstream, first, counted)

    async def hold_first_bytes(self, client: TcpStream, upstream: Stream, host: str, port: int,
                               initial: bytes, traffic: Traffic | None = None) -> bytes | None:
        """The client's first bytes into a raw tunnel, once judged by :func:`judge_first`;
        meanwhile the upstream's bytes flow to the client (server-first protocols). None when
        the tunnel ended first, or was refused (a TLS alert to the client, the refusal
        audited); nothing of the client's has then reached the upstream."""
        limits = self.ctx.limits
        buffered = initial
        copier: asyncio.Task[None] | None = None
        try:
            while True:
                try:
                    if judge_first(buffered, host, port):
                        return buffered
                except EgressRefusal as refusal:
                    if traffic is not None:
                        traffic.refused = True
                    self.refuser.audit(refusal)
                    with contextlib.suppress(ConnectionError, OSError):
                        await client.write(clienthello.alert(_ALERTS.get(
                            refusal.code, clienthello.ALERT_HANDSHAKE_FAILURE)))
                        await client.flush()
                    return None
                if copier is None:
                    copier = asyncio.create_task(_copy(upstream, client))
                reading = asyncio.ensure_future(client.read(READ_SIZE))
                timeout = limits.handshake_timeout if buffered else limits.idle_timeout
                done, _ = await asyncio.wait({reading, copier}, timeout=timeout,
                                             return_when=asyncio.FIRST_COMPLETED)
                if reading not in done:  # the upstream ended, or nothing came in time
                    reading.cancel()
                    await asyncio.gather(reading, return_exceptions=True)
                    with contextlib.suppress(ConnectionError, OSError):
                        await client.flush()
                    return None
                data = reading.result()
                if not data:
                    return None
                buffered += data
        finally:
            if copier is not None:
                copier.cancel()
                await asyncio.gather(copier, return_exceptions=True)

    async def _wait(self, done: asyncio.Future[None], activity: list[float]) -> None:
        """Until ``done``, or ``idle_timeout`` without a byte moved either way."""
        loop = asyncio.get_running_loop()
        idle = self.ctx.limits.idle_timeout
        while not done.done():
            await asyncio.wait([done], timeout=min(idle, 5.0))
            if loop.time() - activity[0] > idle:
                return

    async def _splice(self, client: TcpStream, upstream: TcpStream, initial: bytes,
                      traffic: Traffic) -> None:
        """The spliced relay: what asyncio already holds is written first (the judged first
        bytes, anything read past them), both transports are flushed and stop reading, then
        each direction is spliced socket → pipe → socket on duplicates of the sockets (the
        transports keep theirs, closed by the caller as always)."""
        loop = asyncio.get_running_loop()
        for transport in (client.writer.transport, upstream.writer.transport):
            if not isinstance(transport, asyncio.Transport):
                raise TypeError("tunnels need stream transports")  # pragma: no cover
            transport.pause_reading()
        to_upstream = initial + client.take_buffered()
        to_client = upstream.take_buffered()
        if to_upstream:
            upstream.writer.write(to_upstream)
        if to_client:
            client.writer.write(to_client)
        async with asyncio.timeout(self.ctx.limits.idle_timeout):
            await upstream.flush_all()
            await client.flush_all()
        done: asyncio.Future[None] = loop.create_future()
        activity = [loop.time()]
        directions: list[_Splice] = []
        socks: list[socket.socket] = []
        try:
            for stream in (client, upstream):
                sock = stream.writer.get_extra_info("socket")
                if sock is None or stream.writer.transport.is_closing():
                    return  # a side went away while its buffer drained
                socks.append(socket.socket(fileno=os.dup(sock.fileno())))
            directions.append(_Splice(loop, socks[0], socks[1], activity, done))
            directions.append(_Splice(loop, socks[1], socks[0], activity, done))
            directions[0].partner, directions[1].partner = directions[1], directions[0]
            for direction in directions:
                direction.start()
            await self._wait(done, activity)
        finally:
            if len(directions) == 2:
                traffic.up += directions[0].moved
                traffic.down += directions[1].moved
            traffic.down += len(to_client)
            traffic.up += len(to_upstream) - len(initial)
            for direction in directions:
                direction.close()
            for sock in socks:
                sock.close()

    async def _relay(self, client: TcpStream, upstream: TcpStream, initial: bytes,
                     traffic: Traffic) -> None:
        """The default relay: the transports are handed to :class:`_Relay` protocols, so
        each chunk the kernel hands over is written straight to the other socket (no stream
        buffer, no task switch)."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        activity = [loop.time()]
        left, right = client.writer.transport, upstream.writer.transport
        if not isinstance(left, asyncio.Transport) or not isinstance(right, asyncio.Transport):
            raise TypeError("tunnels need stream transports")  # pragma: no cover
        left.pause_reading()
        right.pause_reading()
        pending_client = initial + client.take_buffered()
        pending_upstream = upstream.take_buffered()
        to_upstream = _Relay(right, activity, done)
        to_client = _Relay(left, activity, done)
        to_upstream.partner, to_client.partner = to_client, to_upstream
        left.set_protocol(to_upstream)
        right.set_protocol(to_client)
        to_upstream.connection_made(left)
        to_client.connection_made(right)
        if pending_client:
            right.write(pending_client)
        if pending_upstream:
            left.write(pending_upstream)
        left.resume_reading()
        right.resume_reading()
        try:
            await self._wait(done, activity)
        finally:
            traffic.up += to_upstream.moved + len(pending_client) - len(initial)
            traffic.down += to_client.moved + len(pending_upstream)

    async def _pump(self, client: TcpStream, upstream: Stream, initial: bytes,
                    traffic: Traffic) -> None:
        """A tunnel inside TLS to an https:// upstream proxy: copied chunk by chunk; it ends
        when either side ends (TLS has no half-close) or after ``idle_timeout`` of silence."""
        loop = asyncio.get_running_loop()
        activity = [loop.time()]
        moved = [0, 0]  # up, down

        async def copy(src: Stream, dst: Stream, first: bytes, way: int) -> None:
            if first:
                await dst.write(first)
                moved[way] += len(first)
            while data := await src.read(READ_SIZE):
                activity[0] = loop.time()
                moved[way] += len(data)
                await dst.write(data)

        buffered = client.take_buffered()
        tasks = [asyncio.create_task(copy(client, upstream, initial + buffered, 0)),
                 asyncio.create_task(copy(upstream, client, b"", 1))]
        idle = self.ctx.limits.idle_timeout
        try:
            while True:
                done, _ = await asyncio.wait(tasks, timeout=min(idle, 5.0),
                                             return_when=asyncio.FIRST_COMPLETED)
                if done or loop.time() - activity[0] > idle:
                    return
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            traffic.up += moved[0] - len(initial)
            traffic.down += moved[1]


async def _copy(src: Stream, dst: TcpStream) -> None:
    """Copy ``src`` to ``dst`` until ``src`` ends (cancelled by the caller before that, when
    the tunnel proper takes over)."""
    while data := await src.read(READ_SIZE):
        await dst.write(data)
    await dst.flush()


class _Splice:
    """One direction of a spliced tunnel, ``src`` → pipe → ``dst``, driven by readiness: read
    only while the pipe is empty, and while ``dst`` cannot take what the pipe holds, wait for
    it to be writable and stop reading ``src`` (so the proxy never holds more than one pipe
    per direction). EOF is passed on as a half-close; the tunnel is done when both
    directions are, or at the first error."""

    def __init__(self, loop: asyncio.AbstractEventLoop, src: socket.socket, dst: socket.socket,
                 activity: list[float], done: asyncio.Future[None]) -> None:
        self.loop = loop
        self.src, self.dst = src, dst
        self.activity = activity
        self.done = done
        self.partner: _Splice | None = None
        self.rpipe, self.wpipe = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        with contextlib.suppress(OSError):
            fcntl.fcntl(self.wpipe, _F_SETPIPE_SZ, SPLICE_PIPE)
        try:
            self.chunk = fcntl.fcntl(self.wpipe, _F_GETPIPE_SZ)
        except OSError:
            self.chunk = 64 * 1024
        self.flags = os.SPLICE_F_MOVE | os.SPLICE_F_NONBLOCK
        self.pending = 0  # bytes in the pipe
        self.moved = 0  # bytes spliced to dst
        self.eof = False
        self.finished = False
        self._reading = self._writing = False

    def start(self) -> None:
        self._want_read(True)

    def _want_read(self, on: bool) -> None:
        if on and not self._reading:
            self.loop.add_reader(self.src.fileno(), self._readable)
        elif not on and self._reading:
            self.loop.remove_reader(self.src.fileno())
        self._reading = on

    def _want_write(self, on: bool) -> None:
        if on and not self._writing:
            self.loop.add_writer(self.dst.fileno(), self._drain)
        elif not on and self._writing:
            self.loop.remove_writer(self.dst.fileno())
        self._writing = on

    def _readable(self) -> None:
        try:
            moved = os.splice(self.src.fileno(), self.wpipe, self.chunk, flags=self.flags)
        except BlockingIOError:
            return
        except OSError:
            self._fail()
            return
        if moved == 0:
            self.eof = True
            self._want_read(False)
        else:
            self.pending += moved
            self.activity[0] = self.loop.time()
        self._drain()

    def _drain(self) -> None:
        while self.pending:
            try:
                moved = os.splice(self.rpipe, self.dst.fileno(), self.pending, flags=self.flags)
            except BlockingIOError:
                self._want_read(False)  # dst is backed up: wait for it, read nothing meanwhile
                self._want_write(True)
                return
            except OSError:
                self._fail()
                return
            self.pending -= moved
            self.moved += moved
        self._want_write(False)
        if not self.eof:
            self._want_read(True)
            return
        with contextlib.suppress(OSError):
            self.dst.shutdown(socket.SHUT_WR)  # the half-close goes on
        self.finished = True
        if self.partner is None or self.partner.finished:
            self._end()

    def _fail(self) -> None:
        self.finished = True
        self._end()

    def _end(self) -> None:
        if not self.done.done():
            self.done.set_result(None)

    def close(self) -> None:
        self._want_read(False)
        self._want_write(False)
        for fd in (self.rpipe, self.wpipe):
            with contextlib.suppress(OSError):
                os.close(fd)


class _Relay(asyncio.Protocol):
    """One direction of a tunnel: what its transport receives is written to ``out``. Reading
    pauses while ``out`` is over its high-water mark (asyncio's flow control), so a slow side
    never makes the proxy buffer without bound."""

    def __init__(self, out: asyncio.BaseTransport, activity: list[float],
                 done: asyncio.Future[None]) -> None:
        self.out = out
        self.activity = activity
        self.done = done
        self.transport: asyncio.Transport | None = None
        self.partner: _Relay | None = None
        self.eof = False
        self.moved = 0  # bytes received from this side (written to the other)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if isinstance(transport, asyncio.Transport):
            self.transport = transport
            transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)

    def data_received(self, data: bytes) -> None:
        self.activity[0] = asyncio.get_running_loop().time()
        self.moved += len(data)
        out = self.out
        if isinstance(out, asyncio.WriteTransport) and not out.is_closing():
            out.write(data)

    def eof_received(self) -> bool:
        self.eof = True
        out = self.out
        if isinstance(out, asyncio.WriteTransport) and out.can_write_eof() \
                and not out.is_closing():
            with contextlib.suppress(OSError, RuntimeError):
                out.write_eof()
        if self.partner is not None and self.partner.eof:
            self._finish()
        return True  # keep the other direction open (half-close)

    def connection_lost(self, exc: Exception | None) -> None:
        self._finish()

    def pause_writing(self) -> None:  # our socket is backed up: stop reading the other one
        if self.partner is not None and self.partner.transport is not None:
            self.partner.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.partner is not None and self.partner.transport is not None:
            self.partner.transport.resume_reading()

    def _finish(self) -> None:
        if not self.done.done():
            self.done.set_result(None)


__all__ = ["SPLICE_BY_DEFAULT", "SPLICE_PIPE", "Tunnel", "judge_first", "splice_available"]
