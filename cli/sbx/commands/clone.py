"""`sbx diff NAME`, `sbx fetch NAME`: adapters to :mod:`sbx.usecases.named.clone`."""

from __future__ import annotations

from typing import Annotated

import typer

from sbx.base.render import Envelope
from sbx.usecases.named import clone as clone_usecase


def diff(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(metavar="NAME", help="A --clone sandbox.")],
) -> int:
    """Show a --clone sandbox's changes (committed and not) against the commit it started
    from."""
    app = ctx.obj
    app.renderer.workload_output("stdout", clone_usecase.diff(app, name))
    return 0


def fetch(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(metavar="NAME", help="A --clone sandbox.")],
    force: Annotated[bool, typer.Option(
        "--force", help="Overwrite the host's sbx/NAME even when it does not fast-forward.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON envelope.")] = False,
) -> int:
    """Bring a --clone sandbox's commits into the host repository as branch sbx/NAME.

    The sandbox makes a git bundle of its branch; it is copied out, verified, checked to hold
    only that branch and fetched with hooks off; the host's work tree is not touched.
    """
    app = ctx.obj
    result = clone_usecase.fetch(app, name, force=force)
    renderer = app.renderer
    if as_json:
        renderer.envelope(Envelope(command="fetch", status="ok", exit_code=0, data=result))
    else:
        renderer.message(f"{result['branch']} -> {result['commit'][:12]} in "
                         f"{result['repository']}")
    return 0


__all__ = ["diff", "fetch"]
