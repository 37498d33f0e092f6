"""The proxy process: ``python -m sbx.proxy CONFIG_PATH RUN_ID``, started by ``sbx run``
through its handshake (:data:`sbx.seams.host.handshake.PROXY`: the argv and the ready line). It
reads its owner's pipe (the client token, then the secrets sbx resolved), prints its ready line
``SBX-PROXY-READY <port>`` once it listens, and follows its signals: SIGUSR1 runtime phase,
SIGHUP re-read secrets, SIGTERM stop; EOF on the owner's pipe stops it too."""

from __future__ import annotations

import asyncio
import ipaddress
import os
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Final

from sbx.base.errors import SbxError
from sbx.domain.credentials.secrets import SecretStore, decode_provided
from sbx.domain.egress import proxyauth, proxycontrol
from sbx.domain.egress.ca import CertificateAuthority
from sbx.domain.egress.proxyconfig import ProxyConfig
from sbx.proxy.credentials import redact
from sbx.proxy.server import EgressProxy, write_stderr
from sbx.seams.host.handshake import PROXY


def load_secrets(config: ProxyConfig, report: Callable[[str], None], *,
                 provided: Mapping[str, str] | None = None) -> dict[str, str]:
    """The values of the configured credentials (never read from the environment): those
    ``provided`` over the owner pipe, and the file store's for the rest."""
    store = SecretStore(config.state_home)
    values: dict[str, str] = {}
    values.update(provided or {})
    for service in dict.fromkeys(c.service for c in config.credentials if c.domains):
        if service in values:
            continue
        try:
            value = store.get(service)
        except SbxError as error:
            report(f"credential {service!r}: {error.message}; its requests are refused")
            continue
        if value is None:
            report(f"credential {service!r} has no stored secret; its requests are refused")
            continue
        values[service] = value
    return values


# The token (a few dozen characters) plus the encoded secrets resolved by sbx: room for a
# handful of values at their 64 KiB limit.
OWNER_LINE_LIMIT: Final = 1024 * 1024


def read_owner_line(fd: int) -> str | None:
    """The first line of the owner's pipe (the client token, maybe empty); None at EOF before
    a newline (the owner went away). Read byte by byte, so nothing after it is consumed."""
    line = b""
    while len(line) <= OWNER_LINE_LIMIT:
        byte = os.read(fd, 1)
        if not byte:
            return None
        if byte == b"\n":
            return line.decode("ascii", "replace").strip()
        line += byte
    return None


def startable(config: ProxyConfig, token: str | None) -> str | None:
    """Why this proxy must not start (None: it may). Listening anywhere but loopback means
    other hosts' and containers' reach: then the run's token and peer network are required."""
    if token is not None and not proxyauth.valid_token(token):
        return "the client token on the owner pipe is malformed"
    try:
        loopback = ipaddress.ip_address(config.listen_host).is_loopback
    except ValueError:
        loopback = False
    if not loopback and (token is None or config.peer_network is None):
        return (f"listening on {config.listen_host} needs the run's client token (owner pipe) "
                "and peer_network; refusing to serve anyone who can reach it")
    return None


def _watch_owner(loop: asyncio.AbstractEventLoop, fd: int, stop: Callable[[], None],
                 on_line: Callable[[bytes], None] | None = None) -> None:
    """Stop when the owner's pipe reaches EOF: the sbx process that started us is gone. Whole
    lines before that go to ``on_line`` (sbx.domain.egress.proxycontrol); without it, or
    past the bound, they are dropped."""
    os.set_blocking(fd, False)
    pending = bytearray()

    def readable() -> None:
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            loop.remove_reader(fd)
            stop()
            return
        if on_line is None:
            return
        pending.extend(data)
        while (end := pending.find(b"\n")) >= 0:
            line = bytes(pending[:end + 1])
            del pending[:end + 1]
            on_line(line)
        if len(pending) > proxycontrol.MAX_LINE_BYTES:
            pending.clear()

    loop.add_reader(fd, readable)


def _policy_writer(config: ProxyConfig, report: Callable[[str], None],
                   ) -> Callable[[bytes], None] | None:
    """A proxy in a container keeps its owner's user policy in its own tmpfs: each new text
    the owner sends replaces that file, which the proxy follows as it follows the host's."""
    path = config.user_policy
    if not config.stream_records or path is None:
        return None

    def write(line: bytes) -> None:
        text = proxycontrol.decode_policy(line)
        if text is None:
            return
        fresh = path.with_name(f".{path.name}.new")
        try:
            fd = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            try:
                view = memoryview(text)
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)
            os.replace(fresh, path)
        except OSError as error:
            report(f"cannot keep the new user policy: {error.strerror}")

    return write


def _owner_token(config: ProxyConfig, fd: int) -> tuple[str, dict[str, str]] | int:
    """The client token ("" for none) and the provided secrets from the owner's pipe, or the
    exit status to end with."""
    try:
        line = read_owner_line(fd)
    except OSError as error:
        write_stderr(f"cannot read the owner's pipe: {error.strerror}")
        return 1
    if line is None:
        write_stderr("the owner's pipe ended before the first line: nobody owns this proxy")
        return 1
    token, _, payload = line.partition("|")
    provided: dict[str, str] = {}
    if payload:
        try:
            provided = decode_provided(payload)
        except ValueError:
            write_stderr("the owner's pipe carried malformed secrets")
            return 2
    refused = startable(config, token or None)
    if refused is not None:
        write_stderr(refused)
        return 2
    return token, provided


def main(argv: Sequence[str] | None = None, *, owner_fd: int | None = None) -> int:
    """The proxy process. ``owner_fd`` (default: stdin) is the owner's pipe: its first line is
    the client token (empty: none), and its EOF ends the proxy."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) not in (1, 2):
        write_stderr("usage: python -m sbx.proxy CONFIG_PATH [RUN_ID] "
                      "(stdin: the owner's pipe)")
        return 2
    try:
        config = ProxyConfig.load(Path(args[0]))
        if len(args) == 2 and args[1] != config.run_id:
            write_stderr(f"run id {args[1]!r} does not match the config's {config.run_id!r}")
            return 2
    except SbxError as error:
        write_stderr(str(error))
        return 1
    fd = sys.stdin.fileno() if owner_fd is None else owner_fd
    owned = _owner_token(config, fd)
    if isinstance(owned, int):
        return owned
    token = owned[0] or None
    provided = owned[1]
    try:
        ca = CertificateAuthority.load_or_create(config.state_home)
    except SbxError as error:
        write_stderr(str(error))
        return 1
    notes: list[str] = []
    secrets = load_secrets(config, notes.append, provided=provided)
    values = list(secrets.values())  # every value ever loaded: redacted from what is logged

    def report(message: str) -> None:
        write_stderr(redact(message, values))

    for note in notes:
        report(note)
    try:
        proxy = EgressProxy(config, server_context=ca.ssl_context_for, secrets=secrets,
                            stderr=report, client_token=token)
    except SbxError as error:
        report(str(error))
        return 1

    def reload() -> None:
        fresh = load_secrets(config, report, provided=provided)
        values.extend(v for v in fresh.values() if v not in values)
        proxy.replace_secrets(fresh)

    def ready(port: int) -> None:
        sys.stdout.write(PROXY.ready_line(port))
        sys.stdout.flush()

    async def run() -> None:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, proxy.stop)
        loop.add_signal_handler(signal.SIGINT, proxy.stop)
        loop.add_signal_handler(signal.SIGUSR1, proxy.switch_to_runtime)
        loop.add_signal_handler(signal.SIGHUP, reload)
        _watch_owner(loop, fd, proxy.stop, _policy_writer(config, report))
        await proxy.serve(ready)

    try:
        asyncio.run(run())
    except OSError as error:
        where = (f"{config.listen_host}:{config.listen_port}" if error.filename is None
                 else f"the ssh-agent relay's socket {error.filename}")
        report(f"cannot listen on {where}: {error.strerror}")
        return 1
    return 0


__all__ = ["OWNER_LINE_LIMIT", "load_secrets", "main", "read_owner_line", "startable"]
