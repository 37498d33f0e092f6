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
import stat
from dataclasses import dataclass, field
from typing import Final

from sbx.domain.sandbox.gitdirs import QUARANTINE_DIR, open_relative
from sbx.domain.sandbox.workspace_scan import WORKSPACE_QUARANTINE
from sbx.seams.host import dirfds

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
            status = dirfds.own_status_at(parent_fd, name)
            run_fd = self._run_directory()
            target = f"{len(self.items) + 1}-{_flat(relative)}"
            dirfds.rename_between(parent_fd, name, run_fd, target)
        except OSError as exc:
            return self._fallback(parent_fd, name, relative, exc)
        finally:
            dirfds.close(parent_fd)
        self.items.append({"from": relative, "to": target, "why": why,
                           "kind": _kind(status.st_mode)})
        return Moved(QUARANTINED, moved_to=f"{self.directory}/{target}")

    def _fallback(self, parent_fd: int, name: str, relative: str, exc: OSError) -> Moved:
        if exc.errno == errno.ENOENT:
            return Moved(LEFT, problem="it was gone")
        try:
            status = dirfds.own_status_at(parent_fd, name)
            if stat.S_ISLNK(status.st_mode):
                target = dirfds.link_text_at(parent_fd, name)
                dirfds.unlink_at(parent_fd, name)
                return Moved(UNLINKED, problem=f"it pointed to {target}")
            dirfds.set_mode_at(parent_fd, name, 0)
        except OSError as second:
            return Moved(LEFT, problem=f"{exc.strerror}; {second.strerror}")
        return Moved(LOCKED, problem=f"it could not be moved ({exc.strerror})")

    def _run_directory(self) -> int:
        if self._run_fd is not None:
            return self._run_fd
        owner = dirfds.status_of(self.root_fd)
        base = WORKSPACE_QUARANTINE
        with contextlib.suppress(OSError):
            if stat.S_ISDIR(dirfds.own_status_at(self.root_fd, ".git").st_mode):
                base = f".git/{QUARANTINE_DIR}"
        directory = self.root_fd
        for part in [*base.split("/"), self.run_id]:
            with contextlib.suppress(FileExistsError):
                dirfds.make_directory_at(directory, part, 0o700)
                with contextlib.suppress(OSError):
                    dirfds.give_at(directory, part, owner.st_uid, owner.st_gid)
            opened = dirfds.open_directory_in(directory, part)
            if directory != self.root_fd:
                dirfds.close(directory)
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
            dirfds.set_descriptor_mode(self._run_fd, 0)
        except OSError:
            pass
        finally:
            if parent is not None:
                dirfds.close(parent)
            dirfds.close(self._run_fd)
            self._run_fd = None
        return directory

    def _write_manifest(self, parent: int, manifest: dict[str, object]) -> None:
        owner = dirfds.status_of(self.root_fd)
        dirfds.write_owned_at(parent, f"{self.run_id}.json",
                               (json.dumps(manifest, indent=2) + "\n").encode(), mode=0o600,
                               uid=owner.st_uid, gid=owner.st_gid)


def _flat(relative: str) -> str:
    flat = relative.replace("/", "%")
    return flat if len(flat) <= 180 else flat[-180:]


def _kind(mode: int) -> str:
    return "directory" if stat.S_ISDIR(mode) else "link" if stat.S_ISLNK(mode) else "file"


__all__ = ["LEFT", "LOCKED", "QUARANTINED", "REPORTED", "UNLINKED", "Moved", "Quarantine"]
