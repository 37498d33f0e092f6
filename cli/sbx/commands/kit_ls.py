"""`sbx kit ls [--json]`: the bundled agent kits' short names and what they resolve to."""

from __future__ import annotations

from typing import Annotated

import typer

from sbx.domain.kits import reference
from sbx.views import kit as kit_view


def ls(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON envelope.")] = False,
) -> int:
    """List the agent kits bundled with sbx by short name (claude, codex, gemini) and what
    each name resolves to from this directory. `sbx run NAME [WORKSPACE]` runs one. A kit
    reference resolves in this order: an existing path, then a kit pinned by `sbx pull`, then
    a short name; so a directory or pinned kit of the same name comes first (shown here)."""
    app = ctx.obj
    kit_view.short_names(app.renderer,
                         reference.short_names(cwd=app.cwd, lock_home=app.state_home))
    return 0


__all__ = ["ls"]
