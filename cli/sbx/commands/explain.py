"""`sbx explain REASON | --list`: cause and fix of a reason code, from the one registry.

The other forms (the effective sandbox of a composition, a request decision, `--last`) arrive
with the diagnostics issue; until then a non-reason argument is refused with the known codes.
"""

from __future__ import annotations

from typing import Annotated

import typer

from sbx.errors import SbxError
from sbx.reasons import Reason


def explain(
    ctx: typer.Context,
    subject: Annotated[str | None, typer.Argument(
        metavar="[REASON]", help="A reason code, e.g. mount_blocked.")] = None,
    list_all: Annotated[bool, typer.Option("--list", help="List every reason code.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON envelope.")] = False,
) -> int:
    """Explain a reason code: what causes it and how to fix it."""
    renderer = ctx.obj.renderer
    if list_all or subject is None:
        renderer.reason_list(list(Reason))
        return 0
    try:
        reason = Reason(subject)
    except ValueError:
        import difflib

        close = difflib.get_close_matches(subject, [r.value for r in Reason], n=1)
        hint = f"Did you mean {close[0]!r}? " if close else ""
        raise SbxError(Reason.INVALID_ARGUMENT, f"{subject!r} is not a reason code",
                       hint=f"{hint}`sbx explain --list` shows them all.") from None
    renderer.reason(reason)
    return 0


__all__ = ["explain"]
