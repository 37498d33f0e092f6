"""``resources@1``: the CPU, memory and GPU a workload asks for.

Applied within the config's bounds: a request over a bound (or any GPU, which sbx cannot
provide) refuses a required entry and is skipped and recorded when optional, never truncated.
One author per sandbox (an identical restatement merges); not on the surface.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.kits.captypes.base import Handler, Merge, add_sole, size_bytes, sole
from sbx.domain.kits.selectionrecord import SelectionRecord
from sbx.domain.kits.types import RESOURCES

if TYPE_CHECKING:
    from sbx.domain.kits.captypes.base import SandboxPlanner
    from sbx.domain.kits.composed import ComposedParts, Origin


class ResourcesType(Handler):
    types = (RESOURCES,)
    singleton = True
    on_surface = False
    implemented = True

    def add(self, merge: Merge, origin: Origin, item: Mapping[str, Any],
            config: Mapping[str, Any], optional: bool) -> None:
        add_sole(merge, origin, RESOURCES, "resources", item, optional)

    def finish(self, merge: Merge, parts: dict[str, Any]) -> None:
        parts["resources"] = sole(merge, RESOURCES)

    def effective(self, composition: ComposedParts) -> Iterable[tuple[str, Any, bool]]:
        if composition.resources is not None:
            entry = composition.resources
            yield entry.type, entry.config, entry.optional

    def plan(self, composition: ComposedParts, planner: SandboxPlanner) -> None:
        entry = composition.resources
        if entry is None or not entry.config:
            return
        limits = planner.limits
        config = entry.config
        problems: list[str] = []
        memory = limits.memory_bytes
        cpu_millis = limits.cpu_millis
        if config.get("memory") not in (None, ""):
            wanted = size_bytes(str(config["memory"]))
            if wanted is None or wanted <= 0:
                problems.append(f"memory {config['memory']!r} is not a size")
            elif wanted > limits.memory_bytes:
                problems.append(f"memory {config['memory']} exceeds the configured bound "
                                f"[sandbox] memory_bytes = {limits.memory_bytes}")
            elif (tmpfs := limits.tmp_bytes + limits.workspace_bytes + limits.home_bytes) \
                    > wanted:
                problems.append(f"memory {config['memory']} is below tmp_bytes + "
                                f"workspace_bytes + home_bytes ({tmpfs}), which the tmpfs "
                                "mounts count against")
            else:
                memory = wanted
        cpu = config.get("cpu")
        if isinstance(cpu, (int, float)) and not isinstance(cpu, bool) and cpu > 0:
            wanted_millis = round(float(cpu) * 1000)
            if wanted_millis > limits.cpu_millis:
                problems.append(f"cpu {cpu} exceeds the configured bound [sandbox] cpu_millis "
                                f"= {limits.cpu_millis}")
            else:
                cpu_millis = max(wanted_millis, 1)
        if config.get("gpu"):
            problems.append(f"gpu {config['gpu']!r} cannot be provided by this sbx")
        if not problems:
            planner.set_limits(memory_bytes=memory, cpu_millis=cpu_millis)
            return
        origin = entry.origins[0]
        if entry.optional:
            planner.skip(SelectionRecord(origin.kit, origin.path, RESOURCES,
                                         "; ".join(problems)))
            return
        raise SbxError(
            Reason.UNSUPPORTED_CAPABILITY,
            f"refused: {origin.kit} {origin.path} ({RESOURCES}) cannot be satisfied: "
            + "; ".join(problems),
            hint="Raise the bound in the config file, lower the kit's request, or mark the "
                 "capability optional; sbx never truncates a request silently.",
            details={"kit": origin.kit, "path": origin.path, "problems": problems})


HANDLER: Final = ResourcesType()

__all__ = ["HANDLER", "ResourcesType"]
