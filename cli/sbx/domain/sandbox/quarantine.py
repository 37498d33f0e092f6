"""Moving what a sandbox planted out of the way: never deleted, never left where tools run it.

Each item is renamed (one rename, no copy) into ``<quarantine>/<run>/``, which is
``.git/sbx-quarantine`` when the workspace has a ``.git`` directory and ``.sbx-quarantine``
otherwise. The run's directory is then made mode 000: a planted repository inside it is not a
place a shell prompt or a ``cd`` wanders into by accident, and later sandboxes get the
quarantine read-only. A manifest next to it (``<run>.json``) says what came from where and how
to put it back. What cannot be renamed (another file system) is made unreadable in place; a
symbolic link that cannot be moved is removed (its target is untouched and recorded).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
from dataclasses import dataclass, field
from typing import Final

from sbx.domain.sandbox.gitdirs import QUARANTINE_DIR, open_relative
from sbx.domain.sandbox.workspace_scan import WORKSPACE_QUARANTINE

QUARANTINED: Final = "quarantined"
LOCKED: Final = "made unreadable"  # could not be moved: mode 000 where it is
UNLINKED: Final = "link removed"
LEFT: Final = "left in place"
REPORTED: Final = "reported"


@dataclass(frozen=True)
class Moved:
    action: str
    moved_to: str | None = None
    problem: str | None = None


@dataclass
class Quarantine:
    """One run's quarantine in one workspace (created on the first move)."""

    root_fd: int
    root_path: str
    run_id: str
    items: list[dict[str, str]] = field(default_factory=list)
    _run_fd: int | None = None
    _base: str | None = None

    @property
    def directory(self) -> str | None:
        """The run's quarantine directory, once something was moved there."""
        return f"{self.root_path}/{self._base}/{self.run_id}" if self._base else None

    def move(self, relative: str, why: str) -> Moved:
        parent, _, name = relative.rpartition("/")
        parent_fd = open_relative(self.root_fd, parent)
        if parent_fd is None:
            return Moved(LEFT, problem="its directory could not be opened without following "
                                       "a symbolic link")
        try:
            status = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
            run_fd = self._run_directory()
            target = f"{len(self.items) + 1}-{_flat(relative)}"
            os.rename(name, target, src_dir_fd=parent_fd, dst_dir_fd=run_fd)
        except OSError as exc:
            return self._fallback(parent_fd, name, relative, exc)
        finally:
            os.close(parent_fd)
        self.items.append({"from": relative, "to": target, "why": why,
                           "kind": _kind(status.st_mode)})
        return Moved(QUARANTINED, moved_to=f"{self.directory}/{target}")

    def _fallback(self, parent_fd: int, name: str, relative: str, exc: OSError) -> Moved:
        if exc.errno == errno.ENOENT:
            return Moved(LEFT, problem="it was gone")
        try:
            status = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
            if stat.S_ISLNK(status.st_mode):
                target = os.readlink(name, dir_fd=parent_fd)
                os.unlink(name, dir_fd=parent_fd)
                return Moved(UNLINKED, problem=f"it pointed to {target}")
            os.chmod(name, 0, dir_fd=parent_fd, follow_symlinks=False)
        except OSError as second:
            return Moved(LEFT, problem=f"{exc.strerror}; {second.strerror}")
        return Moved(LOCKED, problem=f"it could not be moved ({exc.strerror})")

    def _run_directory(self) -> int:
        if self._run_fd is not None:
            return self._run_fd
        owner = os.fstat(self.root_fd)
        base = WORKSPACE_QUARANTINE
        with contextlib.suppress(OSError):
            if stat.S_ISDIR(os.stat(".git", dir_fd=self.root_fd, follow_symlinks=False).st_mode):
                base = f".git/{QUARANTINE_DIR}"
        directory = self.root_fd
        for part in [*base.split("/"), self.run_id]:
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o700, dir_fd=directory)
                with contextlib.suppress(OSError):
                    os.chown(part, owner.st_uid, owner.st_gid, dir_fd=directory,
                             follow_symlinks=False)
            opened = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                             dir_fd=directory)
            if directory != self.root_fd:
                os.close(directory)
            directory = opened
        self._run_fd = directory
        self._base = base
        return directory

    def close(self) -> str | None:
        """Write the manifest and close the run's directory to everyone; its path or None."""
        if self._run_fd is None:
            return None
        directory = self.directory
        manifest: dict[str, object] = {
            "run": self.run_id, "workspace": self.root_path, "moved": self.items,
            "restore": f"chmod 700 {directory} && mv {directory}/<to> {self.root_path}/<from>",
        }
        parent = open_relative(self.root_fd, self._base or "")
        try:
            if parent is not None:
                self._write_manifest(parent, manifest)
            os.fchmod(self._run_fd, 0)
        except OSError:
            pass
        finally:
            if parent is not None:
                os.close(parent)
            os.close(self._run_fd)
            self._run_fd = None
        return directory

    def _write_manifest(self, parent: int, manifest: dict[str, object]) -> None:
        owner = os.fstat(self.root_fd)
        fd = os.open(f"{self.run_id}.json", os.O_WRONLY | os.O_CREAT | os.O_TRUNC
                     | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=parent)
        try:
            with contextlib.suppress(OSError):
                os.fchown(fd, owner.st_uid, owner.st_gid)
            os.write(fd, (json.dumps(manifest, indent=2) + "\n").encode())
        finally:
            os.close(fd)


def _flat(relative: str) -> str:
    flat = relative.replace("/", "%")
    return flat if len(flat) <= 180 else flat[-180:]


def _kind(mode: int) -> str:
    return "directory" if stat.S_ISDIR(mode) else "link" if stat.S_ISLNK(mode) else "file"


__all__ = ["LEFT", "LOCKED", "QUARANTINED", "REPORTED", "UNLINKED", "Moved", "Quarantine"]
