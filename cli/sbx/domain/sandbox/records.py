"""Named sandboxes' records: what a sandbox was created with, kept in the state home.

``<state>/sandboxes/<name>/sandbox.json`` holds the creation request (so a later ``sbx run
--name`` starts the sandbox exactly as it was created) and the ids of what it owns (container,
network, volumes, per-run image). Everything it owns also carries the label ``dev.sbx.name``,
so ``sbx ls``/``rm`` and ``gc`` can find it even when the record is gone.

A name is 2-63 characters, ``[A-Za-z0-9][A-Za-z0-9.-]*[A-Za-z0-9]``, unique per state home;
creating one takes an exclusive lock on the name, so two concurrent ``sbx run --name N`` create
it exactly once.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.seams import owned

SANDBOXES_DIR: Final = "sandboxes"
RECORD_FILE: Final = "sandbox.json"
NAME_PATTERN: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]{0,61}[A-Za-z0-9]")
RECORD_VERSION: Final = 1
MAX_RECORD_BYTES: Final = 1024 * 1024


def check_name(name: str) -> str:
    if not NAME_PATTERN.fullmatch(name):
        shown = name if len(name) <= 80 and name.isprintable() else repr(name[:80])
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"{shown!s} is not a sandbox name: 2-63 letters, digits, '.' or '-', "
                       "starting and ending with a letter or digit",
                       hint="e.g. --name my-agent")
    return name


@dataclass
class SandboxRecord:
    """A named sandbox as created. ``request`` is the creation request (kits, args, workspace,
    mounts, user, limits...), replayed on every start; never a secret value."""

    name: str
    run_id: str
    created: float
    workload: str
    kits: list[str]
    workspace: str | None
    access: str
    request: dict[str, Any]
    container_id: str | None = None
    network: str | None = None
    volumes: list[str] = field(default_factory=list)
    image: str | None = None  # the per-sandbox image the create step committed
    home_volume: str | None = None
    tty: bool = True
    # The [engines] entry it was created on (None: the engine the environment names)
    engine: str | None = None
    engine_host: str | None = None
    version: int = RECORD_VERSION

    def as_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, indent=1)

    @classmethod
    def from_json(cls, text: str, where: Path) -> SandboxRecord:
        try:
            data = json.loads(text)
            if not isinstance(data, dict) or data.get("version") != RECORD_VERSION:
                raise ValueError("not a version-1 record")
            return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})
        except (ValueError, TypeError, RecursionError) as exc:
            raise SbxError(Reason.STATE_CORRUPT, f"the record {where} cannot be read ({exc})",
                           hint="Remove the sandbox with `sbx rm -f NAME` (its objects are "
                                "found by label) and create it again.") from exc


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


def kit_words(record: SandboxRecord) -> tuple[str, tuple[str, ...]]:
    """The workload and mixins as they can be found from anywhere (absolute paths, registry
    references), as recorded at creation; else as they were given."""
    state = record.request.get("kits_state")
    if isinstance(state, Mapping) and isinstance(state.get("workload"), str) \
            and isinstance(state.get("mixins"), list):
        return state["workload"], tuple(str(m) for m in state["mixins"])
    return record.workload, tuple(record.kits)


def record_summary(record: SandboxRecord) -> Mapping[str, Any]:
    return {"name": record.name, "workload": record.workload, "kits": record.kits,
            "workspace": record.workspace, "created": record.created}


__all__ = ["NAME_PATTERN", "SandboxRecord", "SandboxStore", "check_name", "kit_words",
           "record_summary"]
