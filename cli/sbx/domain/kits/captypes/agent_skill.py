"""``agent-skill@1``: one skill bundled in a kit's image, exposed at every selected skills
destination under its effective name (``name``, else the source directory's).

One entry per effective name in a block; across kits the same source and name collapse and a
different source under one name is an error. Not on the surface (image content).

Planned as one startup step (the sandbox user's, before the workload): each destination is a
small tmpfs (the image's file system is read-only in a sandbox); the host store's skills are
linked into it from where sbx mounts the store for such a destination (read-only, at
``SKILLS_STAGING``), then each bundle is linked at ``<dest>/<name>`` unless a skill of that
name is already there (never overwritten). A destination that is also a kit's ``volume@1`` or
``host-mount@1`` keeps that mount (its size and mode) and takes the links in it, bundles or
not; links left there by earlier starts to skills since removed are removed. A source
without ``SKILL.md`` fails the step; nothing bundled is executed. No destination: refused
(``skill_no_destination``) when required, skipped and recorded when optional.
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

from sbx.base.errors import SbxError
from sbx.base.reasons import REGISTRY, Reason
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
from sbx.domain.kits.composed import Hook
from sbx.domain.kits.placeholders import contains_placeholder
from sbx.domain.kits.selectionrecord import SelectionRecord
from sbx.domain.kits.types import AGENT_SKILL, SKILL_NAME, SKILLS_STAGING

if TYPE_CHECKING:
    from sbx.domain.kits.captypes.base import SandboxPlanner
    from sbx.domain.kits.composed import ComposedParts, MergedRequest, Origin

LINKS_TMPFS_BYTES: Final = 1024 * 1024  # symlinks only: a few hundred bytes each
_NO_DESTINATION: Final = "no selected kit declares an agent-skills@1 directory to expose it in"


class AgentSkill(Handler):
    types = (AGENT_SKILL,)
    on_surface = False
    implemented = True

    def plan(self, composition: ComposedParts, planner: SandboxPlanner) -> None:
        bundles = list(composition.bundled_skills)
        destinations = list(dict.fromkeys(
            p for p in ((e.config or {}).get("path") for e in composition.skills)
            if isinstance(p, str)))
        # A destination that is also a kit's volume@1 or host-mount@1 cannot take the store as
        # a second mount there: the store is linked into that storage instead, bundles or not.
        stored = [p for p in destinations if planner.mount_at(p)]
        kept: list[MergedRequest] = []
        for entry in bundles:
            if destinations:
                kept.append(entry)
                continue
            origin = entry.origins[0]
            if entry.optional:
                planner.skip(SelectionRecord(origin.kit, origin.path, AGENT_SKILL,
                                             _NO_DESTINATION))
                continue
            raise SbxError(Reason.SKILL_NO_DESTINATION,
                           f"refused: {origin.kit} {origin.path} ({AGENT_SKILL}): "
                           f"{_NO_DESTINATION}",
                           hint=REGISTRY[Reason.SKILL_NO_DESTINATION].fix,
                           details={"kit": origin.kit, "path": origin.path})
        linked = destinations if kept else stored
        if not linked:
            return
        for path in linked:
            if path not in stored:
                # The image's file system is read-only in a sandbox: the links live on a small
                # tmpfs of the sandbox user's, made fresh at every start.
                planner.add_tmpfs(path, LINKS_TMPFS_BYTES, 0o755)
            planner.add_bundle_destination(path)
        planner.add_hooks((), (_expose_hook(linked, kept),))

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


def _expose_hook(destinations: list[str], bundles: list[MergedRequest]) -> Hook:
    q = shlex.quote
    lines = ["set -eu",
             'link() { [ -e "$2" ] || [ -L "$2" ] || ln -s "$1" "$2"; }']
    for entry in bundles:
        source = str((entry.config or {}).get("path", "")).rstrip("/")
        lines.append(f"[ -f {q(source + '/SKILL.md')} ] || {{ echo 'sbx: agent-skill@1 "
                     f"{skill_name(entry.config or {})}: '{q(source)}' has no SKILL.md' >&2; "
                     "exit 1; }")
    for dest in destinations:
        lines.append(f"mkdir -p {q(dest)}")
        # Kept storage holds the links of earlier starts: one to a skill since removed from
        # the store (or to a store no longer mounted) goes.
        lines.append(f'for s in {q(dest)}/*; do [ -L "$s" ] && [ ! -e "$s" ] && case '
                     f'"$(readlink "$s")" in {SKILLS_STAGING}/*) rm -f "$s";; esac; done; true')
        # The host store first: a skill already there is never overwritten by a bundle.
        lines.append(f"if [ -d {SKILLS_STAGING} ]; then for s in {SKILLS_STAGING}/*; do "
                     f'[ -e "$s" ] && link "$s" {q(dest)}/"${{s##*/}}"; done; fi')
        for entry in bundles:
            source = str((entry.config or {}).get("path", "")).rstrip("/")
            lines.append(f"link {q(source)} {q(dest + '/' + skill_name(entry.config or {}))}")
    return Hook(stage="startup", command="\n".join(lines) + "\n", user=None, env=(),
                background=False, description="sbx: expose the skills",
                config={}, kit="sbx", index=-1, position=0, declared_at=f"{AGENT_SKILL}")


def skill_name(cfg: Mapping[str, Any]) -> str:
    """An ``agent-skill@1`` bundle's effective name: ``name``, else the source directory's name."""
    name = cfg.get("name")
    if isinstance(name, str) and name:
        return name
    return posixpath.basename(str(cfg.get("path", "")).rstrip("/"))


HANDLER: Final = AgentSkill()

__all__ = ["HANDLER", "SKILL_NAME", "AgentSkill", "skill_name"]
