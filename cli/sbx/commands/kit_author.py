"""`sbx kit init|validate|inspect`: adapters to :mod:`sbx.usecases.kitinit`,
:mod:`sbx.usecases.kitvalidate` and :mod:`sbx.usecases.explain` (the effective sandbox)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from sbx.base.deferred import deferred
from sbx.base.reasons import Reason
from sbx.usecases import kitinit
from sbx.usecases.kitinit import DEFAULT_BASE
from sbx.views import explain as explain_view
from sbx.views import kit as kit_view

if TYPE_CHECKING:
    from sbx.usecases import explain as explain_core
    from sbx.usecases import explainsandbox, kitvalidate
else:  # deferred: the kit loaders and the pipeline; `sbx kit init --help` none
    explain_core = deferred("sbx.usecases.explain")
    explainsandbox = deferred("sbx.usecases.explainsandbox")
    kitvalidate = deferred("sbx.usecases.kitvalidate")


def init(
    ctx: typer.Context,
    directory: Annotated[str, typer.Argument(
        metavar="DIR", help="Where to create the kit; its name becomes the kit's name.")],
    mixin: Annotated[bool, typer.Option(
        "--mixin", help="Create a mixin (declarations only) instead of a workload.")] = False,
    base: Annotated[str | None, typer.Option(
        "--from", metavar="IMAGE",
        help=f"The workload's base image (default {DEFAULT_BASE}); it must be present "
             "locally to run, sbx never pulls implicitly.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON envelope.")] = False,
) -> int:
    """Create a minimal kit in DIR that validates and runs.

    A workload gets DIR/NAME.yaml and DIR/NAME.dockerfile (FROM the --from image); a mixin
    gets DIR/NAME.yaml only. Existing files are never overwritten.
    """
    app = ctx.obj
    kit_view.kit_init(app.renderer, kitinit.init_kit(directory, cwd=app.cwd, mixin=mixin,
                                                     base_image=base))
    return 0


def validate(
    ctx: typer.Context,
    reference: Annotated[str, typer.Argument(
        metavar="DIR|REF", help="A kit directory, a pulled kit, or a registry reference.")],
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print {reference, kind, valid, errors, warnings} in an envelope.")
    ] = False,
) -> int:
    """Check one kit with the loader `sbx run` uses; exit 125 (invalid_kit) when invalid.

    A registry reference that was not pulled is checked from its manifest (one GET, nothing
    pulled or pinned). Warnings name capabilities this sbx skips or refuses at run time.
    """
    app = ctx.obj
    result = kitvalidate.validate_kit(reference, cwd=app.cwd, state_home=app.state_home,
                                      env=app.env)
    kit_view.kit_validation(app.renderer, result)
    return 0 if result.valid else int(Reason.INVALID_KIT.exit_status)


def inspect(
    ctx: typer.Context,
    workload: Annotated[str, typer.Argument(
        metavar="WORKLOAD", help="The workload kit (a directory or a pulled kit).")],
    kit: Annotated[list[str] | None, typer.Option(
        "--kit", "-k", metavar="MIXIN", help="A mixin kit, as for `sbx run` (repeatable).")
    ] = None,
    arg: Annotated[list[str] | None, typer.Option(
        "--arg", metavar="NAME=VALUE", help="A value for a kit arg (repeatable).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON envelope.")] = False,
) -> int:
    """Show the effective composition: what `sbx run WORKLOAD --kit MIXIN...` would get.

    Kits in composition order, selected and skipped capabilities, hardening values with their
    sources, network rules per phase with the kit behind each, credentials (bound or not).
    The kits' own description, without the engine: `sbx explain WORKLOAD` reports the same
    from `sbx run`'s planning, adding the image, the user, the limits after resources@1, and
    any refusal `sbx run` would make.
    """
    app = ctx.obj
    kit_set = explain_core.load(workload, kit or (), arg or (), cwd=app.cwd,
                                state_home=app.state_home)
    bound, oauth = explainsandbox.stored_credentials(kit_set, app.state_home)
    explanation = explainsandbox.explain_sandbox(kit_set, app.load_config(), bound=bound,
                                                 oauth=oauth)
    explain_view.explain_sandbox(app.renderer, explanation, command="kit inspect")
    return 0


__all__ = ["init", "inspect", "validate"]
