"""`sbx gc [--dry-run] [--json] [--grace SECONDS]`: adapter to :func:`sbx.usecases.gc.collect`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from sbx.base.deferred import deferred
from sbx.usecases.gc import result as gc_result
from sbx.views import gc as gc_view

if TYPE_CHECKING:
    from sbx.usecases.gc import collect
else:  # deferred: the collector loads the engine client and every store; `sbx gc --help` none
    collect = deferred("sbx.usecases.gc.collect")


def gc(
    ctx: typer.Context,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Only list what would be removed; change nothing.")] = False,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print one JSON envelope listing removed, kept and failed objects.")
    ] = False,
    grace: Annotated[int | None, typer.Option(
        "--grace", metavar="SECONDS", min=0,
        help="Seconds past a deadline before a run's objects count as stale "
             "(default: [gc] grace_seconds, 600).")] = None,
    named: Annotated[bool, typer.Option(
        "--named", help="Also remove stopped named sandboxes (never running ones).")] = False,
) -> int:
    """Remove what crashed or killed runs left behind (by label, this state home only).

    Silent with exit 0 when there was nothing to do or everything was removed, so it suits
    cron; one line per failure, exit 126 (cleanup_failed) when anything could not be removed.
    """
    app = ctx.obj
    result = collect.collect(app, gc_result.GcRequest(dry_run=dry_run, grace_s=grace, named=named))
    gc_view.gc_result(app.renderer, result, verbose=app.verbose)
    return int(result.exit_status)


__all__ = ["gc"]
