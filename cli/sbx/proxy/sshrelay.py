"""The SSH agent relay: a socket in a directory mounted read-only into the sandbox, speaking
the agent protocol to the host's agent one judged request at a time
(:func:`sbx.domain.egress.sshagent.judge`). One sandbox connection is one upstream connection
and carries at most one verified session binding (one ssh client, one server).

It lives in the proxy process, so it has the proxy's owner and lifetime (the one-shot run, or
a named sandbox's keeper) and its phase: when that process is gone the socket answers no one.
Paths are reached through a directory descriptor (``/proc/self/fd/N/name``), so a deep state
home never meets the 108-byte limit of a socket address.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import stat
import struct
from typing import Final

from sbx.domain.egress.sshagent import (
    FAILURE_MESSAGE,
    MAX_MESSAGE_BYTES,
    SOCKET_NAME,
    Binding,
    RelayConfig,
    answer_allowed,
    bind,
    judge,
)
from sbx.domain.egress.sshbind import SESSION_BIND, KnownHost, extension_name, parse_known_hosts
from sbx.proxy.context import ProxyContext

ANSWER_TIMEOUT_S: Final = 30.0  # a hardware key asking for a touch answers within this
MAX_RELAY_CLIENTS: Final = 64
MAX_KNOWN_HOSTS_BYTES: Final = 16 * 1024 * 1024  # a larger file is read only this far


class SSHAgentRelay:
    def __init__(self, ctx: ProxyContext, config: RelayConfig) -> None:
        self.ctx = ctx
        self.config = config
        self._server: asyncio.AbstractServer | None = None
        self._dir_fd: int | None = None
        self._clients: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._dir_fd = os.open(self.config.socket_dir, os.O_RDONLY | os.O_DIRECTORY
                               | os.O_NOFOLLOW)
        with contextlib.suppress(FileNotFoundError):  # a named sandbox's previous start
            os.unlink(SOCKET_NAME, dir_fd=self._dir_fd)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(f"/proc/self/fd/{self._dir_fd}/{SOCKET_NAME}")
            # The sandbox's user is not this process's: the directory (only that sandbox
            # mounts it) is the boundary, the socket is open to whoever is inside.
            os.chmod(SOCKET_NAME, 0o666, dir_fd=self._dir_fd)  # noqa: S103
            sock.listen(16)
        except OSError:
            sock.close()
            raise
        self._server = await asyncio.start_unix_server(self._on_client, sock=sock)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._clients):
            task.cancel()
        if self._clients:
            await asyncio.wait(list(self._clients), timeout=self.ctx.limits.shutdown_timeout)
        if self._dir_fd is not None:
            with contextlib.suppress(OSError):
                os.unlink(SOCKET_NAME, dir_fd=self._dir_fd)
            os.close(self._dir_fd)
            self._dir_fd = None

    async def _on_client(self, reader: asyncio.StreamReader,
                         writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is None or len(self._clients) >= MAX_RELAY_CLIENTS:
            writer.close()
            return
        self._clients.add(task)
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        binding: Binding | None = None
        try:
            while True:
                body = await _read_message(reader, self.ctx.limits.idle_timeout)
                if body is None:
                    return
                phase = self.ctx.phase
                grant = self.config.grant(phase)
                if extension_name(body) == SESSION_BIND:
                    verdict, binding = bind(body, grant, phase, binding, self._known_hosts())
                else:
                    verdict = judge(body, grant, phase, binding)
                if not verdict.forward:
                    self.ctx.stderr(f"ssh-agent: refused {verdict.why}")
                    writer.write(FAILURE_MESSAGE)
                    await writer.drain()
                    continue
                if upstream is None:
                    upstream = await self._connect_upstream()
                if upstream is None:
                    writer.write(FAILURE_MESSAGE)
                    await writer.drain()
                    continue
                answer = await self._ask(upstream, body)
                if answer is None or not answer_allowed(body[0], answer):
                    self.ctx.stderr("ssh-agent: the host's agent gave no usable answer")
                    writer.write(FAILURE_MESSAGE)
                    await writer.drain()
                    _close(upstream[1])
                    upstream = None
                    continue
                writer.write(struct.pack(">I", len(answer)) + answer)
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError, TimeoutError):
            return
        finally:
            self._clients.discard(task)
            if upstream is not None:
                _close(upstream[1])
            _close(writer)

    def _known_hosts(self) -> list[KnownHost]:
        """The host's known_hosts as they are now (a missing file is an empty one)."""
        entries: list[KnownHost] = []
        for path in self.config.known_hosts:
            try:
                with path.open("rb") as handle:
                    text = handle.read(MAX_KNOWN_HOSTS_BYTES).decode("utf-8", "replace")
            except OSError:
                continue
            entries.extend(parse_known_hosts(text))
        return entries

    async def _connect_upstream(self) -> tuple[asyncio.StreamReader,
                                               asyncio.StreamWriter] | None:
        """The host's agent, checked to be a socket at connect time (never followed through
        a link in its last component)."""
        upstream = self.config.upstream
        try:
            dir_fd = os.open(upstream.parent, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as error:
            self.ctx.stderr(f"ssh-agent: the host's agent {upstream} is gone ({error.strerror})")
            return None
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            info = os.stat(upstream.name, dir_fd=dir_fd, follow_symlinks=False)
            if not stat.S_ISSOCK(info.st_mode):
                self.ctx.stderr(f"ssh-agent: {upstream} is not a socket")
                sock.close()
                return None
            sock.setblocking(False)
            await asyncio.wait_for(asyncio.get_running_loop().sock_connect(
                sock, f"/proc/self/fd/{dir_fd}/{upstream.name}"), ANSWER_TIMEOUT_S)
            return await asyncio.open_unix_connection(sock=sock, limit=MAX_MESSAGE_BYTES)
        except (OSError, TimeoutError) as error:
            sock.close()
            self.ctx.stderr(f"ssh-agent: cannot reach the host's agent {upstream} "
                            f"({getattr(error, 'strerror', None) or 'timed out'})")
            return None
        finally:
            os.close(dir_fd)

    async def _ask(self, upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter],
                   body: bytes) -> bytes | None:
        reader, writer = upstream
        try:
            writer.write(struct.pack(">I", len(body)) + body)
            await writer.drain()
            return await _read_message(reader, ANSWER_TIMEOUT_S)
        except (OSError, asyncio.IncompleteReadError, TimeoutError):
            return None


async def _read_message(reader: asyncio.StreamReader, timeout: float) -> bytes | None:
    """One length-prefixed message; None at a clean end, an oversized or empty one."""
    head = await asyncio.wait_for(reader.read(4), timeout)
    if not head:
        return None
    if len(head) < 4:
        head += await asyncio.wait_for(reader.readexactly(4 - len(head)), timeout)
    (length,) = struct.unpack(">I", head)
    if length == 0 or length > MAX_MESSAGE_BYTES:
        return None
    return await asyncio.wait_for(reader.readexactly(length), timeout)


def _close(writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError, RuntimeError):
        writer.close()


__all__ = ["SSHAgentRelay"]
