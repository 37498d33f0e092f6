"""The one pipeline from "this workload, these mixins, these args, this config" to a plan.

``sbx run`` plans with it before it creates anything; ``sbx explain WORKLOAD`` and ``sbx doctor
WORKLOAD`` report what it decides, so all three refuse the same request for the same reason
(one function per rule, never a second implementation). Stages, in order:

1. :func:`load` — host platform, config (with flag overrides), kits: strict decode, args,
   selection and resolution (:func:`sbx.domain.kits.kitset.load_kit_set`, registry kits through the
   lock), the configured detach keys. No engine.
2. :func:`plan` — engine requirements, the kit image (built from the kit directory when its
   content changed, assembled with the mixins' layers; never pulled), the container
   environment, the effective descriptors (``${{ kit.env.* }}`` expanded, validated strictly,
   selected again) and their composition, the capability plan within the configured limits,
   and the credential binding.

Neither stage creates a container, network, volume or proxy. Building (and assembling) the
kit image is part of planning, as it always was for ``sbx run``: it is cached by content hash,
so explain and doctor reuse what run built and run reuses what they built.

What only ``sbx run`` knows — the workspace, ``--mount``, ``--user``, ``-e``, the session mode,
the command after ``--`` — is checked by :mod:`sbx.usecases.run.plan` around these stages.
"""

from __future__ import annotations

import dataclasses
import math
import os
import shlex
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from sbx.base import labels as label_keys
from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.kits.args import final_environment
from sbx.domain.kits.kitset import KitSet, LoadedKit, effective_composition, load_kit_set
from sbx.domain.sandbox.binding import bind_credentials
from sbx.domain.sandbox.capabilities import SUPPORTED, CapabilityPlan, plan_capabilities
from sbx.domain.sandbox.hardening import DEFAULT_WORKSPACE
from sbx.domain.sandbox.images import known_user
from sbx.domain.sandbox.kitimages import ensure_kit_image
from sbx.domain.sandbox.requirements import check_engine, check_host, sandbox_limits
from sbx.domain.sandbox.runtimes import RuntimeChoice, check_runtime, choose_runtime
from sbx.domain.sandbox.sources import staging_available
from sbx.seams.host.agent import host_agent
from sbx.seams.host.git import global_identity
from sbx.seams.session.escape import parse_detach_keys
from sbx.usecases.workload import WorkloadRequest

if TYPE_CHECKING:
    from sbx.base.config import Config
    from sbx.domain.egress.plan import EgressPlan
    from sbx.domain.kits.compose import Composition
    from sbx.domain.kits.selection import SelectionRecord
    from sbx.domain.sandbox.images import SandboxUser
    from sbx.seams.engine import EngineInfo, ImageInfo, Images, Inventory
    from sbx.usecases.context import AppContext

ProgressFactory = Callable[[str], AbstractContextManager[Callable[[str], None]]]
# (the kits, each kit's effective descriptor by reference) -> None, or raises a refusal.
KitGate = Callable[[KitSet, Mapping[str, Mapping[str, Any]]], None]
# How long the helper objects of a plan (a build's or an assembly's) may live before gc
# treats them as left behind by a crash.
HELPER_DEADLINE_S: Final = 3600


@dataclass(frozen=True)
class LoadedWorkload:
    request: WorkloadRequest
    config: Config
    kit_set: KitSet
    detach_keys: str
    runtime: RuntimeChoice | None = None  # None: the engine's default runtime


@dataclass(frozen=True)
class WorkloadPlan:
    """Everything the pipeline decided; ``sbx run`` adds the host side and creates it."""

    loaded: LoadedWorkload
    engine: EngineInfo
    image: ImageInfo  # the assembled image
    image_tag: str
    image_built: bool
    images_used: tuple[ImageInfo, ...]  # for gc's marks (sbx.domain.sandbox.imagecache)
    workspace_target: str
    exports: Mapping[str, str]  # kits' arg `env:` exports
    container_env: Mapping[str, str]
    composition: Composition
    capabilities: CapabilityPlan
    egress: EgressPlan | None
    # Each kit's effective descriptor, by reference: what its permission surface is read from.
    effective: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    @property
    def config(self) -> Config:
        return self.loaded.config

    @property
    def kit_set(self) -> KitSet:
        return self.loaded.kit_set

    def selection(self) -> dict[str, list[dict[str, Any]]]:
        """Selection records of the plan: what was selected and not dropped, and every skip."""
        return selection(self.kit_set, (*self.capabilities.skipped,
                                        *(self.egress.skipped if self.egress else ())))


def selection(kit_set: KitSet, later: Sequence[SelectionRecord],
              ) -> dict[str, list[dict[str, Any]]]:
    """The kits' selection records, with the capabilities selected by type but not satisfiable
    here (``later``: an optional resources@1 over its bound, an optional udp port, an optional
    unbound credential) counted as skipped only."""
    records = kit_set.selection_records()
    skipped = [r.as_dict() for r in later]
    dropped = {(r["kit"], r["path"]) for r in skipped}
    return {"selected": [r for r in records["selected"] if (r["kit"], r["path"]) not in dropped],
            "skipped": records["skipped"] + skipped}


# -- stage 1: no engine ------------------------------------------------------------------------


def load(ctx: AppContext, request: WorkloadRequest) -> LoadedWorkload:
    check_host(os.name)
    config = ctx.load_config()
    if request.timeout_s is not None:
        config = config.with_sandbox_override("timeout_ms", timeout_ms(request.timeout_s),
                                              "flag --timeout")
    # Kits: strict decode, args, selection and resolution, all before anything is built.
    kit_set = load_kit_set(request.workload, request.kits, request.args, cwd=ctx.cwd,
                           cache_dir=ctx.state_home / "cache" / "descriptors",
                           supported=SUPPORTED, lock_home=ctx.state_home)
    return LoadedWorkload(request, config, kit_set, detach_keys(request.detach_keys, config),
                          choose_runtime(request.runtime, config))


def timeout_ms(seconds: float) -> int:
    if not math.isfinite(seconds) or seconds <= 0:
        raise SbxError(Reason.INVALID_ARGUMENT, f"--timeout must be a positive number of "
                       f"seconds, not {seconds}")
    return max(1, math.ceil(seconds * 1000))


def detach_keys(flag: str | None, config: Config) -> str:
    """``--detach-keys`` beats ``[sandbox] detach_keys``; refused when it does not parse."""
    if flag is not None:
        text, source = flag, "--detach-keys"
    else:
        setting = config.sandbox.detach_keys
        text, source = setting.value, f"[sandbox] detach_keys ({setting.source})"
    try:
        parse_detach_keys(text)
    except ValueError as error:
        raise SbxError(Reason.INVALID_ARGUMENT, f"{source}: {error}") from None
    return text


# -- stage 2: the engine -----------------------------------------------------------------------


def plan(ctx: AppContext, loaded: LoadedWorkload, *, run_id: str, progress: ProgressFactory,
         helper_labels: Mapping[str, str], resolve_secrets: bool,
         gate: KitGate | None = None, template: ImageInfo | None = None) -> WorkloadPlan:
    """``resolve_secrets``: read keyring, variable and command secrets for the proxy (``sbx
    run`` only; explain and doctor never read a value). ``gate`` sees each kit's effective
    descriptor before any capability is planned or secret read (``sbx run``'s permission gate,
    sbx.usecases.kitgate); it raises to refuse. ``template``: the image the sandbox starts
    from instead of the kits' (`--template`, checked to be of these kits): nothing is built,
    and its install hooks ran when the template's sandbox was made, so none is planned."""
    driver: Inventory = ctx.driver
    engine = driver.info()
    check_engine(engine)
    check_runtime(engine, loaded.runtime)  # before any image is built
    kit_set = loaded.kit_set
    used: tuple[ImageInfo, ...]
    if template is not None:
        image, image_tag, image_built, used = template, template.id, False, (template,)
    else:
        image, image_tag, image_built, used = _kit_image(ctx, kit_set, progress,
                                                         helper_labels)
    workspace_target = image.workdir or DEFAULT_WORKSPACE
    exports = kit_set.env_exports
    container_env = final_environment(
        dict(env_pairs(image.env)), exports,
        {"SBX_WORKSPACE": workspace_target, "SBX_RUN_ID": run_id})
    composition, effective = effective_composition(
        kit_set, container_env, SUPPORTED, cache_dir=ctx.state_home / "cache" / "effective")
    if gate is not None:
        gate(kit_set, effective)
    capabilities = plan_capabilities(
        composition, limits=sandbox_limits(loaded.config),
        allow_privileged=loaded.request.allow_privileged, workspace_target=workspace_target,
        volume_sizes_enforced=staging_available(),
        kits={k.reference: k.local for k in kit_set.kits},
        git_identity=lambda: global_identity(ctx.env),
        ssh_agent_missing=lambda: host_agent(ctx.env)[1] or None,
        named=loaded.request.named)
    if template is not None:  # before the egress plan: no install phase either
        capabilities = dataclasses.replace(capabilities, lifecycle=dataclasses.replace(
            capabilities.lifecycle, install=()))
    egress = bind_credentials(composition, capabilities, state_home=ctx.state_home, env=ctx.env,
                              resolve_values=resolve_secrets)
    return WorkloadPlan(loaded, engine, image, image_tag, image_built, used, workspace_target,
                        exports, container_env, composition, capabilities, egress, effective)


def _kit_image(ctx: AppContext, kit_set: KitSet, progress: ProgressFactory,
               labels: Mapping[str, str],
               ) -> tuple[ImageInfo, str, bool, tuple[ImageInfo, ...]]:
    """(image, tag, built, every image used) of the workload, with the mixins' layers
    assembled onto it."""
    driver: Images = ctx.driver
    workload = kit_set.workload
    locks = ctx.state_home / "locks"
    workload_image = ensure_kit_image(driver, workload.local, progress,
                                      workload.expanded.build_args, lock_dir=locks,
                                      home_hash=ctx.home_hash)
    mixin_images = [
        (kit.reference, ensure_kit_image(driver, kit.local, progress,
                                         kit.expanded.build_args, lock_dir=locks,
                                         home_hash=ctx.home_hash).image
         if kit.local.dockerfile_text is not None or kit.local.image is not None else None)
        for kit in kit_set.mixins
    ]
    used = (workload_image.image, *(image for _, image in mixin_images if image is not None))
    if not mixin_images:
        return workload_image.image, workload_image.tag, workload_image.built, used
    from sbx.domain.sandbox.assemble import assemble  # only compositions pay for the assembler

    assembled = assemble(driver, workload_image, mixin_images, progress,
                         workload_ref=workload.reference,
                         cache_dir=ctx.state_home / "cache" / "files", helper_labels=labels,
                         lock_dir=locks, home_hash=ctx.home_hash)
    return (assembled.image, assembled.tag, workload_image.built or assembled.built,
            (*used, assembled.image))


def env_pairs(env: Sequence[str]) -> Iterator[tuple[str, str]]:
    for item in env:
        key, sep, value = item.partition("=")
        if sep and key:
            yield key, value


# -- what explain and doctor add ---------------------------------------------------------------


def helper_labels(ctx: AppContext, run_id: str, kit_set: KitSet) -> dict[str, str]:
    """Labels for what a plan's build or assembly may create for a moment (removed at once;
    ``sbx gc`` finds it by these should sbx be killed in between)."""
    import time

    return label_keys.object_labels(
        home_hash=ctx.home_hash, run_id=run_id,
        deadline=math.ceil(time.time() + HELPER_DEADLINE_S),
        kits=[k.reference for k in kit_set.kits], role=label_keys.ROLE_HELPER)


def dry_plan(ctx: AppContext, request: WorkloadRequest, *,
             progress: ProgressFactory | None = None) -> WorkloadPlan:
    """``sbx run``'s planning for ``request`` without creating anything: what explain and
    doctor report. Raises the refusal ``sbx run`` would raise."""
    loaded = load(ctx, request)
    run_id = uuid.uuid4().hex
    return plan(ctx, loaded, run_id=run_id, progress=progress or quiet_progress,
                helper_labels=helper_labels(ctx, run_id, loaded.kit_set),
                resolve_secrets=False)


def planned_user(ctx: AppContext, planned: WorkloadPlan) -> SandboxUser | None:
    """The sandbox user ``sbx run`` would choose without --user and a workspace: the image's
    USER or the configured fallback. None when that needs the image's /etc/passwd, which only
    a (helper) container can read and no earlier run has cached: explain and doctor create
    no container, so ``sbx run`` resolves it."""
    user = planned.config.sandbox.user
    return known_user(planned.image, fallback_uid=user.value,
                      fallback_source=f"[sandbox] user ({user.source})",
                      cache_dir=ctx.state_home / "cache" / "images")


@contextmanager
def quiet_progress(_title: str) -> Iterator[Callable[[str], None]]:
    yield lambda _line: None


def explain_command(loaded: LoadedWorkload) -> str:
    """``sbx explain`` for exactly this request, runnable from any directory: absolute kit
    paths, every ``--arg``, the consent flag. The egress proxy's 403 body appends the
    request to it."""
    request = loaded.request
    kit_set = loaded.kit_set
    words = ["sbx", "explain", kit_argument(kit_set.workload)]
    for kit in kit_set.mixins:
        words += ["--kit", kit_argument(kit)]
    for item in request.args:
        words += ["--arg", item]
    if request.allow_privileged:
        words.append("--allow-privileged")
    return shlex.join(words)


def kit_argument(kit: LoadedKit) -> str:
    """How to name ``kit`` on a command line from anywhere: a registry kit by its reference,
    a local one by its absolute path (its descriptor file when that is what was named)."""
    local = kit.local
    if local.image is not None:
        return local.reference
    if Path(local.reference).suffix == ".yaml":
        return str(local.descriptor_file.absolute())
    return str(local.directory.absolute())


__all__ = ["LoadedWorkload", "WorkloadPlan", "WorkloadRequest", "detach_keys", "dry_plan",
           "env_pairs", "explain_command", "helper_labels", "kit_argument", "load", "plan",
           "planned_user", "quiet_progress", "selection", "timeout_ms"]
