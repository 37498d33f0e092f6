"""`sbx version`: one line, or a JSON envelope."""

from __future__ import annotations

from typing import Annotated

import typer

from sbx import __version__
from sbx.base.render import Envelope


def version(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON envelope.")] = False,
) -> int:
    """Print sbx's version."""
    renderer = ctx.obj.renderer
    if as_json:
        renderer.envelope(Envelope(command="version", status="ok", exit_code=0,
                                   data={"version": __version__}))
    else:
        renderer.message(f"sbx {__version__}")
    return 0


__all__ = ["version"]
