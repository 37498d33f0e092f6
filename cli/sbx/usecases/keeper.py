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
   starting ``sbx`` then points the recorded port at it (:mod:`sbx.seams.host.firewall`);
2. forwards the sandbox's published ports (kits' ``port@1`` and ``-p``: its ``ports.json``,
   :mod:`sbx.usecases.publishedports`), listening before its ready line, so they stay
   reachable with no ``sbx`` attached; a sandbox with ports and no egress has a keeper that
   runs no proxy;
3. watches the sandbox's container through the engine (once a second): when it is no longer
   running — stopped, exited, removed — it stops the proxy and the forwarder and exits;
4. fails closed: if the proxy dies, the keeper exits too and the sandbox has no egress until
   its next start (``sbx run --name`` starts a new keeper).

It is started with ``start_new_session`` (no terminal: a closed SSH session does not reach it)
and records its pid in the run directory (``keeper.pid``) for ``sbx stop``/``rm`` and ``gc``.
This module is the starting ``sbx``'s side; the keeper itself is the program :mod:`sbx.keeper`
(its start and ready line: :data:`sbx.seams.host.handshake.KEEPER`).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.egress.plan import owner_line, write_proxy_config
from sbx.seams import owned
from sbx.seams.host import private, processes
from sbx.seams.host.handshake import KEEPER
from sbx.usecases import idlestop

START_TIMEOUT_S: Final = 20.0
STOP_WAIT_S: Final = 5.0  # a stopped keeper's ports are free within this (it polls each 0.2 s)
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

    def wait_ready(self) -> None:
        """Started ready: its keeper answers once the proxy listens."""
        return

    def switch_to_runtime(self) -> None:
        """Close the install phase (SIGUSR1 to the proxy) and wait for its ack, bounded."""
        import signal

        phase_file = self.run_dir / "proxy.phase"
        with contextlib.suppress(OSError):
            processes.send_signal(self.keeper.proxy_pid, signal.SIGUSR1)
        import time

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
    write_proxy_config(config_json, run_dir)
    private.create_new(run_dir / TOKEN_FILE, token.encode("ascii"))
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


def start_port_keeper(run_dir: Path, run_id: str) -> KeptProxy:
    """A keeper for a named sandbox without egress that publishes ports: it forwards them (its
    ``ports.json``, sbx.usecases.publishedports) and runs no proxy (its ready line says 0 0)."""
    return KeptProxy(start_keeper(run_dir, run_id, "", None), run_dir, run_id)


def ensure_idle_keeper(run_dir: Path, run_id: str, engine_env: Mapping[str, str]) -> None:
    """A named sandbox with an idle stop and no keeper (no egress, no ports) gets one that
    runs no proxy: it is the keeper that watches for idleness (sbx.usecases.idlestop)."""
    if idlestop.read_settings(run_dir) is None or keeper_alive(run_dir, run_id):
        return
    start_keeper(run_dir, run_id, "", None, engine_env=engine_env)


def keeper_alive(run_dir: Path, run_id: str) -> bool:
    return _keeper_pid(run_dir, run_id) is not None


def _keeper_pid(run_dir: Path, run_id: str) -> int | None:
    """The pid ``keeper.pid`` names, if it is alive and really this run's keeper."""
    try:
        raw = owned.read_bytes(run_dir / PID_FILE, max_bytes=MAX_SMALL_FILE_BYTES)
        pid = int((raw or b"").strip())
    except (OSError, ValueError, SbxError):
        return None
    cmdline = processes.cmdline(pid)
    ok = cmdline is not None and run_id.encode() in cmdline and KEEPER.runs_as(cmdline)
    return pid if ok else None


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


def start_keeper(run_dir: Path, run_id: str, token: str,
                 secrets: Mapping[str, str] | None = None, *,
                 engine_env: Mapping[str, str] | None = None) -> KeeperHandle:
    """Start a detached keeper for ``run_dir`` (its ``proxy.json`` written before) and wait
    for its ready line (bounded). Its stdin gets the proxy's owner line: the token, then the
    encoded secrets."""
    log = run_dir / "keeper.log"
    program = processes.start_program(
        KEEPER, (str(run_dir), run_id), owner_line=owner_line(token, secrets), log=log,
        append_log=True, env=keeper_environment(os.environ, engine_env),
        ready_timeout=START_TIMEOUT_S,
        keep_owner_pipe=False)
    if program is None:
        raise SbxError(Reason.PROXY_FAILED,
                       "the named sandbox's egress proxy did not start; the sandbox does not "
                       "start without it", hint=f"See {log} and the proxy's log beside it.")
    port, proxy_pid = program.ready
    return KeeperHandle(program.pid, proxy_pid, port)


def stop_keeper(run_dir: Path, run_id: str, *, wait_s: float = 0.0) -> None:
    """Stop a sandbox's keeper (and so its proxy and ports), only if the recorded pid is really
    it; waiting up to ``wait_s`` for it to be gone (its ports free for the next start)."""
    import signal

    pid = _keeper_pid(run_dir, run_id)
    if pid is None:
        return  # gone, or the pid was reused by another process: never signal it
    with contextlib.suppress(OSError):
        processes.send_signal(pid, signal.SIGTERM)
    import time

    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and processes.pid_alive(pid):  # bounded by wait_s
        time.sleep(0.05)


_PROCESS_KEYS: Final = ("PATH", "LANG", "LC_ALL", "PYTHONPATH", "SSL_CERT_FILE", "SSL_CERT_DIR")
# What names the engine a sandbox is on (and how to reach it); the command's own context
# chose it (a fleet entry, --engine), which may differ from this process's environment.
_ENGINE_KEYS: Final = ("DOCKER_HOST", "DOCKER_CONTEXT", "DOCKER_CONFIG", "DOCKER_CERT_PATH",
                       "DOCKER_TLS_VERIFY", "XDG_RUNTIME_DIR")


def keeper_environment(process: Mapping[str, str],
                       engine_env: Mapping[str, str] | None) -> dict[str, str]:
    """The keeper's environment: this process's basics, and the engine of the sandbox's
    command (``engine_env``, else this process's) so it watches the engine the sandbox is on."""
    engine = process if engine_env is None else engine_env
    return {**{k: v for k, v in process.items() if k in _PROCESS_KEYS},
            **{k: v for k, v in engine.items() if k in _ENGINE_KEYS}}


__all__ = ["MOVED_CONFIG", "PID_FILE", "KeeperHandle", "KeptProxy", "ensure_idle_keeper",
           "keeper_environment",
           "keeper_alive", "recorded_port",
           "restart_kept_proxy", "start_kept_proxy", "start_keeper", "start_port_keeper",
           "stop_keeper"]
