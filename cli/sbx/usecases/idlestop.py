"""Idle auto-stop of a named sandbox (``[sandbox] idle_stop``, ``--idle-stop``): what its run
directory holds for it, and the client lock its keeper counts.

- ``idle.json``: the period in effect for this start (written by the starting ``sbx`` before
  the container starts; the keeper reads it once it sees the container run);
- ``stopped.json``: why the keeper stopped it (``stopped_idle``, when, after how long), read by
  ``sbx ls`` and ``sbx explain NAME``, removed at its next start;
- ``clients/``: one lock file per attached ``sbx run``/``sbx attach``/``sbx exec`` client,
  held (``flock``) for as long as its session lasts; a lock nobody holds is a client that
  went away (even one that was killed), so the count is never stale.

The decision itself is :mod:`sbx.domain.sandbox.idle`; the watching is the keeper's
(:mod:`sbx.keeper`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.seams import owned

SETTINGS_FILE: Final = "idle.json"
STOPPED_FILE: Final = "stopped.json"
CLIENTS_DIR: Final = "clients"
MAX_FILE_BYTES: Final = 4096
STOP_TIMEOUT_S: Final = 10  # `sbx stop`'s grace (SIGTERM, then SIGKILL): the idle stop's too
MAX_CLIENTS: Final = 256  # lock files looked at per count: more is a busy sandbox anyway


@dataclass(frozen=True)
class IdleStopped:
    """Why a named sandbox is stopped: its keeper found it idle."""

    at: float
    idle_s: float
    reason: Reason = Reason.STOPPED_IDLE

    def as_dict(self) -> dict[str, Any]:
        return {"reason": self.reason.value, "at": round(self.at, 3), "idle_s": self.idle_s}


def write_settings(run_dir: Path, idle_s: float | None) -> None:
    """The period for this start (None: no idle stop); an earlier stop's mark goes."""
    with contextlib.suppress(OSError):
        (run_dir / STOPPED_FILE).unlink()
    if idle_s is None:
        with contextlib.suppress(OSError):
            (run_dir / SETTINGS_FILE).unlink()
        return
    owned.write_file(run_dir / SETTINGS_FILE, json.dumps({"idle_stop_s": idle_s}).encode(),
                     durable=False)


def effective(flag_s: Any, config_s: int | None) -> float | None:
    """The period for a start: the one the sandbox was created with (``--idle-stop``, as its
    record keeps it), else ``[sandbox] idle_stop`` as the config says now."""
    if isinstance(flag_s, int | float) and not isinstance(flag_s, bool) and flag_s > 0:
        return float(flag_s)
    return float(config_s) if config_s is not None else None


def read_settings(run_dir: Path) -> float | None:
    """The period in effect, or None (not set, or a file that cannot be read: never a stop
    on a guess)."""
    value = _read_json(run_dir / SETTINGS_FILE).get("idle_stop_s")
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value)
    return None


def mark_stopped(run_dir: Path, idle_s: float, at: float) -> None:
    owned.write_file(run_dir / STOPPED_FILE, json.dumps(
        IdleStopped(at, idle_s).as_dict()).encode(), durable=False)


def stopped_mark(run_dir: Path) -> IdleStopped | None:
    """The keeper's mark, if it stopped this sandbox for being idle (and it was not started
    since)."""
    data = _read_json(run_dir / STOPPED_FILE)
    at, idle_s = data.get("at"), data.get("idle_s")
    if data.get("reason") == Reason.STOPPED_IDLE.value and isinstance(at, int | float) \
            and isinstance(idle_s, int | float):
        return IdleStopped(float(at), float(idle_s))
    return None


@contextlib.contextmanager
def attached(run_dir: Path | None) -> Iterator[None]:
    """Count as a client of the sandbox while inside (no run directory: nothing to count)."""
    if run_dir is None:
        yield
        return
    fd: int | None = None
    path = run_dir / CLIENTS_DIR / f"{os.getpid()}-{os.urandom(4).hex()}.lock"
    fresh = path.with_suffix(".new")  # locked before it has the name the keeper counts
    try:
        owned.ensure_directory(path.parent)
        fd = owned.open_lock(fresh)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.rename(fresh, path)
    except (OSError, SbxError):
        # A run directory that refuses the lock file: the session goes on, uncounted.
        if fd is not None:
            os.close(fd)
            with contextlib.suppress(OSError):
                fresh.unlink()
        fd = None
    try:
        yield
    finally:
        if fd is not None:
            with contextlib.suppress(OSError):
                path.unlink()
            os.close(fd)


def attached_count(run_dir: Path) -> int:
    """How many clients hold their lock now; a lock nobody holds is removed."""
    directory = run_dir / CLIENTS_DIR
    try:
        names = sorted(os.listdir(directory))[:MAX_CLIENTS]
    except OSError:
        return 0
    held = 0
    for name in names:
        if not name.endswith(".lock"):
            continue
        path = directory / name
        try:
            fd = owned.open_lock(path)
        except (OSError, SbxError):
            held += 1  # cannot tell: counted as a client
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            held += 1
        else:
            with contextlib.suppress(OSError):
                path.unlink()
        finally:
            os.close(fd)
    return held


def last_request(run_dir: Path) -> float | None:
    """When the sandbox's proxy last wrote its request log (its config names the file)."""
    config = _read_json(run_dir / "proxy.json", max_bytes=16 * 1024 * 1024)
    log = config.get("request_log")
    if not isinstance(log, str) or not log:
        return None
    try:
        return os.stat(log).st_mtime
    except OSError:
        return None


def _read_json(path: Path, *, max_bytes: int = MAX_FILE_BYTES) -> dict[str, Any]:
    try:
        raw = owned.read_bytes(path, max_bytes=max_bytes)
        data = json.loads(raw) if raw is not None else None
    except (OSError, ValueError, SbxError):
        return {}
    return data if isinstance(data, dict) else {}


__all__ = ["IdleStopped", "attached", "attached_count", "effective", "last_request",
           "mark_stopped",
           "read_settings", "stopped_mark", "write_settings"]
