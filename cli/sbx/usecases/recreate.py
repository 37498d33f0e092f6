"""`sbx run --name NAME --recreate [WORKLOAD ...]`: a named sandbox made again from its kits as
they are now, keeping its HOME and its volumes.

The new container is planned first (every refusal of a creation — a kit that asks for more than
was approved, a missing secret, a blocked mount — leaves the sandbox as it was); then the old
container, its network and firewall rules, its proxy and per-sandbox image are removed;
the volumes (Docker volumes, and as root the file systems in its run directory) and the run id
stay, and the sandbox is created again exactly as a new one is (every check, the hardened
shape, install hooks), mounting them at the same paths. Creation options not given again are
the ones it was made with; ``-e``/``--env-file`` must be given again (sbx keeps no value of
them). Refused when the kits changed the volumes themselves (which paths, in which order):
then HOME could land on another volume.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.sandbox import runrecord
from sbx.domain.sandbox.records import SandboxRecord, kit_words
from sbx.domain.sandbox.sources import Staging
from sbx.seams.host import firewall
from sbx.usecases.context import AppContext
from sbx.usecases.explain import static_composition
from sbx.usecases.keeper import stop_keeper
from sbx.usecases.namedrecord import CREATION_OPTIONS, STOP_TIMEOUT_S, check_workspace
from sbx.usecases.pipeline import load
from sbx.usecases.run.request import OutputSink, ProgressFactory, RunRequest, workload_request
from sbx.usecases.run.rundir import empty_but_volumes
from sbx.usecases.run.start import run_new

if TYPE_CHECKING:
    from sbx.usecases.kitgate import Confirm as ConfirmKits
    from sbx.usecases.run.result import RunResult


def creation_request(request: RunRequest, record: SandboxRecord) -> RunRequest:
    """The request to make ``record`` again: what this command gives, else what it was made
    with."""
    recorded = record.request.get("options") or {}
    defaults = RunRequest(workload=request.workload)
    changes: dict[str, Any] = {}
    for field in CREATION_OPTIONS:
        if getattr(request, field) != getattr(defaults, field) or field not in recorded:
            continue
        if field == "template":  # made again from its kits as they are now, HOME kept as is
            continue
        if field in ("env", "env_files"):
            raise SbxError(Reason.INVALID_ARGUMENT,
                           f"{record.name} was made with {CREATION_OPTIONS[field]}, whose "
                           "values sbx does not keep; give them again to recreate it",
                           hint=f"sbx run --name {record.name} --recreate {record.workload} "
                                f"{CREATION_OPTIONS[field]} ...")
        value = recorded[field]
        changes[field] = tuple(value) if isinstance(value, list) else value
    if "workspace" not in changes and request.workspace is None and record.workspace:
        changes["workspace"] = record.workspace
        changes.setdefault("access", record.access)
    workload, mixins = kit_words(record)
    changes["workload"] = workload
    if not request.kits:
        changes["kits"] = mixins  # found from anywhere, as it was made
    return dataclasses.replace(request, **changes)


def _check_volumes(ctx: AppContext, record: SandboxRecord, request: RunRequest) -> None:
    before = (record.request.get("kits_state") or {}).get("volume_paths")
    if before is None:
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"{record.name} was made by an sbx that did not record its volumes' "
                       "paths, so which volume is HOME after a recreation cannot be told",
                       hint=f"Keep it as it is, or `sbx rm {record.name}` and create it again "
                            "(its HOME and volumes are then lost).")
    now = [v.path for v in static_composition(load(ctx, workload_request(request)).kit_set)
           .volumes]
    if now != list(before):
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"{record.name}'s kits changed its volumes ({', '.join(before) or 'none'}"
                       f" -> {', '.join(now) or 'none'}): recreated, HOME and the volumes "
                       "would not keep their places",
                       hint=f"Keep it as it is, or `sbx rm {record.name}` and create it again "
                            "(its HOME and volumes are then lost).")


def _take_down(ctx: AppContext, record: SandboxRecord,
               on_warning: Callable[[str], None]) -> None:
    """Everything but the volumes, the run directory's volume files and the record (its
    workspace checked first, as when it is removed)."""
    driver = ctx.driver
    run_dir = runrecord.run_dir(ctx.state_home, record.run_id)
    stop_keeper(run_dir, record.run_id)
    if record.container_id is not None:
        if driver.container_state(record.container_id) == "running":
            driver.stop(record.container_id, STOP_TIMEOUT_S)
        driver.remove_container(record.container_id)
    if record.network is not None:
        driver.remove_network(record.network)
    if record.image:
        driver.remove_image(record.image)
    if record.request.get("bridge"):
        guard = firewall.BridgeGuard(str(record.request["bridge"]), record.run_id)
        guard.installed, guard.installed_nat = guard.listed()
        guard.remove()
    problems = Staging.for_named(ctx.home_hash, record.name).release()
    if problems:
        raise SbxError(Reason.CLEANUP_FAILED, "; ".join(problems))
    check_workspace(ctx, record, on_warning, stopped=True)
    empty_but_volumes(run_dir)


def recreate(ctx: AppContext, record: SandboxRecord, request: RunRequest, *,
             on_output: OutputSink, progress: ProgressFactory,
             on_warning: Callable[[str], None],
             on_notice: Callable[[str], None],
             confirm_kits: ConfirmKits | None = None) -> RunResult:
    if request.workload not in (record.workload, kit_words(record)[0]):
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"{record.name} runs {record.workload}, not {request.workload}",
                       hint=f"sbx run --name {record.name} --recreate {record.workload}")
    again = creation_request(request, record)
    _check_volumes(ctx, record, again)

    def replacing() -> None:  # once the new container is planned: a refusal changes nothing
        _take_down(ctx, record, on_warning)
        on_notice(f"{record.name}: its old container is removed; making it again with HOME "
                  "and its volumes")

    return run_new(ctx, again, on_output=on_output, progress=progress, on_warning=on_warning,
                   on_notice=on_notice, confirm_kits=confirm_kits, run_id=record.run_id,
                   replacing=replacing)


__all__ = ["creation_request", "recreate"]
