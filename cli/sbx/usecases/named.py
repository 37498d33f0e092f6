"""Named sandboxes: created once, started, attached, stopped and removed by name.

``sbx run --name NAME WORKLOAD ...`` creates the sandbox when it does not exist (the same
preparation, checks and hardened shape as a one-shot run: :func:`sbx.usecases.run.start.run_new`)
and keeps it afterwards; when it exists, it is started (if stopped) exactly as it was created and
attached. Options that only make sense at creation (kits, args, workspace, mounts, user, limits,
environment) are refused on a later run, naming the option, never silently ignored.

What persists across stop/start: HOME (a volume of its own: as root a file system of
``[sandbox] home_bytes``, else a Docker volume the engine cannot bound — said in ``sbx ls``),
the ``volume@1`` volumes, the workspace (the host's). The root file system stays read-only and
the container is the same hardened container on every start. Its egress proxy is owned by a
detached keeper (sbx.usecases.keeper) and stops with the sandbox. On every start the host paths it
mounts are checked and opened again (and, as root, staged again at the same points), so a
path swapped while the sandbox was stopped is caught like at creation.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sbx.base import labels as label_keys
from sbx.base.errors import MountBlocked, SbxError
from sbx.base.reasons import Reason
from sbx.domain.sandbox import runrecord
from sbx.domain.sandbox.records import SandboxRecord, SandboxStore, check_name
from sbx.seams import audit, owned
from sbx.seams.host import procfs
from sbx.seams.signals import deferred_interrupts
from sbx.usecases import keeper
from sbx.usecases.context import AppContext
from sbx.usecases.namedrecord import (
    CREATION_OPTIONS,
    STOP_TIMEOUT_S,
    check_workspace,
    creation_options,
    hold_creation,
    release_creation,
)
from sbx.usecases.run.request import NO_DEADLINE_S, OutputSink, ProgressFactory, RunRequest

if TYPE_CHECKING:
    from sbx.domain.sandbox.admission import Admission
    from sbx.seams.engine import Driver, OwnedObject
    from sbx.usecases.kitgate import Confirm as ConfirmKits
    from sbx.usecases.namedkits import Confirm as ConfirmFollow
    from sbx.usecases.run.result import RunResult
    from sbx.usecases.run.session import TerminalOutput


# -- run --name -------------------------------------------------------------------------------


def run_named(ctx: AppContext, request: RunRequest, *, on_output: OutputSink,
              progress: ProgressFactory, on_warning: Callable[[str], None],
              on_notice: Callable[[str], None],
              confirm_kits: ConfirmKits | None = None,
              confirm_follow: ConfirmFollow | None = None) -> RunResult:
    # The run's planner and executor: not loaded by ls, stop, rm, attach or exec.
    from sbx.usecases.recreate import recreate
    from sbx.usecases.run.result import RunResult
    from sbx.usecases.run.start import run_new

    name = check_name(request.name or "")
    store = SandboxStore(ctx.state_home)
    hold_creation(store, name)
    try:
        record = store.load(name)
        if record is None:
            if _owned(ctx, name, recorded_only=True):
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
            return recreate(ctx, record, request, on_output=on_output, progress=progress,
                            on_warning=on_warning, on_notice=on_notice,
                            confirm_kits=confirm_kits)
        _refuse_creation_options(request, record)
        started = time.monotonic()
        _start(ctx, record, on_warning, accept=request.accept, confirm=confirm_follow,
               on_notice=on_notice)
    finally:
        release_creation(name)
    if request.detach:
        on_notice(f"{name} is running; `sbx attach {name}` to use it")
        return RunResult(record.run_id, 0, time.monotonic() - started, None, name=name)
    code = attach(ctx, name, request.host, on_output=on_output, on_warning=on_warning,
                  on_notice=on_notice, interactive=request.interactive,
                  terminal_passthrough=request.terminal_passthrough)
    return RunResult(record.run_id, code, time.monotonic() - started, None, name=name)


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


# -- start ------------------------------------------------------------------------------------


def _start(ctx: AppContext, record: SandboxRecord, on_warning: Callable[[str], None], *,
           accept: bool = False, confirm: ConfirmFollow | None = None,
           on_notice: Callable[[str], None] = lambda _text: None) -> None:
    """Start a stopped sandbox as created, with what its kits changed since that it can take
    (sbx.usecases.namedkits); a running one is left as it is."""
    driver = ctx.driver
    if record.container_id is None:
        raise SbxError(Reason.STATE_CORRUPT, f"{record.name}'s record names no container",
                       hint=f"`sbx rm -f {record.name}` and create it again.")
    state = driver.container_state(record.container_id)
    if state is None:
        raise SbxError(Reason.STATE_CORRUPT, f"{record.name}'s container is gone",
                       hint=f"`sbx rm -f {record.name}` and create it again.")
    if state == "running":
        return
    from sbx.usecases.namedkits import follow  # the kits decoded again: only at a start

    _restarting_workspace(ctx, record, on_warning)
    admission = admit_recorded(ctx, record)
    try:
        follow(ctx, record, accept=accept, confirm=confirm, on_notice=on_notice,
               on_warning=on_warning)
        unstaged = _restage(ctx, record, admission)
        _network_again(ctx, record, on_warning)
        with deferred_interrupts():
            driver.start(record.container_id)
        if unstaged:
            _verify(driver, record.container_id, unstaged)
    finally:
        admission.close()


def admit_recorded(ctx: AppContext, record: SandboxRecord, *, env: Sequence[str] = (),
                   env_files: Sequence[str] = ()) -> Admission:
    """A start (or attach, or exec) of a named sandbox, decided as its first start was
    (:func:`sbx.domain.sandbox.admission.admit`): its recorded host paths judged, opened and
    scanned for sockets again, the variables by the run's rules, its recorded user."""

    # The admission and the mount policy: not loaded by ls, stop, rm or logs.
    from sbx.domain.sandbox.admission import StartRequest, admit, recorded_paths, recorded_user
    from sbx.domain.sandbox.mountpolicy import MountPolicy

    names = record.request.get("credential_names")
    if names is None and (env or env_files):
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"{record.name} was created by an older sbx, which did not record the "
                       "variables its credentials hold, so -e/--env-file cannot be checked",
                       hint=f"Recreate it (`sbx rm {record.name}`, then `sbx run --name "
                            f"{record.name} ...`), or run the command without -e.")
    config = ctx.load_config()
    policy = MountPolicy.for_host(ctx.env, state_home=ctx.state_home,
                                  extra_blocked=config.mounts.blocked.value,
                                  allowed_roots=config.mounts.allowed_roots.value)
    pins = record.request.get("pins") or []
    paths = recorded_paths(pins, record.workspace)
    user = recorded_user(str(record.request.get("user") or ""), f"{record.name}'s record")
    start = StartRequest(paths=paths, workspace=record.workspace is not None,
                         env=tuple(env), env_files=tuple(env_files),
                         credential_names=frozenset(str(n) for n in names or ()))
    admission = admit(start, policy, host_env=ctx.env, cwd=ctx.cwd,
                      user=lambda _owner: (user, ()))
    assert admission is not None  # noqa: S101 - the recorded user never asks to plan again
    for pin, host in zip(admission.mounts.pins, paths, strict=False):
        if pin.source.path != host.path:
            admission.close()
            raise MountBlocked(f"{host.path} now resolves to {pin.source.path}; it changed "
                               "while the sandbox was stopped (rule source_changed)",
                               rule="source_changed", path=host.path,
                               hint=f"Put {host.path} back, or `sbx rm {record.name}` and "
                                    "create the sandbox again.")
    return admission


def _restage(ctx: AppContext, record: SandboxRecord,
             admission: Admission) -> list[tuple[str, Any]]:
    """As root, stage the admitted host paths (and mount the volume file systems) at the same
    points as at creation; without root, the (target, source) pairs to verify after the
    start."""
    # Staging and mount checks: only a start or a removal.
    from sbx.domain.sandbox.sources import Staging, staging_available


    pins = admission.mounts.pins
    by_path: dict[str, Any] = {pin.source.path: pin.source for pin in pins}
    log = record.request.get("staging") or []
    if not log or not staging_available():
        return [(pin.target, pin.source) for pin in pins]
    staging = Staging.for_named(ctx.home_hash, record.name)
    problems = staging.release()
    if problems:
        raise SbxError(Reason.CREATE_FAILED, "; ".join(problems))
    for entry in log:
        if entry.get("kind") == "fs":
            staging.remount_filesystem(Path(str(entry["image"])))
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

    from sbx.seams.host.firewall import BridgeGuard  # the host firewall: networked only

    run_dir = runrecord.run_dir(ctx.state_home, record.run_id)
    port: tuple[int, ...] = ()
    gateway = None
    redirect = None
    if record.request.get("proxy"):
        secrets = _start_secrets(ctx, record, run_dir)
        gateway = ctx.driver.network_gateway(record.network)
        kept = keeper.restart_kept_proxy(run_dir, record.run_id, secrets)
        port = (kept.port,)
        dialled = keeper.recorded_port(run_dir)
        if dialled is not None and dialled != kept.port:
            redirect = (dialled, kept.port)
    guard = BridgeGuard(str(bridge), record.run_id, allow_tcp_ports=port,
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
    # The secret store and its resolvers: only a start with an egress proxy.
    from sbx.domain.credentials.secrets import SecretStore, resolve_for_run

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
    from sbx.domain.sandbox.sources import mount_mismatches  # only a start

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


# -- attach / exec / logs ---------------------------------------------------------------------


def attach(ctx: AppContext, name: str, host: Any, *, on_output: OutputSink,
           on_warning: Callable[[str], None], on_notice: Callable[[str], None],
           interactive: bool | None = None, terminal_passthrough: bool = False) -> int:
    """Attach this terminal (or these pipes) to a running sandbox until it exits (its status)
    or the user detaches (0: it keeps running)."""
    # The terminal session: only attach, exec and logs load it.
    from sbx.seams.session.mode import decide_mode
    from sbx.seams.session.pump import SessionEnd
    from sbx.usecases.run.session import OUTPUT_DRAIN_S, Terminal

    record = _load(ctx, name)
    driver = ctx.driver
    container_id = record.container_id
    assert container_id is not None  # noqa: S101 - _load checks
    if driver.container_state(container_id) != "running":
        raise SbxError(Reason.INVALID_ARGUMENT, f"{name} is not running",
                       hint=f"Start it with `sbx run --name {name} {record.workload}`.")
    admit_recorded(ctx, record).close()  # checked like a start, though nothing is mounted
    mode = decide_mode(interactive=interactive, tty=record.tty, capture=False, host=host)
    keys = ctx.load_config().sandbox.detach_keys.value
    output = _to_terminal(ctx, host, on_output, terminal_passthrough)
    stream = driver.attach(container_id, stdin=mode.stdin,
                           detach_keys=keys if record.tty else None)
    terminal = Terminal(host, tty=record.tty, raw=mode.raw,
                        resize_to=lambda rows, columns: driver.resize(
                            container_id, rows=rows, columns=columns))
    terminal.resize()
    session = terminal.session(stream, stdin=mode.stdin, sink=output.sink, detach_keys=keys)
    with terminal.live(session), output:
        end = session.pump(time.monotonic() + NO_DEADLINE_S)
        if end is SessionEnd.EOF:
            session.drain(OUTPUT_DRAIN_S)
    if end is SessionEnd.DETACHED:
        check_workspace(ctx, record, on_warning)
        on_notice(f"detached from {name}; it keeps running")
        return 0
    if end is SessionEnd.OUTPUT_CLOSED:
        raise SbxError(Reason.OUTPUT_CLOSED, "the reader of sbx's output went away")
    code = driver.wait(container_id, 30)
    check_workspace(ctx, record, on_warning, stopped=code is not None)
    return 0 if code is None else code


def exec_in(ctx: AppContext, name: str, argv: Sequence[str], host: Any, *,
            env: Sequence[str], interactive: bool | None, tty: bool | None,
            on_output: OutputSink,
            on_warning: Callable[[str], None] = lambda _text: None,
            terminal_passthrough: bool = False) -> int:
    """Run a command in a running sandbox: its user, its hardening, its egress (the exec
    inherits the container's environment, proxy and sentinels included)."""
    # The terminal session: only attach, exec and logs load it.
    from sbx.seams.session.escape import DEFAULT_DETACH_KEYS
    from sbx.seams.session.mode import decide_mode
    from sbx.seams.session.pump import SessionEnd
    from sbx.usecases.run.session import Terminal

    if not argv:
        raise SbxError(Reason.INVALID_ARGUMENT, "sbx exec needs a command after `--`",
                       hint=f"e.g. sbx exec {name} -- sh")
    record = _load(ctx, name)
    driver = ctx.driver
    assert record.container_id is not None  # noqa: S101 - _load checks
    if driver.container_state(record.container_id) != "running":
        raise SbxError(Reason.INVALID_ARGUMENT, f"{name} is not running",
                       hint=f"Start it with `sbx run --name {name} -d {record.workload}`.")
    mode = decide_mode(interactive=interactive, tty=tty, capture=False, host=host)
    admission = admit_recorded(ctx, record, env=env)
    admission.close()  # the paths are the running container's; only the decision is needed
    output = _to_terminal(ctx, host, on_output, terminal_passthrough)
    stream, exec_id = driver.exec_attach(
        record.container_id, argv, user=f"{admission.user.uid}:{admission.user.gid}",
        env=admission.env,
        workdir=str(record.request.get("workspace_target") or "") or None, tty=mode.tty,
        stdin=mode.stdin)
    terminal = Terminal(host, tty=mode.tty, raw=mode.raw,
                        resize_to=lambda rows, columns: driver.exec_resize(
                            exec_id, rows=rows, columns=columns))
    session = terminal.session(stream, stdin=mode.stdin, sink=output.sink,
                               detach_keys=DEFAULT_DETACH_KEYS)
    terminal.resize()
    with terminal.live(session), output:
        end = session.pump(time.monotonic() + NO_DEADLINE_S)
    if end is SessionEnd.OUTPUT_CLOSED:
        raise SbxError(Reason.OUTPUT_CLOSED, "the reader of sbx's output went away")
    check_workspace(ctx, record, on_warning)
    for _ in range(50):  # the exec's status lands a moment after its stream ends (bounded)
        code = driver.exec_exit_code(exec_id)
        if code is not None:
            return code
        time.sleep(0.02)
    return 0 if end is SessionEnd.DETACHED else 126


def logs(ctx: AppContext, name: str, host: Any, *, follow: bool, on_output: OutputSink,
         terminal_passthrough: bool = False) -> None:
    record = _load(ctx, name)
    assert record.container_id is not None  # noqa: S101 - _load checks
    with _to_terminal(ctx, host, on_output, terminal_passthrough) as output:
        for stream, chunk in ctx.driver.output(record.container_id, follow=follow):
            output.sink(stream, chunk)


def _to_terminal(ctx: AppContext, host: Any, on_output: OutputSink,
                 flag: bool) -> TerminalOutput:
    """``on_output`` filtered where it reaches a terminal, unless the flag or
    ``[sandbox] terminal_passthrough`` passes everything."""
    # The terminal session: only attach, exec and logs load it.
    from sbx.usecases.run.session import TerminalOutput

    passthrough = flag or ctx.load_config().sandbox.terminal_passthrough.value
    return TerminalOutput(on_output, host, ctx.env, passthrough=passthrough)


# -- stop / rm / ls ---------------------------------------------------------------------------


def stop(ctx: AppContext, names: Sequence[str],
         on_warning: Callable[[str], None] = lambda _text: None) -> list[str]:
    """Stop each sandbox (SIGTERM, then SIGKILL after a grace); the keeper then stops its
    proxy; then its writable directories are checked. Returns the names stopped."""
    stopped = []
    for name in names:
        record = _load(ctx, name)
        assert record.container_id is not None  # noqa: S101 - _load checks
        ctx.driver.stop(record.container_id, STOP_TIMEOUT_S)
        keeper.stop_keeper(runrecord.run_dir(ctx.state_home, record.run_id), record.run_id)
        check_workspace(ctx, record, on_warning, stopped=True)
        stopped.append(name)
    return stopped


def _restarting_workspace(ctx: AppContext, record: SandboxRecord,
                          on_warning: Callable[[str], None]) -> None:
    from sbx.usecases import workspace_check  # the git and quarantine checks: not ls's

    run_dir = runrecord.run_dir(ctx.state_home, record.run_id)
    try:
        workspace_check.restarting(ctx, run_dir, record.run_id, on_warning)
    except (OSError, SbxError) as error:
        on_warning(f"{record.name}'s workspace could not be checked before its start "
                   f"({error}); review it before you run git or other tools there")


def remove(ctx: AppContext, names: Sequence[str],
           on_warning: Callable[[str], None] = lambda _text: None) -> list[str]:
    """Remove each sandbox and everything it owns: container, volumes (HOME included),
    network and firewall rules, proxy, staging points, per-sandbox image, run directory, the
    record. Objects are found by label too, so a half-created sandbox goes as well."""
    # Staging and mount checks: only a start or a removal.
    from sbx.domain.sandbox.sources import Staging

    removed = []
    store = SandboxStore(ctx.state_home)
    driver = ctx.driver
    for name in names:
        check_name(name)
        with store.locked(name):
            record = store.load(name)
            objects = _owned(ctx, name)
            if record is None and not objects:
                raise SbxError(Reason.INVALID_ARGUMENT, f"no sandbox named {name}",
                               hint="`sbx ls` lists them.")
            run_id = record.run_id if record is not None else next(
                (o.labels.get(label_keys.RUN, "") for o in objects), "")
            run_dir = runrecord.run_dir(ctx.state_home, run_id) if run_id else None
            if run_dir is not None:
                keeper.stop_keeper(run_dir, run_id)
            for obj in sorted(objects, key=lambda o: ("container", "volume", "network")
                              .index(o.kind) if o.kind in ("container", "volume", "network")
                              else 3):
                {"container": driver.remove_container, "volume": driver.remove_volume,
                 "network": driver.remove_network}[obj.kind](obj.id)
            if record is not None and record.image:
                driver.remove_image(record.image)
            if record is not None and record.request.get("bridge"):
                from sbx.seams.host.firewall import BridgeGuard  # networked sandboxes only

                guard = BridgeGuard(str(record.request["bridge"]), record.run_id)
                guard.installed, guard.installed_nat = guard.listed()
                guard.remove()
            problems = Staging.for_named(ctx.home_hash, name).release()
            if problems:
                raise SbxError(Reason.CLEANUP_FAILED, "; ".join(problems))
            if record is not None:
                check_workspace(ctx, record, on_warning, stopped=True)  # it is gone
            if run_dir is not None:
                shutil.rmtree(run_dir, ignore_errors=True)
            store.forget(name)
            _forget_rules(ctx, name)
        removed.append(name)
    return removed


def _forget_rules(ctx: AppContext, name: str) -> None:
    """The user policy's rules for a removed sandbox go with it (a new sandbox of that name
    must not inherit what was approved for the old one); audited."""
    from sbx.domain.egress.policystore import PolicyStore  # the user policy: only at rm

    store = PolicyStore(ctx.state_home)
    if not store.path.exists():
        return
    with store.editing() as rules:
        gone = [r for r in rules if r.sandbox == name]
        rules[:] = [r for r in rules if r.sandbox != name]
    for rule in gone:
        with contextlib.suppress(OSError):
            audit.record(ctx.state_home, audit.POLICY_RULE_REMOVED, run_id=None,
                         severity="info", details={"rule": rule.as_dict(),
                                                   "why": f"sandbox {name} removed"})


@dataclass(frozen=True)
class SandboxStatus:
    name: str
    workload: str
    kits: list[str]
    status: str
    workspace: str | None
    created: float
    home_bounded: bool

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "workload": self.workload, "kits": self.kits,
                "status": self.status, "workspace": self.workspace,
                "created": round(self.created, 3), "home_bounded": self.home_bounded}


def list_sandboxes(ctx: AppContext, *, include_runs: bool) -> list[SandboxStatus]:
    store = SandboxStore(ctx.state_home)
    owned = ctx.driver.list_owned(label_keys.home_selector(ctx.home_hash))
    states = {o.id: o.state for o in owned if o.kind == "container"}
    found = []
    sandboxes: dict[str, str] = {}  # container id -> the name sbx recorded for it
    for name in store.names():
        record = store.load(name)
        if record is None:
            continue
        sandboxes[record.container_id or ""] = record.name
        state = states.get(record.container_id or "", "missing")
        found.append(SandboxStatus(record.name, record.workload, record.kits, state,
                                   record.workspace, record.created,
                                   bool(record.request.get("home_bounded"))))
    if include_runs:
        for obj in owned:
            # A dev.sbx.name label counts only on the container sbx recorded under it (an
            # image's own label is shadowed empty, and proves nothing either way).
            label = label_keys.value(obj.labels, label_keys.NAME)
            if obj.kind != "container" or (label is not None and sandboxes.get(obj.id) == label) \
                    or obj.labels.get(label_keys.ROLE) != label_keys.ROLE_SANDBOX:
                continue
            found.append(SandboxStatus(f"(run {obj.labels.get(label_keys.RUN, '')[:12]})",
                                       obj.labels.get(label_keys.KITS, "").split(",")[0],
                                       obj.labels.get(label_keys.KITS, "").split(",")[1:],
                                       obj.state, None, 0.0, True))
    return found


# -- helpers ----------------------------------------------------------------------------------


def _load(ctx: AppContext, name: str) -> SandboxRecord:
    record = SandboxStore(ctx.state_home).load(check_name(name))
    if record is None or record.container_id is None:
        raise SbxError(Reason.INVALID_ARGUMENT, f"no sandbox named {name}",
                       hint="`sbx ls` lists them; `sbx run --name NAME WORKLOAD` creates one.")
    return record


def _owned(ctx: AppContext, name: str, *, recorded_only: bool = False) -> list[OwnedObject]:
    """This home's objects labelled as sandbox ``name``'s; with ``recorded_only``, only those
    whose run sbx recorded as creating ``name`` (a half-made sandbox), not whatever carries
    the label."""
    found = ctx.driver.list_owned({**label_keys.home_selector(ctx.home_hash),
                                   label_keys.NAME: name})
    if not recorded_only:
        return found
    return [o for o in found if _recorded_name(ctx, o.labels.get(label_keys.RUN, "")) == name]


def _recorded_name(ctx: AppContext, run_id: str) -> str | None:
    if not runrecord.RUN_ID.fullmatch(run_id):
        return None
    record = runrecord.read(runrecord.run_dir(ctx.state_home, run_id))
    name = record.get("name") if record is not None else None
    return name if isinstance(name, str) else None


__all__ = ["CREATION_OPTIONS", "SandboxStatus", "attach", "creation_options", "exec_in",
           "list_sandboxes", "logs", "remove", "run_named", "stop"]
