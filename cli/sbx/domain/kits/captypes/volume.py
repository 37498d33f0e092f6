"""``volume@1``: storage the sandbox is given at a path (per sandbox, never shared with the host).

``tmpfs: true`` is a size-capped tmpfs counted against the memory limit; with a ``size``, a file
system of exactly that size (which needs root: otherwise refused, or skipped when optional);
else a fresh Docker volume. Volumes and ``host-mount@1`` share one path key: the same cleaned
path from two kits merges only between volumes of equivalent storage settings (size by bytes,
mode by octal value, omitted tmpfs = false). On the surface: ``storagePaths``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.kits.captypes.base import (
    CapabilityEntry,
    Handler,
    Keyed,
    Keys,
    Merge,
    Out,
    clean_path,
    config_of,
    missing,
    opt_str,
    restated,
    show,
    size_bytes,
    string,
)
from sbx.domain.kits.composed import Volume
from sbx.domain.kits.placeholders import contains_placeholder
from sbx.domain.kits.selectionrecord import SelectionRecord
from sbx.domain.kits.types import HOST_MOUNT, VOLUME

if TYPE_CHECKING:
    from sbx.domain.kits.captypes.base import SandboxPlanner
    from sbx.domain.kits.composed import ComposedParts, Origin
    from sbx.domain.kits.surfacetypes import Surface, Widening

STORAGE: Final = "storage"  # the path key volume@1 and host-mount@1 share
DEFAULT_TMPFS_BYTES: Final = 64 * 1024 * 1024


class VolumeType(Handler):
    types = (VOLUME,)
    implemented = True

    def claim(self, entry: CapabilityEntry, keys: Keys, out: Out) -> None:
        claim_storage(entry, "volume", keys, out)

    def add(self, merge: Merge, origin: Origin, item: Mapping[str, Any],
            config: Mapping[str, Any], optional: bool) -> None:
        add_storage(merge, origin, VOLUME, item, config, optional)

    def finish(self, merge: Merge, parts: dict[str, Any]) -> None:
        parts["volumes"] = tuple(
            Volume(path, opt_str(cfg.get("size")), cfg.get("tmpfs") is True,
                   opt_str(cfg.get("mode")), cfg, keyed.optional, tuple(keyed.origins))
            for path, keyed in merge.table(STORAGE).items()
            if keyed.item.get("type") != HOST_MOUNT and (cfg := config_of(keyed.item)) is not None)

    def effective(self, composition: ComposedParts) -> Iterable[tuple[str, Any, bool]]:
        for volume in composition.volumes:
            yield VOLUME, volume.config, volume.optional

    def project(self, ctype: str, config: Any, lists: dict[str, list[str]],
                flags: dict[str, bool]) -> bool:
        return project_storage_path(config, lists["storage_paths"])

    def widenings(self, granted: Surface, candidate: Surface) -> Iterator[Widening]:
        yield from missing("storage", granted.storage_paths, candidate.storage_paths)

    def plan(self, composition: ComposedParts, planner: SandboxPlanner) -> None:
        limits = planner.limits
        budget = limits.memory_bytes - limits.tmp_bytes - limits.workspace_bytes \
            - limits.home_bytes
        for volume in composition.volumes:
            size = size_bytes(volume.size) if volume.size else None
            mode = int(volume.mode, 8) if volume.mode else None
            origin = volume.origins[0]
            if volume.tmpfs:
                capped = size or DEFAULT_TMPFS_BYTES
                budget -= capped
                if budget < 0:
                    raise SbxError(
                        Reason.UNSUPPORTED_CAPABILITY,
                        f"refused: {origin.kit} {origin.path} ({VOLUME}) tmpfs {volume.path} "
                        f"of {capped} bytes does not fit in the memory limit beside /tmp and "
                        "the workspace", hint="Raise [sandbox] memory_bytes or lower the sizes.")
                planner.add_tmpfs(volume.path, capped, mode)
            elif size is not None and not planner.volume_sizes_enforced:
                reason = (f"{volume.path}: size {volume.size} cannot be enforced without root "
                          "(sbx gives a sized volume a file system of that size, which needs "
                          "mount)")
                if volume.optional:
                    planner.skip(SelectionRecord(origin.kit, origin.path, VOLUME, reason))
                    continue
                raise SbxError(Reason.UNSUPPORTED_CAPABILITY,
                               f"refused: {origin.kit} {origin.path} ({VOLUME}) {reason}",
                               hint="Run sbx as root, mark the volume optional, or drop its "
                                    "size (an unsized volume is bounded only by the host's "
                                    "disk).")
            else:
                planner.add_volume(volume.path, mode, size)


def project_storage_path(config: Any, paths: list[str]) -> bool:
    """A storage entry's surface: its cleaned path (False: no path to project)."""
    path = config.get("path") if isinstance(config, Mapping) else None
    if not isinstance(path, str):
        return False
    paths.append(clean_path(path))
    return True


def claim_storage(entry: CapabilityEntry, label: str, keys: Keys, out: Out) -> None:
    path = string(entry.config.get("path"))
    if path and not contains_placeholder(path):
        import posixpath

        previous = keys.claim(STORAGE, posixpath.normpath(path), entry.path)
        if previous is not None:
            out.add(entry.at("config", "path"), f"{label} path {path!r} is already claimed "
                                                f"at {show(previous)} (volume and host-mount "
                                                "share one path key)")


def add_storage(merge: Merge, origin: Origin, ctype: str, item: Mapping[str, Any],
                config: Mapping[str, Any], optional: bool) -> None:
    table = merge.table(STORAGE)
    path = clean_path(str(config.get("path", "")))
    held = table.get(path)
    if held is None:
        table[path] = Keyed(origin, item, optional, [origin])
        return
    if HOST_MOUNT in (ctype, held.item.get("type")):
        # Shared host storage has one declaring kit; collapsing even identical requests
        # would silently choose whose data the other kit receives.
        merge.problem(f"{held.origin} and {origin} both declare storage at {path}; a host "
                      "mount has one owner")
        return
    held_cfg = held.item.get("config")
    before = _identity(held_cfg if isinstance(held_cfg, Mapping) else {})
    after = _identity(config)
    if before != after:
        merge.problem(f"{held.origin} and {origin} both declare volume@1 at {path} with "
                      f"different storage settings ({_text(before)} vs "
                      f"{_text(after)}); one of them has to change")
        return
    restated(held, origin, optional)


def _identity(cfg: Mapping[str, Any]) -> tuple[Any, ...]:
    # Equivalence per volume@1: size by byte value, mode by octal value, omitted tmpfs = false;
    # an omitted size or mode stays unspecified and differs from any explicit value.
    size = cfg.get("size")
    mode = cfg.get("mode")
    size_key: Any = None
    if size is not None and size != "":
        size_key = size_bytes(str(size)) if size_bytes(str(size)) is not None else str(size)
    mode_key: Any = None
    if mode is not None and mode != "":
        text = str(mode)
        mode_key = int(text, 8) if re.fullmatch(r"[0-7]{1,4}", text) else text
    return (size_key, cfg.get("tmpfs") is True, mode_key)


def _text(identity: tuple[Any, ...]) -> str:
    size, tmpfs, mode = identity
    size_text = ("unspecified" if size is None
                 else f"{size} bytes" if isinstance(size, int) else str(size))
    mode_text = ("unspecified" if mode is None
                 else f"{mode:04o}" if isinstance(mode, int) else str(mode))
    return f"size {size_text}, {'tmpfs' if tmpfs else 'block'}, mode {mode_text}"


HANDLER: Final = VolumeType()

__all__ = ["DEFAULT_TMPFS_BYTES", "HANDLER", "STORAGE", "VolumeType", "add_storage",
           "claim_storage", "project_storage_path"]
