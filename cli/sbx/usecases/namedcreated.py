"""A named sandbox's record, written once its container started: the kits' state and
session verbs come from their composition (apart from sbx.usecases.namedrecord, so a start of
an existing sandbox loads no composition)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from sbx.domain.sandbox import runrecord
from sbx.domain.sandbox.lifecycle import STARTUP_SCRIPT
from sbx.domain.sandbox.records import SandboxRecord
from sbx.usecases import fleet, keeper
from sbx.usecases.context import AppContext
from sbx.usecases.explain import static_composition
from sbx.usecases.namedkits import fingerprint
from sbx.usecases.namedrecord import creation_options, release_creation
from sbx.usecases.run.request import RunRequest
from sbx.usecases.run.sessionverbs import acp_facts
from sbx.usecases.sandboxstore import SandboxStore

if TYPE_CHECKING:
    from sbx.usecases.run.plan import RunPlan


def keep_created(ctx: AppContext, plan: RunPlan, ids: dict[str, Any],
                 request: RunRequest) -> None:
    """The started named sandbox recorded (:func:`record_created`), and its keeper when it
    has an idle stop and no proxy or ports to keep."""
    record_created(ctx, plan, ids, request)
    keeper.ensure_idle_keeper(runrecord.run_dir(ctx.state_home, plan.run_id), plan.run_id,
                              ctx.env)


def record_created(ctx: AppContext, plan: RunPlan, ids: dict[str, Any],
                   request: RunRequest) -> None:
    """Called by the run once a named sandbox's container started: from now on it is the
    sandbox's (a failure before this point removed everything, like a one-shot run)."""
    assert plan.name is not None  # noqa: S101 - only named plans get here
    store = SandboxStore(ctx.state_home)
    kit_set, _config, composition, capabilities = plan.full()
    record = SandboxRecord(
        name=plan.name, run_id=plan.run_id, created=time.time(),
        workload=kit_set.workload.reference, kits=[k.reference for k in kit_set.mixins],
        workspace=plan.workspace_host, access=plan.access,
        request={"workspace_target": plan.workspace_target, "bridge": plan.bridge,
                 # --workspace-mode copy: the directory it was copied from (nothing is bound)
                 "workspace_copy": plan.workspace_copy,
                 # its workspace volume (copied, or --clone's checkout): what a helper mounts
                 "workspace_volume": plan.workspace_volume,
                 "proxy": plan.egress is not None, "user": plan.spec.user,
                 "pins": [{"path": p.source.path, "target": p.target,
                           "read_only": p.read_only} for p in plan.host_mounts.pins],
                 "staging": ids.get("staging", []),
                 "credentials": {s: _optional(composition, s) for s in plan.egress.bound
                                 if plan.egress.modes.get(s) == "apikey"}
                 if plan.egress is not None else {},
                 "home_bounded": any(v.size is not None and v.path == plan.home
                                     for v in capabilities.volumes),
                 "credential_names": sorted(plan.credential_names),
                 "options": creation_options(request),
                 "runtime": plan.spec.runtime,  # checked against the engine at each start
                 "kits_state": fingerprint(kit_set, static_composition(kit_set)),
                 "sessions": session_record(plan.spec, composition,
                                            kit_set.workload.reference),
                 "acp": acp_facts(composition, kit_set)},
        container_id=ids["container_id"], network=ids.get("network"),
        volumes=list(ids.get("volumes", [])), image=ids.get("image"),
        home_volume=plan.home, tty=plan.mode.tty)
    record.engine, record.engine_host = fleet.current(ctx)
    store.save(record)
    release_creation(plan.name)  # created and recorded: others may use the name now


def session_record(spec: Any, composition: Any, workload: str) -> dict[str, Any]:
    """What `sbx run NAME --prompt` and `sbx sessions NAME` drive later: the launch argv (the
    startup wrapper's target, else Entrypoint + Cmd) and the workload's own session verbs."""
    entrypoint, command = tuple(spec.entrypoint or ()), tuple(spec.command or ())
    launch = command if entrypoint == ("/bin/sh", STARTUP_SCRIPT) else (*entrypoint, *command)

    def own(entry: Any) -> dict[str, Any] | None:
        if entry is None or not any(o.kit == workload for o in entry.origins):
            return None
        return {"type": entry.type, "config": dict(entry.config or {})}

    lifecycle = composition.lifecycle
    return {"launch": list(launch), "agent_sessions": own(composition.agent_sessions),
            "interactive": own(composition.agent_interactive_sessions),
            "lifecycle_interactive": list(lifecycle.interactive)
            if lifecycle is not None and lifecycle.interactive is not None else None}


def _optional(composition: Any, service: str) -> bool:
    return all(c.optional for c in composition.credentials if c.service == service)


__all__ = ["keep_created", "record_created", "session_record"]
