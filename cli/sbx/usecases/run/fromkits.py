"""The planner's inputs from the kits: the full plan.

The pipeline (sbx.usecases.pipeline, shared with explain and doctor) decodes the config and the
kits, finds or builds the image, runs the kits' permission gate, plans the capabilities and
resolves the credentials; what it decided becomes the run's :class:`~sbx.usecases.run.recipe.Recipe`
(HOME, the command, the variables, the image with its mount points), which the plan cache keeps
when the plan needs nothing beyond a container.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.credentials.oauth import ACCESS_SENTINEL_PREFIX, REFRESH_SENTINEL_PREFIX
from sbx.domain.egress.policystore import PolicyStore
from sbx.domain.egress.proxycreds import SENTINEL_PREFIX
from sbx.domain.sandbox import imageprobe
from sbx.domain.sandbox.admission import Admission, HostPath, sentinel_names
from sbx.domain.sandbox.capabilities import CapabilityPlan, NamedVolume
from sbx.domain.sandbox.credfiles import credential_files
from sbx.domain.sandbox.hardening import TMP_TARGET, Limits
from sbx.domain.sandbox.identity import WorkspaceOwner, choose_user, home_path
from sbx.domain.sandbox.imagecache import record_use
from sbx.domain.sandbox.images import SandboxUser, resolve_user
from sbx.domain.sandbox.kitpins import KitFiles, kit_files
from sbx.domain.sandbox.lifecycle import STARTUP_SCRIPT
from sbx.domain.sandbox.limitflags import bounds_of
from sbx.domain.sandbox.mountedfiles import with_mounted_files
from sbx.domain.sandbox.mountpoints import prepare_mountpoints
from sbx.domain.sandbox.platform import (
    BASH,
    agent_launch,
    check_platform_bash,
    check_platform_image,
    declares_platform,
)
from sbx.domain.sandbox.publish import parse_publishes
from sbx.domain.sandbox.sources import staging_available
from sbx.seams.engine import ImageInfo
from sbx.usecases import kitgate, pipeline
from sbx.usecases.context import AppContext
from sbx.usecases.kitgate import Confirm as ConfirmKits
from sbx.usecases.kitgate import KitSurface
from sbx.usecases.pipeline import LoadedWorkload, WorkloadPlan
from sbx.usecases.run.kitmounts import kit_host_mounts
from sbx.usecases.run.plan import Decided, FullParts, RunPlan, owner_key, plan
from sbx.usecases.run.recipe import PlanFacts, Recipe
from sbx.usecases.run.request import (
    NO_DEADLINE_S,
    ProgressFactory,
    RunRequest,
    access_of,
    has_workspace_volume,
    workload_request,
)
from sbx.usecases.run.sessionverbs import session_env, session_launch

if TYPE_CHECKING:
    from sbx.base.config import Config
    from sbx.domain.egress.plan import EgressPlan
    from sbx.domain.kits.compose import Composition
    from sbx.domain.kits.kitset import KitSet


def prepare(ctx: AppContext, request: RunRequest, run_id: str,
            progress: ProgressFactory, *, confirm_kits: ConfirmKits | None = None,
            on_notice: Callable[[str], None] = lambda _text: None) -> RunPlan:
    """The full plan of ``request``: everything checked, nothing but probes created."""
    # Config and kits (no engine): the pipeline's first stage, as for explain and doctor.
    inputs = FromKits(pipeline.load(ctx, workload_request(request)), request, progress,
                      confirm_kits=confirm_kits, on_notice=on_notice)
    planned = plan(ctx, request, run_id, inputs)
    assert planned is not None  # noqa: S101 - the kits' inputs never ask to plan again
    return planned


class FromKits:
    """The planner's inputs (sbx.usecases.run.plan.PlanInputs) from the decoded kits."""

    def __init__(self, loaded: LoadedWorkload, request: RunRequest, progress: ProgressFactory,
                 *, confirm_kits: ConfirmKits | None,
                 on_notice: Callable[[str], None]) -> None:
        self.loaded = loaded
        self.config: Config = loaded.config
        self.kit_set: KitSet = loaded.kit_set
        self.request = request
        self.progress = progress
        self.confirm_kits = confirm_kits
        self.on_notice = on_notice
        self.surfaces: list[KitSurface] = []
        # What the engine's part found, for the steps after it.
        self._planned: WorkloadPlan | None = None
        self._ctx: AppContext | None = None
        self._labels: Mapping[str, str] = {}
        self._files: tuple[KitFiles, ...] = ()
        self._credential_names: frozenset[str] = frozenset()

    @property
    def blocked(self) -> Sequence[str]:
        return self.config.mounts.blocked.value

    @property
    def allowed_roots(self) -> Sequence[str]:
        return self.config.mounts.allowed_roots.value

    @property
    def timeout_s(self) -> float:
        return timeout_of(self.request, self.config)

    @property
    def kits(self) -> Sequence[str]:
        return [k.reference for k in self.kit_set.kits]

    @property
    def planned(self) -> WorkloadPlan:
        if self._planned is None:  # pragma: no cover - the planner asks the engine first
            raise SbxError(Reason.CREATE_FAILED, "internal: the kits were not planned yet")
        return self._planned

    def engine(self, ctx: AppContext, run_id: str, labels: Mapping[str, str]) -> bool:
        """Engine, image, effective kits, capabilities, credentials: the pipeline's second
        stage, with the kits' permission gate before any capability is planned or secret
        read."""
        request = self.request

        def gate(kits: KitSet, effective: Mapping[str, Mapping[str, Any]]) -> None:
            self.surfaces.extend(kitgate.kit_surfaces(kits, effective, ctx.cwd))
            kitgate.approve(ctx.state_home, self.surfaces, accept=request.accept,
                            confirm=self.confirm_kits,
                            command=kitgate.accept_command(ctx.argv, ctx.passthrough),
                            run_id=run_id, on_notice=self.on_notice)

        template = None
        if request.template is not None:
            # Only a run from a template reads one (the label, the kits' digests).
            from sbx.usecases import templates

            template = templates.image_for(ctx, request.template, self.kit_set)
        planned = pipeline.plan(ctx, self.loaded, run_id=run_id, progress=self.progress,
                                helper_labels=labels, resolve_secrets=True, gate=gate,
                                template=template)
        self._planned, self._ctx, self._labels = planned, ctx, labels
        record_use(ctx.driver, ctx.home_hash, list(planned.images_used))  # for gc's marks
        if planned.egress is not None:
            # The proxy follows the user policy: a damaged rules file refuses the run before
            # anything starts (its denies would be lost), as the proxy would refuse to start.
            PolicyStore(ctx.state_home).load()
        self._credential_names = _sentinel_variables(planned)
        self._files = tuple(local_kit_files(self.kit_set, ctx.cwd))
        return True

    @property
    def workspace_target(self) -> str:
        return self.planned.workspace_target

    @property
    def credential_names(self) -> frozenset[str]:
        return self._credential_names

    @property
    def kit_files(self) -> Sequence[KitFiles]:
        return self._files

    def kit_mounts(self, ctx: AppContext, taken: Sequence[str]
                   ) -> tuple[Sequence[HostPath], set[str]]:
        capabilities = self.planned.capabilities
        if not capabilities.host_mounts and not capabilities.skills_paths:
            return (), set()
        return kit_host_mounts(ctx, capabilities, taken)

    def user(self, owner: WorkspaceOwner | None) -> tuple[SandboxUser, tuple[str, ...]]:
        config, planned, ctx = self.config, self.planned, self._ctx
        assert ctx is not None  # noqa: S101 - set with the plan
        return choose_user(
            flag=self.request.user, owner=owner, access=access_of(self.request),
            root_workspace=config.sandbox.root_workspace.value,
            image_user=lambda: resolve_user(
                ctx.driver, planned.image, fallback_uid=config.sandbox.user.value,
                fallback_source=f"[sandbox] user ({config.sandbox.user.source})",
                cache_dir=ctx.state_home / "cache" / "images", helper_labels=self._labels))

    def decide(self, ctx: AppContext, request: RunRequest, run_id: str, admission: Admission,
               labels: Mapping[str, str]) -> Decided:
        """HOME, the command and the sandbox's capabilities as it gets them; the image with
        its mount points; the recipe of it all."""
        planned = self.planned
        kit_set = self.kit_set
        named = request.name
        workspace_target = planned.workspace_target
        host_mounts = admission.mounts
        workspace = host_mounts.workspace
        extra_targets = [pin.target for pin in host_mounts.pins if pin.source is not workspace]
        capabilities = dataclasses.replace(planned.capabilities,
                                           published=parse_publishes(request.publish))
        home = home_path(
            taken=[workspace_target, TMP_TARGET, *extra_targets,
                   *(v.path for v in capabilities.volumes), *capabilities.tmpfs])
        if named is not None:
            capabilities = _with_home_volume(capabilities, home,
                                             local=ctx.driver.location().local)
        egress = planned.egress
        if egress is not None and "oauth" in egress.modes.values():
            lifecycle = capabilities.lifecycle
            capabilities = dataclasses.replace(capabilities, lifecycle=dataclasses.replace(
                lifecycle, files=(*lifecycle.files, *credential_files(
                    planned.composition, egress.modes, ctx.state_home, home=home))))
        # Kit files on mounts made at start (/tmp, HOME, tmpfs volumes, a private workspace)
        # would be hidden by those mounts: they are copied in by a startup step instead.
        capabilities = _with_mounted_files(capabilities, [
            TMP_TARGET, home, *capabilities.tmpfs,
            *((workspace_target,) if workspace is None else ())])
        command, entrypoint = _command(request, planned, capabilities, kit_set)
        if declares_platform(planned.composition, kit_set.workload.reference):
            # HOME's mode is asked in the same probe, so the mount points below cost none.
            found = imageprobe.probed(ctx.driver, planned.image, paths=(BASH,), dirs=(home,),
                                      cache_dir=ctx.state_home / "cache" / "images",
                                      helper_labels=labels)
            check_platform_bash(found.stats[BASH], kit_set.workload.reference)
        # The CA goes into the per-run image, so a network policy always takes the create step.
        needs_create_step = capabilities.needs_create_step or egress is not None
        volume_prefix = f"sbx-{ctx.home_hash[:8]}-{named}" if named else f"sbx-{run_id[:16]}"
        # Ports and egress need an interface: a per-run internal network (no route beyond the
        # host).
        networked = bool(capabilities.ports or capabilities.published) or egress is not None
        image = prepare_mountpoints(ctx.driver, planned.image, home=home,
                                    cache_dir=ctx.state_home / "cache" / "images",
                                    helper_labels=labels, lock_dir=ctx.state_home / "locks",
                                    home_hash=ctx.home_hash)
        # the last use, for gc (sbx.domain.sandbox.imagecache)
        record_use(ctx.driver, ctx.home_hash, [image])
        recipe = self._recipe(planned, image, admission, capabilities, home=home,
                              command=command, entrypoint=entrypoint)
        return Decided(recipe, image.labels, FullParts(
            planned=planned, capabilities=capabilities,
            run_image_tag=f"sbx-run/{run_id}:1" if needs_create_step else None,
            volume_names=tuple(f"{volume_prefix}-v{i}"
                               for i in range(len(capabilities.volumes))),
            network=f"sbx-{run_id[:16]}" if networked else None,
            bridge=f"sbx{run_id[:12]}" if networked else None,
            credential_names=self.credential_names,
            workspace_volume=(f"{volume_prefix}-ws" if has_workspace_volume(request)
                              else None)))

    def _recipe(self, planned: WorkloadPlan, image: ImageInfo, admission: Admission,
                capabilities: CapabilityPlan, *, home: str, command: tuple[str, ...] | None,
                entrypoint: tuple[str, ...] | None) -> Recipe:
        config, request, user = self.config, self.request, admission.user
        runtime = self.loaded.runtime
        return Recipe(
            image=image, image_tag=planned.image_tag,
            images_used=tuple(i.id for i in (*planned.images_used, image)),
            uid=user.uid, gid=user.gid, user_source=user.source,
            user_warnings=tuple(admission.user_notes), owner=owner_key(admission.owner),
            timeout_s=self.timeout_s, limits=dataclasses.asdict(capabilities.limits),
            workspace_target=planned.workspace_target, command=command, entrypoint=entrypoint,
            env={**planned.exports, **session_env(request, planned.composition, self.kit_set),
                 **capabilities.env}, home=home, tmpfs=dict(capabilities.tmpfs),
            detach_keys=self.loaded.detach_keys,
            runtime=runtime.name if runtime is not None else None,
            runtime_source=runtime.source if runtime is not None else "",
            terminal_passthrough=(request.terminal_passthrough
                                  or config.sandbox.terminal_passthrough.value),
            explain_command=(f"sbx explain {request.name}" if request.name is not None
                             else _explain_command(self.loaded)),
            notes=tuple(capabilities.notes), blocked=tuple(self.blocked),
            allowed_roots=tuple(self.allowed_roots),
            facts=_facts(self.kit_set, capabilities, planned.egress),
            kit_surfaces=tuple(kit.to_json() for kit in self.surfaces),
            kit_files=tuple(kit.to_json() for kit in self._files),
            bounds=bounds_of(Limits.from_sandbox(config.sandbox)))


def local_kit_files(kit_set: KitSet, cwd: Path) -> list[KitFiles]:
    """What each local kit of the set reads from the host (pulled kits live in the state
    home, which no sandbox can mount)."""
    return [kit_files(kit.local, cwd) for kit in kit_set.kits if kit.local.image is None]


def timeout_of(request: RunRequest, config: Config) -> float:
    """A run's time limit in seconds. A named sandbox has none unless --timeout gives one: it
    lives until it is stopped (its labels then carry a deadline years away, and gc leaves
    named sandboxes alone anyway)."""
    if request.name is not None and request.timeout_s is None:
        return NO_DEADLINE_S
    return float(config.sandbox.timeout_ms.value / 1000)


def _with_home_volume(capabilities: CapabilityPlan, home: str, *,
                      local: bool) -> CapabilityPlan:
    """A named sandbox's HOME persists across stop/start: a volume of its own, sized where
    sbx can bound it (a sized one is staged on this machine: on an engine elsewhere it is the
    engine's own volume, unsized, as where staging is unavailable here)."""
    return dataclasses.replace(capabilities, volumes=(
        *capabilities.volumes, NamedVolume(home, 0o700, capabilities.limits.home_bytes
                                           if local and staging_available() else None)))


def _with_mounted_files(capabilities: CapabilityPlan, targets: Sequence[str]) -> CapabilityPlan:
    return with_mounted_files(capabilities, list(targets))


def _explain_command(loaded: LoadedWorkload) -> str:
    return pipeline.explain_command(loaded)


def _facts(kit_set: KitSet, capabilities: CapabilityPlan, egress: EgressPlan | None,
           ) -> PlanFacts:
    limits = capabilities.limits
    return PlanFacts(
        workload=kit_set.workload.reference, kits=tuple(k.reference for k in kit_set.kits),
        selection=pipeline.selection(kit_set, (*capabilities.skipped,
                                               *(egress.skipped if egress else ()))),
        limits={"memory_bytes": limits.memory_bytes, "cpu_millis": limits.cpu_millis,
                "pids": limits.pids},
        privileged=capabilities.privileged)


def _command(request: RunRequest, planned: WorkloadPlan, capabilities: CapabilityPlan,
             kit_set: KitSet) -> tuple[tuple[str, ...] | None, tuple[str, ...] | None]:
    """(command, entrypoint) for the sandbox, always explicit; startup hooks wrap the argv.

    The workload's argv is the image's ENTRYPOINT + (ARGS after `--`, else its CMD), as with
    `docker run`, plus a session verb's tail (--prompt, --resume, --continue), or the ACP
    adapter's command (--acp). It is passed explicitly because a per-run image committed by the
    create step would otherwise inherit the create step's keepalive entrypoint.
    """
    image = planned.image
    acp = request.session is not None and request.session.verb == "acp"
    if request.command is None and not image.entrypoint and not image.cmd and not acp:
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"{kit_set.workload.reference}'s image has no ENTRYPOINT or CMD and no "
                       "command was given after `--`",
                       hint="Add CMD to the dockerfile, or pass `-- CMD...`.")
    argv = (*(image.entrypoint or ()), *(request.command or image.cmd or ()))
    if request.session is not None:
        argv = session_launch(request, planned.composition, kit_set, argv)
    if declares_platform(planned.composition, kit_set.workload.reference):
        check_platform_image(image.user, kit_set.workload.reference)
        argv = agent_launch(argv)
    if capabilities.lifecycle.startup:
        return argv, ("/bin/sh", STARTUP_SCRIPT)
    return argv[1:], argv[:1]


def _sentinel_variables(planned: WorkloadPlan) -> frozenset[str]:
    """The variables of this sandbox that hold a credential's sentinel."""
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


__all__ = ["FromKits", "local_kit_files", "prepare", "timeout_of"]
