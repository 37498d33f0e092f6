"""``agent-skills@1``: a directory the agent scans for skills, which receives the host's shared
skills store (within the host's and the kit's modes) and every selected bundled skill.

One entry per path in a block; across kits the same path takes the widest declared mode (still
bounded by the host). On the surface: ``skillsPaths``, and ``skillsWritePaths`` for readwrite.
sbx's host setting is read-only, so the store (sbx.base.paths.skills_home) is mounted read-only
at every path when it exists and is not empty; a missing or empty store mounts nothing and
refuses nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final

from sbx.domain.kits.captypes.base import (
    CapabilityEntry,
    Handler,
    Keyed,
    Keys,
    Merge,
    Out,
    merged,
    missing,
    restated,
    show,
    string,
)
from sbx.domain.kits.placeholders import contains_placeholder
from sbx.domain.kits.types import AGENT_SKILLS

if TYPE_CHECKING:
    from sbx.domain.kits.captypes.base import SandboxPlanner
    from sbx.domain.kits.composed import ComposedParts, Origin
    from sbx.domain.kits.surfacetypes import Surface, Widening


class AgentSkills(Handler):
    types = (AGENT_SKILLS,)
    implemented = True

    def plan(self, composition: ComposedParts, planner: SandboxPlanner) -> None:
        # sbx's host setting is read-only: the narrower of it and any kit mode is read-only.
        for entry in composition.skills:
            path = (entry.config or {}).get("path")
            if isinstance(path, str):
                planner.add_skills_destination(path)

    def claim(self, entry: CapabilityEntry, keys: Keys, out: Out) -> None:
        path = string(entry.config.get("path"))
        if path and not contains_placeholder(path):
            previous = keys.claim("skills", path, entry.path)
            if previous is not None:
                out.add(entry.at("config", "path"), f"skills for {path!r} already declared at "
                                                    f"{show(previous)}")

    def add(self, merge: Merge, origin: Origin, item: Mapping[str, Any],
            config: Mapping[str, Any], optional: bool) -> None:
        table = merge.table("skills")
        path = str(config.get("path", ""))
        held = table.get(path)
        if held is None:
            table[path] = Keyed(origin, item, optional, [origin])
            return
        held_cfg = held.item.get("config")
        if mode_of(config) == "readwrite" and mode_of(
                held_cfg if isinstance(held_cfg, Mapping) else {}) != "readwrite":
            # The widest declared mode wins; the host setting still bounds it at mount time.
            held.item = {**held.item, "config": {**config}}
        restated(held, origin, optional)

    def finish(self, merge: Merge, parts: dict[str, Any]) -> None:
        parts["skills"] = tuple(merged(k) for k in merge.table("skills").values())

    def effective(self, composition: ComposedParts) -> Iterable[tuple[str, Any, bool]]:
        for entry in composition.skills:
            yield entry.type, entry.config, entry.optional

    def project(self, ctype: str, config: Any, lists: dict[str, list[str]],
                flags: dict[str, bool]) -> bool:
        path = config.get("path") if isinstance(config, Mapping) else None
        if not isinstance(path, str):
            return False
        lists["skills_paths"].append(path)
        if config.get("mode") == "readwrite":
            lists["skills_write_paths"].append(path)
        return True

    def widenings(self, granted: Surface, candidate: Surface) -> Iterator[Widening]:
        yield from missing("skills", granted.skills_paths, candidate.skills_paths)
        yield from missing("skills.write", granted.skills_write_paths,
                           candidate.skills_write_paths)


def mode_of(cfg: Mapping[str, Any]) -> str:
    return str(cfg.get("mode") or "readonly")


HANDLER: Final = AgentSkills()

__all__ = ["HANDLER", "AgentSkills", "mode_of"]
