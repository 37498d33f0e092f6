"""`sbx doctor [--json]`: adapter to :func:`sbx.core.doctor.diagnose`."""

from __future__ import annotations

from typing import Annotated

import typer


def doctor(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON envelope.")] = False,
) -> int:
    """Check that this machine can run sandboxes safely: platform, config, identity, engine,
    enforced resource limits (a tiny probe container) and stale objects.

    Exit 0 when no check failed (warnings allowed), 1 otherwise.
    """
    from sbx.core.doctor import diagnose

    app = ctx.obj
    report = diagnose(app)
    app.renderer.doctor_report(report)
    return int(report.exit_status)


__all__ = ["doctor"]
