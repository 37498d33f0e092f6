"""`sbx run --name`: create the sandbox, or start it (if stopped) exactly as it was created."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sbx.base.errors import MountBlocked, SbxError
from sbx.base.reasons import Reason
from sbx.domain.credentials.secrets import SecretStore, resolve_for_run
from sbx.domain.kits.sessions import SessionAsk, parse_ids
from sbx.domain.sandbox import runrecord
from sbx.domain.sandbox.records import SandboxRecord, check_name
from sbx.domain.sandbox.runtimes import RuntimeChoice, check_runtime
from sbx.domain.sandbox.sources import Staging, mount_mismatches, staging_available
from sbx.seams import owned, ports
from sbx.seams.host import firewall, procfs
from sbx.seams.session.mode import decide_mode
from sbx.seams.signals import deferred_interrupts
from sbx.usecases import idlestop, keeper, publishedports, workspace_check
from sbx.usecases.context import AppContext
from sbx.usecases.named.admit import admit_recorded
from sbx.usecases.named.listing import load_named, owned_objects
from sbx.usecases.named.session import attach, exec_in
from sbx.usecases.named.sessions import SessionList, recorded_adapter, recorded_argv
from sbx.usecases.namedfollow import follow
from sbx.usecases.namedrecord import (
    CREATION_OPTIONS,
    creation_options,
    hold_creation,
    release_creation,
)
from sbx.usecases.run.request import NO_HOST_STREAMS, OutputSink, ProgressFactory, RunRequest
from sbx.usecases.run.result import RunResult
from sbx.usecases.run.start import run_new
from sbx.usecases.sandboxstore import SandboxStore

if TYPE_CHECKING:
    from sbx.domain.sandbox.admission import Admission
    from sbx.seams.engine import Driver
    from sbx.usecases.kitgate import Confirm as ConfirmKits
    from sbx.usecases.namedkits import Confirm as ConfirmFollow


def run_named(ctx: AppContext, request: RunRequest, *, on_output: OutputSink,
              progress: ProgressFactory, on_warning: Callable[[str], None],
              on_notice: Callable[[str], None],
              confirm_kits: ConfirmKits | None = None,
              confirm_follow: ConfirmFollow | None = None) -> RunResult:
    name = check_name(request.name or "")
    store = SandboxStore(ctx.state_home)
    hold_creation(store, name)
    try:
        record = store.load(name)
        if record is None:
            if owned_objects(ctx, name, recorded_only=True):
                raise SbxError(Reason.INVALID_ARGUMENT,
                               f"objects of a sandbox named {name} exist without its record",
                               hint=f"Remove them with `sbx rm -f {name}` and create it again.")
            if request.recreate:
                raise SbxError(Reason.INVALID_ARGUMENT, f"no sandbox named {name} to recreate",
                               hint=f"Create it: sbx run --name {name} WORKLOAD ...")
            return run_new(ctx, request, on_output=on_output, progress=progress,
                           on_warning=on_warning, on_notice=on_notice,
                           confirm_kits=confirm_kits)
        if request.recreate:
            # The kits decoded and composed again: only --recreate makes a container anew.
            from sbx.usecases.recreate import recreate

            return recreate(ctx, record, request, on_output=on_output, progress=progress,
                            on_warning=on_warning, on_notice=on_notice,
                            confirm_kits=confirm_kits)
        _refuse_creation_options(request, record)
        started = time.monotonic()

        def starting() -> bool:
            started_now = _start(ctx, record, on_warning, accept=request.accept,
                                 confirm=confirm_follow, on_notice=on_notice)
            release_creation(name)
            return started_now

        if request.detach:
            starting()
            on_notice(f"{name} is running; `sbx attach {name}` to use it")
            return RunResult(record.run_id, 0, time.monotonic() - started, None, name=name)
        # attached before it starts, as `docker start -ai`: a short workload's output is kept
        code = attach(ctx, name, request.host, on_output=on_output, on_warning=on_warning,
                      on_notice=on_notice, interactive=request.interactive,
                      terminal_passthrough=request.terminal_passthrough, starting=starting)
    finally:
        release_creation(name)
    return RunResult(record.run_id, code, time.monotonic() - started, None, name=name)


def start_named(ctx: AppContext, word: str, *, on_warning: Callable[[str], None],
                on_notice: Callable[[str], None], accept: bool = False,
                confirm: ConfirmFollow | None = None) -> tuple[str, bool]:
    """`sbx start NAME`: a stopped named sandbox started as it was created, through the same
    admission (sbx.usecases.named.admit) and kit follow-up as `sbx run --name NAME`; its
    workload is not given again. Returns the name and whether it was started (False: it was
    running already)."""
    name = load_named(ctx, word, command="sbx start").name
    store = SandboxStore(ctx.state_home)
    hold_creation(store, name)
    try:
        record = store.load(name)
        if record is None:
            raise SbxError(Reason.INVALID_ARGUMENT, f"no sandbox named {name}",
                           hint="`sbx ls` lists them.")
        was = ctx.driver.container_state(record.container_id or "")
        _start(ctx, record, on_warning, accept=accept, confirm=confirm, on_notice=on_notice)
    finally:
        release_creation(name)
    return name, was != "running"


def exec_started(ctx: AppContext, word: str, argv: Sequence[str], host: Any, *,
                 env: Sequence[str], interactive: bool | None, tty: bool | None,
                 on_output: OutputSink, on_warning: Callable[[str], None],
                 on_notice: Callable[[str], None], terminal_passthrough: bool = False) -> int:
    """`sbx exec`: a stopped sandbox is started first (as `sbx start` does, and said on
    stderr), as Docker's sbx does; then the command runs in it."""
    if not argv:
        raise SbxError(Reason.INVALID_ARGUMENT, "sbx exec needs a command after `--`",
                       hint=f"e.g. sbx exec {word} -- sh")
    record = load_named(ctx, word, command="sbx exec")
    if ctx.driver.container_state(record.container_id or "") != "running":
        name, _ = start_named(ctx, record.name, on_warning=on_warning, on_notice=on_notice)
        on_notice(f"{name} was stopped: started it for this command "
                  f"(`sbx stop {name}` stops it again)")
    return exec_in(ctx, record.name, argv, host, env=env, interactive=interactive, tty=tty,
                   on_output=on_output, on_warning=on_warning,
                   terminal_passthrough=terminal_passthrough)


def run_verb_named(ctx: AppContext, request: RunRequest, *, on_output: OutputSink,
                   progress: ProgressFactory, on_warning: Callable[[str], None],
                   on_notice: Callable[[str], None], confirm_kits: ConfirmKits | None = None,
                   confirm_follow: ConfirmFollow | None = None) -> int:
    """`sbx run NAME… --prompt|--resume|--continue`: the verb as a process of the named
    sandbox (sbx.usecases.named.sessions), which is created first when missing (left running,
    its own workload not attached) and started when stopped."""
    ask = request.session
    assert ask is not None and request.name is not None  # noqa: S101 - the entry checks
    name = check_name(request.name)
    if request.command is not None:
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"{ask.flag} and a command after `--` both say what the agent runs",
                       hint=f"Give one, or run a command in it: sbx exec {name} -- CMD ...")
    existing = SandboxStore(ctx.state_home).load(name)
    if existing is not None:
        _refuse_creation_options(request, existing)
    else:
        run_named(ctx, dataclasses.replace(request, session=None, detach=True),
                  on_output=on_output, progress=progress, on_warning=on_warning,
                  on_notice=on_notice, confirm_kits=confirm_kits, confirm_follow=confirm_follow)
    record = _running(ctx, name, on_warning, on_notice)
    tty = request.tty
    if tty is None and ask.verb == "prompt":
        tty = False  # headless: the output as the agent wrote it, byte for byte
    terminal = decide_mode(interactive=request.interactive, tty=tty, capture=False,
                           host=request.host).tty
    env = request.env
    if ask.verb == "acp":  # the adapter's variables pass the same admission as -e's
        adapter = recorded_adapter(record)
        argv, env = adapter.command, (*env, *(f"{k}={v}" for k, v in adapter.env.items()))
    else:
        argv = recorded_argv(record, ask, terminal=terminal)
    return exec_in(ctx, name, argv, request.host, env=env,
                   interactive=request.interactive, tty=tty, on_output=on_output,
                   on_warning=on_warning, terminal_passthrough=request.terminal_passthrough)


def list_sessions(ctx: AppContext, word: str, *, on_output: OutputSink,
                  on_warning: Callable[[str], None],
                  on_notice: Callable[[str], None]) -> SessionList:
    """Run the workload's list verb in the sandbox and read its stdout as ids; its stderr is
    passed on as the agent wrote it."""
    record = load_named(ctx, word, command="sbx sessions")
    record = _running(ctx, record.name, on_warning, on_notice)
    command = recorded_argv(record, SessionAsk("list"), terminal=False)
    out = bytearray()

    def collect(stream: str, chunk: bytes | memoryview) -> None:
        if stream == "stdout":
            if len(out) < 16 * 1024 * 1024:  # bounded: ids, not a transcript
                out.extend(chunk)
        else:
            on_output(stream, chunk)

    code = exec_in(ctx, record.name, command, NO_HOST_STREAMS, env=(), interactive=False,
                   tty=False, on_output=collect, on_warning=on_warning)
    return SessionList(record.name, tuple(parse_ids(bytes(out))), command, code)


def _running(ctx: AppContext, name: str, on_warning: Callable[[str], None],
             on_notice: Callable[[str], None]) -> SandboxRecord:
    record = load_named(ctx, name, command="sbx sessions")
    if ctx.driver.container_state(record.container_id or "") != "running":
        start_named(ctx, record.name, on_warning=on_warning, on_notice=on_notice)
        on_notice(f"{record.name} was stopped: started it for this session "
                  f"(`sbx stop {record.name}` stops it again)")
    return record


def _refuse_creation_options(request: RunRequest, record: SandboxRecord) -> None:
    """Creation-only options may be given again only with the values the sandbox was created
    with (running the same command twice is fine); any other value is refused by name."""
    recorded = record.request.get("options") or {}
    given = [CREATION_OPTIONS[field_name] for field_name, value
             in creation_options(request).items() if recorded.get(field_name) != value]
    if request.workload != record.workload:
        given.insert(0, f"WORKLOAD {request.workload} (created with {record.workload})")
    if given:
        raise SbxError(
            Reason.INVALID_ARGUMENT,
            f"{record.name} exists; these options only apply when a sandbox is created: "
            + ", ".join(given),
            hint=f"Run `sbx run --name {record.name} {record.workload}` without them, or "
                 f"`sbx rm {record.name}` and create it again with them.",
            details={"options": given})


def _start(ctx: AppContext, record: SandboxRecord, on_warning: Callable[[str], None], *,
           accept: bool = False, confirm: ConfirmFollow | None = None,
           on_notice: Callable[[str], None] = lambda _text: None) -> bool:
    """Start a stopped sandbox as created, with what its kits changed since that it can take
    (sbx.usecases.namedkits), after admitting it; a running one is left as it is (False)."""
    driver = ctx.driver
    if record.container_id is None:
        raise SbxError(Reason.STATE_CORRUPT, f"{record.name}'s record names no container",
                       hint=f"`sbx rm -f {record.name}` and create it again.")
    state = driver.container_state(record.container_id)
    if state is None:
        raise SbxError(Reason.STATE_CORRUPT, f"{record.name}'s container is gone",
                       hint=f"`sbx rm -f {record.name}` and create it again.")
    if state == "running":
        return False
    runtime = record.request.get("runtime")
    if isinstance(runtime, str):  # the engine may have lost it while the sandbox was stopped
        check_runtime(driver.info(), RuntimeChoice(
            runtime, f"the named sandbox {record.name}", named=record.name))
    _restarting_workspace(ctx, record, on_warning)
    admission = admit_recorded(ctx, record)
    try:
        follow(ctx, record, accept=accept, confirm=confirm, on_notice=on_notice,
               on_warning=on_warning)
        unstaged = _restage(ctx, record, admission)
        run_dir = runrecord.run_dir(ctx.state_home, record.run_id)
        options = record.request.get("options")
        idlestop.write_settings(run_dir, idlestop.effective(  # before its keeper watches
            options.get("idle_stop_s") if isinstance(options, dict) else None,
            ctx.load_config().sandbox.idle_stop.value))
        _network_again(ctx, record, on_warning)
        with deferred_interrupts():
            driver.start(record.container_id)
        keeper.ensure_idle_keeper(run_dir, record.run_id, ctx.env)
        if unstaged:
            _verify(driver, record.container_id, unstaged)
    finally:
        admission.close()
    return True


def _restage(ctx: AppContext, record: SandboxRecord,
             admission: Admission) -> list[tuple[str, Any]]:
    """As root, stage the admitted host paths (and mount the volume file systems) at the same
    points as at creation; without root, the (target, source) pairs to verify after the
    start."""

    pins = admission.mounts.pins
    by_path: dict[str, Any] = {pin.source.path: pin.source for pin in pins}
    log = record.request.get("staging") or []
    if not log or not staging_available():
        return [(pin.target, pin.source) for pin in pins]
    staging = Staging.for_named(ctx.home_hash, record.name)
    held = staging.mounted_filesystems(log)  # a volume still mounted from its file stays
    problems = staging.release(keep=held)
    if problems:
        raise SbxError(Reason.CREATE_FAILED, "; ".join(problems))
    for index, entry in enumerate(log):
        if entry.get("kind") == "fs":
            staging.remount_filesystem(Path(str(entry["image"])),
                                       held=staging.directory / str(index) in held)
        else:
            staged = by_path.get(str(entry.get("path")))
            if staged is None:
                raise MountBlocked(f"{entry.get('path')} is no longer one of the sandbox's "
                                   "mounts (rule source_changed)", rule="source_changed",
                                   path=str(entry.get("path")))
            staging.stage(staged)
    return []


def _network_again(ctx: AppContext, record: SandboxRecord,
                   on_warning: Callable[[str], None]) -> None:
    """The bridge's firewall rules (they do not survive a host reboot) and the proxy's keeper,
    with the secrets resolved again for this start (a host variable, a host command, the OS
    keyring: as for a one-shot run, never kept on disk). A recorded proxy port someone else
    took while the sandbox was stopped is redirected to the proxy's new one (as root), or
    the start is refused with the way out."""
    bridge = record.request.get("bridge")
    if not bridge or record.network is None:
        return

    run_dir = runrecord.run_dir(ctx.state_home, record.run_id)
    port: tuple[int, ...] = ()
    gateway = None
    redirect = None
    wanted = publishedports.read_wanted(run_dir)
    if wanted is not None:  # its keeper forwards them; a held -p host port refuses the start
        keeper.stop_keeper(run_dir, record.run_id, wait_s=keeper.STOP_WAIT_S)  # a stale one
        ports.check_free(wanted[1])
    if record.request.get("proxy"):
        secrets = _start_secrets(ctx, record, run_dir)
        gateway = ctx.driver.network_gateway(record.network)
        kept = keeper.restart_kept_proxy(run_dir, record.run_id, secrets)
        port = (kept.port,)
        dialled = keeper.recorded_port(run_dir)
        if dialled is not None and dialled != kept.port:
            redirect = (dialled, kept.port)
    elif wanted is not None:
        keeper.start_port_keeper(run_dir, record.run_id)
    guard = firewall.BridgeGuard(str(bridge), record.run_id, allow_tcp_ports=port,
                                 proxy_address=gateway, redirect=redirect)
    gap = guard.ensure()
    if gap and redirect is not None:
        keeper.stop_keeper(run_dir, record.run_id)
        raise SbxError(
            Reason.PROXY_FAILED,
            f"{record.name}'s egress proxy port {redirect[0]} on {gateway} (which the "
            "sandbox's environment names) is taken by another process, and sbx cannot "
            f"redirect it to a free port without the host firewall ({gap})",
            hint=f"Free that port (`ss -ltnp 'sport = :{redirect[0]}'` names who holds it), "
                 f"run sbx as root so it can redirect the port, or `sbx rm {record.name}` and "
                 "create the sandbox again.",
            details={"port": redirect[0], "address": gateway})
    if gap:
        on_warning(gap)


def _start_secrets(ctx: AppContext, record: SandboxRecord, run_dir: Path) -> dict[str, str]:
    """The secrets this start hands the keeper: those not in the file store, resolved now; a
    required one that cannot be had refuses the start (``credential_unbound``)."""
    recorded = record.request.get("credentials")
    if isinstance(recorded, dict):
        wanted = [_Needed(str(s), bool(optional)) for s, optional in recorded.items()]
    else:  # created before the record kept them: every API-key credential of its proxy
        try:  # the run's own config only (sbx.seams.owned)
            raw = owned.read_bytes(run_dir / "proxy.json", max_bytes=16 * 1024 * 1024)
            config = json.loads(raw or b"{}")
            wanted = [_Needed(str(c["service"]), False) for c in config.get("credentials", [])
                      if c.get("domains")]
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            wanted = []
    return dict(resolve_for_run(SecretStore(ctx.state_home), wanted, ctx.env).provided)


@dataclass(frozen=True)
class _Needed:
    service: str
    optional: bool


def _verify(driver: Driver, container_id: str, pins: Sequence[tuple[str, Any]]) -> None:
    pid = driver.container_pid(container_id)
    try:
        container = procfs.mountinfo(pid) if pid else ""
        host = procfs.mountinfo()
    except OSError:
        return
    problems = mount_mismatches(pins, container, host) if container else []
    if problems:
        driver.stop(container_id, 0)
        raise MountBlocked("a host path changed while the sandbox was stopped; it was stopped "
                           "again: " + "; ".join(problems) + " (rule source_changed)",
                           rule="source_changed", path=pins[0][1].path)


def _restarting_workspace(ctx: AppContext, record: SandboxRecord,
                          on_warning: Callable[[str], None]) -> None:
    run_dir = runrecord.run_dir(ctx.state_home, record.run_id)
    try:
        workspace_check.restarting(ctx, run_dir, record.run_id, on_warning)
    except (OSError, SbxError) as error:
        on_warning(f"{record.name}'s workspace could not be checked before its start "
                   f"({error}); review it before you run git or other tools there")
