"""`sbx run`: check everything, build, run one hardened sandbox, and always clean up.

Order (SPEC §2.1): config → kits (strict) → selection → mounts → engine → image → user → create
→ start → stream → wait/timeout → remove. Nothing is created before every check passed; once
something is created, the ``finally`` in :func:`_execute` removes it on every path (success,
failure, timeout, Ctrl-C, engine error). What a hard kill leaves behind is ``sbx gc``'s job,
found by the labels every object carries.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from sbx import audit
from sbx import labels as label_keys
from sbx.config import Config
from sbx.context import AppContext
from sbx.core.images import SandboxUser, ensure_kit_image, resolve_user
from sbx.driver import Driver, EngineInfo, ImageInfo
from sbx.errors import SbxError
from sbx.hardening import (
    DEFAULT_WORKSPACE,
    BindMount,
    ContainerSpec,
    Limits,
    build_spec,
    hardening_violations,
)
from sbx.kits.local import LocalKit, load_local_kit
from sbx.kits.selection import Selection, member_types, refuse_unsupported, select
from sbx.mounts import MountPolicy, check_mount, check_source, parse_mount_flag
from sbx.reasons import Reason

# Capability types this sbx implements. Until the kits issue lands, none: every required
# capability is refused by type name, every optional one is skipped and recorded.
SUPPORTED_CAPABILITIES: Final[frozenset[str]] = frozenset()
ACCESS_MODES: Final = ("none", "ro", "rw")
OUTPUT_CAPTURE_BYTES: Final = 1024 * 1024  # per stream, under --json
OUTPUT_DRAIN_S: Final = 5.0


@dataclass(frozen=True)
class RunRequest:
    workload: str
    workspace: str | None = None
    access: str | None = None
    mounts: tuple[str, ...] = ()
    timeout_s: float | None = None
    command: tuple[str, ...] | None = None
    capture_output: bool = False


@dataclass(frozen=True)
class RunPlan:
    """Everything decided before the engine is asked to create anything."""

    run_id: str
    kit: LocalKit
    config: Config
    selection: Selection
    image: ImageInfo
    image_tag: str
    image_built: bool
    user: SandboxUser
    spec: ContainerSpec
    timeout_s: float
    deadline: int
    workspace_target: str
    workspace_host: str | None
    access: str
    warnings: tuple[str, ...] = ()


@dataclass
class RunResult:
    run_id: str
    exit_code: int
    duration_s: float
    plan: RunPlan
    stdout: bytes = b""
    stderr: bytes = b""
    truncated: bool = False
    cleanup_errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        plan = self.plan
        data: dict[str, Any] = {
            "run_id": self.run_id,
            "exit_code": self.exit_code,
            "duration_s": round(self.duration_s, 3),
            "workload": plan.kit.reference,
            "image": plan.image_tag,
            "image_built": plan.image_built,
            "user": f"{plan.user.uid}:{plan.user.gid}",
            "workspace": {"target": plan.workspace_target, "host": plan.workspace_host,
                          "access": plan.access},
            "timeout_s": plan.timeout_s,
            "selection": plan.selection.as_dict(),
            "warnings": list(plan.warnings),
        }
        if self.stdout or self.stderr or self.truncated:
            data["stdout"] = self.stdout.decode("utf-8", "replace")
            data["stderr"] = self.stderr.decode("utf-8", "replace")
            data["output_truncated"] = self.truncated
        return data


OutputSink = Callable[[str, bytes], None]
ProgressFactory = Callable[[str], Any]


def run(ctx: AppContext, request: RunRequest, *, on_output: OutputSink,
        progress: ProgressFactory,
        on_warning: Callable[[str], None] = lambda _text: None) -> RunResult:
    run_id = uuid.uuid4().hex
    try:
        plan = prepare(ctx, request, run_id, progress)
    except SbxError as error:
        _audit(ctx, audit.SANDBOX_UNAVAILABLE, run_id, "warning",
               {"reason": error.reason.value, "workload": request.workload})
        raise
    for warning in plan.warnings:
        on_warning(warning)
    return _execute(ctx, plan, request, on_output)


# -- preparation: every check, nothing created ---------------------------------------------


def prepare(ctx: AppContext, request: RunRequest, run_id: str,
            progress: ProgressFactory) -> RunPlan:
    if os.name != "posix":
        raise SbxError(Reason.UNSUPPORTED_PLATFORM, f"sbx runs on unix hosts, not {os.name}")
    config = ctx.load_config()
    if request.timeout_s is not None:
        config = config.with_sandbox_override(
            "timeout_ms", _timeout_ms(request.timeout_s), "flag --timeout")
    kit = load_local_kit(request.workload, cwd=ctx.cwd,
                         cache_dir=ctx.state_home / "cache" / "descriptors")
    if kit.descriptor.kind != "workload":
        raise SbxError(
            Reason.KIT_INCOHERENT,
            f"{kit.reference} is a {kit.descriptor.kind} kit; a composition needs exactly one "
            "kind: workload base",
            hint="Pass a workload kit as WORKLOAD (mixins compose on top of one).")
    selection = select(kit.reference, kit.descriptor.capabilities, SUPPORTED_CAPABILITIES)
    refuse_unsupported(selection, member_types(kit.descriptor.capabilities))

    access = _access(request)
    policy = MountPolicy.for_host(ctx.env, state_home=ctx.state_home,
                                  extra_blocked=config.mounts.blocked.value,
                                  allowed_roots=config.mounts.allowed_roots.value)
    workspace_host = _workspace_source(ctx, policy, request, access)
    mount_requests = [parse_mount_flag(text) for text in request.mounts]

    driver = ctx.driver
    _check_engine(driver.info())
    kit_image = ensure_kit_image(driver, kit, progress)
    image = kit_image.image
    workspace_target = image.workdir or DEFAULT_WORKSPACE
    extra_binds = [
        _bind(check_mount(policy, mount, reserved_targets={workspace_target}))
        for mount in mount_requests
    ]
    _refuse_duplicate_targets(extra_binds)
    timeout_s = config.sandbox.timeout_ms.value / 1000
    deadline = math.ceil(time.time() + timeout_s)
    helper_labels = label_keys.object_labels(
        home_hash=ctx.home_hash, run_id=run_id, deadline=deadline,
        kits=[kit.reference], role=label_keys.ROLE_HELPER)
    user = resolve_user(driver, image, fallback_uid=config.sandbox.user.value,
                        fallback_source=f"[sandbox] user ({config.sandbox.user.source})",
                        cache_dir=ctx.state_home / "cache" / "users",
                        helper_labels=helper_labels)
    command = request.command
    if command is None and not image.entrypoint and not image.cmd:
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"{kit.reference}'s image has no ENTRYPOINT or CMD and no command was "
                       "given after `--`", hint="Add CMD to the dockerfile, or pass `-- CMD...`.")
    limits = _limits(config)
    spec = build_spec(
        image=image.id,
        uid=user.uid,
        gid=user.gid,
        limits=limits,
        workspace_target=workspace_target,
        workspace_bind=(BindMount(workspace_host, workspace_target, access == "ro")
                        if workspace_host else None),
        extra_binds=extra_binds,
        command=command,
        entrypoint=None,
        env={"SBX_RUN_ID": run_id},
        labels={**helper_labels, label_keys.ROLE: label_keys.ROLE_SANDBOX},
    )
    violations = hardening_violations(spec, limits)
    if violations:  # pragma: no cover - build_spec cannot produce these; a guard against drift
        raise SbxError(Reason.CREATE_FAILED, "refusing an unhardened container: "
                       + "; ".join(violations))
    warnings = _workspace_warnings(workspace_host, access, user)
    return RunPlan(run_id=run_id, kit=kit, config=config, selection=selection, image=image,
                   image_tag=kit_image.tag, image_built=kit_image.built, user=user, spec=spec,
                   timeout_s=timeout_s, deadline=deadline, workspace_target=workspace_target,
                   workspace_host=workspace_host, access=access, warnings=warnings)


def _workspace_warnings(host: str | None, access: str, user: SandboxUser) -> tuple[str, ...]:
    """Say up front when the sandbox user will not be able to write its rw workspace.

    The workspace is mounted as it is on the host (sbx never chowns a user's directory), so a
    directory owned by someone else is read-only in practice; better to say so than to let the
    agent discover it halfway through its task.
    """
    if host is None or access != "rw":
        return ()
    stat = os.stat(host)
    writable = (
        (stat.st_uid == user.uid and stat.st_mode & 0o200)
        or (stat.st_gid == user.gid and stat.st_mode & 0o020)
        or stat.st_mode & 0o002
    )
    if writable:
        return ()
    return (f"workspace {host} is owned by {stat.st_uid}:{stat.st_gid} with mode "
            f"{stat.st_mode & 0o777:o}; the sandbox user {user.uid}:{user.gid} cannot write "
            "to it (chown it, or pass --access ro to make that explicit)",)


def _timeout_ms(seconds: float) -> int:
    if not math.isfinite(seconds) or seconds <= 0:
        raise SbxError(Reason.INVALID_ARGUMENT, f"--timeout must be a positive number of "
                       f"seconds, not {seconds}")
    return max(1, math.ceil(seconds * 1000))


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


def _bind(mount: Any) -> BindMount:
    return BindMount(str(mount.source), mount.target, mount.read_only)


def _refuse_duplicate_targets(binds: list[BindMount]) -> None:
    seen: set[str] = set()
    for bind in binds:
        if bind.target in seen:
            raise SbxError(Reason.MOUNT_BLOCKED,
                           f"two mounts target {bind.target} (rule duplicate_target)",
                           details={"rule": "duplicate_target", "path": bind.target})
        seen.add(bind.target)


def _check_engine(info: EngineInfo) -> None:
    if info.os and info.os != "linux":
        raise SbxError(Reason.UNSUPPORTED_PLATFORM,
                       f"the engine runs {info.os} containers; sbx needs a Linux engine")
    # Rootless engines apply limits only on cgroup v2 with delegation; on v1 they silently
    # ignore them, which would make every limit a lie (PEERS A.4).
    if info.rootless and info.cgroup_version == "1":
        raise SbxError(
            Reason.RESOURCE_LIMITS_UNENFORCED,
            "the engine is rootless on cgroup v1: memory, pids and cpu limits would not be "
            "enforced", hint="Use a rootful engine or cgroup v2 with delegation.",
            details={"limits": ["memory", "pids", "cpu"]})


def _limits(config: Config) -> Limits:
    sandbox = config.sandbox
    return Limits(memory_bytes=sandbox.memory_bytes.value, pids=sandbox.pids.value,
                  cpu_millis=sandbox.cpu_millis.value, tmp_bytes=sandbox.tmp_bytes.value,
                  workspace_bytes=sandbox.workspace_bytes.value)


# -- execution: create, stream, wait, always remove -----------------------------------------


class _Capture:
    """Bounded capture of a workload's output for the --json envelope."""

    def __init__(self) -> None:
        self.parts: dict[str, bytearray] = {"stdout": bytearray(), "stderr": bytearray()}
        self.truncated = False

    def __call__(self, stream: str, chunk: bytes) -> None:
        buffer = self.parts[stream]
        room = OUTPUT_CAPTURE_BYTES - len(buffer)
        if room < len(chunk):
            self.truncated = True
        buffer.extend(chunk[:max(room, 0)])


def _execute(ctx: AppContext, plan: RunPlan, request: RunRequest,
             on_output: OutputSink) -> RunResult:
    driver = ctx.driver
    capture = _Capture() if request.capture_output else None
    sink: OutputSink = capture if capture is not None else on_output
    run_dir = _write_run_dir(ctx, plan)
    container_id: str | None = None
    started = time.monotonic()
    cleanup_errors: list[str] = []
    try:
        container_id = driver.create(plan.spec)
        _update_run_dir(run_dir, container_id)
        driver.start(container_id)
        reader = _start_reader(driver, container_id, sink)
        _audit(ctx, audit.SANDBOX_STARTED, plan.run_id, "info", {
            "workload": plan.kit.reference, "image": plan.image_tag,
            "user": plan.spec.user, "workspace_access": plan.access,
            "skipped": [r.as_dict() for r in plan.selection.skipped]})
        for record in plan.selection.skipped:
            _audit(ctx, audit.CAPABILITY_SKIPPED, plan.run_id, "info", record.as_dict())
        exit_code = driver.wait(container_id, plan.timeout_s)
        if exit_code is None:
            driver.kill(container_id)
            reader.join(OUTPUT_DRAIN_S)
            _audit(ctx, audit.SANDBOX_FINISHED, plan.run_id, "warning", {
                "reason": Reason.TIMEOUT.value, "duration_s": _elapsed(started)})
            raise SbxError(Reason.TIMEOUT,
                           f"the workload ran past its time limit of {plan.timeout_s:g}s and "
                           "was killed",
                           details={"run_id": plan.run_id, "timeout_s": plan.timeout_s})
        reader.join(OUTPUT_DRAIN_S)
        _audit(ctx, audit.SANDBOX_FINISHED, plan.run_id, "info",
               {"exit_code": exit_code, "duration_s": _elapsed(started)})
        result = RunResult(plan.run_id, exit_code, time.monotonic() - started, plan)
        if capture is not None:
            result.stdout = bytes(capture.parts["stdout"])
            result.stderr = bytes(capture.parts["stderr"])
            result.truncated = capture.truncated
        result.cleanup_errors = cleanup_errors
        return result
    finally:
        cleanup_errors.extend(_cleanup(ctx, plan, driver, container_id, run_dir))


def _start_reader(driver: Driver, container_id: str, sink: OutputSink) -> threading.Thread:
    # Opened in this thread, so an engine error surfaces here rather than being lost.
    chunks = driver.output(container_id)

    def pump() -> None:
        try:
            for stream, chunk in chunks:
                sink(stream, chunk)
        except SbxError:
            # The container went away under us (killed, removed); the wait reports why.
            return

    thread = threading.Thread(target=pump, name=f"sbx-output-{container_id[:12]}", daemon=True)
    thread.start()
    return thread


def _cleanup(ctx: AppContext, plan: RunPlan, driver: Driver, container_id: str | None,
             run_dir: Path) -> list[str]:
    errors: list[str] = []
    if container_id is not None:
        try:
            driver.remove_container(container_id)
        except SbxError as error:
            errors.append(str(error))
    if not errors:
        shutil.rmtree(run_dir, ignore_errors=True)
    if errors:
        _audit(ctx, audit.CLEANUP_FAILED, plan.run_id, "warning",
               {"reason": "container_remove_failed", "count": len(errors)})
    return errors


def _write_run_dir(ctx: AppContext, plan: RunPlan) -> Path:
    """Per-run state under the state home: lets gc and explain find what a crash left."""
    run_dir = ctx.state_home / "runs" / plan.run_id
    run_dir.mkdir(parents=True, mode=0o700)
    (run_dir / "run.json").write_text(json.dumps({
        "run_id": plan.run_id, "pid": os.getpid(), "deadline": plan.deadline,
        "workload": plan.kit.reference, "image": plan.image_tag, "container_id": None,
    }), encoding="utf-8")
    return run_dir


def _update_run_dir(run_dir: Path, container_id: str) -> None:
    path = run_dir / "run.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["container_id"] = container_id
    path.write_text(json.dumps(data), encoding="utf-8")


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


__all__ = ["ACCESS_MODES", "SUPPORTED_CAPABILITIES", "RunPlan", "RunRequest", "RunResult",
           "prepare", "run"]
