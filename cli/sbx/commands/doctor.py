"""`sbx doctor [--json]`: adapter to :func:`sbx.usecases.doctor.diagnose`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from sbx.base.deferred import deferred
from sbx.views import doctor as doctor_view

if TYPE_CHECKING:
    from sbx.usecases.doctor import diagnose, model
else:  # deferred: the checks load the engine client and the pipeline; `--help` none
    diagnose = deferred("sbx.usecases.doctor.diagnose")
    model = deferred("sbx.usecases.doctor.model")


def doctor(
    ctx: typer.Context,
    workload: Annotated[str | None, typer.Argument(
        help="Also plan this workload (and --kit mixins) as `sbx run` would, creating "
             "nothing: the same refusals, with the same reason codes.")] = None,
    kit: Annotated[list[str] | None, typer.Option(
        "--kit", "-k", metavar="MIXIN", help="A mixin kit to check with the workload.")] = None,
    arg: Annotated[list[str] | None, typer.Option(
        "--arg", metavar="NAME=VALUE", help="A kit arg value, as for sbx run.")] = None,
    allow_privileged: Annotated[bool, typer.Option(
        "--allow-privileged",
        help="Plan as `sbx run --allow-privileged` would (consent to privileged@1).")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON envelope.")] = False,
) -> int:
    """Check that this machine can run sandboxes safely: platform, config, identity, engine,
    enforced resource limits (a tiny probe container) and stale objects.

    Exit 0 when no check failed (warnings allowed), 1 otherwise.
    """
    app = ctx.obj
    request = model.DoctorRequest(workload=workload, kits=tuple(kit or ()),
                                        args=tuple(arg or ()), allow_privileged=allow_privileged)
    report = diagnose.diagnose(app, request)
    doctor_view.doctor_report(app.renderer, report)
    return int(report.exit_status)


__all__ = ["doctor"]
