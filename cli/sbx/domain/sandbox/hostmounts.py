"""The kits' ``host-mount@1`` directories: where each lives on the host and what it belongs to.

A directory is keyed on the declaring kit's identity and the cleaned in-sandbox path, so every
sandbox of that kit shares it and another kit naming the same path gets its own
(see sbx.domain.kits.captypes.host_mount.kit_identity). Each kit directory holds
``kit.json`` (the identity and the paths, for ``sbx kit mounts``); the directories themselves
outlive every sandbox until the user removes them.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.seams.host import files, lookup

INDEX: Final = "kit.json"
DEFAULT_MODE: Final = 0o755
_SLUG: Final = re.compile(r"[^A-Za-z0-9._-]+")


def _digest(text: str, length: int) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:length]


def directory_name(path: str) -> str:
    """A readable, collision-free name for an in-sandbox path (``/home/agent/.cache`` →
    ``home_agent_.cache-<hash>``)."""
    slug = _SLUG.sub("_", path.strip("/"))[:80] or "root"
    return f"{slug}-{_digest(path, 12)}"


@dataclass(frozen=True)
class StoredMount:
    kit: str  # identity
    path: str  # in the sandbox
    directory: Path  # on the host


class HostMountStore:
    def __init__(self, root: Path) -> None:
        self.root = root

    def kit_directory(self, identity: str) -> Path:
        return self.root / _digest(identity, 24)

    def ensure(self, identity: str, path: str, mode: int | None) -> tuple[Path, bool]:
        """The directory of (kit, path), made with ``mode`` when it is new; (it, made now)."""
        kit_dir = self.kit_directory(identity)
        try:
            files.make_directory(self.root, 0o755, parents=True, exist_ok=True)
            files.make_directory(kit_dir, 0o755, exist_ok=True)
            self._index(kit_dir, identity, path)
            target = kit_dir / directory_name(path)
            try:
                files.make_directory(target, 0o700)
            except FileExistsError:
                return target, False  # reopened: its permissions and contents are kept
            files.set_mode(target, DEFAULT_MODE if mode is None else mode)
            return target, True
        except OSError as error:
            raise SbxError(Reason.CREATE_FAILED,
                           f"cannot make the host-mount@1 directory for {path} under "
                           f"{self.root}: {error.strerror}",
                           hint="Free the disk or fix the permissions of that directory "
                                "(SBX_HOST_MOUNTS chooses another).") from None

    def _index(self, kit_dir: Path, identity: str, path: str) -> None:
        index = kit_dir / INDEX
        known, listed = self._read_index(index)
        paths = sorted({*listed, path}) if known == identity else [path]
        if known == identity and paths == listed:
            return
        files.replace_text(index, json.dumps({"kit": identity, "paths": paths}, indent=2) + "\n")

    @staticmethod
    def _read_index(index: Path) -> tuple[str | None, list[str]]:
        """(the kit's identity, its paths); (None, []) when the index is unreadable."""
        try:
            data = json.loads(files.file_text(index))
        except (OSError, ValueError, UnicodeDecodeError):
            return None, []
        if not isinstance(data, dict) or not isinstance(data.get("kit"), str) or \
                not isinstance(data.get("paths"), list) or \
                not all(isinstance(p, str) for p in data["paths"]):
            return None, []
        return data["kit"], sorted(data["paths"])

    def listing(self) -> Iterator[StoredMount]:
        """Every directory a kit has here (a kit directory whose index is unreadable lists
        nothing; ``rm`` of its hash removes it)."""
        try:
            kits = files.real_subdirectories(self.root)
        except OSError:
            return
        for kit_dir in kits:
            identity, paths = self._read_index(kit_dir / INDEX)
            for path in paths:
                directory = kit_dir / directory_name(path)
                if lookup.is_directory_checked(directory):
                    yield StoredMount(identity or "?", path, directory)

    def remove(self, kit: str, path: str | None = None) -> list[StoredMount]:
        """Remove the directories of ``kit`` (an identity, or a listed directory's kit
        hash), or only the one of ``path``; the removed ones."""
        gone = [m for m in self.listing()
                if kit in (m.kit, m.directory.parent.name)
                and (path is None or m.path == path)]
        for mount in gone:
            files.remove_tree(mount.directory)
        parents = {m.directory.parent for m in gone}
        for parent in parents:
            if not files.holds_a_directory(parent):
                files.remove_tree(parent)
        return gone


__all__ = ["DEFAULT_MODE", "HostMountStore", "StoredMount", "directory_name"]
