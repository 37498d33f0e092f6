"""A planned run, executed: create, start, stream, wait or time out, and always remove.

Nothing exists before the plan (sbx.usecases.run.plan) passed every check; once something is
created, the ``finally`` of :func:`execute` removes it (sbx.usecases.run.cleanup) on every path.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import posixpath
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Final

from sbx.base.errors import MountBlocked, SbxError
from sbx.base.reasons import Reason
from sbx.domain.kits.types import SKILLS_STAGING
from sbx.domain.sandbox import runrecord
from sbx.domain.sandbox.hardening import BindMount, ContainerSpec, deadline_check
from sbx.domain.sandbox.mountrules import SOURCE_CHANGED
from sbx.domain.sandbox.observer import OBSERVER_PORT, observer_token, observer_url
from sbx.domain.sandbox.sources import Staging, mount_mismatches, staging_available
from sbx.seams import audit
from sbx.seams.engine import Driver
from sbx.seams.host import procfs
from sbx.seams.session.pump import Session, SessionEnd
from sbx.seams.session.stream import AttachedStream
from sbx.seams.signals import deferred_interrupts, raise_if_interrupted
from sbx.usecases import idlestop, runstore, workspace_check
from sbx.usecases.context import AppContext
from sbx.usecases.run.cleanup import Created, cleanup, created_ids
from sbx.usecases.run.kitmounts import kit_mount_targets
from sbx.usecases.run.plan import RunPlan
from sbx.usecases.run.request import NO_DEADLINE_S, OutputSink, RunRequest
from sbx.usecases.run.result import RunResult, selection
from sbx.usecases.run.rundir import audit_event, elapsed, open_run_dir
from sbx.usecases.run.session import OUTPUT_DRAIN_S, Terminal, TerminalOutput

OUTPUT_CAPTURE_BYTES: Final = 1024 * 1024  # per stream, under --json
DEADLINE_MARGIN_S: Final = 3  # the sandbox's own deadline trails sbx's by this much


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


def execute(ctx: AppContext, plan: RunPlan, request: RunRequest, on_output: OutputSink,
            on_warning: Callable[[str], None],
            on_notice: Callable[[str], None]) -> RunResult:
    driver = ctx.driver
    capture = _Capture() if request.capture_output else None
    # What reaches a terminal loses the sequences that act outside the screen (the install
    # hooks' output too); captured or piped output stays byte for byte.
    output = TerminalOutput(on_output, request.host, ctx.env,
                            passthrough=plan.terminal_passthrough)
    on_output = output.sink
    sink: OutputSink = capture if capture is not None else on_output
    run_dir = _open_run_dir(ctx, plan, request)
    created = Created()
    started = time.monotonic()
    cleanup_errors: list[str] = []
    finished: list[RunResult] = []
    try:
        container_id, stream = _create_sandbox(ctx, plan, driver, created, run_dir, on_output,
                                               on_warning)
        deadline = time.monotonic() + plan.timeout_s
        raise_if_interrupted()
        driver.start(container_id)
        if plan.name is not None:  # its keeper forwards its ports: said before any return
            _start_ports(driver, plan, created, container_id, run_dir, on_notice)
        if plan.name is not None and _keep_named(ctx, plan, request, created, container_id,
                                                 on_notice):
            return RunResult(plan.run_id, 0, time.monotonic() - started, plan)
        terminal = Terminal(request.host, tty=plan.mode.tty, raw=plan.mode.raw,
                            resize_to=lambda rows, columns: driver.resize(
                                container_id, rows=rows, columns=columns))
        terminal.resize()  # as soon as it runs: the workload may ask for its size at once
        if created.staging is None:
            _verify_mounts(driver, plan, container_id, on_warning)
        if plan.name is None:
            _start_ports(driver, plan, created, container_id, run_dir, on_notice)
        _audit_started(ctx, plan)
        session = terminal.session(stream, stdin=plan.mode.stdin, sink=sink,
                                   detach_keys=plan.detach_keys)
        exit_code, end = _session(driver, container_id, terminal, session, deadline,
                                  client=run_dir if plan.name is not None else None)
        if exit_code is None and plan.name is not None and end is SessionEnd.DETACHED:
            on_notice(f"detached from {plan.name}; it keeps running (`sbx attach "
                      f"{plan.name}` to return, `sbx stop {plan.name}` to stop it)")
            exit_code = 0
        if exit_code is None:
            _ended_early(ctx, plan, end, started)
        assert exit_code is not None  # noqa: S101 - _ended_early always raises
        audit_event(ctx, audit.SANDBOX_FINISHED, plan.run_id, "info",
                    {"exit_code": exit_code, "duration_s": elapsed(started)})
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
        output.end()  # a closed reader must not stop the cleanup
        # A signal here (a closing terminal sends SIGHUP twice) must not stop the removal
        # halfway: it is held back and raised once everything is gone.
        with deferred_interrupts():
            problems = cleanup(ctx, plan, driver, created, run_dir)
            _check_workspace(ctx, plan, created, finished[0] if finished else None,
                             on_warning)
        cleanup_errors.extend(problems)
        pending = sys.exc_info()[1]
        replacement = _say_what_is_left(pending, problems)
        if replacement is not None:
            raise replacement from pending


def _result(ctx: AppContext, plan: RunPlan, exit_code: int, started: float,
            created: Created, capture: _Capture | None, cleanup_errors: list[str],
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


def _open_run_dir(ctx: AppContext, plan: RunPlan, request: RunRequest) -> Path:
    """The run's directory; a named sandbox's with its idle stop (its keeper reads it once
    the container runs). ``--idle-stop`` without a name is refused first."""
    if plan.name is None and request.idle_stop_s is not None:
        raise SbxError(Reason.INVALID_ARGUMENT, "--idle-stop applies to a named sandbox: a "
                       "one-shot run ends with its session (--timeout bounds it)",
                       hint=f"sbx run --name NAME --idle-stop 30m {request.workload}")
    run_dir = open_run_dir(ctx, plan)
    if plan.name is not None:
        idlestop.write_settings(run_dir, idlestop.effective(
            request.idle_stop_s, ctx.load_config().sandbox.idle_stop.value))
    return run_dir


def _keep_named(ctx: AppContext, plan: RunPlan, request: RunRequest, created: Created,
                container_id: str, on_notice: Callable[[str], None]) -> bool:
    """A named sandbox that started is the sandbox's from now on (recorded, never removed by
    this run); True when it was started detached (nothing to attach to here)."""
    # Only a named sandbox records itself (with its kits' state) and has a keeper (whose proxy
    # start loads the egress plan and kit composition): not a one-shot run's path.
    from sbx.usecases.namedcreated import keep_created

    keep_created(ctx, plan, created_ids(created, container_id), request)
    created.kept = True
    if not request.detach:
        return False
    _audit_started(ctx, plan)
    on_notice(f"{plan.name} started; `sbx attach {plan.name}` to use it")
    return True


def _audit_started(ctx: AppContext, plan: RunPlan) -> None:
    skipped = selection(plan)["skipped"]
    audit_event(ctx, audit.SANDBOX_STARTED, plan.run_id, "info", {
        "workload": plan.facts.workload, "kits": plan.references,
        "image": plan.image_tag, "user": plan.spec.user,
        "workspace_access": plan.access, "privileged": plan.spec.privileged,
        "skipped": skipped, "session": plan.mode.as_dict(),
        "credentials": dict(plan.egress.modes) if plan.egress is not None else {},
        "explain": plan.explain_command})  # `sbx explain --last` reproduces the request
    for record in skipped:
        audit_event(ctx, audit.CAPABILITY_SKIPPED, plan.run_id, "info", record)


def _final_spec(ctx: AppContext, plan: RunPlan, boundary: Mapping[str, str],
                created: Created) -> ContainerSpec:
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
            created: Created) -> ContainerSpec:
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


def _staging(ctx: AppContext, plan: RunPlan, created: Created) -> Staging:
    if created.staging is None:
        created.staging = (Staging.for_named(ctx.home_hash, plan.name) if plan.name is not None
                           else Staging.for_run(ctx.home_hash, plan.run_id))
    return created.staging


def _kit_mount_binds(ctx: AppContext, plan: RunPlan, created: Created) -> list[BindMount]:
    """The kits' host directories for the install step (mounted before hooks), staged as the
    sandbox's are."""
    targets = kit_mount_targets(plan.capabilities)
    pins = [pin for pin in plan.host_mounts.pins if pin.target in targets]
    if not pins:
        return []
    if staging_available():
        staging = _staging(ctx, plan, created)
        binds = [BindMount(staging.stage(pin.source), pin.target, pin.read_only) for pin in pins]
    else:
        binds = [BindMount(pin.source.path, pin.target, pin.read_only) for pin in pins]
    # A destination that also takes bundled skills gets the store's skills as links at start;
    # the install hooks see the store there directly (read-only, the same opened source).
    # (Not where a kit's volume or host directory is mounted: the install step has that too.)
    caps = plan.capabilities
    storage = set() if caps is None else {posixpath.normpath(p) for p in (
        *(v.path for v in caps.volumes), *(m.path for m in caps.host_mounts))}
    bundles = [p for p in (caps.bundle_paths if caps is not None else ())
               if posixpath.normpath(p) not in storage]
    return binds + [BindMount(b.source, path, True) for b in binds if b.target == SKILLS_STAGING
                    for path in bundles]


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


def _check_workspace(ctx: AppContext, plan: RunPlan, created: Created,
                     result: RunResult | None, on_warning: Callable[[str], None]) -> None:
    """The after-run check of the writable host directories, once nothing writes them any
    more: the container is gone, or a kept named sandbox has stopped."""
    if not plan.workspace_baselines:
        return
    if created.kept and created.container is not None:
        with contextlib.suppress(SbxError):
            if ctx.driver.container_state(created.container) == "running":
                return  # checked when a later session with it ends, or at its stop
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


def _session(driver: Driver, container_id: str, terminal: Terminal, session: Session,
             deadline: float, *, client: Path | None = None) -> tuple[int | None, SessionEnd]:
    """Pump the session (the host terminal raw for its duration), then the exit status; None
    when the workload had to be stopped (deadline, detach, output closed). A named sandbox
    (``client``: its run directory, where this session counts as its client while it lasts:
    never idle) is left running on a detach or a closed reader."""
    keep = client is not None
    with idlestop.attached(client), terminal.live(session):
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


def _create_sandbox(ctx: AppContext, plan: RunPlan, driver: Driver, created: Created,
                    run_dir: Path, on_output: OutputSink,
                    on_warning: Callable[[str], None]) -> tuple[str, AttachedStream]:
    """Volumes, network and proxy, the create step, the container, its attach stream.

    Each object is recorded in the same breath as it is created: a signal in between is held
    back (sbx.seams.signals), so the cleanup always knows everything there is to remove.
    """
    raise_if_interrupted()  # a signal whose KeyboardInterrupt a library swallowed
    copied = None
    if plan.workspace_volume is not None and not plan.recreate:  # a recreation keeps it
        # Only a workspace volume (copied, or --clone's) loads its module; archived first, so
        # a workspace over its bound is refused before anything exists.
        from sbx.usecases.run import workspacecopy

        copied = workspacecopy.workspace_archive(plan)
    try:
        _create_volumes(ctx, plan, driver, created, run_dir)
        if plan.workspace_volume is not None:
            with deferred_interrupts():  # a kept one (a recreation's) is returned as it is
                made = driver.create_volume(plan.workspace_volume, plan.labels)
                if not plan.recreate:
                    created.volumes.append(made)
        if copied is not None:
            workspacecopy.fill(driver, plan, copied)
    finally:
        if copied is not None:
            copied.close()
    boundary: dict[str, str] = {}
    if plan.network is not None:
        # The egress proxy and the host firewall: only a run with a network loads them.
        from sbx.usecases.run.network import setup_network

        boundary = setup_network(ctx, plan, driver, created, run_dir, on_warning)
    if plan.run_image_tag is not None:
        # The create step's lifecycle and CA: only a run with a per-run image loads them.
        from sbx.usecases.run.createstep import create_step

        created.image = plan.run_image_tag  # removing one never committed is a no-op
        create_step(ctx, plan, driver, on_output, boundary, created.proxy, created.sized,
                    _kit_mount_binds(ctx, plan, created))
    raise_if_interrupted()
    with deferred_interrupts():
        container_id = driver.create(_final_spec(ctx, plan, boundary, created))
        created.container = container_id
    runstore.update(run_dir, container_id=container_id)
    # Attached before the start, so the stream holds every byte from the first.
    with deferred_interrupts():
        stream = driver.attach(container_id, stdin=plan.mode.stdin,
                               detach_keys=plan.detach_keys if plan.mode.tty else None)
        created.stream = stream
    if created.proxy is not None:
        created.proxy.wait_ready()  # a proxy beside the engine booted meanwhile
    return container_id, stream


def _create_volumes(ctx: AppContext, plan: RunPlan, driver: Driver, created: Created,
                    run_dir: Path) -> None:
    """The kits' volumes: a Docker volume each, or a file system of exactly its size."""
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


def _start_ports(driver: Driver, plan: RunPlan, created: Created, container_id: str,
                 run_dir: Path, on_notice: Callable[[str], None]) -> None:
    """Forward the kits' and -p ports: here for a one-shot run; a named sandbox's keeper
    already does (sbx.usecases.publishedports), and what it published is announced."""
    if plan.capabilities is None or plan.network is None:
        return
    # deferred: the port forwarder (the engine's proxy), for a run that publishes ports only
    from sbx.usecases import publishedports

    bindings = publishedports.bindings_of(plan.capabilities)
    if not bindings:
        return
    if plan.name is not None:
        published = publishedports.published_now(run_dir)
    else:
        address = driver.container_ip(container_id, plan.network)
        if address is None:  # the workload already finished
            return
        created.forwarder, published = publishedports.forward(address, bindings)
    publishedports.announce(published, on_notice)
    names = plan.capabilities.port_names
    token = observer_token(created.proxy_url)
    for port in published:
        if port.source == publishedports.KIT and names.get(port.container_port) == OBSERVER_PORT \
                and token is not None:
            on_notice("browser observer (opens once, for one browser): "
                      f"{observer_url(port.host, port.host_port, token)}")


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
    audit_event(ctx, audit.SANDBOX_FINISHED, plan.run_id, "warning", {
        "reason": reason.value, "duration_s": elapsed(started)})
    raise SbxError(reason, message,
                   details={"run_id": plan.run_id, "timeout_s": plan.timeout_s})


__all__ = ["execute"]
