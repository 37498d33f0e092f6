"""Output of the skills commands: the host's skills store."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from sbx.base.render import Envelope, Renderer, escape

if TYPE_CHECKING:
    from pathlib import Path

    from sbx.domain.sandbox.skillstore import StoredSkill

_TABLE_DESCRIPTION = 72  # characters of a description in the table; --json has it whole


def skills_list(renderer: Renderer, store: Path, skills: Sequence[StoredSkill]) -> None:
    """The store's skills: name, description (from SKILL.md's front matter) and size."""
    if renderer.as_json:
        renderer.envelope(Envelope(command="skills", status="ok", exit_code=0,
                                   data={"action": "ls", "store": str(store),
                                         "skills": [s.as_dict() for s in skills]}))
        return
    if not skills:
        renderer.note(f"no skills in the store {store}; add one with: sbx skills add PATH")
        return
    renderer.table(("name", "description", "size"),
                   [(escape(s.name), escape(_short(s.description)), _size(s.size))
                    for s in skills])


def skill_added(renderer: Renderer, skill: StoredSkill, replaced: bool) -> None:
    if renderer.as_json:
        renderer.envelope(Envelope(command="skills", status="ok", exit_code=0,
                                   data={"action": "add", "replaced": replaced,
                                         **skill.as_dict()}))
        return
    verb = "replaced" if replaced else "added"
    text = f"{verb} skill {skill.name} ({_size(skill.size)}) at {skill.directory}"
    renderer.line(renderer.out_file, escape(text), text)


def skill_removed(renderer: Renderer, name: str, directory: Path) -> None:
    if renderer.as_json:
        renderer.envelope(Envelope(command="skills", status="ok", exit_code=0,
                                   data={"action": "rm", "name": name,
                                         "directory": str(directory)}))
        return
    text = f"removed skill {name} ({directory})"
    renderer.line(renderer.out_file, escape(text), text)


def _short(text: str) -> str:
    return text if len(text) <= _TABLE_DESCRIPTION else text[:_TABLE_DESCRIPTION - 3] + "..."


def _size(size: int) -> str:
    for unit in ("B", "KiB", "MiB"):
        if size < 1024 or unit == "MiB":
            return f"{size} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size = size / 1024  # type: ignore[assignment]
    return f"{size} B"
