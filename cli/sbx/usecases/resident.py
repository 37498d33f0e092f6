"""`sbx resident start|stop|status`: this user's resident helper (sbx.resident), which serves
command lines from a process that has sbx imported already. sbx works the same without it."""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.seams import resident as wire
from sbx.seams.host import processes
from sbx.seams.host.handshake import RESIDENT
from sbx.usecases.context import AppContext

DEFAULT_IDLE_S: Final = 1800
MIN_IDLE_S: Final = 1
MAX_IDLE_S: Final = 7 * 86400
READY_TIMEOUT_S: Final = 60.0  # it imports all of sbx before it answers
STOP_WAIT_S: Final = 10.0
_STOP_POLL_S: Final = 0.05


@dataclass(frozen=True)
class HelperState:
    """What the helper of this interpreter, installation and user says of itself."""

    socket: Path
    running: bool
    answer: dict[str, Any]
    started_now: bool = False

    def as_json(self) -> dict[str, Any]:
        fields = {key: value for key, value in self.answer.items() if key != "op"}
        return {**fields, "running": self.running, "socket": str(self.socket),
                "started_now": self.started_now}


def socket_path(app: AppContext) -> Path:
    """Where this process's callers look: its interpreter, installation and module path (the
    console script's directory, ``sys.path[0]``, is not on the helper's)."""
    return Path(wire.socket_path(app.env, sys.path[1:]))


def status(app: AppContext) -> HelperState:
    """A helper whose code on disk changed answers once, as stale, and stops serving."""
    path = socket_path(app)
    answer = wire.ask(str(path), "status")
    return HelperState(path, answer is not None and not answer.get("stale"), answer or {})


def start(app: AppContext, idle_s: int) -> HelperState:
    if not MIN_IDLE_S <= idle_s <= MAX_IDLE_S:
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"--idle {idle_s} is outside {MIN_IDLE_S}..{MAX_IDLE_S} seconds",
                       hint=f"sbx resident start --idle {DEFAULT_IDLE_S}")
    path = socket_path(app)
    _private_dir(path.parent)
    answer = wire.ask(str(path), "status")
    if answer is not None and not answer.get("stale"):
        return HelperState(path, True, answer)
    if answer is not None and not _ended(answer.get("pid")):
        raise SbxError(Reason.RESIDENT_UNAVAILABLE,
                       f"the helper of sbx's previous code (pid {answer.get('pid')}) still runs "
                       f"{answer.get('commands_running', 0)} of its commands; it exits when "
                       "they end", hint="sbx resident start")
    log = path.parent / "resident.log"
    program = processes.start_program(
        RESIDENT, [str(path), str(idle_s)], owner_line=b"", log=log, env=app.env,
        ready_timeout=READY_TIMEOUT_S, keep_owner_pipe=False)
    if program is None:
        raise SbxError(Reason.RESIDENT_UNAVAILABLE,
                       f"the resident helper did not start; its log is {log}",
                       hint=f"tail {log}")
    answer = wire.ask(str(path), "status")
    if answer is None:
        raise SbxError(Reason.RESIDENT_UNAVAILABLE,
                       f"the resident helper started but does not answer on {path}",
                       hint=f"tail {log}")
    return HelperState(path, True, answer, started_now=True)


def stop(app: AppContext) -> HelperState:
    """Ask the helper to stop (it ends once the commands it runs have ended) and wait a while
    for it to go."""
    path = socket_path(app)
    answer = wire.ask(str(path), "stop")
    if answer is None:
        return HelperState(path, False, {})
    _ended(answer.get("pid"))
    return HelperState(path, False, answer)


def _ended(pid: object) -> bool:
    """Whether the helper ``pid`` exited, waited for a while (it ends once its commands do)."""
    deadline = time.monotonic() + STOP_WAIT_S
    while isinstance(pid, int) and processes.pid_alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(_STOP_POLL_S)
    return True


def _private_dir(directory: Path) -> None:
    """The helper's directory, made 0700 when missing; one not private to this user refused."""
    uid = os.getuid()
    try:
        directory.mkdir(mode=0o700)
    except FileExistsError:
        pass  # judged below, whoever made it
    except OSError as exc:
        raise SbxError(Reason.RESIDENT_UNAVAILABLE,
                       f"cannot make the resident helper's directory {directory}: "
                       f"{exc.strerror or exc}", hint=f"mkdir -m 700 {directory}") from exc
    if not wire.private_dir(directory, uid):
        try:
            owner = directory.lstat().st_uid
        except OSError:
            owner = uid
        hint = f"chmod 700 {directory}" if owner == uid and directory.is_dir() \
            and not directory.is_symlink() else \
            "export XDG_RUNTIME_DIR=DIR  # a directory of yours, mode 0700"
        raise SbxError(Reason.RESIDENT_UNAVAILABLE,
                       f"{directory} is not a directory of uid {uid} closed to everyone else"
                       + (f" (it belongs to uid {owner})" if owner != uid else ""), hint=hint)


__all__ = ["DEFAULT_IDLE_S", "HelperState", "socket_path", "start", "status", "stop"]
