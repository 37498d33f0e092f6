"""`sbx run`: check everything, build, run one hardened sandbox, and always clean up.

Order (SPEC §2.1): the pipeline's first stage (config, kits: strict, args, selection,
resolution) → the run's own arguments (access, session, workspace, mounts) → the pipeline's
second stage (engine, image, effective kits, capabilities, credentials: sbx.usecases.pipeline, the
planning `sbx explain` and `sbx doctor` report) → the host side (mount checks, user, HOME,
command, spec) → create → start → stream → wait/timeout → remove. Nothing is created before
every check passed; once
something is created, the ``finally`` in :func:`_execute` removes it on every path (success,
failure, timeout, Ctrl-C, engine error). What a hard kill leaves behind is ``sbx gc``'s job,
found by the labels every object carries.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from sbx.base import labels as label_keys
from sbx.base import paths
from sbx.base.errors import MountBlocked, SbxError
from sbx.base.reasons import REGISTRY, Reason
from sbx.domain.sandbox import runrecord
from sbx.domain.sandbox.admission import (
    Admission,
    HostPath,
    StartRequest,
    admit,
    sentinel_names,
)
from sbx.domain.sandbox.hardening import (
    TMP_TARGET,
    BindMount,
    ContainerSpec,
    build_create_step_spec,
    build_spec,
    deadline_check,
    hardening_violations,
    tmpfs_options,
)
from sbx.domain.sandbox.identity import FALLBACK_HOME, WorkspaceOwner, choose_user, home_path
from sbx.domain.sandbox.imagecache import record_use
from sbx.domain.sandbox.images import SandboxUser, resolve_user
from sbx.domain.sandbox.mountpoints import prepare_mountpoints
from sbx.domain.sandbox.mounts import (
    SOURCE_CHANGED,
    CheckedMount,
    MountPolicy,
    check_mount,
    check_source,
    parse_mount_flag,
)
from sbx.domain.sandbox.sources import (
    HostMounts,
    Staging,
    mount_mismatches,
    staging_available,
)
from sbx.seams import audit
from sbx.seams.engine import Driver, ImageInfo
from sbx.seams.host import procfs
from sbx.seams.session.escape import DEFAULT_DETACH_KEYS, parse_detach_keys
from sbx.seams.session.mode import HostStreams, SessionMode, decide_mode
from sbx.seams.session.pump import Session, SessionEnd
from sbx.seams.session.sanitize import for_terminal
from sbx.seams.session.terminal import raw_mode, terminal_environment, window_size
from sbx.seams.signals import deferred_interrupts, raise_if_interrupted
from sbx.usecases.context import AppContext
from sbx.usecases.plancache import PlanFacts, Recipe

if TYPE_CHECKING:
    # Only a full plan needs these (decoding, validation, composition): a run from a cached
    # plan (sbx.usecases.plancache) never imports them, so they are imported where they are used.
    from sbx.base.config import Config
    from sbx.domain.egress.plan import EgressPlan, ProxyProcess
    from sbx.domain.egress.sshagent import RelayConfig
    from sbx.domain.kits.compose import Composition
    from sbx.domain.kits.kitset import KitSet
    from sbx.domain.sandbox.capabilities import CapabilityPlan, NamedVolume
    from sbx.domain.sandbox.hardening import Limits
    from sbx.domain.sandbox.kitpins import KitFiles
    from sbx.domain.sandbox.lifecycle import KitFile
    from sbx.domain.sandbox.workspace_trust import Baseline
    from sbx.seams.host.firewall import BridgeGuard
    from sbx.seams.ports import PortForwarder
    from sbx.seams.session.stream import AttachedStream
    from sbx.usecases.keeper import KeptProxy
    from sbx.usecases.kitgate import Confirm as ConfirmKits
    from sbx.usecases.kitgate import KitSurface
    from sbx.usecases.pipeline import WorkloadPlan, WorkloadRequest

ACCESS_MODES: Final = ("none", "ro", "rw")
OUTPUT_CAPTURE_BYTES: Final = 1024 * 1024  # per stream, under --json
OUTPUT_DRAIN_S: Final = 5.0
DEADLINE_MARGIN_S: Final = 3  # the sandbox's own deadline trails sbx's by this much
RELAY_DIR: Final = "ssh-agent"  # the SSH agent relay's socket directory in the run directory
NO_HOST_STREAMS: Final = HostStreams(stdin_fd=None, stdin_is_terminal=False,
                                     stdout_is_terminal=False)


@dataclass(frozen=True)
class RunRequest:
    workload: str
    workspace: str | None = None
    access: str | None = None
    mounts: tuple[str, ...] = ()
    timeout_s: float | None = None
    command: tuple[str, ...] | None = None
    capture_output: bool = False
    kits: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    allow_privileged: bool = False
    interactive: bool | None = None  # -i; None = decided from the host streams
    tty: bool | None = None  # -t True, --no-tty False, None = decided from the host streams
    env: tuple[str, ...] = ()  # -e NAME[=VALUE]
    env_files: tuple[str, ...] = ()  # --env-file FILE
    user: str | None = None  # --user UID[:GID]
    detach_keys: str | None = None  # --detach-keys (else [sandbox] detach_keys)
    trust_workspace: bool = False  # --trust-workspace: no read-only .git in a rw workspace
    name: str | None = None  # --name: a named sandbox that persists (sbx.usecases.named)
    detach: bool = False  # -d: start it and do not attach
    # --accept: approve the kits' permission widenings (usecases.kitgate), and a named
    # sandbox's kits asking for more at its start (usecases.namedkits)
    accept: bool = False
    # --terminal-passthrough (else [sandbox] terminal_passthrough): every terminal sequence
    # reaches the user's terminal, those acting outside the screen included
    terminal_passthrough: bool = False
    recreate: bool = False  # --recreate: a new container for a named sandbox, HOME kept
    host: HostStreams = NO_HOST_STREAMS


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


@dataclass
class RunResult:
    run_id: str
    exit_code: int
    duration_s: float
    plan: RunPlan | None  # None: an existing named sandbox was started or attached
    stdout: bytes = b""
    stderr: bytes = b""
    ports: list[dict[str, object]] = field(default_factory=list)
    truncated: bool = False
    cleanup_errors: list[str] = field(default_factory=list)
    host_config_changed: list[str] = field(default_factory=list)
    workspace_findings: list[dict[str, Any]] = field(default_factory=list)
    name: str | None = None

    def as_dict(self) -> dict[str, Any]:
        plan = self.plan
        if plan is None:
            return {"run_id": self.run_id, "exit_code": self.exit_code, "name": self.name,
                    "duration_s": round(self.duration_s, 3)}
        data: dict[str, Any] = {
            "run_id": self.run_id,
            "exit_code": self.exit_code,
            "duration_s": round(self.duration_s, 3),
            "workload": plan.facts.workload,
            "kits": plan.references,
            "image": plan.image_tag,
            "image_built": plan.image_built,
            "user": f"{plan.user.uid}:{plan.user.gid}",
            "workspace": {"target": plan.workspace_target, "host": plan.workspace_host,
                          "access": plan.access},
            "timeout_s": plan.timeout_s,
            "selection": _selection(plan),
            # Bound credentials and the half each is bound in ("apikey" | "oauth"); no value.
            "credentials": dict(plan.egress.modes) if plan.egress is not None else {},
            "limits": dict(plan.facts.limits),
            "privileged": plan.facts.privileged,
            "warnings": list(plan.warnings),
            "ports": self.ports,
            "home": plan.home,
            "session": plan.mode.as_dict(),
            "host_config_changed": self.host_config_changed,
            "workspace_findings": self.workspace_findings,
            "name": plan.name,
        }
        if self.stdout or self.stderr or self.truncated:
            data["stdout"] = self.stdout.decode("utf-8", "replace")
            data["stderr"] = self.stderr.decode("utf-8", "replace")
            data["output_truncated"] = self.truncated
        return data


def _selection(plan: RunPlan) -> dict[str, list[dict[str, Any]]]:
    """Selection records; a capability selected by type but then not satisfiable (an optional
    resources@1 over its bound, an optional udp port) counts as skipped only."""
    return {key: [dict(record) for record in records]
            for key, records in plan.facts.selection.items()}


OutputSink = Callable[[str, bytes | memoryview], None]
ProgressFactory = Callable[[str], Any]


def run(ctx: AppContext, request: RunRequest, *, on_output: OutputSink,
        progress: ProgressFactory,
        on_warning: Callable[[str], None] = lambda _text: None,
        on_notice: Callable[[str], None] = lambda _text: None,
        confirm_kits: ConfirmKits | None = None,
        confirm_follow: Callable[[str, Sequence[Any]], bool] | None = None) -> RunResult:
    """``confirm_kits``: the question about a local kit's widenings (sbx.usecases.kitgate);
    ``confirm_follow``: about a named sandbox's kits asking for more at its start
    (sbx.usecases.namedkits)."""
    if request.detach and request.name is None:
        raise SbxError(Reason.INVALID_ARGUMENT, "-d/--detach needs --name: a one-shot sandbox "
                       "ends with its session", hint="Give it a name: sbx run --name NAME -d ...")
    if request.recreate and request.name is None:
        raise SbxError(Reason.INVALID_ARGUMENT, "--recreate needs --name: it makes a named "
                       "sandbox's container again", hint="sbx run --name NAME --recreate ...")
    if request.name is not None:
        from sbx.usecases.named import run_named

        return run_named(ctx, request, on_output=on_output, progress=progress,
                         on_warning=on_warning, on_notice=on_notice,
                         confirm_kits=confirm_kits, confirm_follow=confirm_follow)
    return run_new(ctx, request, on_output=on_output, progress=progress,
                   on_warning=on_warning, on_notice=on_notice, confirm_kits=confirm_kits)


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
    _claim(ctx, run_id, again=again)
    try:
        plan = prepare(ctx, request, run_id, progress, confirm_kits=confirm_kits,
                       on_notice=on_notice)
        if replacing is not None:
            replacing()
    except SbxError as error:
        _unclaim(ctx, run_id, again=again)
        _audit(ctx, audit.SANDBOX_UNAVAILABLE, run_id, "warning",
               {"reason": error.reason.value, "workload": request.workload})
        raise
    except BaseException:
        _unclaim(ctx, run_id, again=again)
        raise
    for warning in plan.warnings:
        on_warning(warning)
    return _execute(ctx, plan, request, on_output, on_warning, on_notice)


def run_cached(ctx: AppContext, request: RunRequest, recipe: Recipe, *, on_output: OutputSink,
               progress: ProgressFactory,
               on_warning: Callable[[str], None] = lambda _text: None,
               on_notice: Callable[[str], None] = lambda _text: None,
               confirm_kits: ConfirmKits | None = None) -> RunResult:
    """A one-shot run from a cached plan (sbx.usecases.plancache); when the engine no longer has
    its image, the workspace changed owner, or a kit's approval no longer covers it, the full
    plan is made instead."""
    run_id = new_run_id()
    _claim(ctx, run_id)
    try:
        plan = prepare_cached(ctx, request, run_id, recipe)
        if plan is None:
            plan = prepare(ctx, request, run_id, progress, confirm_kits=confirm_kits,
                           on_notice=on_notice)
    except SbxError as error:
        _unclaim(ctx, run_id)
        _audit(ctx, audit.SANDBOX_UNAVAILABLE, run_id, "warning",
               {"reason": error.reason.value, "workload": request.workload})
        raise
    except BaseException:
        _unclaim(ctx, run_id)
        raise
    for warning in plan.warnings:
        on_warning(warning)
    return _execute(ctx, plan, request, on_output, on_warning, on_notice)


def new_run_id() -> str:
    """32 random hex digits (as ``uuid.uuid4().hex`` has, without importing uuid)."""
    return os.urandom(16).hex()


# -- preparation: every check, nothing created ---------------------------------------------


def prepare_cached(ctx: AppContext, request: RunRequest, run_id: str,
                   recipe: Recipe) -> RunPlan | None:
    """The plan of a cached recipe, with every check that depends on this moment made again.

    Made again, each run: the host platform; the engine's requirements (it may have been
    switched, e.g. to a rootless one); the image, by id, still present (and marked for gc);
    the workspace and every ``--mount`` through the mount policy, opened and scanned for
    sockets, with the git pins of a writable workspace; the workspace's owner (the user was
    chosen with it: a change means a full plan); ``-e``/``--env-file`` and the terminal
    variables; the session mode; the run's id, labels and deadline; the hardening check of
    the final spec. Not made again, because the key covers every input they read: the
    config's decoding and validation, the kits' decoding, validation, resolution and
    composition, the capability plan, the image build, the user from the image.
    None when the full plan must be made instead.
    """
    from sbx.domain.sandbox.requirements import check_engine, check_host

    check_host()
    if not recipe_approved(ctx.state_home, recipe):
        return None  # the full plan runs the kits' permission gate (it asks or refuses)
    access = _access(request)
    session_mode = decide_mode(interactive=request.interactive, tty=request.tty,
                               capture=request.capture_output, host=request.host)
    policy = MountPolicy.for_host(ctx.env, state_home=ctx.state_home,
                                  extra_blocked=recipe.blocked,
                                  allowed_roots=recipe.allowed_roots)
    workspace_host = _workspace_source(ctx, policy, request, access)
    mount_requests = [parse_mount_flag(text) for text in request.mounts]
    timeout_s = recipe.timeout_s
    deadline = math.ceil(time.time() + timeout_s)
    labels = label_keys.object_labels(
        home_hash=ctx.home_hash, run_id=run_id, deadline=deadline, kits=list(recipe.facts.kits),
        role=label_keys.ROLE_HELPER)
    driver = ctx.driver
    check_engine(driver.info())
    images = []
    for image_id in dict.fromkeys(recipe.images_used):
        found = driver.image(image_id)
        if found is None or found.id != image_id:
            return None  # gone (gc, docker rmi): the full plan builds it again
        images.append(found)
    record_use(driver, ctx.home_hash, [i for i in images if not _marked(i, ctx.home_hash)])
    workspace_target = recipe.workspace_target
    checked = [check_mount(policy, mount, reserved_targets={workspace_target})
               for mount in mount_requests]
    _refuse_duplicate_targets(checked)

    def recipe_user(owner: WorkspaceOwner | None,
                    ) -> tuple[SandboxUser, tuple[str, ...]] | None:
        if _owner_key(owner) != recipe.owner:
            return None  # the user was chosen with another owner or mode: plan it again
        return SandboxUser(recipe.uid, recipe.gid, recipe.user_source), recipe.user_warnings

    # A cached plan holds no credential (plancache.cacheable), so no sentinel variables.
    admission = admit(_start_request(request, workspace_host, workspace_target, access, checked,
                                     credential_names=frozenset(),
                                     kits=recipe_kit_files(recipe),
                                     config_file=paths.config_path(ctx.env)),
                      policy, host_env=ctx.env, cwd=ctx.cwd, user=recipe_user)
    if admission is None:
        return None
    image_labels = next((i.labels for i in images if i.id == recipe.image.id), {})
    try:
        return _plan_from_recipe(ctx, request, run_id, recipe, access=access,
                                 session_mode=session_mode, labels=labels, deadline=deadline,
                                 admission=admission, image_labels=image_labels)
    except BaseException:
        admission.close()
        raise


def recipe_approved(state_home: Path, recipe: Recipe) -> bool:
    """Whether the kits' recorded approvals still cover what a cached plan's kits ask for
    (they may have changed since the plan was cached: a narrowing is recorded, and going back
    to the cached kit is then a widening that must be asked for)."""
    if not any(kit.get("permissions") for kit in recipe.kit_surfaces):
        return True  # they ask for nothing (an empty surface has no fields)
    from sbx.domain.kits.approvals import covered
    from sbx.domain.kits.surface import Surface

    return covered(state_home, [(str(kit["path"]), str(kit["descriptor"]),
                                 Surface.from_json(kit["permissions"]))
                                for kit in recipe.kit_surfaces])


def recipe_kit_files(recipe: Recipe) -> tuple[KitFiles, ...]:
    from sbx.domain.sandbox.kitpins import KitFiles

    return tuple(KitFiles.from_json(kit) for kit in recipe.kit_files)


def local_kit_files(kit_set: KitSet, cwd: Path) -> list[KitFiles]:
    """What each local kit of the set reads from the host (pulled kits live in the state
    home, which no sandbox can mount)."""
    from sbx.domain.sandbox.kitpins import kit_files

    return [kit_files(kit.local, cwd) for kit in kit_set.kits if kit.local.image is None]


def _owner_key(owner: WorkspaceOwner | None) -> tuple[int, int, int] | None:
    return (owner.uid, owner.gid, owner.mode) if owner is not None else None


def _marked(image: ImageInfo, home_hash: str) -> bool:
    from sbx.domain.sandbox.imagecache import use_tag

    return use_tag(home_hash, image.id) in image.tags


def _plan_from_recipe(ctx: AppContext, request: RunRequest, run_id: str, recipe: Recipe, *,
                      access: str, session_mode: SessionMode, labels: Mapping[str, str],
                      deadline: int, admission: Admission,
                      image_labels: Mapping[str, str]) -> RunPlan:
    """:func:`_plan` for a cached recipe: the same spec, from the same values."""
    from sbx.domain.sandbox.hardening import Limits

    host_mounts = admission.mounts
    workspace = host_mounts.workspace
    workspace_host = workspace.path if workspace is not None else None
    workspace_target = recipe.workspace_target
    extra_binds = [BindMount(pin.source.path, pin.target, pin.read_only)
                   for pin in host_mounts.pins if pin.source is not workspace]
    user = admission.user
    limits = Limits(**recipe.limits)
    user_env = admission.env
    session_env = terminal_environment(ctx.env) if session_mode.tty else {}
    spec = build_spec(
        image=recipe.image.id, uid=user.uid, gid=user.gid, limits=limits,
        workspace_target=workspace_target,
        workspace_bind=(BindMount(workspace_host, workspace_target, access == "ro")
                        if workspace_host else None),
        extra_binds=extra_binds, command=recipe.command, entrypoint=recipe.entrypoint,
        env={**recipe.exports, **session_env, **user_env, "SBX_RUN_ID": run_id},
        home=recipe.home, labels={**labels, label_keys.ROLE: label_keys.ROLE_SANDBOX},
        image_labels=image_labels,
        extra_tmpfs={path: tmpfs_options(size, mode=f"{mode if mode is not None else 0o700:o}",
                                         uid=user.uid, gid=user.gid)
                     for path, (size, mode) in recipe.tmpfs.items()},
        privileged=False, network_mode="none", tty=session_mode.tty,
        stdin_open=session_mode.stdin, stdin_once=True, engine_log=False, home_volume=None,
        name=None)
    # No consent from a cached request: a cached plan is never privileged (plancache.cacheable).
    violations = hardening_violations(spec, limits, privileged_consented=False)
    if violations:  # pragma: no cover - build_spec cannot produce these; a guard against drift
        raise SbxError(Reason.CREATE_FAILED, "refusing an unhardened container: "
                       + "; ".join(violations))
    return RunPlan(run_id=run_id, kit_set=None, config=None, composition=None,
                   capabilities=None, image=recipe.image, image_tag=recipe.image_tag,
                   image_built=False, user=user, spec=spec, timeout_s=recipe.timeout_s,
                   deadline=deadline, workspace_target=workspace_target,
                   workspace_host=workspace_host, access=access, labels=labels,
                   container_env={}, run_image_tag=None,
                   warnings=(*recipe.user_warnings, *host_mounts.notes, *recipe.notes),
                   mode=session_mode, home=recipe.home, detach_keys=recipe.detach_keys,
                   terminal_passthrough=recipe.terminal_passthrough,
                   host_mounts=host_mounts,
                   workspace_baselines=tuple(host_mounts.baselines),
                   explain_command=recipe.explain_command, facts=recipe.facts)


def workload_request(request: RunRequest) -> WorkloadRequest:
    """The part of a run request that explain and doctor share (sbx.usecases.pipeline)."""
    from sbx.usecases.pipeline import WorkloadRequest

    return WorkloadRequest(workload=request.workload, kits=request.kits, args=request.args,
                           allow_privileged=request.allow_privileged,
                           timeout_s=request.timeout_s, detach_keys=request.detach_keys,
                           named=request.name is not None)


def prepare(ctx: AppContext, request: RunRequest, run_id: str,
            progress: ProgressFactory, *, confirm_kits: ConfirmKits | None = None,
            on_notice: Callable[[str], None] = lambda _text: None) -> RunPlan:
    from sbx.usecases import pipeline

    # Config and kits (no engine): the pipeline's first stage, as for explain and doctor.
    loaded = pipeline.load(ctx, workload_request(request))
    config = loaded.config
    kit_set = loaded.kit_set
    access = _access(request)
    # A named sandbox is made for agents: a TTY unless --no-tty, whatever this terminal is.
    tty = True if request.name is not None and request.tty is None else request.tty
    session_mode = decide_mode(interactive=request.interactive, tty=tty,
                               capture=request.capture_output, host=request.host)
    policy = MountPolicy.for_host(ctx.env, state_home=ctx.state_home,
                                  extra_blocked=config.mounts.blocked.value,
                                  allowed_roots=config.mounts.allowed_roots.value)
    workspace_host = _workspace_source(ctx, policy, request, access)
    mount_requests = [parse_mount_flag(text) for text in request.mounts]

    timeout_s = _timeout_of(request, config)
    deadline = math.ceil(time.time() + timeout_s)
    references = [k.reference for k in kit_set.kits]
    labels = label_keys.object_labels(
        home_hash=ctx.home_hash, run_id=run_id, deadline=deadline, kits=references,
        role=label_keys.ROLE_HELPER)
    # Engine, image, effective kits, capabilities, credentials: the pipeline's second stage,
    # with the kits' permission gate before any capability is planned or secret read.
    surfaces: list[KitSurface] = []

    def gate(kits: KitSet, effective: Mapping[str, Mapping[str, Any]]) -> None:
        from sbx.usecases import kitgate

        surfaces.extend(kitgate.kit_surfaces(kits, effective, ctx.cwd))
        kitgate.approve(ctx.state_home, surfaces, accept=request.accept, confirm=confirm_kits,
                        command=kitgate.accept_command(ctx.argv, ctx.passthrough),
                        run_id=run_id, on_notice=on_notice)

    planned = pipeline.plan(ctx, loaded, run_id=run_id, progress=progress,
                            helper_labels=labels, resolve_secrets=True, gate=gate)
    record_use(ctx.driver, ctx.home_hash, list(planned.images_used))  # for gc's marks
    if planned.egress is not None:
        # The proxy follows the user policy: a damaged rules file refuses the run before
        # anything starts (its denies would be lost), as the proxy would refuse to start.
        from sbx.domain.egress.policystore import PolicyStore

        PolicyStore(ctx.state_home).load()
    workspace_target = planned.workspace_target
    checked = [check_mount(policy, mount, reserved_targets={workspace_target})
               for mount in mount_requests]
    _refuse_duplicate_targets(checked)
    driver = ctx.driver

    def choose(owner: WorkspaceOwner | None) -> tuple[SandboxUser, tuple[str, ...]]:
        return choose_user(
            flag=request.user, owner=owner, access=access,
            root_workspace=config.sandbox.root_workspace.value,
            image_user=lambda: resolve_user(
                driver, planned.image, fallback_uid=config.sandbox.user.value,
                fallback_source=f"[sandbox] user ({config.sandbox.user.source})",
                cache_dir=ctx.state_home / "cache" / "users", helper_labels=labels))

    credential_names = _sentinel_variables(planned)
    kit_files = tuple(local_kit_files(kit_set, ctx.cwd))
    kit_mounts, made = _kit_host_mounts(ctx, planned.capabilities,
                                        [workspace_target, *(m.target for m in checked)])
    admission = admit(_start_request(request, workspace_host, workspace_target, access, checked,
                                     credential_names=credential_names, kits=kit_files,
                                     config_file=paths.config_path(ctx.env),
                                     kit_mounts=kit_mounts),
                      policy, host_env=ctx.env, cwd=ctx.cwd, user=choose)
    assert admission is not None  # noqa: S101 - choose never asks to plan again
    try:
        _own_made_mounts(admission, made)
        return _plan(ctx, request, run_id, planned=planned, access=access,
                     session_mode=session_mode, labels=labels, deadline=deadline,
                     admission=admission, credential_names=credential_names,
                     gated=(tuple(surfaces), kit_files))
    except BaseException:
        admission.close()
        raise


def _plan(ctx: AppContext, request: RunRequest, run_id: str, *, planned: WorkloadPlan,
          access: str, session_mode: SessionMode, labels: Mapping[str, str],
          deadline: int, admission: Admission, credential_names: frozenset[str],
          gated: tuple[Sequence[KitSurface], Sequence[KitFiles]] = ((), ())) -> RunPlan:
    """The host side of the plan, once the start was admitted (its host paths are open and
    closed by the caller on failure): HOME, the command, the container spec."""
    driver = ctx.driver
    config = planned.config
    kit_set = planned.kit_set
    image = planned.image
    workspace_target = planned.workspace_target
    timeout_s = _timeout_of(request, config)
    named = request.name
    if named is not None:
        labels = {**labels, label_keys.NAME: named}
    host_mounts = admission.mounts
    workspace = host_mounts.workspace
    owner = admission.owner
    workspace_host = workspace.path if workspace is not None else None
    extra_binds = [BindMount(pin.source.path, pin.target, pin.read_only)
                   for pin in host_mounts.pins if pin.source is not workspace]
    user, user_warnings = admission.user, admission.user_notes
    exports = planned.exports
    container_env = planned.container_env
    composition = planned.composition
    capabilities = planned.capabilities
    home = home_path(
        taken=[workspace_target, TMP_TARGET, *(b.target for b in extra_binds),
               *(v.path for v in capabilities.volumes), *capabilities.tmpfs])
    if named is not None:
        capabilities = _with_home_volume(capabilities, home)
    egress = planned.egress
    if egress is not None and "oauth" in egress.modes.values():
        from sbx.domain.sandbox.credfiles import credential_files

        lifecycle = capabilities.lifecycle
        capabilities = dataclasses.replace(capabilities, lifecycle=dataclasses.replace(
            lifecycle, files=(*lifecycle.files, *credential_files(
                composition, egress.modes, ctx.state_home, home=home))))
    # Kit files on mounts made at start (/tmp, HOME, tmpfs volumes, a private workspace)
    # would be hidden by those mounts: they are copied in by a startup step instead.
    capabilities = _with_mounted_files(capabilities, [
        TMP_TARGET, home, *capabilities.tmpfs,
        *((workspace_target,) if workspace_host is None else ())])
    command, entrypoint = _command(request, image, capabilities, kit_set)
    user_env = admission.env
    # The CA goes into the per-run image, so a network policy always takes the create step.
    needs_create_step = capabilities.needs_create_step or egress is not None
    run_image_tag = f"sbx-run/{run_id}:1" if needs_create_step else None
    volume_prefix = f"sbx-{ctx.home_hash[:8]}-{named}" if named else f"sbx-{run_id[:16]}"
    volume_names = tuple(f"{volume_prefix}-v{i}" for i in range(len(capabilities.volumes)))
    # Ports and egress need an interface: a per-run internal network (no route beyond the host).
    networked = bool(capabilities.ports) or egress is not None
    network = f"sbx-{run_id[:16]}" if networked else None
    bridge = f"sbx{run_id[:12]}" if networked else None
    limits = capabilities.limits
    image = prepare_mountpoints(driver, image, home=home,
                                cache_dir=ctx.state_home / "cache" / "mountpoints",
                                helper_labels=labels, lock_dir=ctx.state_home / "locks",
                                home_hash=ctx.home_hash)
    # the last use, for gc (sbx.domain.sandbox.imagecache)
    record_use(driver, ctx.home_hash, [image])
    session_env = terminal_environment(ctx.env) if session_mode.tty else {}
    spec = build_spec(
        image=run_image_tag or image.id,
        uid=user.uid,
        gid=user.gid,
        limits=limits,
        workspace_target=workspace_target,
        workspace_bind=(BindMount(workspace_host, workspace_target, access == "ro")
                        if workspace_host else None),
        extra_binds=[*extra_binds, *_volume_binds(volume_names, capabilities.volumes, {}),
                     *_relay_binds(ctx, run_id, capabilities)],
        command=command,
        entrypoint=entrypoint,
        env={**exports, **capabilities.env, **session_env, **user_env, "SBX_RUN_ID": run_id},
        home=home,
        labels={**labels, label_keys.ROLE: label_keys.ROLE_SANDBOX},
        image_labels=image.labels,
        extra_tmpfs={path: tmpfs_options(size, mode=f"{mode if mode is not None else 0o700:o}",
                                         uid=user.uid, gid=user.gid)
                     for path, (size, mode) in capabilities.tmpfs.items()},
        privileged=capabilities.privileged,
        network_mode=network or "none",
        tty=session_mode.tty,
        # A named sandbox keeps stdin open across attaches, and a bounded engine log for
        # `sbx logs`; its HOME is the last of its volumes.
        stdin_open=session_mode.stdin or named is not None,
        stdin_once=named is None,
        engine_log=named is not None,
        home_volume=volume_names[-1] if named is not None else None,
        name=f"sbx-{named}-{ctx.home_hash[:8]}" if named is not None else None,
    )
    violations = hardening_violations(spec, limits,
                                      privileged_consented=request.allow_privileged)
    if violations:  # pragma: no cover - build_spec cannot produce these; a guard against drift
        raise SbxError(Reason.CREATE_FAILED, "refusing an unhardened container: "
                       + "; ".join(violations))
    warnings = (*user_warnings, *host_mounts.notes, *capabilities.notes)
    plan = RunPlan(run_id=run_id, kit_set=kit_set, config=config, composition=composition,
                   capabilities=capabilities, image=image, image_tag=planned.image_tag,
                   image_built=planned.image_built, user=user, spec=spec,
                   timeout_s=timeout_s, deadline=deadline, workspace_target=workspace_target,
                   workspace_host=workspace_host, access=access, labels=labels,
                   container_env=container_env, run_image_tag=run_image_tag,
                   volume_names=volume_names, network=network, bridge=bridge,
                   egress=egress, warnings=warnings, mode=session_mode, home=home,
                   detach_keys=planned.loaded.detach_keys, host_mounts=host_mounts,
                   terminal_passthrough=(request.terminal_passthrough
                                         or config.sandbox.terminal_passthrough.value),
                   workspace_baselines=tuple(host_mounts.baselines), name=named,
                   credential_names=credential_names,
                   explain_command=f"sbx explain {named}" if named is not None
                   else _explain_command(planned), recreate=request.recreate,
                   facts=_facts(kit_set, capabilities, egress))
    _remember(ctx, request, planned, plan, user_warnings=user_warnings, owner=owner,
              limits=limits, command=command, entrypoint=entrypoint, capabilities=capabilities,
              gated=gated)
    return plan


def _with_home_volume(capabilities: CapabilityPlan, home: str) -> CapabilityPlan:
    """A named sandbox's HOME persists across stop/start: a volume of its own, sized where
    sbx can bound it."""
    from sbx.domain.sandbox.capabilities import NamedVolume

    return dataclasses.replace(capabilities, volumes=(
        *capabilities.volumes, NamedVolume(home, 0o700, capabilities.limits.home_bytes
                                           if staging_available() else None)))


def _with_mounted_files(capabilities: CapabilityPlan, targets: Sequence[str]) -> CapabilityPlan:
    from sbx.domain.sandbox.mountedfiles import with_mounted_files

    return with_mounted_files(capabilities, list(targets))


def _explain_command(planned: WorkloadPlan) -> str:
    from sbx.usecases import pipeline

    return pipeline.explain_command(planned.loaded)


def _facts(kit_set: KitSet, capabilities: CapabilityPlan, egress: EgressPlan | None,
           ) -> PlanFacts:
    from sbx.usecases import pipeline

    limits = capabilities.limits
    return PlanFacts(
        workload=kit_set.workload.reference, kits=tuple(k.reference for k in kit_set.kits),
        selection=pipeline.selection(kit_set, (*capabilities.skipped,
                                               *(egress.skipped if egress else ()))),
        limits={"memory_bytes": limits.memory_bytes, "cpu_millis": limits.cpu_millis,
                "pids": limits.pids},
        privileged=capabilities.privileged)


def _remember(ctx: AppContext, request: RunRequest, planned: WorkloadPlan, plan: RunPlan, *,
              user_warnings: Sequence[str], owner: WorkspaceOwner | None, limits: Limits,
              command: tuple[str, ...] | None, entrypoint: tuple[str, ...] | None,
              capabilities: CapabilityPlan,
              gated: tuple[Sequence[KitSurface], Sequence[KitFiles]]) -> None:
    """Offer the plan to the plan cache (which keeps only plans it can run again)."""
    if ctx.argv is None:  # not from the command line: nothing to key it by
        return
    from sbx.usecases import plancache

    config = planned.config
    kit_set = planned.kit_set
    user = plan.user
    image = plan.image
    recipe = plancache.Recipe(
        image=image, image_tag=planned.image_tag,
        images_used=tuple(i.id for i in (*planned.images_used, image)),
        uid=user.uid, gid=user.gid, user_source=user.source,
        user_warnings=tuple(user_warnings),
        owner=_owner_key(owner),
        timeout_s=plan.timeout_s, limits=dataclasses.asdict(limits),
        workspace_target=plan.workspace_target, command=command, entrypoint=entrypoint,
        exports=dict(planned.exports), home=plan.home, tmpfs=dict(capabilities.tmpfs),
        detach_keys=plan.detach_keys, terminal_passthrough=plan.terminal_passthrough,
        explain_command=plan.explain_command, notes=tuple(capabilities.notes),
        blocked=tuple(config.mounts.blocked.value),
        allowed_roots=tuple(config.mounts.allowed_roots.value), facts=plan.facts,
        kit_surfaces=tuple(kit.to_json() for kit in gated[0]),
        kit_files=tuple(kit.to_json() for kit in gated[1]))
    plancache.remember(ctx, request, plan, recipe,
                       cacheable=plancache.cacheable(planned, plan, kit_set))


NO_DEADLINE_S: Final = 10 * 365 * 24 * 3600.0  # a named sandbox without --timeout


def _timeout_of(request: RunRequest, config: Config) -> float:
    """A run's time limit in seconds. A named sandbox has none unless --timeout gives one: it
    lives until it is stopped (its labels then carry a deadline years away, and gc leaves
    named sandboxes alone anyway)."""
    if request.name is not None and request.timeout_s is None:
        return NO_DEADLINE_S
    return float(config.sandbox.timeout_ms.value / 1000)


def _command(request: RunRequest, image: ImageInfo, capabilities: CapabilityPlan,
             kit_set: KitSet) -> tuple[tuple[str, ...] | None, tuple[str, ...] | None]:
    """(command, entrypoint) for the sandbox, always explicit; startup hooks wrap the argv.

    The workload's argv is the image's ENTRYPOINT + (ARGS after `--`, else its CMD), as with
    `docker run`. It is passed explicitly because a per-run image committed by the create step
    would otherwise inherit the create step's keepalive entrypoint.
    """
    if request.command is None and not image.entrypoint and not image.cmd:
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"{kit_set.workload.reference}'s image has no ENTRYPOINT or CMD and no "
                       "command was given after `--`",
                       hint="Add CMD to the dockerfile, or pass `-- CMD...`.")
    argv = (*(image.entrypoint or ()), *(request.command or image.cmd or ()))
    if capabilities.lifecycle.startup:
        from sbx.domain.sandbox.lifecycle import STARTUP_SCRIPT

        return argv, ("/bin/sh", STARTUP_SCRIPT)
    return argv[1:], argv[:1]


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


def _kit_host_mounts(ctx: AppContext, capabilities: CapabilityPlan, taken: Sequence[str],
                     ) -> tuple[list[HostPath], set[str]]:
    """The kits' host-mount@1 directories (made when new) and the host's skills store, to be
    judged by the mount policy and mounted like any host path; and the directories made now."""
    out: list[HostPath] = []
    store_dir = paths.skills_home(ctx.env)
    if capabilities.skills_paths and _non_empty_directory(store_dir):
        # The host's skills store, read-only (sbx's host setting), judged like any mount.
        out += [HostPath(str(store_dir), path, True) for path in capabilities.skills_paths
                if path not in taken]
    if not capabilities.host_mounts:
        return out, set()
    from sbx.domain.sandbox.hostmounts import HostMountStore

    store = HostMountStore(paths.host_mounts_home(ctx.env))
    made: set[str] = set()
    for mount in capabilities.host_mounts:
        if mount.path in taken:
            raise SbxError(Reason.INVALID_ARGUMENT,
                           f"host-mount@1 {mount.path} is also the target of the workspace or "
                           "a --mount; one path holds one mount",
                           hint="Mount the workspace or that --mount somewhere else.")
        directory, new = store.ensure(mount.kit, mount.path, mount.mode)
        out.append(HostPath(str(directory), mount.path, False))
        if new:
            made.add(os.path.realpath(directory))
    return out, made


def _non_empty_directory(path: Path) -> bool:
    try:
        with os.scandir(path) as entries:
            return any(True for _ in entries)
    except OSError:
        return False  # missing or unreadable: no host content, never a refusal


def _own_made_mounts(admission: Admission, made: set[str]) -> None:
    """A host-mount@1 directory made for this run belongs to the sandbox user (as root: the
    opened directory itself, so what is chowned is what is mounted)."""
    if not made or os.geteuid() != 0:
        return
    from sbx.seams.host.mounts import chown_descriptor

    user = admission.user
    for pin in admission.mounts.pins:
        if pin.source.path in made:
            chown_descriptor(pin.source.fd, user.uid, user.gid)


def _sentinel_variables(planned: WorkloadPlan) -> frozenset[str]:
    """The variables of this sandbox that hold a credential's sentinel."""
    from sbx.domain.credentials.oauth import ACCESS_SENTINEL_PREFIX, REFRESH_SENTINEL_PREFIX
    from sbx.domain.egress.proxyconfig import SENTINEL_PREFIX

    return sentinel_names(planned.exports, _credential_names(planned.composition),
                          (SENTINEL_PREFIX, ACCESS_SENTINEL_PREFIX, REFRESH_SENTINEL_PREFIX))


def _credential_names(composition: Composition) -> set[str]:
    """The variables kits' credential@1 entries hold a sentinel in."""
    names: set[str] = set()
    for credential in composition.credentials:
        api = credential.config.get("apiKey")
        name = api.get("name") if isinstance(api, Mapping) else None
        if isinstance(name, str) and name:
            names.add(name)
    return names


def _access(request: RunRequest) -> str:
    if request.access is not None and request.access not in ACCESS_MODES:
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"--access must be one of none, ro, rw (got {request.access!r})")
    if request.workspace is None:
        if request.access in ("ro", "rw"):
            raise SbxError(Reason.INVALID_ARGUMENT,
                           f"--access {request.access} needs a WORKSPACE directory",
                           hint="Pass the directory after the workload, e.g. `sbx run ./kit .`.")
        return "none"
    return request.access or "rw"


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


# -- execution: create, stream, wait, always remove -----------------------------------------


class _Capture:
    """Bounded capture of a workload's output for the --json envelope."""

    def __init__(self) -> None:
        self.parts: dict[str, bytearray] = {"stdout": bytearray(), "stderr": bytearray()}
        self.truncated = False

    def __call__(self, stream: str, chunk: bytes | memoryview) -> None:
        buffer = self.parts[stream]
        room = OUTPUT_CAPTURE_BYTES - len(buffer)
        if room < len(chunk):
            self.truncated = True
        buffer.extend(chunk[:max(room, 0)])


def _execute(ctx: AppContext, plan: RunPlan, request: RunRequest, on_output: OutputSink,
             on_warning: Callable[[str], None],
             on_notice: Callable[[str], None]) -> RunResult:
    driver = ctx.driver
    capture = _Capture() if request.capture_output else None
    # What reaches a terminal loses the sequences that act outside the screen (the install
    # hooks' output too); captured or piped output stays byte for byte.
    on_output, end_output = for_terminal(on_output, request.host, ctx.env,
                                         passthrough=plan.terminal_passthrough)
    sink: OutputSink = capture if capture is not None else on_output
    run_dir = _open_run_dir(ctx, plan)
    created = _Created()
    started = time.monotonic()
    cleanup_errors: list[str] = []
    finished: list[RunResult] = []
    try:
        container_id, stream = _create_sandbox(ctx, plan, driver, created, run_dir, on_output,
                                               on_warning)
        deadline = time.monotonic() + plan.timeout_s
        raise_if_interrupted()
        driver.start(container_id)
        if plan.name is not None and _keep_named(ctx, plan, request, created, container_id,
                                                 on_notice):
            return RunResult(plan.run_id, 0, time.monotonic() - started, plan)
        terminal_fd = request.host.stdin_fd if plan.mode.raw else None
        size_fd = request.host.size_fd() if plan.mode.tty else None
        resize = _resizer(driver, container_id, size_fd)
        resize()  # as soon as it runs: the workload may ask for its size at once
        if created.staging is None:
            _verify_mounts(driver, plan, container_id, on_warning)
        _start_ports(driver, plan, created, container_id, on_notice)
        _audit_started(ctx, plan)
        session = Session(stream, tty=plan.mode.tty,
                          stdin_fd=request.host.stdin_fd if plan.mode.stdin else None,
                          sink=sink, escape=parse_detach_keys(plan.detach_keys),
                          on_resize=resize if size_fd is not None else None)
        exit_code, end = _session(driver, container_id, session, terminal_fd, deadline,
                                  keep=plan.name is not None)
        if exit_code is None and plan.name is not None and end is SessionEnd.DETACHED:
            on_notice(f"detached from {plan.name}; it keeps running (`sbx attach "
                      f"{plan.name}` to return, `sbx stop {plan.name}` to stop it)")
            exit_code = 0
        if exit_code is None:
            _ended_early(ctx, plan, end, started)
        assert exit_code is not None  # noqa: S101 - _ended_early always raises
        _audit(ctx, audit.SANDBOX_FINISHED, plan.run_id, "info",
               {"exit_code": exit_code, "duration_s": _elapsed(started)})
        finished.append(_result(ctx, plan, exit_code, started, created, capture,
                                cleanup_errors, on_warning))
        return finished[0]
    except SbxError as error:
        if created.container is not None and error.reason is Reason.DOCKER_UNREACHABLE:
            # Something was already created: this is not a refusal before the start.
            raise SbxError(Reason.ENGINE_LOST,
                           f"lost the Docker engine during the run: {error.message}",
                           hint=error.hint, details=error.details) from error
        raise
    finally:
        with contextlib.suppress(OSError):  # a closed reader must not stop the cleanup
            end_output()
        # A signal here (a closing terminal sends SIGHUP twice) must not stop the removal
        # halfway: it is held back and raised once everything is gone.
        with deferred_interrupts():
            problems = _cleanup(ctx, plan, driver, created, run_dir)
            _check_workspace(ctx, plan, created, finished[0] if finished else None,
                             on_warning)
        cleanup_errors.extend(problems)
        pending = sys.exc_info()[1]
        replacement = _say_what_is_left(pending, problems)
        if replacement is not None:
            raise replacement from pending


def _result(ctx: AppContext, plan: RunPlan, exit_code: int, started: float,
            created: _Created, capture: _Capture | None, cleanup_errors: list[str],
            on_warning: Callable[[str], None]) -> RunResult:
    result = RunResult(plan.run_id, exit_code, time.monotonic() - started, plan)
    result.ports = [p.as_dict() for p in (created.forwarder.published
                                          if created.forwarder else [])]
    if capture is not None:
        result.stdout = bytes(capture.parts["stdout"])
        result.stderr = bytes(capture.parts["stderr"])
        result.truncated = capture.truncated
    result.cleanup_errors = cleanup_errors  # filled in by the caller's finally
    return result


def _keep_named(ctx: AppContext, plan: RunPlan, request: RunRequest, created: _Created,
                container_id: str, on_notice: Callable[[str], None]) -> bool:
    """A named sandbox that started is the sandbox's from now on (recorded, never removed by
    this run); True when it was started detached (nothing to attach to here)."""
    from sbx.usecases.named import record_created

    record_created(ctx, plan, created_ids(created, container_id), request)
    created.kept = True
    if not request.detach:
        return False
    _audit_started(ctx, plan)
    on_notice(f"{plan.name} started; `sbx attach {plan.name}` to use it")
    return True


def _audit_started(ctx: AppContext, plan: RunPlan) -> None:
    skipped = _selection(plan)["skipped"]
    _audit(ctx, audit.SANDBOX_STARTED, plan.run_id, "info", {
        "workload": plan.facts.workload, "kits": plan.references,
        "image": plan.image_tag, "user": plan.spec.user,
        "workspace_access": plan.access, "privileged": plan.spec.privileged,
        "skipped": skipped, "session": plan.mode.as_dict(),
        "credentials": dict(plan.egress.modes) if plan.egress is not None else {},
        "explain": plan.explain_command})  # `sbx explain --last` reproduces the request
    for record in skipped:
        _audit(ctx, audit.CAPABILITY_SKIPPED, plan.run_id, "info", record)


def _final_spec(ctx: AppContext, plan: RunPlan, boundary: Mapping[str, str],
                created: _Created) -> ContainerSpec:
    """The planned spec plus what only exists now: the boundary environment (proxy, CA,
    sentinels), the staged mount sources, and the sandbox's own deadline (a little after
    sbx's, which it backs up)."""
    spec = plan.spec
    if boundary:
        spec = dataclasses.replace(spec, env={**spec.env, **boundary})
    spec = _staged(ctx, plan, spec, created)
    if plan.timeout_s >= NO_DEADLINE_S:
        return spec
    return dataclasses.replace(spec, healthcheck=deadline_check(
        math.ceil(time.time() + plan.timeout_s + DEADLINE_MARGIN_S), plan.timeout_s))


def _staged(ctx: AppContext, plan: RunPlan, spec: ContainerSpec,
            created: _Created) -> ContainerSpec:
    """As root, give the engine staging points that name exactly the opened host paths; and
    sized volumes their file systems."""
    binds = list(spec.binds)
    pins = plan.host_mounts.pins
    if pins and staging_available():
        staging = _staging(ctx, plan, created)
        staged = {pin.target: staging.stage(pin.source) for pin in pins}
        binds = [dataclasses.replace(bind, source=staged[bind.target])
                 if not bind.volume and bind.target in staged else bind for bind in binds]
    binds = [dataclasses.replace(bind, source=created.sized[bind.source])
             if not bind.volume and bind.source in created.sized else bind for bind in binds]
    return dataclasses.replace(spec, binds=tuple(binds))


def _kit_mount_binds(ctx: AppContext, plan: RunPlan, created: _Created) -> list[BindMount]:
    """The host-mount@1 directories for the install step (mounted before hooks), staged as
    the sandbox's are."""
    capabilities = plan.capabilities
    targets = ({m.path for m in capabilities.host_mounts} | set(capabilities.skills_paths)
               if capabilities is not None else set())
    pins = [pin for pin in plan.host_mounts.pins if pin.target in targets]
    if not pins:
        return []
    if staging_available():
        staging = _staging(ctx, plan, created)
        return [BindMount(staging.stage(pin.source), pin.target, pin.read_only) for pin in pins]
    return [BindMount(pin.source.path, pin.target, pin.read_only) for pin in pins]


def _staging(ctx: AppContext, plan: RunPlan, created: _Created) -> Staging:
    if created.staging is None:
        created.staging = (Staging.for_named(ctx.home_hash, plan.name) if plan.name is not None
                           else Staging.for_run(ctx.home_hash, plan.run_id))
    return created.staging


def _relay_binds(ctx: AppContext, run_id: str, capabilities: CapabilityPlan,
                 phase: str | None = None) -> list[BindMount]:
    """The SSH agent relay's directory, read-only (its socket is the proxy process's); for
    the install step only when the install phase is granted."""
    from sbx.domain.kits.captypes.ssh_agent import SANDBOX_DIR

    if not capabilities.ssh_agent or (
            phase is not None and all(p != phase for p, _, _ in capabilities.ssh_agent)):
        return []
    return [BindMount(str(runrecord.run_dir(ctx.state_home, run_id) / RELAY_DIR), SANDBOX_DIR,
                      True)]


def _volume_binds(names: Sequence[str], volumes: Sequence[NamedVolume],
                  sized: Mapping[str, str]) -> list[BindMount]:
    """A Docker volume per unsized ``volume@1``; a sized one is a bind of its own file system
    (named by the volume's name until that exists, see _staged)."""
    return [BindMount(sized.get(name, name), volume.path, False, volume=False)
            if volume.size is not None
            else BindMount(name, volume.path, False, volume=True)
            for name, volume in zip(names, volumes, strict=True)]


def _verify_mounts(driver: Driver, plan: RunPlan, container_id: str,
                   on_warning: Callable[[str], None]) -> None:
    """Without staging (sbx not root): what the container mounted must be what was opened.

    Read from the container's own mountinfo right after the start; a difference stops the
    sandbox (the README states the window this leaves as a residual risk)."""
    pins = plan.host_mounts.pins
    if not pins:
        return
    pid = driver.container_pid(container_id)
    try:
        container = procfs.mountinfo(pid) if pid else None
        host = procfs.mountinfo()
    except OSError:
        container = None
    if container is None:
        on_warning("the sandbox's mounts could not be verified (it had already finished)")
        return
    problems = mount_mismatches([(pin.target, pin.source) for pin in pins], container, host)
    if problems:
        driver.kill(container_id)
        raise MountBlocked(
            "a host path changed between the check and the mount; the sandbox was stopped: "
            + "; ".join(problems) + f" (rule {SOURCE_CHANGED})", rule=SOURCE_CHANGED,
            path=pins[0].source.path,
            hint="Run again, and find out what is modifying the path while sbx starts.")


def _check_workspace(ctx: AppContext, plan: RunPlan, created: _Created,
                     result: RunResult | None, on_warning: Callable[[str], None]) -> None:
    """The after-run check of the writable host directories, once nothing writes them any
    more: the container is gone, or a kept named sandbox has stopped."""
    if not plan.workspace_baselines:
        return
    if created.kept and created.container is not None:
        with contextlib.suppress(SbxError):
            if ctx.driver.container_state(created.container) == "running":
                return  # checked when a later session with it ends, or at its stop
    from sbx.usecases import workspace_check

    try:
        outcome = workspace_check.check(ctx, plan.workspace_baselines, run_id=plan.run_id,
                                        on_warning=on_warning)
        if created.kept:  # it has stopped: what changes from now on is the owner's
            with contextlib.suppress(OSError):
                (runrecord.run_dir(ctx.state_home, plan.run_id)
                 / workspace_check.CHECKED_STOPPED).touch()
    except (OSError, SbxError) as error:  # the run's own outcome must still reach the user
        on_warning(f"the workspace could not be checked after the run ({error}); review it "
                   "before you run git or other tools there")
        return
    if result is not None:
        result.host_config_changed = outcome.paths(plan.workspace_host)
        result.workspace_findings = outcome.as_json()


def _session(driver: Driver, container_id: str, session: Session, terminal_fd: int | None,
             deadline: float, *, keep: bool = False) -> tuple[int | None, SessionEnd]:
    """Pump the session (the host terminal raw for its duration), then the exit status; None
    when the workload had to be stopped (deadline, detach, output closed). A sandbox to
    ``keep`` (a named one) is left running on a detach or a closed reader."""
    with session, session.resize_on_sigwinch(), \
            (raw_mode(terminal_fd) if terminal_fd is not None else contextlib.nullcontext()):
        end = session.pump(deadline)
        exit_code = (driver.wait(container_id, max(deadline - time.monotonic(), 0.001))
                     if end is SessionEnd.EOF else None)
        if exit_code is None and not (keep and end in (SessionEnd.DETACHED,
                                                       SessionEnd.OUTPUT_CLOSED)):
            _stop(driver, container_id, session, end)
    return exit_code, end


def _stop(driver: Driver, container_id: str, session: Session, end: SessionEnd) -> None:
    """Kill a workload that has to end early, without ever waiting on a stalled stream.

    The engine does not finish a kill while the container's attach stream is backed up (seen
    on 20.10: the kill request then hangs for a minute). When nobody reads our output any more
    the stream is closed first; otherwise it is drained while the kill runs, so what the
    workload wrote before it died still arrives (bounded by OUTPUT_DRAIN_S).
    """
    if end is SessionEnd.OUTPUT_CLOSED:
        session.close_stream()
        with contextlib.suppress(SbxError):  # cleanup force-removes it anyway
            driver.kill(container_id)
        return

    def kill() -> None:
        with contextlib.suppress(SbxError):
            driver.kill(container_id)

    killer = threading.Thread(target=kill, name="sbx-kill", daemon=True)
    killer.start()
    session.drain(OUTPUT_DRAIN_S)
    session.close_stream()
    killer.join(OUTPUT_DRAIN_S)


def _create_sandbox(ctx: AppContext, plan: RunPlan, driver: Driver, created: _Created,
                    run_dir: Path, on_output: OutputSink,
                    on_warning: Callable[[str], None]) -> tuple[str, AttachedStream]:
    """Volumes, network and proxy, the create step, the container, its attach stream.

    Each object is recorded in the same breath as it is created: a signal in between is held
    back (sbx.seams.signals), so the cleanup always knows everything there is to remove.
    """
    raise_if_interrupted()  # a signal whose KeyboardInterrupt a library swallowed
    volumes = plan.capabilities.volumes if plan.capabilities is not None else ()
    for name, volume in zip(plan.volume_names, volumes, strict=True):
        # a file system of exactly that size (sbx.domain.sandbox.sources)
        image = run_dir / "volumes" / f"{name}.img"
        if volume.size is not None:
            staging = _staging(ctx, plan, created)
            with deferred_interrupts():
                created.sized[name] = staging.remount_filesystem(image) \
                    if plan.recreate and image.exists() else staging.stage_filesystem(
                        image, volume.size, uid=plan.user.uid, gid=plan.user.gid,
                        mode=volume.mode)
            continue
        with deferred_interrupts():
            made = driver.create_volume(name, plan.labels)  # a kept one is returned as it is
            if not plan.recreate:
                created.volumes.append(made)
    boundary = _setup_network(ctx, plan, driver, created, run_dir, on_warning)
    if plan.run_image_tag is not None:
        created.image = plan.run_image_tag  # removing one never committed is a no-op
        _create_step(ctx, plan, driver, on_output, boundary, created.proxy, created.sized,
                     _kit_mount_binds(ctx, plan, created))
    raise_if_interrupted()
    with deferred_interrupts():
        container_id = driver.create(_final_spec(ctx, plan, boundary, created))
        created.container = container_id
    runrecord.update(run_dir, container_id=container_id)
    # Attached before the start, so the stream holds every byte from the first.
    with deferred_interrupts():
        stream = driver.attach(container_id, stdin=plan.mode.stdin,
                               detach_keys=plan.detach_keys if plan.mode.tty else None)
        created.stream = stream
    return container_id, stream


def _say_what_is_left(error: BaseException | None,
                      problems: Sequence[str]) -> SbxError | None:
    """A failing run whose cleanup failed too says what it left behind, for ``sbx gc``; an
    interrupted one gets an error that says so (instead of "everything was removed")."""
    if not problems or error is None:
        return None
    left = "; ".join(problems)
    advice = (f"sbx could not remove everything it created ({left}); `sbx gc` removes it "
              "once the engine answers again.")
    if isinstance(error, KeyboardInterrupt):
        return SbxError(Reason.INTERRUPTED, "interrupted; " + advice,
                        details={"left_for_gc": list(problems)})
    if isinstance(error, SbxError):
        error.details["left_for_gc"] = list(problems)
        error.hint = (f"{error.hint} " if error.hint else "") + advice
    return None


def _resizer(driver: Driver, container_id: str, terminal_fd: int | None) -> Callable[[], None]:
    """Sets the sandbox terminal to the host terminal's size (a no-op without a terminal)."""
    def resize() -> None:
        if terminal_fd is None:
            return
        size = window_size(terminal_fd)
        if size is not None:
            with contextlib.suppress(SbxError):  # gone already: nothing left to resize
                driver.resize(container_id, rows=size[0], columns=size[1])

    return resize


def _start_ports(driver: Driver, plan: RunPlan, created: _Created, container_id: str,
                 on_notice: Callable[[str], None]) -> None:
    if plan.capabilities is None or not plan.capabilities.ports or plan.network is None:
        return
    address = driver.container_ip(container_id, plan.network)
    if address is None:  # the workload already finished
        return
    from sbx.seams.ports import PortForwarder

    created.forwarder = PortForwarder(address)
    from sbx.domain.sandbox.observer import OBSERVER_PORT, observer_token, observer_url

    names = plan.capabilities.port_names
    for published in created.forwarder.start(plan.capabilities.ports):  # or start_failed
        on_notice(f"port {published.key} is published on "
                  f"{published.host}:{published.host_port}")
        token = observer_token(created.proxy_url)
        if names.get(published.container_port) == OBSERVER_PORT and token is not None:
            on_notice("browser observer (opens once, for one browser): "
                      f"{observer_url(published.host, published.host_port, token)}")


def _ended_early(ctx: AppContext, plan: RunPlan, end: SessionEnd, started: float) -> None:
    """The workload was stopped before it finished by itself: say why (always raises)."""
    if end is SessionEnd.DETACHED:
        reason, message = Reason.DETACHED, (
            f"the session was ended from the host ({plan.detach_keys}); the sandbox was "
            "stopped and removed")
    elif end is SessionEnd.OUTPUT_CLOSED:
        reason, message = Reason.OUTPUT_CLOSED, "the reader of sbx's output went away"
    else:
        reason, message = Reason.TIMEOUT, (
            f"the workload ran past its time limit of {plan.timeout_s:g}s and was killed")
    _audit(ctx, audit.SANDBOX_FINISHED, plan.run_id, "warning", {
        "reason": reason.value, "duration_s": _elapsed(started)})
    raise SbxError(reason, message,
                   details={"run_id": plan.run_id, "timeout_s": plan.timeout_s})


@dataclass
class _Created:
    """Everything this run asked the engine to create, so cleanup removes exactly that."""

    container: str | None = None
    image: str | None = None
    volumes: list[str] = field(default_factory=list)
    network: str | None = None
    guard: BridgeGuard | None = None  # only runs with a network import these
    forwarder: PortForwarder | None = None
    proxy: ProxyProcess | KeptProxy | None = None
    proxy_url: str | None = None  # the sandbox's HTTPS_PROXY (the browser observer's key)
    stream: AttachedStream | None = None
    staging: Staging | None = None
    sized: dict[str, str] = field(default_factory=dict)  # volume name -> its file system
    kept: bool = False  # a named sandbox that started: its objects outlive this run


def created_ids(created: _Created, container_id: str) -> dict[str, Any]:
    """What a named sandbox owns, for its record."""
    return {"container_id": container_id, "network": created.network,
            "volumes": list(created.volumes), "image": created.image,
            "staging": list(created.staging.log) if created.staging is not None else []}


def _setup_network(ctx: AppContext, plan: RunPlan, driver: Driver, created: _Created,
                   run_dir: Path, on_warning: Callable[[str], None]) -> dict[str, str]:
    """The per-run internal network, the egress proxy, and the bridge's firewall rules.

    Returns the boundary environment (proxy, CA, credential sentinels) for the sandbox."""
    if plan.network is None or plan.bridge is None:
        return {}
    from sbx.seams.host.firewall import BridgeGuard

    with deferred_interrupts():  # created and recorded together (sbx.seams.signals)
        created.network = driver.create_network(plan.network, plan.labels, bridge=plan.bridge,
                                                internal=True)
    boundary: dict[str, str] = {}
    gateway: str | None = None
    if plan.egress is not None:
        gateway = driver.network_gateway(created.network)
        with deferred_interrupts():
            created.proxy, boundary = _start_egress(ctx, plan, gateway, plan.bridge, run_dir)
            created.proxy_url = boundary.get("HTTPS_PROXY")
    # Only the proxy's own address and port are open to the bridge (issue #10, item 4).
    created.guard = BridgeGuard(plan.bridge, plan.run_id, allow_tcp_ports=(
        (created.proxy.port,) if created.proxy is not None else ()), proxy_address=gateway)
    gap = created.guard.install()  # create_failed when iptables refuses (fail closed)
    if gap:
        on_warning(gap)
    return boundary


def _start_egress(ctx: AppContext, plan: RunPlan, gateway: str, bridge: str,
                  run_dir: Path) -> tuple[ProxyProcess | KeptProxy, dict[str, str]]:
    """Start this run's egress proxy on the network's gateway; the sandbox's boundary env.

    Only the sandbox may use it: the proxy URL carries a fresh per-run token (handed to the
    proxy over its owner pipe, never written anywhere), and the proxy accepts clients only
    from inside the run's network (issue #10, item 4)."""
    from sbx.domain.egress.plan import credential_env, proxy_env, start_proxy
    from sbx.domain.egress.policystore import rules_path
    from sbx.domain.egress.proxyauth import new_token
    from sbx.domain.egress.proxyconfig import CredentialSpec, ProxyConfig

    assert plan.egress is not None  # noqa: S101 - guarded by the caller
    kit_set, plan_config, composition, _capabilities = plan.full()
    specs = tuple(CredentialSpec.from_credential(c, mode=plan.egress.modes.get(c.service,
                                                                              "apikey"))
                  for c in composition.credentials if c.service in plan.egress.bound)
    # An unbound credential's token endpoint is still answered by the proxy (logins inside
    # the sandbox are rewritten there too).
    specs += tuple(s for c in composition.credentials if c.service not in plan.egress.bound
                   if (s := CredentialSpec.token_endpoint_only(c)) is not None)
    network_settings = plan_config.network
    ca_file = network_settings.upstream_ca_file.value
    config = ProxyConfig(
        run_id=plan.run_id, state_home=ctx.state_home,
        audit_log=ctx.state_home / "audit.jsonl", network=composition.network,
        phase=plan.egress.initial_phase,  # type: ignore[arg-type]
        credentials=specs, listen_host=gateway, listen_port=0,
        upstream_proxy=network_settings.upstream_proxy.value,
        upstream_ca_file=Path(ca_file) if ca_file else None,
        explain_command=plan.explain_command, phase_file=run_dir / "proxy.phase",
        peer_network=_sandbox_network(bridge, gateway), login_dir=run_dir / runrecord.LOGINS_DIR,
        sandbox=plan.name, request_log=_request_log(ctx, plan.run_id),
        user_policy=rules_path(ctx.state_home),
        kit_files={k.reference: str(k.local.descriptor_file.absolute())
                   for k in kit_set.kits if k.local.image is None},
        ssh_agent=_relay_config(ctx, run_dir, _capabilities))
    token = new_token()
    proxy: ProxyProcess | KeptProxy
    if plan.name is not None:
        # A named sandbox's proxy outlives this process: a detached keeper owns it, with
        # the token kept (0600) for its later starts (sbx.usecases.keeper).
        from sbx.usecases.keeper import start_kept_proxy

        proxy = start_kept_proxy(config.to_json(), run_dir, plan.run_id, token,
                                 secrets=plan.egress.provided)
    else:
        proxy = start_proxy(config.to_json(), run_dir, plan.run_id, client_token=token,
                            secrets=plan.egress.provided)
    runrecord.update(run_dir, proxy_pid=proxy.pid)  # gc stops an orphan by it
    return proxy, {**proxy_env(gateway, proxy.port, token), **credential_env(specs)}


def _request_log(ctx: AppContext, run_id: str) -> Path:
    """This run's request log (``requests/<run id>/``), after dropping the logs of old
    one-shot runs beyond the kept number (named sandboxes' logs stay with them)."""
    from sbx.domain.egress import requestlog
    from sbx.domain.sandbox.records import SandboxStore

    root = ctx.state_home / requestlog.LOG_DIR
    store = SandboxStore(ctx.state_home)
    named: list[str] = []
    try:
        for name in store.names():
            record = store.load(name)
            if record is not None:
                named.append(record.run_id)
    except SbxError:
        named = []  # a record that cannot be read: whose log is whose is unknown, keep all
    else:
        requestlog.prune(root, protected=[*named, run_id])
    return requestlog.log_path(root / run_id)


def _relay_config(ctx: AppContext, run_dir: Path,
                  capabilities: CapabilityPlan) -> RelayConfig | None:
    """The SSH agent relay the proxy process serves, on the host agent as it is now."""
    if not capabilities.ssh_agent:
        return None
    from sbx.domain.egress.sshagent import RelayConfig, grants_of
    from sbx.seams.host.agent import host_agent

    upstream, why = host_agent(ctx.env)
    if upstream is None:
        raise SbxError(Reason.SSH_AGENT_MISSING,
                       f"the host's SSH agent went away before the sandbox started: {why}",
                       hint=REGISTRY[Reason.SSH_AGENT_MISSING].fix)
    socket_dir = run_dir / RELAY_DIR
    socket_dir.mkdir(mode=0o755, exist_ok=True)
    socket_dir.chmod(0o755)  # the sandbox's user must reach the socket inside
    return RelayConfig(socket_dir, upstream, grants_of(capabilities.ssh_agent))


def _sandbox_network(bridge: str, gateway: str) -> str:
    """The run network's address range (from its bridge), where the proxy's only client lives;
    the proxy does not start without it (fail closed)."""
    import ipaddress

    from sbx.seams.host.firewall import bridge_network

    network = bridge_network(bridge)
    if network is None or ipaddress.ip_address(gateway) not in ipaddress.ip_network(network):
        raise SbxError(Reason.PROXY_FAILED,
                       f"cannot read the address range of the sandbox network's bridge {bridge}"
                       f" (gateway {gateway}); the egress proxy would not know its only client",
                       hint="sbx's egress needs a Linux host with the engine's bridge networks.")
    return network


def _create_step(ctx: AppContext, plan: RunPlan, driver: Driver, on_output: OutputSink,
                 boundary: Mapping[str, str], proxy: ProxyProcess | KeptProxy | None,
                 created_sized: Mapping[str, str],
                 kit_mounts: Sequence[BindMount] = ()) -> None:
    """Kit files, profiles, CA, startup script and install hooks → the per-run image."""
    from sbx.domain.sandbox.lifecycle import (
        CREATE_STEP_CAP_DROP,
        KEEPALIVE,
        CreateStep,
        parse_accounts,
        run_create_step,
    )

    assert plan.run_image_tag is not None  # noqa: S101 - guarded by the caller
    capabilities = plan.full()[3]
    passwd = driver.read_image_file(plan.image.id, "/etc/passwd", plan.labels) or b""
    volumes = _volume_binds(plan.volume_names, capabilities.volumes, created_sized)
    spec = build_create_step_spec(
        image=plan.image.id, limits=capabilities.limits, workdir=plan.workspace_target,
        labels=plan.labels, image_labels=plan.image.labels, keepalive=KEEPALIVE,
        cap_drop=CREATE_STEP_CAP_DROP,
        binds=[*volumes, *kit_mounts,
               *_relay_binds(ctx, plan.run_id, capabilities, "install")])
    lifecycle = capabilities.lifecycle
    if plan.egress is not None and plan.network is not None:
        # Install hooks reach exactly the install phase's hosts, through the same proxy.
        spec = dataclasses.replace(spec, network_mode=plan.network)
        lifecycle = dataclasses.replace(
            lifecycle, files=(*lifecycle.files, *_trust_files(ctx, plan, driver)))
    # Install hooks' output is the kit author's, shown like a build's: on stderr.
    step = CreateStep(
        driver=driver, spec=spec, image_tag=plan.run_image_tag, image_labels=plan.labels,
        base=plan.image,
        uid=plan.user.uid, gid=plan.user.gid, container_env=plan.container_env,
        accounts=parse_accounts(passwd.decode("utf-8", "replace")),
        workdir=plan.workspace_target,
        on_output=lambda _stream, chunk: on_output("stderr", chunk),
        boundary_env={**capabilities.env, **boundary}, home=plan.home,
        after_install=(proxy.switch_to_runtime
                       if proxy is not None and plan.egress is not None
                       and plan.egress.initial_phase == "install" else None))
    try:
        run_create_step(step, lifecycle, [(v.path, v.mode) for v in capabilities.volumes])
    except SbxError as error:
        if error.reason is Reason.HOOK_FAILED and plan.egress is not None:
            raise _after_refusal(ctx, plan, error) from error
        raise


def _after_refusal(ctx: AppContext, plan: RunPlan, error: SbxError) -> SbxError:
    """A hook that failed after its egress was refused names the refusal first (what, the
    rule, the fix): the kit's command was likely fine and the policy (or the network) not."""
    from sbx.usecases.policylog import record_line, records_of_run

    refused = records_of_run(ctx.state_home, plan.run_id, phase="install")
    if not refused:
        return error
    last = refused[-1]
    what = record_line(last).split(" ", 2)[2]  # without the time and the sandbox
    fix = last.get("fix") if isinstance(last.get("fix"), str) else None
    more = f" (and {len(refused) - 1} more refusal(s))" if len(refused) > 1 else ""
    hint = (f"Paste `{fix}` to allow it (reviewed: it shows the widening), then run again; "
            if fix else f"`sbx explain {last.get('code')}` says what to do; ")
    hint += f"`sbx explain {plan.run_id}` lists every refusal of this run."
    return SbxError(
        Reason.HOOK_FAILED,
        f"{error.message}, after sbx refused its request: {what}{more}",
        hint=hint, details={**error.details, "refusals": refused[-5:], "fix": fix})


def _trust_files(ctx: AppContext, plan: RunPlan, driver: Driver) -> list[KitFile]:
    """sbx's CA (and an upstream proxy's, ``[network] upstream_ca_file``: a TLS-intercepting
    corporate proxy signs the hosts sbx tunnels), a bundle of the image's CAs plus those, and
    that bundle in the image's own system location, so clients that ignore SSL_CERT_FILE
    trust intercepted TLS too."""
    from sbx.domain.egress.ca import CertificateAuthority
    from sbx.domain.egress.plan import (
        CA_BUNDLE,
        CA_FILE,
        SYSTEM_BUNDLES,
        trust_bundle,
        upstream_certificates,
    )
    from sbx.domain.sandbox.lifecycle import KitFile

    ca_pem = CertificateAuthority.load_or_create(ctx.state_home).certificate_pem()
    upstream = plan.full()[1].network.upstream_ca_file.value
    if upstream:
        ca_pem = ca_pem.rstrip(b"\n") + b"\n" + upstream_certificates(Path(upstream))
    system_path, system = next(
        ((p, data) for p in SYSTEM_BUNDLES
         if (data := driver.read_image_file(plan.image.id, p, plan.labels)) is not None),
        (SYSTEM_BUNDLES[0], None))
    bundle = trust_bundle(ca_pem, system).decode("utf-8")
    files = [KitFile(kit="sbx", where="egress CA", path=CA_FILE, content=ca_pem.decode(),
                     mode=0o644, owner_is_sandbox_user=False),
             KitFile(kit="sbx", where="egress CA", path=CA_BUNDLE, content=bundle, mode=0o644,
                     owner_is_sandbox_user=False),
             KitFile(kit="sbx", where="egress CA", path=system_path, content=bundle,
                     mode=0o644, owner_is_sandbox_user=False)]
    return files


def _cleanup(ctx: AppContext, plan: RunPlan, driver: Driver, created: _Created,
             run_dir: Path) -> list[str]:
    """Remove what this run created; of a named sandbox that started, only this process's own
    handles (the rest is the sandbox's).

    The order is by dependency, not the mirror of creation: the port forwarder and the proxy
    stop first (nothing may leave or enter while the rest goes), then the container (it holds
    the image, the volumes and the network), the image, the volumes, the network; the bridge's
    firewall rules go last, so they outlive every object they protect
    (tests/unit/test_run_cleanup.py checks this order on a failure at every step). A step
    that fails, in any way, never stops the ones after it: its failure is returned."""
    errors: list[str] = []
    failed: dict[str, int] = {}

    def step(reason: str, undo: Callable[[], object]) -> bool:
        try:
            undo()
        except Exception as error:  # every failure is reported, and none stops the rest
            text = str(error) if isinstance(error, SbxError) else \
                f"{reason.removesuffix('_failed').replace('_', ' ')}: " \
                f"{type(error).__name__}: {error}"
            errors.append(text)
            failed[reason] = failed.get(reason, 0) + 1
            return False
        return True

    if created.stream is not None:
        step("stream_close_failed", created.stream.close)
    if created.forwarder is not None:
        step("forwarder_stop_failed", created.forwarder.stop)
    if created.kept:
        step("mount_release_failed", plan.host_mounts.close)
        _release_owner(plan.run_id)  # the named sandbox owns itself from now on
        return errors
    if created.proxy is not None:
        step("proxy_stop_failed", created.proxy.stop)
    if created.container is not None:
        container = created.container
        step("container_remove_failed", lambda: driver.remove_container(container))
    if created.image is not None:
        image = created.image
        step("image_remove_failed", lambda: driver.remove_image(image))
    for name in created.volumes:
        step("volume_remove_failed", functools.partial(driver.remove_volume, name))
    if created.network is not None:
        step("network_remove_failed", functools.partial(driver.remove_network, created.network))
    if not errors and plan.recreate:
        _empty_but_volumes(run_dir)  # a failed recreation keeps HOME and the volumes
    elif not errors:
        shutil.rmtree(run_dir, ignore_errors=True)
    if created.staging is not None:
        staging = created.staging
        staging_errors: list[str] = []
        if step("staging_release_failed", lambda: staging_errors.extend(staging.release())) \
                and staging_errors:
            errors.extend(staging_errors)
            failed["staging_release_failed"] = len(staging_errors)
    step("mount_release_failed", plan.host_mounts.close)
    if created.guard is not None:
        guard = created.guard
        rule_errors: list[str] = []
        if step("firewall_rule_remove_failed", lambda: rule_errors.extend(guard.remove())) \
                and rule_errors:
            errors.extend(rule_errors)
            failed["firewall_rule_remove_failed"] = len(rule_errors)
    for reason, count in failed.items():
        _audit(ctx, audit.CLEANUP_FAILED, plan.run_id, "warning",
               {"reason": reason, "count": count})
    _release_owner(plan.run_id)
    return errors


def _empty_but_volumes(run_dir: Path) -> None:
    """A recreated sandbox's run directory: what its container had goes, its volumes' file
    systems, the OAuth logins made inside it and the owner lock (held by the recreation,
    gc's sign of a live owner) stay."""
    for child in run_dir.iterdir() if run_dir.is_dir() else ():
        if child.name in ("volumes", runrecord.LOGINS_DIR, runrecord.OWNER_LOCK):
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                child.unlink()


_OWNER_LOCKS: dict[str, int] = {}  # run id -> its owner lock, held while the run lives


def _release_owner(run_id: str) -> None:
    fd = _OWNER_LOCKS.pop(run_id, None)
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)


def _open_run_dir(ctx: AppContext, plan: RunPlan) -> Path:
    """The run's record in the run directory it claimed, with the workspace baselines (for the
    check after a named sandbox's sessions, or gc's); a failure gives the claim back."""
    try:
        run_dir = _write_run_dir(ctx, plan)
        if plan.workspace_baselines:
            from sbx.usecases import workspace_check

            workspace_check.save(run_dir, plan.workspace_baselines)
    except BaseException:
        _unclaim(ctx, plan.run_id, again=plan.recreate)
        raise
    return run_dir


def _claim(ctx: AppContext, run_id: str, *, again: bool = False) -> None:
    """The run's owner lock, taken before its plan creates anything (probe containers,
    images): ``sbx gc`` never touches what a live owner holds. ``again``: a recreated named
    sandbox's run directory, which exists and keeps its volumes."""
    _path, lock_fd = runrecord.claim(ctx.state_home, run_id, again=again)
    _OWNER_LOCKS[run_id] = lock_fd


def _unclaim(ctx: AppContext, run_id: str, *, again: bool = False) -> None:
    """A run refused before it started: its (empty) run directory goes with its lock; a
    recreation's (``again``) is the named sandbox's own and stays."""
    if not again:
        shutil.rmtree(runrecord.run_dir(ctx.state_home, run_id), ignore_errors=True)
    _release_owner(run_id)


def _write_run_dir(ctx: AppContext, plan: RunPlan) -> Path:
    """Per-run state under the state home: lets gc and explain find what a crash left."""
    claimed = plan.run_id in _OWNER_LOCKS
    path, lock_fd = runrecord.create(ctx.state_home, runrecord.RunRecord(
        run_id=plan.run_id, deadline=plan.deadline, workload=plan.facts.workload,
        kits=tuple(plan.references), image=plan.image_tag, run_image=plan.run_image_tag,
        volumes=plan.volume_names, name=plan.name), owner_lock=True, claimed=claimed)
    if lock_fd is not None:
        _OWNER_LOCKS[plan.run_id] = lock_fd
    return path


def _elapsed(started: float) -> float:
    return round(time.monotonic() - started, 3)


def _audit(ctx: AppContext, event: str, run_id: str, severity: str,
           details: Mapping[str, Any]) -> None:
    try:
        audit.record(ctx.state_home, event, run_id=run_id, severity=severity, details=details)
    except OSError:
        # An unwritable audit log must not turn a finished run into a crash; the run's own
        # result still reaches the user.
        return


__all__ = ["ACCESS_MODES", "RunPlan", "RunRequest", "RunResult",
           "prepare", "run"]
