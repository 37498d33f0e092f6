"""`sbx df [--json]`: adapter to :func:`sbx.usecases.diskusage.disk_usage`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from sbx.base.deferred import deferred
from sbx.views import diskusage as df_view

if TYPE_CHECKING:
    from sbx.usecases import diskusage
else:  # deferred: the engine client and every store; `sbx df --help` loads none
    diskusage = deferred("sbx.usecases.diskusage")


def df(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON envelope.")] = False,
) -> int:
    """Show what this state home takes: images, sandboxes, volumes, HOMEs, its own files, and
    what `sbx gc` could reclaim now (gc's own decisions, as a dry run)."""
    app = ctx.obj
    df_view.disk_usage(app.renderer, diskusage.disk_usage(app), as_json=as_json)
    return 0


__all__ = ["df"]
