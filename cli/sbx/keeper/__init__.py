"""The keeper program: a named sandbox's proxy and published ports, outliving the terminal.

The keeper of a named sandbox's egress proxy, as a program of its own:
``python -m sbx.keeper RUN_DIR RUN_ID`` (its start and ready line:
:data:`sbx.seams.host.handshake.KEEPER`; what it is for: :mod:`sbx.usecases.keeper`, the
starting ``sbx``'s side).

It reads the proxy's owner line on its stdin, starts the proxy on the run's config (on a free
port when the recorded one is taken; none without a config: a sandbox with ports only), listens
on the sandbox's published ports (``ports.json``), writes its pid to ``keeper.pid``, prints
``SBX-KEEPER-READY <port> <proxy pid>`` (0 0 without a proxy) and closes its stdout; then it
watches the sandbox's container once a second, points the forwarder at the container's address
once it runs, stops it when its idle stop says so (:class:`_IdleStop`), and stops the proxy
and the forwarder (and exits) when the container no longer runs, or exits when the proxy dies
(fail closed).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from sbx.base.errors import SbxError
from sbx.domain.credentials.secrets import decode_provided
from sbx.domain.egress.plan import launch_proxy
from sbx.domain.sandbox.idle import IdleWatch, Sample
from sbx.seams import owned
from sbx.seams.engine import Containers
from sbx.seams.host.handshake import KEEPER
from sbx.seams.ports import PortForwarder
from sbx.seams.transports import open_engine
from sbx.usecases import idlestop, publishedports, runstore
from sbx.usecases.keeper import MAX_CONFIG_BYTES, MOVED_CONFIG, PID_FILE

POLL_S: Final = 1.0
FIRST_START_WAIT_S: Final = 900.0  # the create step (install hooks) may take this long


def _launch(run_dir: Path, run_id: str, token: str | None,
            secrets: Mapping[str, str]) -> Any:
    """The proxy on the recorded config; when its port is taken by someone else, the same
    config on a free port (``proxy.moved.json``), so the sandbox still starts."""
    config = run_dir / "proxy.json"
    try:
        return launch_proxy(config, run_dir, run_id, client_token=token, secrets=secrets)
    except SbxError:
        data = json.loads(owned.read_bytes(config, max_bytes=MAX_CONFIG_BYTES) or b"{}")
        if not _taken(str(data.get("listen_host", "")), int(data.get("listen_port") or 0)):
            raise
    data["listen_port"] = 0
    moved = run_dir / MOVED_CONFIG
    owned.write_file(moved, json.dumps(data).encode("utf-8"))
    return launch_proxy(moved, run_dir, run_id, client_token=token, secrets=secrets)


def _taken(host: str, port: int) -> bool:
    """Whether ``host:port`` is held by another socket (the bind fails with EADDRINUSE)."""
    import errno
    import socket

    if not host or not 0 < port < 65536:
        return False
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((host, port))
        except OSError as error:
            return error.errno == errno.EADDRINUSE
    return False


def _container_id(run_dir: Path) -> str | None:
    return runstore.container_id(run_dir)


class _Ports:
    """The sandbox's published ports: listening from the start, forwarded to the container's
    address once it runs (it may change across stop/start)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        wanted = publishedports.read_wanted(run_dir)
        self.network = wanted[0] if wanted is not None else None
        self.forwarder = PortForwarder("")
        if wanted is not None:
            publishedports.write_published(run_dir, self.forwarder.start(wanted[1]))

    def follow(self, driver: Containers, container: str) -> None:
        if self.network is None or self.forwarder.target_ip:
            return
        with contextlib.suppress(SbxError):  # the engine is busy: asked again next time
            self.forwarder.target_ip = driver.container_ip(container, self.network) or ""

    def stop(self) -> None:
        self.forwarder.stop()
        publishedports.forget_published(self.run_dir)


class _IdleStop:
    """The sandbox's idle stop (``idle.json``, read once it runs): sampled once a second,
    decided by :class:`IdleWatch`; when idle, stopped as `sbx stop` does (SIGTERM, the same
    grace, then SIGKILL) after marking why (``stopped.json``)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.watch: IdleWatch | None = None
        self.read = False

    def check(self, driver: Containers, container: str) -> None:
        if not self.read:
            self.read = True
            period = idlestop.read_settings(self.run_dir)
            self.watch = IdleWatch(period) if period is not None else None
        if self.watch is None:
            return
        try:
            activity = driver.container_activity(container)
        except SbxError:
            activity = None  # the engine is busy: an unknown sample counts as activity
        if activity is not None and not activity.running:
            return  # it stopped: the watch loop sees it
        sample = Sample(time.time(), (activity.execs if activity else 0)
                        + idlestop.attached_count(self.run_dir),
                        idlestop.last_request(self.run_dir),
                        activity.cpu_ns if activity else None)
        if not self.watch.observe(sample):
            return
        idlestop.mark_stopped(self.run_dir, self.watch.idle_s, sample.at)
        sys.stderr.write(f"idle for {self.watch.idle_s:g} s: stopping the sandbox\n")
        with contextlib.suppress(SbxError):  # not stopped: still idle, tried again next time
            driver.stop(container, idlestop.STOP_TIMEOUT_S)


def _watch(run_dir: Path, proxy: Any, ports: _Ports) -> int:
    """Until the sandbox stops (0) or its proxy dies (1: fail closed)."""
    driver: Containers = open_engine(dict(os.environ))
    started = time.monotonic()
    seen_running = False
    idle = _IdleStop(run_dir)
    while proxy is None or proxy.alive():
        time.sleep(POLL_S)
        container = _container_id(run_dir)
        state = None
        if container is not None:
            try:
                state = driver.container_state(container)
            except SbxError:
                continue  # the engine is busy or restarting: ask again
        if state == "running" and container is not None:
            seen_running = True
            ports.follow(driver, container)
            idle.check(driver, container)
            continue
        if seen_running or (container is not None and state is None) \
                or time.monotonic() - started > FIRST_START_WAIT_S:
            return 0  # the sandbox stopped (or never came): its proxy goes with it
    return 1  # the proxy died: fail closed (no egress until the next start)


def main(argv: Sequence[str] | None = None) -> int:
    import signal

    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        sys.stderr.write("usage: python -m sbx.keeper RUN_DIR RUN_ID (stdin: token)\n")
        return 2
    run_dir, run_id = Path(args[0]), args[1]
    token, _, payload = sys.stdin.readline().strip().partition("|")
    try:
        secrets = decode_provided(payload) if payload else {}
    except ValueError:
        sys.stderr.write("the keeper's pipe carried malformed secrets\n")
        return 2

    def stop(_signum: int, _frame: object) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # no terminal can end it
    proxy = _launch(run_dir, run_id, token or None, secrets) \
        if (run_dir / "proxy.json").exists() else None
    ports: _Ports | None = None
    try:
        try:
            ports = _Ports(run_dir)
        except SbxError as error:  # port_taken: no ready line, so the start fails
            sys.stderr.write(f"{error.reason.value}: {error.message}\n")
            return 1
        (run_dir / PID_FILE).write_text(str(os.getpid()), encoding="utf-8")
        sys.stdout.write(KEEPER.ready_line(proxy.port if proxy else 0, proxy.pid if proxy else 0))
        sys.stdout.flush()
        sys.stdout.close()
        return _watch(run_dir, proxy, ports)
    finally:
        if ports is not None:
            ports.stop()
        if proxy is not None:
            proxy.stop()
        with contextlib.suppress(OSError):
            (run_dir / PID_FILE).unlink()


__all__ = ["main"]
