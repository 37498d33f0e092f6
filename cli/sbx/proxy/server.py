"""One run's egress proxy: the listening socket, the phase (install → runtime, once) and the
collaborators each connection goes through, built once and sharing one
:class:`~sbx.proxy.context.ProxyContext`."""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
import sys
from collections.abc import Callable, Mapping

from sbx.domain.egress import proxystream
from sbx.domain.egress.proxyconfig import ProxyConfig, ProxyLimits
from sbx.domain.egress.requestlog import JsonlSink, NullSink
from sbx.domain.kits.compose import Network, Phase
from sbx.proxy.connection import ClientHandler
from sbx.proxy.context import ProxyContext
from sbx.proxy.credentials import ProxyCredentials
from sbx.proxy.dialing import Dialer, Resolver
from sbx.proxy.exchange import Forwarder
from sbx.proxy.intercept import Interceptor
from sbx.proxy.kitregistry import KitRegistry
from sbx.proxy.recorder import Recorder
from sbx.proxy.refusals import Refuser
from sbx.proxy.relay import Tunnel
from sbx.proxy.sshrelay import SSHAgentRelay
from sbx.proxy.stdoutlines import LineSink, StdoutLines
from sbx.proxy.streams import READ_SIZE
from sbx.proxy.userrules import UserRules
from sbx.usecases.kitstore import KitStore


def write_stderr(message: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(f"sbx-proxy: {message}\n")
        sys.stderr.flush()


class EgressProxy:
    """One run's egress proxy. ``secrets`` maps service → value (read by
    :func:`~sbx.proxy.process.main` from the secret store); a configured credential
    without a value refuses its requests. ``client_token``: the run's proxy token every
    request must carry (None: no credentials asked, for loopback-only use). ``use_splice``:
    relay raw tunnels with ``splice(2)`` (None:
    :data:`~sbx.proxy.relay.SPLICE_BY_DEFAULT`,
    off; see :mod:`sbx.proxy.relay` for why)."""

    def __init__(self, config: ProxyConfig, *, server_context: Callable[[str], ssl.SSLContext],
                 secrets: Mapping[str, str], stderr: Callable[[str], None] | None = None,
                 resolver: Resolver | None = None, client_token: str | None = None,
                 use_splice: bool | None = None) -> None:
        self.config = config
        report = stderr or write_stderr
        self.ctx = ctx = ProxyContext(config, config.phase, report)
        self.credentials = ProxyCredentials(ctx, secrets)
        ctx.stderr = self.credentials.redactor(report)  # real OAuth tokens never reach stderr
        self.credentials.load_oauth()
        if config.user_policy is not None:
            ctx.rules = UserRules(config.user_policy, config.network, config.sandbox,
                                  ctx.stderr)
        sink: JsonlSink | NullSink | LineSink
        if config.stream_records:
            ctx.lines = StdoutLines()
            sink = LineSink(ctx.lines)
        elif config.request_log is not None:
            sink = JsonlSink(config.request_log, segment_bytes=config.limits.log_segment_bytes,
                             segments=config.limits.log_segments, report=ctx.stderr)
        else:
            sink = NullSink()
        self._client_token = client_token
        ctx.recorder = Recorder(ctx, sink, self._never_logged)
        refuser = Refuser(ctx)
        dialer = Dialer(ctx, resolver=resolver)
        self.kit_registry = (KitRegistry(ctx, KitStore(
            config.kit_registry, max_bytes=config.limits.kit_registry_bytes))
                             if config.kit_registry is not None else None)
        forwarder = Forwarder(ctx, self.credentials, dialer, self.kit_registry)
        self.handler = ClientHandler(
            ctx, client_token=client_token, credentials=self.credentials, dialer=dialer,
            forwarder=forwarder, tunnel=Tunnel(ctx, refuser, use_splice=use_splice),
            interceptor=Interceptor(ctx, server_context=server_context, forwarder=forwarder,
                                    refuser=refuser),
            refuser=refuser)
        self._server: asyncio.Server | None = None
        self.ssh_agent = (SSHAgentRelay(ctx, config.ssh_agent)
                          if config.ssh_agent is not None else None)
        self._stopping = asyncio.Event()
        self.port = 0

    def _never_logged(self) -> list[str]:
        """What no record may hold: secret values, sentinels, the OAuth tokens seen, and the
        run's proxy token (the sandbox knows it and may write it into a path or a host)."""
        credentials = self.credentials
        return [*credentials.secrets.values(),
                *(s.decode("utf-8", "replace") for s in credentials.sentinels),
                *credentials.oauth_seen,
                *([self._client_token] if self._client_token else [])]

    @property
    def phase(self) -> Phase:
        return self.ctx.phase

    @property
    def limits(self) -> ProxyLimits:
        return self.ctx.limits

    @property
    def network(self) -> Network | None:
        return self.ctx.network

    async def start(self) -> int:
        self._server = await asyncio.start_server(
            self.handler.on_client, self.config.listen_host, self.config.listen_port,
            limit=READ_SIZE, backlog=256, reuse_address=True)
        sockets = self._server.sockets
        self.port = int(sockets[0].getsockname()[1]) if sockets else 0
        if self.ssh_agent is not None:
            await self.ssh_agent.start()
        self._write_phase_file()
        return self.port

    def switch_to_runtime(self) -> None:
        """install → runtime, irreversibly: install rules and credentials stop applying, and
        every connection opened during install is closed."""
        if self.ctx.phase == "runtime":
            return
        self.ctx.phase = "runtime"
        for task, conn in list(self.ctx.conns.items()):
            if conn.phase == "install":
                for stream in conn.streams:
                    stream.abort()
                task.cancel()
        self._write_phase_file()

    def stop(self) -> None:
        self._stopping.set()

    def replace_secrets(self, secrets: Mapping[str, str]) -> None:
        """Use these values from now on (SIGHUP re-reads the store: a rotated or removed secret
        takes effect on the next request, without restarting the sandbox)."""
        self.credentials.secrets = dict(secrets)

    async def serve(self, ready: Callable[[int], None] | None = None) -> None:
        """Listen until :meth:`stop` (or SIGTERM/SIGINT when run by ``main``)."""
        port = await self.start()
        if ready is not None:
            ready(port)
        await self._stopping.wait()
        await self.close()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        if self.ssh_agent is not None:
            await self.ssh_agent.close()
        tasks = list(self.ctx.conns)
        for task, conn in list(self.ctx.conns.items()):
            for stream in conn.streams:
                stream.abort()
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=self.limits.shutdown_timeout)
        if self._server is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                async with asyncio.timeout(self.limits.shutdown_timeout):
                    await self._server.wait_closed()
        if self.kit_registry is not None:
            self.kit_registry.close()
        self.ctx.recorder.sink.close()

    def _write_phase_file(self) -> None:
        if self.ctx.lines is not None:
            self.ctx.lines.emit(proxystream.PHASE, self.ctx.phase)
        path = self.config.phase_file
        if path is None:
            return
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        try:
            tmp.write_text(f"{self.ctx.phase}\n", encoding="utf-8")
            os.replace(tmp, path)
        except OSError as error:
            self.ctx.stderr(f"cannot write the phase file {path}: {error.strerror}")


__all__ = ["EgressProxy", "write_stderr"]
