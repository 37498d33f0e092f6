"""`sbx resident start|stop|status` (sbx.usecases.resident)."""

from __future__ import annotations

from typing import Annotated

import typer

from sbx.usecases import resident
from sbx.views import resident as resident_view

JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON envelope.")]


def start(
    ctx: typer.Context,
    idle: Annotated[int, typer.Option(
        "--idle", metavar="SECONDS",
        help="Exit after this many seconds with no command to serve (1 to 604800).")] = 1800,
    as_json: JsonOption = False,
) -> int:
    """Start the resident helper (a socket only you can open; exits when idle).

    Later sbx commands of this installation are served by a process that has sbx imported
    already, through a socket in a directory only you can enter (checked with SO_PEERCRED).
    It runs each command in a fork of itself with your streams, directory, umask and
    environment, and declines (the command then runs in its own process, as without it) a
    caller that differs from it in ids, groups, limits, namespaces or a variable read while
    sbx loaded. It holds no secret and exits when idle, on `sbx resident stop`, or when sbx's
    code changes. `SBX_RESIDENT=0` bypasses it for one command.
    """
    app = ctx.obj
    resident_view.state(app.renderer, "resident start", resident.start(app, idle))
    return 0


def stop(ctx: typer.Context, as_json: JsonOption = False) -> int:
    """Stop the resident helper once the commands it runs have ended."""
    app = ctx.obj
    resident_view.state(app.renderer, "resident stop", resident.stop(app))
    return 0


def status(ctx: typer.Context, as_json: JsonOption = False) -> int:
    """Whether the resident helper runs, what it served and declined, its memory."""
    app = ctx.obj
    resident_view.state(app.renderer, "resident status", resident.status(app))
    return 0


__all__ = ["start", "status", "stop"]
