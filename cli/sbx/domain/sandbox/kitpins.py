"""A run must not be able to rewrite the kits it runs: kit files under a writable mount are
read-only inside the sandbox.

A kit directory can sit inside the workspace (``sbx run ./agent .``) or another read-write
``--mount``; if the sandbox could write it, it could widen its own next run — a new host, the
user's secret injected elsewhere, an install hook of its own. So, for every local kit of the
run and every writable mount (:func:`kit_pins`):

- the kit directory, and its descriptor or companion recipe when those are links to files
  elsewhere, are bind-mounted **read-only onto themselves** where they appear in the sandbox;
  every directory between the mount and the kit is bind-mounted onto itself too, since a mount
  point cannot be renamed (otherwise the sandbox could move the pinned directory aside and put
  a new one at the kit's name);
- refused (``mount_blocked``, rule ``kit_writable``): a writable mount that **is** a kit
  directory or lies inside one (the whole directory is the kit's build context), a kit named
  through a symbolic link that lies inside a writable mount (the sandbox could re-point it),
  and a descriptor or recipe with other hard links on a writable mount's file system (it could
  be rewritten through another name).

What another run with the same directory writable does to it is out of this run's reach: the
permission gate (sbx.usecases.kitgate) still shows any permission such a change adds.
"""

from __future__ import annotations

import posixpath
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sbx.base.errors import MountBlocked
from sbx.domain.sandbox.mountrules import KIT_WRITABLE
from sbx.domain.sandbox.sources import OpenedSource, Pin, open_child
from sbx.seams.host import lookup

if TYPE_CHECKING:
    from pathlib import Path

    from sbx.domain.kits.localkit import LocalKit


@dataclass(frozen=True)
class KitFiles:
    """What one local kit reads from the host, as the loader named it (absolute, links not
    resolved): the name the user gave, its directory, its descriptor and recipe files."""

    named: str
    directory: str
    files: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"named": self.named, "directory": self.directory, "files": list(self.files)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> KitFiles:
        named, directory, files = data["named"], data["directory"], data["files"]
        if not isinstance(named, str) or not isinstance(directory, str) \
                or not isinstance(files, list) or not all(isinstance(f, str) for f in files):
            raise TypeError("kit files")
        return cls(named, directory, tuple(files))


def kit_files(kit: LocalKit, cwd: Path) -> KitFiles:
    directory = lookup.absolute_from_cwd(kit.directory)
    files = [lookup.absolute_from_cwd(kit.descriptor_file)]
    named = kit.descriptor.data.get("dockerfile")
    if isinstance(named, str):
        files.append(posixpath.join(directory, named))
    elif kit.descriptor.data.get("build") is None:
        companion = posixpath.join(directory, f"{kit.stem}.dockerfile")
        if lookup.lexists(companion):
            files.append(companion)
    return KitFiles(posixpath.normpath(posixpath.join(cwd, kit.reference)), directory,
                    tuple(files))


def kit_pins(kits: Sequence[KitFiles], writable: Sequence[Pin],
             files: Sequence[str] = ()) -> list[Pin]:
    """The pins that keep ``kits`` (and ``files``: the config file, which decides the next
    run's limits and mount policy) read-only under the ``writable`` mounts (workspace and
    ``--mount ...:rw`` pins, already opened); raises ``mount_blocked`` where that cannot be
    done. The caller owns (closes) the returned pins' sources."""
    if not writable or not (kits or files):
        return []
    protected = _protected(kits, files)
    pins: dict[str, Pin] = {}
    try:
        for mount in writable:
            root = mount.source.path
            for kit in kits:
                _refuse_links(kit, root, [path for path, _kit in protected])
            for path, kit in protected:
                if path == root or _inside(root, path):
                    raise _blocked(
                        f"the writable mount {root} is {'' if path == root else 'inside '}"
                        f"the kit directory {path} of {kit.named}: the sandbox could rewrite "
                        "the kit its next run uses", root,
                        "Mount a directory that does not hold the kit (or keep the kit "
                        "outside the workspace), or make it read-only: --access ro / "
                        "--mount SRC:DST:ro.")
                if _inside(path, root):
                    _pin_inside(mount, posixpath.relpath(path, root), pins)
            for kit in kits:
                for file in kit.files:
                    real = lookup.real_path(file)
                    if lookup.is_regular_file(real):
                        _refuse_hard_links(real, mount.source, kit)
    except BaseException:
        for pin in pins.values():
            pin.source.close()
        raise
    return list(pins.values())


def _protected(kits: Sequence[KitFiles], files: Sequence[str]) -> list[tuple[str, KitFiles]]:
    """Each kit's real directory, and any of its files that resolves outside it, and each of
    ``files`` that is a regular file; nothing inside another protected directory twice."""
    found: list[tuple[str, KitFiles]] = []
    for file in files:
        real = lookup.real_path(file)
        if lookup.is_regular_file(real):
            found.append((real, KitFiles(file, posixpath.dirname(real), ())))
    for kit in kits:
        directory = lookup.real_path(kit.directory)
        found.append((directory, kit))
        for file in kit.files:
            real = lookup.real_path(file)
            if not _inside(real, directory):
                found.append((real, kit))
    found.sort(key=lambda item: item[0])
    kept: list[tuple[str, KitFiles]] = []
    for path, kit in found:
        if not any(path == other or _inside(path, other) for other, _ in kept):
            kept.append((path, kit))
    return kept


def _pin_inside(mount: Pin, relative: str, pins: dict[str, Pin]) -> None:
    """Open ``relative`` below the mount's opened source one component at a time (never
    through a link), self-binding each directory on the way and the last one read-only."""
    parts = relative.split("/")
    parent = mount.source
    target = mount.target.rstrip("/")
    for index, part in enumerate(parts):
        target = f"{target}/{part}"
        child = open_child(parent, part)
        if child is None:
            raise _blocked(f"{parent.path}/{part} vanished while the kit was being pinned",
                           f"{parent.path}/{part}", "Run again.")
        last = index == len(parts) - 1
        previous = pins.get(target)
        if previous is not None and (previous.read_only or not last):
            child.close()
        else:
            if previous is not None:
                previous.source.close()
            pins[target] = Pin(child, target, last)
        if not last and not stat.S_ISDIR(child.mode):
            raise _blocked(f"{child.path} is no longer a directory", child.path, "Run again.")
        parent = pins[target].source


def _refuse_links(kit: KitFiles, root: str, pinned: Sequence[str]) -> None:
    """No symbolic link on the way to the kit may lie inside a writable mount (unless inside
    a kit directory, which is pinned read-only)."""
    for name in (kit.named, kit.directory, *kit.files):
        parts = [p for p in name.split("/") if p]
        for index in range(1, len(parts) + 1):
            prefix = "/" + "/".join(parts[:index])
            if not lookup.is_link(prefix):
                continue
            where = posixpath.join(lookup.real_path(posixpath.dirname(prefix)),
                                 posixpath.basename(prefix))
            if any(_inside(where, directory) for directory in pinned):
                continue
            if where == root or _inside(where, root):
                raise _blocked(
                    f"kit {kit.named} is reached through the symbolic link {prefix}, which "
                    f"lies inside the writable mount {root}: the sandbox could point it at "
                    "another kit", prefix,
                    f"Name the kit by its real path ({lookup.real_path(name)}), or make the "
                    "mount read-only.")


def _refuse_hard_links(path: str, mount: OpenedSource, kit: KitFiles) -> None:
    try:
        info = lookup.status(path)
    except OSError:
        return
    if stat.S_ISREG(info.st_mode) and info.st_nlink > 1 and info.st_dev == mount.device:
        raise _blocked(
            f"{path} of kit {kit.named} has {info.st_nlink} hard links on the file system of "
            f"the writable mount {mount.path}: the sandbox could rewrite it through another "
            "name", path, "Replace the links with a copy (cp --remove-destination), or make "
            "the mount read-only.")


def _inside(path: str, root: str) -> bool:
    return path.startswith(root.rstrip("/") + "/")


def _blocked(message: str, path: str, hint: str) -> MountBlocked:
    return MountBlocked(f"{message} (rule {KIT_WRITABLE})", rule=KIT_WRITABLE, path=path,
                        hint=hint)


__all__ = ["KitFiles", "kit_files", "kit_pins"]
