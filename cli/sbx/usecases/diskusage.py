"""`sbx df`: what this state home holds on the engine and on disk, and what `sbx gc` could
reclaim now.

Sizes come from one engine call (``GET /system/df``, Docker's own accounting) and, for what
lives in the state home (run directories, sized HOME and volume file systems, caches), from the
files themselves. What is reclaimable is decided by gc's own code: a dry run of
:func:`sbx.usecases.gc.collect.survey` (nothing is removed), each object it would remove then
priced from the same numbers. No second classifier: a change in gc's rules changes `df`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from sbx.base import labels as label_keys
from sbx.domain.sandbox.imagecache import marked_by
from sbx.domain.sandbox.runrecord import RUNS_DIR
from sbx.domain.sandbox.sources import NAMED_PREFIX, STAGING_ROOT
from sbx.usecases.context import AppContext
from sbx.usecases.gc.collect import survey
from sbx.usecases.sandboxstore import SandboxStore

MAX_WALK_ENTRIES: Final = 200_000  # a state home larger than this is sized in part


@dataclass(frozen=True)
class Usage:
    kind: str  # image | sandbox | container | volume | home | state
    id: str
    name: str
    bytes: int
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "id": self.id, "name": self.name, "bytes": self.bytes,
                "detail": self.detail}


@dataclass
class DiskUsage:
    images: list[Usage] = field(default_factory=list)
    sandboxes: list[Usage] = field(default_factory=list)  # named ones and running one-shots
    volumes: list[Usage] = field(default_factory=list)
    homes: list[Usage] = field(default_factory=list)  # each named sandbox's HOME
    state: list[Usage] = field(default_factory=list)  # the state home's own files
    reclaimable: list[Usage] = field(default_factory=list)  # what `sbx gc` would remove
    note: str | None = None  # why nothing is reclaimable (gc skipped, locked...)

    def totals(self) -> dict[str, int]:
        return {name: sum(u.bytes for u in getattr(self, name)) for name in
                ("images", "sandboxes", "volumes", "homes", "state", "reclaimable")}

    def as_dict(self) -> dict[str, Any]:
        return {**{name: [u.as_dict() for u in getattr(self, name)] for name in
                   ("images", "sandboxes", "volumes", "homes", "state", "reclaimable")},
                "totals": self.totals(), "note": self.note}


def disk_usage(ctx: AppContext) -> DiskUsage:
    home = ctx.home_hash
    raw = ctx.driver.disk_usage()
    usage = DiskUsage()
    images = {str(i.get("Id", "")): i for i in raw.get("Images") or () if _ours(i, home)
              or marked_by(home, str(i.get("Id", "")), i.get("RepoTags") or ())}
    for ident, image in images.items():
        tags = [t for t in image.get("RepoTags") or () if t != "<none>:<none>"]
        # a template (`sbx save`) is this home's too, and user data: said as such
        template = label_keys.value(image.get("Labels") or {}, label_keys.TEMPLATE) == "1"
        usage.images.append(Usage("image", ident, tags[0] if tags else ident[:19],
                                  _unique(image), ("template, " if template else "")
                                  + f"{int(image.get('Containers') or 0)} containers"))
    containers = {str(c.get("Id", "")): c for c in raw.get("Containers") or () if _ours(c, home)}
    volumes = {str(v.get("Name", "")): v for v in raw.get("Volumes") or () if _ours(v, home)}
    for name, volume in volumes.items():
        usage.volumes.append(Usage("volume", name, name, _volume_size(volume),
                                   label_keys.value(volume.get("Labels") or {},
                                                    label_keys.NAME) or ""))
    named_ids = _named(ctx, usage, containers, volumes)
    for ident, container in containers.items():
        if ident in named_ids:
            continue
        run = (container.get("Labels") or {}).get(label_keys.RUN, "")
        usage.sandboxes.append(Usage("container", ident, f"(run {run[:12]})",
                                     int(container.get("SizeRw") or 0),
                                     str(container.get("State") or "")))
    usage.state = _state(ctx.state_home)
    _reclaimable(ctx, usage, images, containers, volumes)
    return usage


def _named(ctx: AppContext, usage: DiskUsage, containers: Mapping[str, Any],
           volumes: Mapping[str, Any]) -> set[str]:
    store = SandboxStore(ctx.state_home)
    seen: set[str] = set()
    for name in store.names():
        record = store.load(name)
        if record is None:
            continue
        ident = record.container_id or ""
        seen.add(ident)
        container = containers.get(ident) or {}
        usage.sandboxes.append(Usage("sandbox", ident, name, int(container.get("SizeRw") or 0),
                                     str(container.get("State") or "missing")))
        points = STAGING_ROOT / ctx.home_hash / f"{NAMED_PREFIX}{name}"
        home = _home_of(record.volumes, record.request.get("staging") or [], volumes, points)
        if home is not None:
            usage.homes.append(Usage("home", home[0], name, home[1], record.home_volume or ""))
    return seen


def _home_of(docker_volumes: Iterable[str], staging: Iterable[Any],
             listed: Mapping[str, Any], points: Path) -> tuple[str, int] | None:
    """A named sandbox's HOME: the last of its volumes (``…-vN``, N highest), a Docker
    volume or, where sbx bounds it, a file system image in its run directory: sized by its
    files where it is mounted now (the image's blocks lag behind the page cache), else by
    the image's own blocks."""
    found: list[tuple[int, str, int]] = []
    for volume in docker_volumes:
        size = _volume_size(listed[volume]) if volume in listed else 0
        found.append((_index(volume), volume, size))
    for position, entry in enumerate(staging):
        if isinstance(entry, dict) and entry.get("kind") == "fs":
            image = Path(str(entry.get("image", "")))
            point = points / str(position)
            size = _tree_size(point, content=True) if os.path.ismount(point) else _file_size(image)
            found.append((_index(image.stem), image.stem, size))
    if not found:
        return None
    _position, volume, size = max(found)
    return volume, size


def _index(volume: str) -> int:
    tail = volume.rpartition("-v")[2]
    return int(tail) if tail.isdigit() else -1


def _reclaimable(ctx: AppContext, usage: DiskUsage, images: Mapping[str, Any],
                 containers: Mapping[str, Any], volumes: Mapping[str, Any]) -> None:
    result = survey(ctx)  # gc's own decisions, as a dry run
    if result.outcome != "done":
        usage.note = result.note
    runs = ctx.state_home / RUNS_DIR
    for item in result.removed:
        if item.kind == "container":
            size = int((containers.get(item.id) or {}).get("SizeRw") or 0)
        elif item.kind == "volume":
            size = _volume_size(volumes[item.id]) if item.id in volumes else 0
        elif item.kind in ("image", "cached_image"):
            size = _unique(images.get(item.id) or {})
        elif item.kind == "run_dir":
            size = _tree_size(runs / item.id)
        else:  # networks, firewall rules, proxies, staging: no disk of their own
            size = 0
        usage.reclaimable.append(Usage(item.kind, item.id, item.short, size, item.why))


def _ours(entry: Mapping[str, Any], home: str) -> bool:
    labels = entry.get("Labels") or {}
    return all(labels.get(k) == v for k, v in label_keys.home_selector(home).items())


def _unique(image: Mapping[str, Any]) -> int:
    """What removing the image frees: its size less the layers other images share."""
    size = int(image.get("Size") or 0)
    shared = int(image.get("SharedSize") or 0)
    return size - shared if 0 <= shared <= size else size


def _volume_size(volume: Mapping[str, Any]) -> int:
    return max(int((volume.get("UsageData") or {}).get("Size") or 0), 0)


def _file_size(path: Path) -> int:
    try:
        return os.lstat(path).st_blocks * 512  # what the sparse file system image takes
    except OSError:
        return 0


def _state(state_home: Path) -> list[Usage]:
    """The state home's top-level parts (runs, cache, sandboxes...), by what they take."""
    if not state_home.is_dir():
        return []
    return [Usage("state", entry.name, entry.name, _tree_size(Path(entry.path)))
            for entry in sorted(os.scandir(state_home), key=lambda e: e.name)
            if entry.is_dir(follow_symlinks=False)]


def _tree_size(root: Path, *, content: bool = False) -> int:
    """What the files under ``root`` take on disk (a sparse image by its blocks), or with
    ``content`` their bytes (a just-written file's blocks may not be allocated yet)."""
    total = 0
    for count, path in enumerate(_files(root)):
        if count > MAX_WALK_ENTRIES:
            break
        try:
            info = os.lstat(path)
        except OSError:
            continue
        total += info.st_size if content else info.st_blocks * 512
    return total


def _files(root: Path) -> Iterable[Path]:
    for directory, _dirs, names in os.walk(root):  # links are not followed
        for name in names:
            yield Path(directory, name)


__all__ = ["DiskUsage", "Usage", "disk_usage"]
