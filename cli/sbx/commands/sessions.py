"""`sbx sessions NAME [--json]`: adapter to :func:`sbx.usecases.named.sessions.list_sessions`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from sbx.base.deferred import deferred
from sbx.views import sandboxes as sandboxes_view

if TYPE_CHECKING:
    from sbx.usecases.named import sessions
else:  # imported on first use: `sbx --help` loads no use case
    sessions = deferred("sbx.usecases.named.sessions")


def sessions_(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(metavar="NAME",
                                        help="The sandbox's name (or its run id).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON envelope.")] = False,
) -> int:
    """List the agent's resumable sessions in a named or kept sandbox, most recent first.

    Runs the list verb the workload kit declares (agent-sessions@1) in the sandbox, started
    if stopped; an id goes to `sbx run ... --resume ID`. Exit status: the list command's.
    """
    app = ctx.obj
    renderer = app.renderer
    listed = sessions.list_sessions(app, name, on_output=renderer.workload_output,
                                    on_warning=renderer.warn, on_notice=renderer.note)
    sandboxes_view.session_list(renderer, listed, as_json=as_json)
    return int(listed.exit_code)


__all__ = ["sessions_"]
