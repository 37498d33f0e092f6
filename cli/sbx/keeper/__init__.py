"""The keeper program: a named sandbox's proxy, outliving the terminal.

The keeper of a named sandbox's egress proxy, as a program of its own:
``python -m sbx.keeper RUN_DIR RUN_ID`` (its start and ready line:
:data:`sbx.seams.host.handshake.KEEPER`; what it is for: :mod:`sbx.usecases.keeper`, the
starting ``sbx``'s side).

It reads the proxy's owner line on its stdin, starts the proxy on the run's config (on a free
port when the recorded one is taken), writes its pid to ``keeper.pid``, prints
``SBX-KEEPER-READY <port> <proxy pid>`` and closes its stdout; then it watches the sandbox's
container once a second and stops the proxy (and exits) when the container no longer runs, or
exits when the proxy dies (fail closed).
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
from sbx.domain.sandbox import runrecord
from sbx.seams import owned
from sbx.seams.engine import Containers
from sbx.seams.host.handshake import KEEPER
from sbx.seams.transports import open_engine
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
    return runrecord.container_id(run_dir)


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
    proxy = _launch(run_dir, run_id, token or None, secrets)
    try:
        (run_dir / PID_FILE).write_text(str(os.getpid()), encoding="utf-8")
        sys.stdout.write(KEEPER.ready_line(proxy.port, proxy.pid))
        sys.stdout.flush()
        sys.stdout.close()
        driver: Containers = open_engine(dict(os.environ))
        started = time.monotonic()
        seen_running = False
        while proxy.alive():
            time.sleep(POLL_S)
            container = _container_id(run_dir)
            state = None
            if container is not None:
                try:
                    state = driver.container_state(container)
                except SbxError:
                    continue  # the engine is busy or restarting: ask again
            if state == "running":
                seen_running = True
                continue
            if seen_running or (container is not None and state is None) \
                    or time.monotonic() - started > FIRST_START_WAIT_S:
                return 0  # the sandbox stopped (or never came): its proxy goes with it
        return 1  # the proxy died: fail closed (no egress until the next start)
    finally:
        proxy.stop()
        with contextlib.suppress(OSError):
            (run_dir / PID_FILE).unlink()


__all__ = ["main"]
