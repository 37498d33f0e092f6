"""What a run needs of where its engine is: a run on an engine that does not share this machine's
disk and network stack is refused when it would need either, never started with an empty
workspace or without its egress boundary."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import TYPE_CHECKING

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason

if TYPE_CHECKING:
    from sbx.seams.engine import EngineLocation
    from sbx.usecases.pipeline import WorkloadPlan
    from sbx.usecases.run.plan import RunPlan


def local_needs(plan: RunPlan) -> list[str]:
    # A copied workspace (--workspace-mode copy) is not here: it travels through the engine.
    """What of ``plan`` exists only on this machine, in words (empty: it runs anywhere)."""
    workspace = plan.workspace_host
    mounted = sorted({pin.source.path for pin in plan.host_mounts.pins
                      if workspace is None or not _below(pin.source.path, workspace)})
    volumes = plan.capabilities.volumes if plan.capabilities is not None else ()
    capabilities = plan.capabilities
    return _needs(workspace=workspace, host_paths=mounted,
                  sized=[v.path for v in volumes if v.size is not None],
                  egress=_egress_needs(named=plan.name is not None and plan.egress is not None,
                                       modes=plan.egress.modes if plan.egress else {},
                                       ssh_agent=bool(capabilities and capabilities.ssh_agent),
                                       kit_registry=bool(capabilities
                                                         and capabilities.kit_registry)),
                  ports=bool(capabilities and (capabilities.ports or capabilities.published)))


def planned_needs(planned: WorkloadPlan) -> list[str]:
    """What a run of ``planned`` would need of this machine before any workspace is given:
    what ``sbx explain WORKLOAD`` can predict of run's ``engine_not_local``."""
    capabilities = planned.capabilities
    return _needs(workspace=None,
                  host_paths=[f"host-mount@1 at {m.path}" for m in capabilities.host_mounts],
                  sized=[v.path for v in capabilities.volumes if v.size is not None],
                  egress=_egress_needs(named=False,
                                       modes=planned.egress.modes if planned.egress else {},
                                       ssh_agent=bool(capabilities.ssh_agent),
                                       kit_registry=capabilities.kit_registry),
                  ports=bool(capabilities.ports))


def _egress_needs(*, named: bool, modes: Mapping[str, str], ssh_agent: bool,
                  kit_registry: bool) -> list[str]:
    """What of a run's egress only this machine can serve: the proxy itself runs beside any
    engine (sbx.usecases.run.engineproxy), these parts of it not yet."""
    needs: list[str] = []
    if named:
        needs.append("a named sandbox's egress, whose proxy a keeper on this machine owns")
    oauth = sorted(service for service, mode in modes.items() if mode == "oauth")
    if oauth:
        needs.append("OAuth credentials (" + ", ".join(oauth) + "), which the proxy refreshes "
                     "in this machine's store")
    if ssh_agent:
        needs.append("the SSH agent relay (ssh-agent@1), whose agent is on this machine")
    if kit_registry:
        needs.append("the kit registry (kit-registry@1), served from this machine's kit store")
    return needs


def _needs(*, workspace: str | None, host_paths: list[str], sized: list[str],
           egress: list[str], ports: bool) -> list[str]:
    needs: list[str] = []
    if workspace is not None:
        needs.append(f"the workspace {workspace} is bound from this machine's disk")
    if host_paths:
        needs.append("host paths (" + ", ".join(host_paths) + ") bound from this machine's disk")
    if sized:
        needs.append("sized volumes (" + ", ".join(sized) + ") staged on this machine")
    needs.extend(egress)
    if ports:
        needs.append("published ports, forwarded from this machine")
    return needs


def _hint(needs: list[str], workload: str, workspace: str | None) -> str:
    """The fix: a bound workspace alone is copied in instead; the rest needs this machine."""
    local = "use the local engine (`unset DOCKER_HOST DOCKER_CONTEXT`)"
    if workspace is not None and len(needs) == 1:
        command = shlex.join(["sbx", "run", workload, workspace, "--workspace-mode", "copy"])
        return (f"Copy the workspace in instead of binding it: add `--workspace-mode copy`, "
                f"e.g. `{command}` (`sbx cp NAME:PATH DEST` brings results back), or {local}.")
    return (f"Over that engine, one-shot runs work with kits' network and API-key "
            f"credentials, without mounts (a workspace with `--workspace-mode copy`); for "
            f"this one {local}.")


def _below(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def refuse_local_only(location: EngineLocation, plan: RunPlan) -> None:
    """``engine_not_local`` when the engine is elsewhere and the run needs this machine."""
    error = not_local(location, local_needs(plan), workload=plan.facts.workload,
                      workspace=plan.workspace_host)
    if error is not None:
        raise error


def not_local(location: EngineLocation, needs: list[str], *, workload: str = "WORKLOAD",
              workspace: str | None = None) -> SbxError | None:
    """The refusal of a run with ``needs`` on the engine at ``location`` (None: it may run)."""
    if location.local or not needs:
        return None
    return SbxError(
        Reason.ENGINE_NOT_LOCAL,
        f"the engine at {location.host} is on another host, and this run needs "
        + "; ".join(needs),
        hint=_hint(needs, workload, workspace),
        details={"engine": location.host, "needs": needs})


__all__ = ["local_needs", "not_local", "planned_needs", "refuse_local_only"]
