"""What a run needs of where its engine is: a run on an engine that does not share this machine's
disk and network stack is refused when it would need either, never started with an empty
workspace or without its egress boundary."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason

if TYPE_CHECKING:
    from sbx.seams.engine import EngineLocation
    from sbx.usecases.run.plan import RunPlan


def local_needs(plan: RunPlan) -> list[str]:
    """What of ``plan`` exists only on this machine, in words (empty: it runs anywhere)."""
    needs: list[str] = []
    if plan.workspace_host is not None:
        needs.append(f"the workspace {plan.workspace_host} is bound from this machine's disk")
    workspace = plan.workspace_host
    mounted = sorted({pin.source.path for pin in plan.host_mounts.pins
                      if workspace is None or not _below(pin.source.path, workspace)})
    if mounted:
        needs.append("host paths (" + ", ".join(mounted) + ") bound from this machine's disk")
    volumes = plan.capabilities.volumes if plan.capabilities is not None else ()
    sized = [v.path for v in volumes if v.size is not None]
    if sized:
        needs.append("sized volumes (" + ", ".join(sized) + ") staged on this machine")
    if plan.egress is not None:
        needs.append("network access, whose egress proxy and firewall sbx runs on this "
                     "machine's bridge")
    elif plan.network is not None:
        needs.append("published ports, forwarded from this machine")
    return needs


def _below(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def refuse_local_only(location: EngineLocation, plan: RunPlan) -> None:
    """``engine_not_local`` when the engine is elsewhere and the run needs this machine."""
    if location.local:
        return
    needs = local_needs(plan)
    if not needs:
        return
    raise SbxError(
        Reason.ENGINE_NOT_LOCAL,
        f"the engine at {location.host} is on another host, and this run needs "
        + "; ".join(needs),
        hint="Over that engine only offline runs without a workspace or mounts work today "
             "(`sbx run WORKLOAD -- CMD`, a kit with no network); for this one use the local "
             "engine (`unset DOCKER_HOST DOCKER_CONTEXT`). Copying the workspace in "
             "(`--workspace-mode copy`) is not built yet.",
        details={"engine": location.host, "needs": needs})


__all__ = ["local_needs", "refuse_local_only"]
