"""The keeper of a named sandbox's egress proxy: egress that outlives the terminal.

A one-shot run's proxy lives as long as the ``sbx`` process that started it (it holds the
proxy's owner pipe). A named sandbox outlives every ``sbx`` process, so its proxy is owned by a
small detached process instead — the keeper — that:

1. starts the proxy on the run's config (the port recorded at creation, the same per-sandbox
   token, so the container's proxy environment stays right across stop/start) and reports
   ``SBX-KEEPER-READY <port> <proxy pid>`` on its stdout, then closes it. The secrets the
   starting ``sbx`` resolved (keyring, host variable, host command: resolved at every start,
   as for a one-shot run) come on its stdin after the token, and go on to the proxy's owner
   pipe: never a file, an argument or the environment. When the recorded port is taken (by
   another local user, say), the proxy listens on a free one and the ready line says so; the
   starting ``sbx`` then points the recorded port at it (:mod:`sbx.seams.firewall`);
2. watches the sandbox's container through the engine (once a second): when it is no longer
   running — stopped, exited, removed — it stops the proxy and exits;
3. fails closed: if the proxy dies, the keeper exits too and the sandbox has no egress until
   its next start (``sbx run --name`` starts a new keeper).

It is started with ``start_new_session`` (no terminal: a closed SSH session does not reach it)
and records its pid in the run directory (``keeper.pid``) for ``sbx stop``/``rm`` and ``gc``.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.seams import owned

READY_PREFIX: Final = "SBX-KEEPER-READY "
START_TIMEOUT_S: Final = 20.0
POLL_S: Final = 1.0
FIRST_START_WAIT_S: Final = 900.0  # the create step (install hooks) may take this long
PID_FILE: Final = "keeper.pid"
TOKEN_FILE: Final = "proxy.token"  # noqa: S105 - a file name, not a password
MOVED_CONFIG: Final = "proxy.moved.json"  # the proxy's config on a free port (recorded taken)
MAX_SMALL_FILE_BYTES: Final = 4096
MAX_CONFIG_BYTES: Final = 16 * 1024 * 1024


@dataclass(frozen=True)
class KeeperHandle:
    """What the starting ``sbx`` learns of a keeper."""

    pid: int
    proxy_pid: int
    port: int


@dataclass
class KeptProxy:
    """A named sandbox's proxy as the starting ``sbx`` sees it (the keeper owns it)."""

    keeper: KeeperHandle
    run_dir: Path
    run_id: str

    @property
    def port(self) -> int:
        return self.keeper.port

    @property
    def pid(self) -> int:
        return self.keeper.proxy_pid

    def switch_to_runtime(self) -> None:
        """Close the install phase (SIGUSR1 to the proxy) and wait for its ack, bounded."""
        import signal

        phase_file = self.run_dir / "proxy.phase"
        with contextlib.suppress(OSError):
            os.kill(self.keeper.proxy_pid, signal.SIGUSR1)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                phase = owned.read_bytes(phase_file, max_bytes=MAX_SMALL_FILE_BYTES)
                if phase is not None and phase.strip() == b"runtime":
                    _persist_for_restart(self.run_dir, self.port)
                    return
            time.sleep(0.02)
        raise SbxError(Reason.PROXY_FAILED,
                       "the egress proxy did not confirm closing the install phase")

    def stop(self) -> None:
        stop_keeper(self.run_dir, self.run_id)


def start_kept_proxy(config_json: str, run_dir: Path, run_id: str, token: str,
                     secrets: Mapping[str, str] | None = None) -> KeptProxy:
    """Write the proxy's config and the sandbox's proxy token (0600, for its later starts) and
    start a keeper for them, handing it ``secrets`` (service → value) over its pipe."""
    from sbx.domain.egress.plan import write_proxy_config

    write_proxy_config(config_json, run_dir)
    fd = os.open(run_dir / TOKEN_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as handle:
        handle.write(token)
    kept = KeptProxy(start_keeper(run_dir, run_id, token, secrets), run_dir, run_id)
    _persist_for_restart(run_dir, kept.port)
    return kept


def restart_kept_proxy(run_dir: Path, run_id: str,
                       secrets: Mapping[str, str] | None = None) -> KeptProxy:
    """The keeper for a later start of a named sandbox: the recorded port (or a free one when
    it is taken: :func:`recorded_port` says which the sandbox uses) and token, in the runtime
    phase (install hooks ran at creation), with the secrets resolved for this start."""
    raw = owned.read_bytes(run_dir / TOKEN_FILE, max_bytes=MAX_SMALL_FILE_BYTES)
    if raw is None:
        raise SbxError(Reason.PROXY_FAILED, f"the sandbox's proxy token {run_dir / TOKEN_FILE} "
                       "is missing; the sandbox does not start without its egress proxy",
                       hint="Remove the sandbox (`sbx rm NAME`) and create it again.")
    token = raw.decode("ascii", "replace").strip()
    return KeptProxy(start_keeper(run_dir, run_id, token, secrets), run_dir, run_id)


def recorded_port(run_dir: Path) -> int | None:
    """The proxy port the sandbox's environment names (recorded at creation)."""
    try:
        raw = owned.read_bytes(run_dir / "proxy.json", max_bytes=MAX_CONFIG_BYTES)
        port = json.loads(raw or b"")["listen_port"]
    except (OSError, ValueError, KeyError, TypeError, SbxError):
        return None
    return port if isinstance(port, int) and 0 < port < 65536 else None


def _persist_for_restart(run_dir: Path, port: int) -> None:
    """Later starts bind the same port (the container's proxy variables name it) and begin
    in the runtime phase; the phase only goes forward (install → runtime)."""
    path = run_dir / "proxy.json"
    try:
        raw = owned.read_bytes(path, max_bytes=MAX_CONFIG_BYTES)
        data = json.loads(raw) if raw is not None else None
    except (OSError, ValueError):
        return
    if not isinstance(data, dict):
        return
    data["listen_port"] = port
    with contextlib.suppress(OSError):
        phase = owned.read_bytes(run_dir / "proxy.phase", max_bytes=MAX_SMALL_FILE_BYTES)
        if phase is not None and phase.decode("ascii", "replace").strip() == "runtime":
            data["phase"] = "runtime"
    owned.write_file(path, json.dumps(data).encode("utf-8"))


def keeper_argv(run_dir: Path, run_id: str) -> list[str]:
    return [sys.executable, "-m", "sbx.usecases.keeper", str(run_dir), run_id]


def start_keeper(run_dir: Path, run_id: str, token: str,
                 secrets: Mapping[str, str] | None = None) -> KeeperHandle:
    """Start a detached keeper for ``run_dir`` (its ``proxy.json`` written before) and wait
    for its ready line (bounded). Its stdin gets the proxy's owner line: the token, then the
    encoded secrets."""
    from sbx.domain.egress.plan import owner_line

    log = run_dir / "keeper.log"
    with log.open("ab") as stderr:
        process = subprocess.Popen(keeper_argv(run_dir, run_id), stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=stderr,
                                   start_new_session=True, env=_environment())
    assert process.stdin is not None and process.stdout is not None  # noqa: S101 - PIPEs
    try:
        process.stdin.write(owner_line(token, secrets))
        process.stdin.close()
    except OSError:
        pass
    deadline = time.monotonic() + START_TIMEOUT_S
    line = b""
    while time.monotonic() < deadline and process.poll() is None:
        ready, _, _ = select.select([process.stdout], [], [], 0.1)
        if ready:
            line = process.stdout.readline()
            break
    process.stdout.close()
    text = line.decode("utf-8", "replace").strip()
    if not text.startswith(READY_PREFIX):
        with contextlib.suppress(OSError):
            process.kill()
        raise SbxError(Reason.PROXY_FAILED,
                       "the named sandbox's egress proxy did not start; the sandbox does not "
                       "start without it", hint=f"See {log} and the proxy's log beside it.")
    port, proxy_pid = (int(part) for part in text[len(READY_PREFIX):].split()[:2])
    return KeeperHandle(process.pid, proxy_pid, port)


def stop_keeper(run_dir: Path, run_id: str) -> None:
    """Stop a sandbox's keeper (and so its proxy), only if the recorded pid is really it."""
    import signal

    try:
        raw = owned.read_bytes(run_dir / PID_FILE, max_bytes=MAX_SMALL_FILE_BYTES)
        pid = int((raw or b"").strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError, SbxError):
        return
    if run_id.encode() not in cmdline or b"sbx.usecases.keeper" not in cmdline:
        return  # gone, or the pid was reused by another process: never signal it
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGTERM)


def _environment() -> dict[str, str]:
    keep = ("PATH", "LANG", "LC_ALL", "PYTHONPATH", "DOCKER_HOST", "DOCKER_CONFIG",
            "DOCKER_CERT_PATH", "DOCKER_TLS_VERIFY", "SSL_CERT_FILE", "SSL_CERT_DIR")
    return {k: v for k, v in os.environ.items() if k in keep}


# -- the keeper process ---------------------------------------------------------------------


def _launch(run_dir: Path, run_id: str, token: str | None,
            secrets: Mapping[str, str]) -> Any:
    """The proxy on the recorded config; when its port is taken by someone else, the same
    config on a free port (``proxy.moved.json``), so the sandbox still starts."""
    from sbx.domain.egress.plan import launch_proxy

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
    from sbx.domain.sandbox.runrecord import container_id

    return container_id(run_dir)


def main(argv: Sequence[str] | None = None) -> int:
    import signal

    from sbx.domain.credentials.secrets import decode_provided
    from sbx.seams.engine import Containers
    from sbx.seams.transports import open_engine

    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        sys.stderr.write("usage: python -m sbx.usecases.keeper RUN_DIR RUN_ID (stdin: token)\n")
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
        sys.stdout.write(f"{READY_PREFIX}{proxy.port} {proxy.pid}\n")
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


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["KeeperHandle", "KeptProxy", "keeper_argv", "main", "recorded_port",
           "restart_kept_proxy", "start_kept_proxy", "start_keeper", "stop_keeper"]
