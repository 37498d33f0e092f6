"""``host-mount@1``: a host directory sbx owns, shared by every sandbox of the declaring kit.

Descriptor side: the path key is shared with ``volume@1``, and a host mount has one owner, so
two kits naming one path conflict even when their requests are identical. On the surface its
paths are listed apart from storage (``hostMountPaths``), so moving a path from a volume to a
host mount is the widening ``host-mount``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final

from sbx.domain.kits.captypes.base import (
    CapabilityEntry,
    Handler,
    Keys,
    Merge,
    Out,
    clean_path,
    config_of,
    missing,
    opt_str,
)
from sbx.domain.kits.captypes.volume import STORAGE, add_storage, claim_storage
from sbx.domain.kits.types import HOST_MOUNT

if TYPE_CHECKING:
    from sbx.domain.kits.compose import Composition, Origin
    from sbx.domain.kits.surface import Surface, Widening


class HostMountType(Handler):
    types = (HOST_MOUNT,)
    refusal = ("sbx keeps no kit-owned host directories yet; a per-run volume would lose what "
               "this type promises to keep past the sandbox")

    def claim(self, entry: CapabilityEntry, keys: Keys, out: Out) -> None:
        claim_storage(entry, "host mount", keys, out)

    def add(self, merge: Merge, origin: Origin, item: Mapping[str, Any],
            config: Mapping[str, Any], optional: bool) -> None:
        add_storage(merge, origin, HOST_MOUNT, item, config, optional)

    def finish(self, merge: Merge, parts: dict[str, Any]) -> None:
        from sbx.domain.kits.compose import HostMount

        parts["host_mounts"] = tuple(
            HostMount(path, opt_str(cfg.get("mode")), cfg, keyed.optional, keyed.origin)
            for path, keyed in merge.table(STORAGE).items()
            if keyed.item.get("type") == HOST_MOUNT and (cfg := config_of(keyed.item)) is not None)

    def effective(self, composition: Composition) -> Iterable[tuple[str, Any, bool]]:
        for mount in composition.host_mounts:
            yield HOST_MOUNT, mount.config, mount.optional

    def project(self, ctype: str, config: Any, lists: dict[str, list[str]],
                flags: dict[str, bool]) -> bool:
        path = config.get("path") if isinstance(config, Mapping) else None
        if not isinstance(path, str):
            return False
        lists["host_mount_paths"].append(clean_path(path))
        return True

    def widenings(self, granted: Surface, candidate: Surface) -> Iterator[Widening]:
        yield from missing("host-mount", granted.host_mount_paths, candidate.host_mount_paths)


HANDLER: Final = HostMountType()

__all__ = ["HANDLER", "HostMountType"]
