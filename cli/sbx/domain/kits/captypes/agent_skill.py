"""``agent-skill@1``: one skill bundled in a kit's image, exposed at every selected skills
destination under its effective name (``name``, else the source directory's).

One entry per effective name in a block; across kits the same source and name collapse and a
different source under one name is an error. Not on the surface (image content).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

from sbx.domain.kits.captypes.base import (
    CapabilityEntry,
    Handler,
    Keyed,
    Keys,
    Merge,
    Out,
    merged,
    restated,
    show,
    string,
)
from sbx.domain.kits.placeholders import contains_placeholder
from sbx.domain.kits.types import AGENT_SKILL

if TYPE_CHECKING:
    from sbx.domain.kits.composed import ComposedParts, Origin

SKILL_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,254}")


class AgentSkill(Handler):
    types = (AGENT_SKILL,)
    refusal = ("sbx mounts the host skills store at agent-skills@1 paths but does not yet "
               "expose a skill bundled in a kit's image there")
    on_surface = False

    def check(self, entry: CapabilityEntry, config: Mapping[str, Any], kind: str | None,
              out: Out) -> None:
        path = config.get("path")
        if "name" in config or not isinstance(path, str) or contains_placeholder(path):
            return
        base = posixpath.basename(path)
        if base and not SKILL_NAME.fullmatch(base):
            out.add(entry.at("config", "path"), f"the skill name defaults to the directory name "
                                                f"{base!r}, which is not a valid skill name; "
                                                "set name")

    def claim(self, entry: CapabilityEntry, keys: Keys, out: Out) -> None:
        config = entry.config
        name = string(config.get("name"))
        path = string(config.get("path"))
        effective = name if name else (posixpath.basename(path) if path else None)
        if effective and not contains_placeholder(effective):
            previous = keys.claim("skill", effective, entry.path)
            if previous is not None:
                out.add(entry.at("config"), f"skill {effective!r} already declared at "
                                            f"{show(previous)}")

    def add(self, merge: Merge, origin: Origin, item: Mapping[str, Any],
            config: Mapping[str, Any], optional: bool) -> None:
        table = merge.table("bundled-skills")
        source = str(config.get("path", ""))
        name = skill_name(config)
        held = table.get(name)
        if held is None:
            table[name] = Keyed(origin, item, optional, [origin])
            return
        held_cfg = held.item.get("config")
        held_source = str(held_cfg.get("path", "")) if isinstance(held_cfg, Mapping) else ""
        if held_source != source:
            merge.problem(f"{held.origin} and {origin} both bundle a skill named {name!r} from "
                          f"different sources ({held_source} vs {source}); rename one of them")
            return
        restated(held, origin, optional)

    def finish(self, merge: Merge, parts: dict[str, Any]) -> None:
        parts["bundled_skills"] = tuple(merged(k) for k in merge.table("bundled-skills").values())

    def effective(self, composition: ComposedParts) -> Iterable[tuple[str, Any, bool]]:
        for entry in composition.bundled_skills:
            yield entry.type, entry.config, entry.optional


def skill_name(cfg: Mapping[str, Any]) -> str:
    """An ``agent-skill@1`` bundle's effective name: ``name``, else the source directory's name."""
    name = cfg.get("name")
    if isinstance(name, str) and name:
        return name
    return posixpath.basename(str(cfg.get("path", "")).rstrip("/"))


HANDLER: Final = AgentSkill()

__all__ = ["HANDLER", "SKILL_NAME", "AgentSkill", "skill_name"]
