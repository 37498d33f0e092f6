"""The named sandboxes' records on disk: ``<state>/sandboxes/<name>/sandbox.json`` loaded,
saved and forgotten, the names listed, and each name's lock.

What a record holds and what a name may be is :mod:`sbx.domain.sandbox.records`'s; a record is
read back only when it is this user's own (:mod:`sbx.seams.owned`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.sandbox.records import (
    MAX_RECORD_BYTES,
    NAME_PATTERN,
    RECORD_FILE,
    SANDBOXES_DIR,
    SandboxRecord,
    check_name,
)
from sbx.seams import owned


class SandboxStore:
    """The named sandboxes of one state home."""

    def __init__(self, state_home: Path) -> None:
        self.root = state_home / SANDBOXES_DIR

    def directory(self, name: str) -> Path:
        return self.root / check_name(name)

    def load(self, name: str) -> SandboxRecord | None:
        path = self.directory(name) / RECORD_FILE
        try:
            raw = owned.read_prefix(path, MAX_RECORD_BYTES + 1)  # this user's own record only
        except OSError as exc:
            raise SbxError(Reason.STATE_UNWRITABLE,
                           f"the record {path} cannot be read ({exc.strerror})") from exc
        if raw is None:
            return None
        return SandboxRecord.from_json(raw.decode("utf-8", "replace"), path)

    def save(self, record: SandboxRecord) -> None:
        directory = self.directory(record.name)
        path = directory / RECORD_FILE
        try:
            owned.ensure_directory(directory)
            owned.write_file(path, record.as_json().encode("utf-8"))
        except OSError as exc:
            raise SbxError(Reason.STATE_UNWRITABLE,
                           f"the record {path} cannot be written ({exc.strerror})") from exc

    def forget(self, name: str) -> None:
        """Remove the record (the sandbox's objects were removed before)."""
        directory = self.directory(name)
        for child in (directory / RECORD_FILE, directory / f".{RECORD_FILE}.tmp"):
            with contextlib.suppress(FileNotFoundError):
                child.unlink()
        for leftover in sorted(directory.glob("*"), reverse=True) if directory.exists() else ():
            with contextlib.suppress(OSError):
                leftover.unlink() if leftover.is_file() else None
        with contextlib.suppress(OSError):
            directory.rmdir()

    def names(self) -> list[str]:
        try:
            entries = sorted(self.root.iterdir())
        except OSError:
            return []
        return [e.name for e in entries if NAME_PATTERN.fullmatch(e.name)
                and (e / RECORD_FILE).is_file()]

    @contextlib.contextmanager
    def locked(self, name: str) -> Iterator[None]:
        """Exclusive use of ``name`` while inside (start, removal)."""
        fd = self.acquire(name)
        try:
            yield
        finally:
            os.close(fd)

    def acquire(self, name: str) -> int:
        """Take the name's lock (blocking); the descriptor releases it when closed."""
        check_name(name)
        try:
            owned.ensure_directory(self.root)
            fd = owned.open_lock(self.root / f".{name}.lock")
        except OSError as exc:
            raise SbxError(Reason.STATE_UNWRITABLE,
                           f"cannot lock the sandbox name {name} ({exc.strerror})") from exc
        fcntl.flock(fd, fcntl.LOCK_EX)
        return fd


__all__ = ["SandboxStore"]
