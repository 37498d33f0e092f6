"""What sbx records about a named sandbox: the options it was created with, its record once
it started, the lock that makes one of two concurrent creations win, and the check of its
writable directories after a session."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from sbx.base.errors import SbxError
from sbx.domain.sandbox import runrecord
from sbx.domain.sandbox.lifecycle import STARTUP_SCRIPT
from sbx.domain.sandbox.records import SandboxRecord, SandboxStore
from sbx.usecases import fleet, workspace_check
from sbx.usecases.context import AppContext
from sbx.usecases.explain import static_composition
from sbx.usecases.idlestop import STOP_TIMEOUT_S
from sbx.usecases.namedkits import fingerprint
from sbx.usecases.run.request import RunRequest
from sbx.usecases.run.sessionverbs import acp_facts

if TYPE_CHECKING:
    from sbx.usecases.run.plan import RunPlan

# Flags that shape a sandbox at its creation; given again for an existing one, they are
# refused by name (RunRequest field -> the flag the user typed).
CREATION_OPTIONS: Final = {
    "kits": "--kit", "args": "--arg", "workspace": "WORKSPACE", "access": "--access",
    "mounts": "--mount", "env": "--env", "env_files": "--env-file", "user": "--user",
    "timeout_s": "--timeout", "command": "-- ARGS", "allow_privileged": "--allow-privileged",
    "trust_workspace": "--trust-workspace", "tty": "--tty/--no-tty",
    "detach_keys": "--detach-keys", "memory_bytes": "--memory", "cpu_millis": "--cpus",
    "pids": "--pids", "runtime": "--runtime", "workspace_mode": "--workspace-mode",
    "publish": "--publish",
    "clone": "--clone", "clone_volume": "--clone", "idle_stop_s": "--idle-stop",
    "template": "--template",
}


_creating: dict[str, int] = {}  # name -> its lock, held while this process creates it


def hold_creation(store: SandboxStore, name: str) -> None:
    """Exactly one of two concurrent `run --name N` creates it: the name's lock is held from
    here until the new sandbox is recorded (record_created), or the creation failed."""
    _creating[name] = store.acquire(name)


def release_creation(name: str) -> None:
    fd = _creating.pop(name, None)
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)


def creation_options(request: RunRequest) -> dict[str, Any]:
    """The creation-only options a request gave, as the record keeps them: values as given,
    except variables (``-e``/``--env-file``), of which only a digest is kept (never a value)."""
    defaults = RunRequest(workload=request.workload)
    options: dict[str, Any] = {}
    for field_name in CREATION_OPTIONS:
        value = getattr(request, field_name)
        if value == getattr(defaults, field_name):
            continue
        if field_name in ("env", "env_files"):
            value = hashlib.sha256(json.dumps(list(value)).encode()).hexdigest()
        options[field_name] = list(value) if isinstance(value, tuple) else value
    return options


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


def check_workspace(ctx: AppContext, record: SandboxRecord,
                    on_warning: Callable[[str], None], *, stopped: bool = False) -> None:
    """The after-run check of the sandbox's writable directories (sbx.usecases.workspace_check)
    against what they held when it last started."""
    run_dir = runrecord.run_dir(ctx.state_home, record.run_id)
    try:
        workspace_check.check_named(ctx, run_dir, record.run_id, on_warning, stopped=stopped)
    except (OSError, SbxError) as error:
        on_warning(f"{record.name}'s workspace could not be checked ({error}); review it "
                   "before you run git or other tools there")


__all__ = ["CREATION_OPTIONS", "STOP_TIMEOUT_S", "check_workspace", "creation_options",
           "hold_creation", "record_created", "release_creation"]
