"""A run from request to result: its run directory claimed, the plan made (from the kits, or
from the plan cache's recipe), offered to the plan cache, executed."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from sbx.base.errors import SbxError
from sbx.seams import audit
from sbx.usecases import plancache
from sbx.usecases.context import AppContext
from sbx.usecases.run.execute import execute
from sbx.usecases.run.fromcache import prepare_cached
from sbx.usecases.run.plan import RunPlan, new_run_id
from sbx.usecases.run.recipe import Recipe
from sbx.usecases.run.request import OutputSink, ProgressFactory, RunRequest
from sbx.usecases.run.result import RunResult
from sbx.usecases.run.rundir import audit_event, claim, unclaim

if TYPE_CHECKING:
    from sbx.usecases.kitgate import Confirm as ConfirmKits


def run_new(ctx: AppContext, request: RunRequest, *, on_output: OutputSink,
            progress: ProgressFactory,
            on_warning: Callable[[str], None] = lambda _text: None,
            on_notice: Callable[[str], None] = lambda _text: None,
            confirm_kits: ConfirmKits | None = None,
            run_id: str | None = None,
            replacing: Callable[[], None] | None = None) -> RunResult:
    """Prepare and run a sandbox that does not exist yet (a one-shot run, or the creation of a
    named sandbox). A recreated named sandbox keeps its ``run_id`` (its run directory holds
    its volumes); ``replacing`` takes its old container down once the new one is planned, so
    a refusal (a kit's widening, a missing secret, a blocked mount) leaves it as it was."""
    again = run_id is not None
    run_id = run_id or new_run_id()

    def planned() -> RunPlan:
        plan = full_plan(ctx, request, run_id, progress, confirm_kits=confirm_kits,
                         on_notice=on_notice)
        if replacing is not None:
            replacing()
        return plan

    plan = _planned(ctx, request, run_id, planned, again=again)
    for warning in plan.warnings:
        on_warning(warning)
    return execute(ctx, plan, request, on_output, on_warning, on_notice)


def run_cached(ctx: AppContext, request: RunRequest, recipe: Recipe, *, on_output: OutputSink,
               progress: ProgressFactory,
               on_warning: Callable[[str], None] = lambda _text: None,
               on_notice: Callable[[str], None] = lambda _text: None,
               confirm_kits: ConfirmKits | None = None) -> RunResult:
    """A one-shot run from a cached plan (sbx.usecases.plancache); when the engine no longer has
    its image, the workspace changed owner, or a kit's approval no longer covers it, the full
    plan is made instead."""
    run_id = new_run_id()

    def planned() -> RunPlan:
        plan = prepare_cached(ctx, request, run_id, recipe)
        if plan is None:
            plan = full_plan(ctx, request, run_id, progress, confirm_kits=confirm_kits,
                             on_notice=on_notice)
        return plan

    plan = _planned(ctx, request, run_id, planned)
    for warning in plan.warnings:
        on_warning(warning)
    return execute(ctx, plan, request, on_output, on_warning, on_notice)


def full_plan(ctx: AppContext, request: RunRequest, run_id: str, progress: ProgressFactory, *,
              confirm_kits: ConfirmKits | None,
              on_notice: Callable[[str], None]) -> RunPlan:
    """The plan from the kits, offered to the plan cache (which keeps only plans it can run
    again)."""
    # Config and kit decoding, composition, the kits' gate: never on a cached run's path.
    from sbx.usecases.run.fromkits import prepare

    plan = prepare(ctx, request, run_id, progress, confirm_kits=confirm_kits,
                   on_notice=on_notice)
    if ctx.argv is not None and plan.recipe is not None:  # else nothing to key it by
        plancache.remember(ctx, request, plan, plan.recipe,
                           cacheable=plancache.cacheable(plan))
    return plan


def _planned(ctx: AppContext, request: RunRequest, run_id: str, plan: Callable[[], RunPlan],
             *, again: bool = False) -> RunPlan:
    """``plan()`` under the run's claim, which a refusal gives back (audited)."""
    claim(ctx, run_id, again=again)
    try:
        return plan()
    except SbxError as error:
        unclaim(ctx, run_id, again=again)
        audit_event(ctx, audit.SANDBOX_UNAVAILABLE, run_id, "warning",
                    {"reason": error.reason.value, "workload": request.workload})
        raise
    except BaseException:
        unclaim(ctx, run_id, again=again)
        raise


__all__ = ["full_plan", "run_cached", "run_new"]
