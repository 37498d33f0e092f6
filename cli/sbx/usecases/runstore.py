"""``runs/<id>/`` on disk: the run directory made and locked by its owner, its record
(:class:`~sbx.domain.sandbox.runrecord.RunRecord`) written, updated and read back.

The only writer of ``run.json``. Writes that fail become ``state_unwritable``
(:mod:`sbx.seams.state`); every file read back must be this user's own
(:mod:`sbx.seams.owned`).
"""

from __future__ import annotations

import fcntl
import json
from pathlib import Path
from typing import Any

from sbx.base.errors import SbxError
from sbx.domain.sandbox import runrecord
from sbx.seams import owned, state


def claim(state_home: Path, run_id: str, *, again: bool = False) -> tuple[Path, int]:
    """Make ``runs/<id>/`` and take its owner lock, before the run creates anything (gc never
    touches what a live owner holds); the descriptor stays open for as long as the run lives.
    :func:`create` then writes the record into it. ``again``: a recreated named sandbox's
    directory, which exists (checked as this user's own) and keeps its volumes."""
    path = runrecord.run_dir(state_home, run_id)
    with state.writing(path, "write the run record in", home=state_home):
        owned.ensure_directory(path.parent)
        if again:
            owned.ensure_directory(path)
        else:
            path.mkdir(mode=0o700)  # a fresh id: an existing directory is not this run's
        lock_fd = owned.open_lock(path / runrecord.OWNER_LOCK)
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
    return path, lock_fd


def create(state_home: Path, record: runrecord.RunRecord, *, owner_lock: bool = False,
           claimed: bool = False) -> tuple[Path, int | None]:
    """Make ``runs/<id>/`` (already made by :func:`claim` when ``claimed``) and write its
    record; with ``owner_lock``, also take the owner lock and return its descriptor (the
    caller keeps it open for as long as the run lives).

    A full or read-only state home refuses here (``state_unwritable``), before anything that
    would need the record is created."""
    path = runrecord.run_dir(state_home, record.run_id)
    with state.writing(path, "write the run record in", home=state_home):
        lock_fd: int | None = None
        if not claimed:
            owned.ensure_directory(path.parent)
            path.mkdir(mode=0o700)  # a fresh id: an existing directory is not this run's
            if owner_lock:
                lock_fd = owned.open_lock(path / runrecord.OWNER_LOCK)
                fcntl.flock(lock_fd, fcntl.LOCK_EX)
        owned.write_file(path / runrecord.RUN_RECORD,
                         json.dumps(record.as_dict()).encode("utf-8"), durable=False)
    return path, lock_fd


def update(path: Path, **changes: Any) -> None:
    """Set fields of the record in ``path`` (a run directory), e.g. ``container_id=...``."""
    record = path / runrecord.RUN_RECORD
    with state.writing(record, "update the run record", home=path.parent.parent):
        raw = owned.read_bytes(record, max_bytes=runrecord.MAX_RECORD_BYTES)
        if raw is None:
            raise FileNotFoundError(2, "No such file or directory", str(record))
        data = json.loads(raw)
        data.update({k: v for k, v in changes.items() if v is not None})
        owned.write_file(record, json.dumps(data).encode("utf-8"), durable=False)


def read(path: Path) -> dict[str, Any] | None:
    """The record in the run directory ``path``; None when it is missing, damaged or not this
    user's own file (sbx.seams.owned): never trusted, never raises."""
    try:
        raw = owned.read_bytes(path / runrecord.RUN_RECORD, max_bytes=runrecord.MAX_RECORD_BYTES)
        data = json.loads(raw) if raw is not None else None
    except (OSError, ValueError, RecursionError, SbxError):
        return None
    return data if isinstance(data, dict) else None


def container_id(path: Path) -> str | None:
    """The container recorded in the run directory ``path``, if any (never raises)."""
    data = read(path)
    cid = data.get("container_id") if data is not None else None
    return cid if isinstance(cid, str) and cid else None


__all__ = ["claim", "container_id", "create", "read", "update"]
