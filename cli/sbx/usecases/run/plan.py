"""The one planner: every check that depends on this moment, the admission, the container spec.

Its inputs come from the kits (:mod:`sbx.usecases.run.fromkits`: config, kits, image,
capabilities, credentials) or from a recipe the plan cache kept (:mod:`sbx.usecases.run.fromcache`);
either way :func:`plan` makes the same checks in the same order and :func:`assemble` builds and
checks the one container spec. Nothing is created here but probe containers and images.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from sbx.base import labels as label_keys
from sbx.base import paths
from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.sandbox.admission import Admission, HostMounts, HostPath, StartRequest, admit
from sbx.domain.sandbox.hardening import (
    BindMount,
    ContainerSpec,
    Limits,
    build_spec,
    hardening_violations,
    tmpfs_options,
)
from sbx.domain.sandbox.identity import FALLBACK_HOME, WorkspaceOwner
from sbx.domain.sandbox.images import SandboxUser
from sbx.domain.sandbox.kitpins import KitFiles
from sbx.domain.sandbox.limitflags import LimitFlags, apply_flags, check_tmpfs_fit
from sbx.domain.sandbox.mountpolicy import MountPolicy
from sbx.domain.sandbox.mounts import CheckedMount, check_mount, check_source, parse_mount_flag
from sbx.seams.engine import ImageInfo
from sbx.seams.session.escape import DEFAULT_DETACH_KEYS
from sbx.seams.session.mode import SessionMode, decide_mode
from sbx.seams.session.terminal import terminal_environment
from sbx.usecases.context import AppContext
from sbx.usecases.run.kitmounts import own_made_mounts, relay_binds
from sbx.usecases.run.recipe import PlanFacts, Recipe
from sbx.usecases.run.request import RunRequest, access_of, copies_workspace

if TYPE_CHECKING:
    # Only a full plan has these (decoding, validation, composition): a run from the plan
    # cache never imports them.
    from sbx.base.config import Config
    from sbx.domain.egress.plan import EgressPlan
    from sbx.domain.kits.compose import Composition
    from sbx.domain.kits.kitset import KitSet
    from sbx.domain.sandbox.capabilities import CapabilityPlan, NamedVolume
    from sbx.domain.sandbox.workspace_trust import Baseline
    from sbx.usecases.pipeline import WorkloadPlan

@dataclass(frozen=True)
class RunPlan:
    """Everything decided before the engine is asked to create anything."""

    run_id: str
    # The decoded kits, config and composition: None on a plan from the plan cache, which
    # only ever holds plans that need none of them to run (sbx.usecases.plancache.cacheable).
    kit_set: KitSet | None
    config: Config | None
    composition: Composition | None
    capabilities: CapabilityPlan | None
    image: ImageInfo  # the assembled image
    image_tag: str
    image_built: bool
    user: SandboxUser
    spec: ContainerSpec
    timeout_s: float
    deadline: int
    workspace_target: str
    workspace_host: str | None
    access: str
    labels: Mapping[str, str]
    container_env: Mapping[str, str]
    run_image_tag: str | None  # the per-run image the create step commits, when needed
    volume_names: tuple[str, ...] = ()
    network: str | None = None  # the per-run internal network (ports, egress)
    bridge: str | None = None
    egress: EgressPlan | None = None
    warnings: tuple[str, ...] = ()
    mode: SessionMode = field(default_factory=lambda: SessionMode(False, False, False))
    home: str = FALLBACK_HOME
    detach_keys: str = DEFAULT_DETACH_KEYS
    terminal_passthrough: bool = False  # sbx.seams.session.sanitize
    host_mounts: HostMounts = field(default_factory=HostMounts)
    # What each writable host directory held before the run (workspace_trust.protect)
    workspace_baselines: tuple[Baseline, ...] = ()
    name: str | None = None  # a named sandbox: kept after the session (sbx.usecases.named)
    # The variables that hold a credential's sentinel: never the user's to set (-e), at any
    # later exec either.
    credential_names: frozenset[str] = frozenset()
    explain_command: str = "sbx explain"  # reproduces this run's request (the 403 body's)
    recreate: bool = False  # a named sandbox made again: its run dir and volumes are kept
    # What the run reports about the kits (workload, references, selection, limits): read from
    # here, so a plan from the cache reports the same as the full plan it was made from.
    facts: PlanFacts = field(default_factory=PlanFacts)
    recipe: Recipe | None = None  # what the spec was assembled from (what the cache keeps)
    # --workspace-mode copy: the checked host directory copied at creation into the sandbox's
    # own volume ``workspace_volume`` (mounted at the workspace target; nothing is bound); a
    # volume without a copy is --clone's, made empty for the checkout
    workspace_copy: str | None = None
    workspace_volume: str | None = None
    from_template: bool = False  # --template: HOME starts with the template's (createstep)

    @property
    def references(self) -> list[str]:
        return list(self.facts.kits)

    def full(self) -> tuple[KitSet, Config, Composition, CapabilityPlan]:
        """The decoded parts, which only a full plan has (named sandboxes, egress, create
        steps and volumes never come from the cache)."""
        if (self.kit_set is None or self.config is None or self.composition is None
                or self.capabilities is None):
            raise SbxError(Reason.CREATE_FAILED,
                           "internal: a cached plan reached a step that needs the full plan")
        return self.kit_set, self.config, self.composition, self.capabilities


@dataclass(frozen=True)
class FullParts:
    """What only a full plan has: the decoded kits and config, and whatever a cached plan never
    needs (a name, privilege, a network, egress, a create step, volumes, credentials)."""

    planned: WorkloadPlan
    capabilities: CapabilityPlan  # as the sandbox gets them (HOME volume, moved kit files)
    run_image_tag: str | None
    volume_names: tuple[str, ...]
    network: str | None
    bridge: str | None
    credential_names: frozenset[str]
    workspace_volume: str | None = None  # --workspace-mode copy: the workspace's own volume


@dataclass(frozen=True)
class Decided:
    """The planner's input for one run: the recipe, the labels of the image it names, and the
    full plan's own parts (None from the cache)."""

    recipe: Recipe
    image_labels: Mapping[str, str]
    full: FullParts | None = None


class PlanInputs(Protocol):
    """Where the planner's inputs come from, asked in the planner's order."""

    @property
    def blocked(self) -> Sequence[str]: ...  # [mounts] blocked
    @property
    def allowed_roots(self) -> Sequence[str]: ...  # [mounts] allowed_roots
    @property
    def timeout_s(self) -> float: ...
    @property
    def kits(self) -> Sequence[str]: ...  # the kits' references, for the labels

    def engine(self, ctx: AppContext, run_id: str, labels: Mapping[str, str]) -> bool:
        """The engine's part (image, capabilities, credentials, or the cached images still
        there); False when the full plan must be made instead."""
        ...

    @property
    def workspace_target(self) -> str: ...
    @property
    def credential_names(self) -> frozenset[str]: ...
    @property
    def kit_files(self) -> Sequence[KitFiles]: ...

    def kit_mounts(self, ctx: AppContext, taken: Sequence[str]
                   ) -> tuple[Sequence[HostPath], set[str]]:
        """The kits' host directories to admit (sbx.usecases.run.kitmounts), and those made
        now for this run."""
        ...

    def user(self, owner: WorkspaceOwner | None) -> tuple[SandboxUser, tuple[str, ...]] | None:
        """The sandbox's user for this workspace owner; None: the full plan must be made."""
        ...

    def decide(self, ctx: AppContext, request: RunRequest, run_id: str, admission: Admission,
               labels: Mapping[str, str]) -> Decided: ...


def plan(ctx: AppContext, request: RunRequest, run_id: str,
         inputs: PlanInputs) -> RunPlan | None:
    """Plan a run from ``inputs``; None when they ask for the full plan instead (the cached
    image is gone, the workspace changed owner)."""
    access = access_of(request)
    # A named sandbox is made for agents: a TTY unless --no-tty, whatever this terminal is.
    tty = True if request.name is not None and request.tty is None else request.tty
    session_mode = decide_mode(interactive=request.interactive, tty=tty,
                               capture=request.capture_output, host=request.host)
    policy = MountPolicy.for_host(ctx.env, state_home=ctx.state_home,
                                  extra_blocked=inputs.blocked,
                                  allowed_roots=inputs.allowed_roots)
    workspace_host = _workspace_source(ctx, policy, request, access)
    # A copied workspace passes the same mount policy (what a copy reads is what a mount
    # could) but is never mounted: the admission's binds, pins and trust checks are for a
    # directory the sandbox writes back into, and a copy writes nothing to this disk.
    workspace_copy = None
    if copies_workspace(request) and workspace_host is not None:
        workspace_copy, workspace_host = workspace_host, None
    mount_requests = [parse_mount_flag(text) for text in request.mounts]
    deadline = math.ceil(time.time() + inputs.timeout_s)
    labels = label_keys.object_labels(
        home_hash=ctx.home_hash, run_id=run_id, deadline=deadline, kits=list(inputs.kits),
        role=label_keys.ROLE_HELPER)
    if not inputs.engine(ctx, run_id, labels):
        return None
    workspace_target = inputs.workspace_target
    checked = [check_mount(policy, mount, reserved_targets={workspace_target})
               for mount in mount_requests]
    _refuse_duplicate_targets(checked)
    kit_mounts, made = inputs.kit_mounts(ctx, [workspace_target, *(m.target for m in checked)])
    admission = admit(_start_request(request, workspace_host, workspace_target, access, checked,
                                     credential_names=inputs.credential_names,
                                     kits=inputs.kit_files,
                                     config_file=paths.config_path(ctx.env),
                                     kit_mounts=kit_mounts),
                      policy, host_env=ctx.env, cwd=ctx.cwd, user=inputs.user)
    if admission is None:
        return None
    try:
        if made:
            own_made_mounts(admission, made)
        decided = inputs.decide(ctx, request, run_id, admission, labels)
        return assemble(ctx, request, run_id, decided, access=access,
                        session_mode=session_mode, labels=labels, deadline=deadline,
                        admission=admission, workspace_copy=workspace_copy)
    except BaseException:
        admission.close()
        raise


def assemble(ctx: AppContext, request: RunRequest, run_id: str, decided: Decided, *,
             access: str, session_mode: SessionMode, labels: Mapping[str, str], deadline: int,
             admission: Admission, workspace_copy: str | None = None) -> RunPlan:
    """The container spec from what was decided and what was admitted (the host paths, the
    user, the variables), checked for its hardening; and the plan around it."""
    recipe, full = decided.recipe, decided.full
    named = request.name if full is not None else None  # a cached plan is never named
    if named is not None:
        labels = {**labels, label_keys.NAME: named}
    host_mounts = admission.mounts
    workspace = host_mounts.workspace
    workspace_host = workspace.path if workspace is not None else None
    workspace_target = recipe.workspace_target
    user = admission.user
    # The flags' limits within the config's bounds, on every run: a recipe (and so the plan
    # cache) never holds them.
    flags = LimitFlags(request.memory_bytes, request.cpu_millis, request.pids)
    limits = apply_flags(Limits(**recipe.limits), recipe.bounds, flags)
    capabilities = full.capabilities if full is not None else None
    volume_names = full.volume_names if full is not None else ()
    extra_binds = [BindMount(pin.source.path, pin.target, pin.read_only)
                   for pin in host_mounts.pins if pin.source is not workspace]
    if capabilities is not None:
        extra_binds += volume_binds(volume_names, capabilities.volumes, {})
        extra_binds += relay_binds(ctx, run_id, capabilities)
    network = full.network if full is not None else None
    workspace_volume = full.workspace_volume if full is not None else None
    if workspace_copy is not None and workspace_volume is None:
        raise SbxError(Reason.CREATE_FAILED, "internal: a copied workspace without its volume")
    workspace_bind = BindMount(workspace_host, workspace_target, access == "ro") \
        if workspace_host else None
    if workspace_volume is not None:
        workspace_bind = BindMount(workspace_volume, workspace_target, access == "ro",
                                   volume=True)
    session_env = terminal_environment(ctx.env) if session_mode.tty else {}
    spec = build_spec(
        image=(full.run_image_tag if full is not None else None) or recipe.image.id,
        uid=user.uid,
        gid=user.gid,
        limits=limits,
        workspace_target=workspace_target,
        workspace_bind=workspace_bind,
        extra_binds=extra_binds,
        command=recipe.command,
        entrypoint=recipe.entrypoint,
        env={**recipe.env, **session_env, **admission.env, "SBX_RUN_ID": run_id},
        home=recipe.home,
        labels={**labels, label_keys.ROLE: label_keys.ROLE_SANDBOX},
        image_labels=decided.image_labels,
        extra_tmpfs={path: tmpfs_options(size, mode=f"{mode if mode is not None else 0o700:o}",
                                         uid=user.uid, gid=user.gid)
                     for path, (size, mode) in recipe.tmpfs.items()},
        privileged=capabilities is not None and capabilities.privileged,
        network_mode=network or "none",
        tty=session_mode.tty,
        # A named sandbox keeps stdin open across attaches, and a bounded engine log for
        # `sbx logs`; its HOME is the last of its volumes.
        stdin_open=session_mode.stdin or named is not None,
        stdin_once=named is None,
        engine_log=named is not None,
        home_volume=volume_names[-1] if named is not None else None,
        name=f"sbx-{named}-{ctx.home_hash[:8]}" if named is not None else None,
        runtime=recipe.runtime,
    )
    if flags.memory_bytes is not None:
        check_tmpfs_fit(limits.memory_bytes, spec.tmpfs, flag="--memory")
    # Consent is this request's own: a cached plan never carries it (nor privilege).
    violations = hardening_violations(
        spec, limits, privileged_consented=full is not None and request.allow_privileged)
    if violations:  # pragma: no cover - build_spec cannot produce these; a guard against drift
        raise SbxError(Reason.CREATE_FAILED, "refusing an unhardened container: "
                       + "; ".join(violations))
    planned = full.planned if full is not None else None
    return RunPlan(
        run_id=run_id,
        kit_set=planned.kit_set if planned is not None else None,
        config=planned.config if planned is not None else None,
        composition=planned.composition if planned is not None else None,
        capabilities=capabilities, image=recipe.image, image_tag=recipe.image_tag,
        image_built=planned is not None and planned.image_built, user=user, spec=spec,
        timeout_s=recipe.timeout_s, deadline=deadline, workspace_target=workspace_target,
        workspace_host=workspace_host, access=access, labels=labels,
        container_env=planned.container_env if planned is not None else {},
        run_image_tag=full.run_image_tag if full is not None else None,
        volume_names=volume_names, network=network,
        bridge=full.bridge if full is not None else None,
        egress=planned.egress if planned is not None else None,
        warnings=(*admission.user_notes, *host_mounts.notes, *recipe.notes),
        mode=session_mode, home=recipe.home, detach_keys=recipe.detach_keys,
        terminal_passthrough=recipe.terminal_passthrough, host_mounts=host_mounts,
        workspace_baselines=tuple(host_mounts.baselines), name=named,
        credential_names=full.credential_names if full is not None else frozenset(),
        explain_command=recipe.explain_command,
        recreate=full is not None and request.recreate,
        facts=dataclasses.replace(recipe.facts, limits={
            "memory_bytes": limits.memory_bytes, "cpu_millis": limits.cpu_millis,
            "pids": limits.pids}) if flags.given() else recipe.facts,
        recipe=recipe, workspace_copy=workspace_copy, workspace_volume=workspace_volume,
        from_template=planned is not None and planned.loaded.request.template is not None)


def volume_binds(names: Sequence[str], volumes: Sequence[NamedVolume],
                 sized: Mapping[str, str]) -> list[BindMount]:
    """A Docker volume per unsized ``volume@1``; a sized one is a bind of its own file system
    (named by the volume's name until that exists, see sbx.usecases.run.execute)."""
    return [BindMount(sized.get(name, name), volume.path, False, volume=False)
            if volume.size is not None
            else BindMount(name, volume.path, False, volume=True)
            for name, volume in zip(names, volumes, strict=True)]


def owner_key(owner: WorkspaceOwner | None) -> tuple[int, int, int] | None:
    """The workspace owner the user was chosen by, as a recipe keeps it."""
    return (owner.uid, owner.gid, owner.mode) if owner is not None else None


def new_run_id() -> str:
    """32 random hex digits (as ``uuid.uuid4().hex`` has, without importing uuid)."""
    return os.urandom(16).hex()


def _start_request(request: RunRequest, workspace_host: str | None, workspace_target: str,
                   access: str, checked: Sequence[CheckedMount], *,
                   credential_names: frozenset[str], kits: Sequence[KitFiles] = (),
                   config_file: Path | None = None,
                   kit_mounts: Sequence[HostPath] = ()) -> StartRequest:
    """What this run asks to mount and pass (sbx.domain.sandbox.admission decides)."""
    paths = [HostPath(workspace_host, workspace_target, access == "ro")] \
        if workspace_host is not None else []
    paths += [HostPath(str(m.source), m.target, m.read_only) for m in checked]
    paths += kit_mounts
    return StartRequest(paths=tuple(paths), workspace=workspace_host is not None,
                        protect=True, trust=request.trust_workspace,
                        env=request.env, env_files=request.env_files,
                        credential_names=credential_names, kits=tuple(kits),
                        config_file=config_file)


def _workspace_source(ctx: AppContext, policy: MountPolicy, request: RunRequest,
                      access: str) -> str | None:
    if request.workspace is None:
        return None
    raw = request.workspace
    absolute = raw if os.path.isabs(raw) else os.path.join(ctx.cwd, raw)
    canonical = check_source(policy, absolute)
    if not canonical.is_dir():
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"workspace {raw} is not a directory")
    # With --access none the path is checked (a blocked path is refused either way) but not
    # mounted: the sandbox gets a private tmpfs workspace.
    return None if access == "none" else str(canonical)


def _refuse_duplicate_targets(binds: Sequence[CheckedMount]) -> None:
    seen: set[str] = set()
    for bind in binds:
        if bind.target in seen:
            raise SbxError(Reason.MOUNT_BLOCKED,
                           f"two mounts target {bind.target} (rule duplicate_target)",
                           details={"rule": "duplicate_target", "path": bind.target})
        seen.add(bind.target)


__all__ = ["Decided", "FullParts", "PlanInputs", "RunPlan", "assemble",
           "new_run_id", "owner_key", "plan", "volume_binds"]
