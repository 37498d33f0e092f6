"""``host-mount@1``: a host directory sbx owns, shared by every sandbox of the declaring kit.

Descriptor side: the path key is shared with ``volume@1``, and a host mount has one owner, so
two kits naming one path conflict even when their requests are identical. On the surface its
paths are listed apart from storage (``hostMountPaths``), so moving a path from a volume to a
host mount is the widening ``host-mount``. The planner gets each path with its kit's identity;
the directory itself is made and mounted through the mount policy by the run
(sbx.domain.sandbox.hostmounts).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from sbx.domain.kits.captypes.base import (
    CapabilityEntry,
    Handler,
    Keys,
    Merge,
    Out,
    config_of,
    missing,
    opt_str,
)
from sbx.domain.kits.captypes.volume import (
    STORAGE,
    add_storage,
    claim_storage,
    project_storage_path,
)
from sbx.domain.kits.composed import HostMount
from sbx.domain.kits.types import HOST_MOUNT
from sbx.seams.host import lookup


def kit_identity(reference: str, directory: Path, stem: str, image: str | None) -> str:
    """What a kit's host directories are keyed on: a registry kit's repository (a new tag or
    digest keeps them), a local kit's real directory and descriptor stem. Nothing a descriptor
    says (its name, a ``source``) is part of it, so no kit can claim another's storage."""
    if image is not None:
        return "registry:" + image.partition("@")[0]
    return f"local:{lookup.real_path(str(directory))}/{stem}"

if TYPE_CHECKING:
    from sbx.domain.kits.captypes.base import SandboxPlanner
    from sbx.domain.kits.composed import ComposedParts, Origin
    from sbx.domain.kits.surfacetypes import Surface, Widening


class HostMountType(Handler):
    types = (HOST_MOUNT,)
    implemented = True

    def plan(self, composition: ComposedParts, planner: SandboxPlanner) -> None:
        for mount in composition.host_mounts:
            kit = planner.kits.get(mount.origin.kit)
            if kit is None:  # pragma: no cover - every origin is a kit of the set
                continue
            mode = int(mount.mode, 8) if mount.mode else None
            planner.add_host_mount(mount.path, mode, kit_identity(
                kit.reference, kit.directory, kit.stem, kit.image))

    def claim(self, entry: CapabilityEntry, keys: Keys, out: Out) -> None:
        claim_storage(entry, "host mount", keys, out)

    def add(self, merge: Merge, origin: Origin, item: Mapping[str, Any],
            config: Mapping[str, Any], optional: bool) -> None:
        add_storage(merge, origin, HOST_MOUNT, item, config, optional)

    def finish(self, merge: Merge, parts: dict[str, Any]) -> None:
        parts["host_mounts"] = tuple(
            HostMount(path, opt_str(cfg.get("mode")), cfg, keyed.optional, keyed.origin)
            for path, keyed in merge.table(STORAGE).items()
            if keyed.item.get("type") == HOST_MOUNT and (cfg := config_of(keyed.item)) is not None)

    def effective(self, composition: ComposedParts) -> Iterable[tuple[str, Any, bool]]:
        for mount in composition.host_mounts:
            yield HOST_MOUNT, mount.config, mount.optional

    def project(self, ctype: str, config: Any, lists: dict[str, list[str]],
                flags: dict[str, bool]) -> bool:
        return project_storage_path(config, lists["host_mount_paths"])

    def widenings(self, granted: Surface, candidate: Surface) -> Iterator[Widening]:
        yield from missing("host-mount", granted.host_mount_paths, candidate.host_mount_paths)


HANDLER: Final = HostMountType()

__all__ = ["HANDLER", "HostMountType", "kit_identity"]
