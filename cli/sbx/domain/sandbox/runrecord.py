"""``runs/<id>/``: the record every run (and each of doctor's probes) keeps in the state home.

The record says what a run created, so ``sbx gc`` can remove what a crash left behind, and
``sbx explain`` and the keeper can find a run's container. This module is the only writer of
``run.json``; gc reads it defensively (:func:`sbx.usecases.gc.listing._read_record`) because a
crash can leave it torn. The owner lock (``owner.lock``), held for as long as the owning process
lives, tells gc an orphaned run from a live one: a pid can be reused, a lock cannot.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from sbx.base.errors import SbxError
from sbx.seams import owned, state

RUNS_DIR: Final = "runs"
RUN_RECORD: Final = "run.json"
OWNER_LOCK: Final = "owner.lock"
LOGINS_DIR: Final = "oauth"  # OAuth logins made inside the sandbox, its own (0600)
MAX_RECORD_BYTES: Final = 1024 * 1024
RUN_ID: Final = re.compile(r"[0-9a-f]{32}")


@dataclass(frozen=True)
class RunRecord:
    """What ``run.json`` holds. Fields gc reads: pid, deadline, proxy_pid, name."""

    run_id: str
    deadline: int
    workload: str
    pid: int = field(default_factory=os.getpid)
    kits: tuple[str, ...] = ()
    image: str | None = None
    run_image: str | None = None
    volumes: tuple[str, ...] = ()
    container_id: str | None = None
    proxy_pid: int | None = None
    name: str | None = None  # a named sandbox's: gc leaves it to `sbx rm`

    def as_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["kits"], data["volumes"] = list(self.kits), list(self.volumes)
        return data


def run_dir(state_home: Path, run_id: str) -> Path:
    return state_home / RUNS_DIR / run_id


def login_dir(state_home: Path, run_id: str) -> Path:
    """Where the egress proxy keeps the OAuth logins made inside this run's sandbox."""
    return run_dir(state_home, run_id) / LOGINS_DIR


def claim(state_home: Path, run_id: str, *, again: bool = False) -> tuple[Path, int]:
    """Make ``runs/<id>/`` and take its owner lock, before the run creates anything (gc never
    touches what a live owner holds); the descriptor stays open for as long as the run lives.
    :func:`create` then writes the record into it. ``again``: a recreated named sandbox's
    directory, which exists (checked as this user's own) and keeps its volumes."""
    path = run_dir(state_home, run_id)
    with state.writing(path, "write the run record in", home=state_home):
        owned.ensure_directory(path.parent)
        if again:
            owned.ensure_directory(path)
        else:
            path.mkdir(mode=0o700)  # a fresh id: an existing directory is not this run's
        lock_fd = owned.open_lock(path / OWNER_LOCK)
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
    return path, lock_fd


def create(state_home: Path, record: RunRecord, *, owner_lock: bool = False,
           claimed: bool = False) -> tuple[Path, int | None]:
    """Make ``runs/<id>/`` (already made by :func:`claim` when ``claimed``) and write its
    record; with ``owner_lock``, also take the owner lock and return its descriptor (the
    caller keeps it open for as long as the run lives).

    A full or read-only state home refuses here (``state_unwritable``), before anything that
    would need the record is created."""
    path = run_dir(state_home, record.run_id)
    with state.writing(path, "write the run record in", home=state_home):
        lock_fd: int | None = None
        if not claimed:
            owned.ensure_directory(path.parent)
            path.mkdir(mode=0o700)  # a fresh id: an existing directory is not this run's
            if owner_lock:
                lock_fd = owned.open_lock(path / OWNER_LOCK)
                fcntl.flock(lock_fd, fcntl.LOCK_EX)
        owned.write_file(path / RUN_RECORD, json.dumps(record.as_dict()).encode("utf-8"),
                         durable=False)
    return path, lock_fd


def update(path: Path, **changes: Any) -> None:
    """Set fields of the record in ``path`` (a run directory), e.g. ``container_id=...``."""
    record = path / RUN_RECORD
    with state.writing(record, "update the run record", home=path.parent.parent):
        raw = owned.read_bytes(record, max_bytes=MAX_RECORD_BYTES)
        if raw is None:
            raise FileNotFoundError(2, "No such file or directory", str(record))
        data = json.loads(raw)
        data.update({k: v for k, v in changes.items() if v is not None})
        owned.write_file(record, json.dumps(data).encode("utf-8"), durable=False)


def read(path: Path) -> dict[str, Any] | None:
    """The record in the run directory ``path``; None when it is missing, damaged or not this
    user's own file (sbx.seams.owned): never trusted, never raises."""
    try:
        raw = owned.read_bytes(path / RUN_RECORD, max_bytes=MAX_RECORD_BYTES)
        data = json.loads(raw) if raw is not None else None
    except (OSError, ValueError, RecursionError, SbxError):
        return None
    return data if isinstance(data, dict) else None


def container_id(path: Path) -> str | None:
    """The container recorded in the run directory ``path``, if any (never raises)."""
    data = read(path)
    cid = data.get("container_id") if data is not None else None
    return cid if isinstance(cid, str) and cid else None


__all__ = ["LOGINS_DIR", "MAX_RECORD_BYTES", "OWNER_LOCK", "RUNS_DIR", "RUN_ID", "RUN_RECORD",
           "RunRecord", "claim", "container_id", "create", "login_dir", "read", "run_dir",
           "update"]
