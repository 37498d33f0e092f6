"""`sbx skills ls|add|rm`: the host's shared skills store that agent-skills@1 shows in
sandboxes (SBX_SKILLS, default $XDG_DATA_HOME/sbx/skills or ~/.local/share/sbx/skills)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from sbx.base.paths import skills_home
from sbx.domain.sandbox.skillstore import SkillStore, check_name
from sbx.views import skills as skills_view

_JSON = typer.Option("--json", help="Print a JSON envelope.")


def ls(ctx: typer.Context, as_json: Annotated[bool, _JSON] = False) -> int:
    """List the skills in the host's skills store: name, description (SKILL.md's front
    matter) and size."""
    app = ctx.obj
    store = SkillStore(skills_home(app.env))
    skills_view.skills_list(app.renderer, store.root, store.listing())
    return 0


def add(
    ctx: typer.Context,
    path: Annotated[Path, typer.Argument(
        metavar="PATH", help="The skill's directory (SKILL.md at its root).")],
    name: Annotated[str | None, typer.Option(
        "--name", metavar="NAME",
        help="The skill's name in the store (default: the directory's name).")] = None,
    force: Annotated[bool, typer.Option(
        "--force", help="Replace a skill of the same name.")] = False,
    as_json: Annotated[bool, _JSON] = False,
) -> int:
    """Copy a skill directory into the host's skills store (no link followed, at most 64
    MiB); every sandbox whose kits declare agent-skills@1 sees it from its next start."""
    app = ctx.obj
    store = SkillStore(skills_home(app.env))
    chosen = check_name(name if name is not None else Path(os.path.abspath(path)).name, path)
    replaced = store.holds(chosen)
    skill = store.add(path, chosen, force=force)
    skills_view.skill_added(app.renderer, skill, replaced)
    return 0


def rm(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(metavar="NAME", help="The skill's name (sbx skills ls).")],
    as_json: Annotated[bool, _JSON] = False,
) -> int:
    """Remove a skill from the host's skills store; sandboxes stop seeing it from their
    next start."""
    app = ctx.obj
    store = SkillStore(skills_home(app.env))
    skills_view.skill_removed(app.renderer, name, store.remove(name))
    return 0


__all__ = ["add", "ls", "rm"]
