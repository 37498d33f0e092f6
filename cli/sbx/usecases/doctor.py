"""`sbx doctor`: preflight checks, each with a status, a reason code and a fix (SPEC §2.2).

Every check is a :class:`Check` in :data:`CHECKS`: an id, a title and a function from the shared
:class:`DoctorState` to a :class:`Verdict`. More checks (images/kits, egress, credentials) are
added by appending to the table. Each check runs in its own daemon thread with its own timeout,
so a hung engine makes *that* check fail (``docker_unreachable``, "timed out") and doctor itself
always finishes; checks that need the engine report at once when the engine check did not pass.

Doctor starts nothing it does not remove again: the limit probe is one tiny container (labelled
``role=helper`` for this state home, with a run directory recording doctor's pid), removed in a
``finally``; should doctor itself be killed meanwhile, ``sbx gc`` finds it like any run.
"""

from __future__ import annotations

import enum
import math
import os
import platform
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol

from sbx.base import labels as label_keys
from sbx.base.errors import ConfigError, SbxError
from sbx.base.reasons import ExitStatus, Reason
from sbx.domain.sandbox import runrecord
from sbx.domain.sandbox.requirements import sandbox_limits

if TYPE_CHECKING:
    from sbx.base.config import Config
    from sbx.domain.sandbox.hardening import Limits
    from sbx.seams.engine import Containers, EngineInfo, Images, Inventory, Sessions

    class ProbeEngine(Images, Containers, Sessions, Protocol):
        """The roles the limit probe uses: its image, its container and the container's log."""
    from sbx.usecases.context import AppContext

CHECK_TIMEOUT_S: Final = 10.0
PROBE_TIMEOUT_S: Final = 20.0  # the limit probe: create + start + wait + logs + remove
PROBE_WAIT_S: Final = 10.0  # how long the probe's shell may run
PROBE_KIT: Final = "doctor-probe"
# The smallest image that has /bin/sh does; these are tried first, then other local images by
# size. sbx never pulls: with no usable local image, the limits check warns.
PROBE_IMAGES: Final = ("sbx-test/busybox:1", "busybox:latest", "busybox:musl", "busybox:uclibc",
                       "alpine:latest")
MAX_PROBE_ATTEMPTS: Final = 3
# The kernel stores memory limits in whole pages; anything within one large page is "as asked".
MEMORY_SLACK_BYTES: Final = 64 * 1024
UNLIMITED_V1_BYTES: Final = 1 << 62

# Reads the probe's own cgroup limits (v2 unified, else v1 per-controller) as key=value lines.
PROBE_SCRIPT: Final = """\
r() { [ -r "$1" ] && printf '%s=%s\\n' "$2" "$(cat "$1")"; return 0; }
c=/sys/fs/cgroup
if [ -f $c/cgroup.controllers ]; then
  echo cgroup=2
  r $c/memory.max memory; r $c/memory.swap.max swap; r $c/pids.max pids; r $c/cpu.max cpu
else
  echo cgroup=1
  r $c/memory/memory.limit_in_bytes memory; r $c/memory/memory.memsw.limit_in_bytes memsw
  r $c/pids/pids.max pids
  for d in cpu cpu,cpuacct cpuacct,cpu; do
    if [ -r $c/$d/cpu.cfs_quota_us ]; then
      r $c/$d/cpu.cfs_quota_us cpu_quota; r $c/$d/cpu.cfs_period_us cpu_period; break
    fi
  done
fi
"""


class Status(enum.StrEnum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"


_SEVERITY: Final = {Status.OK: 0, Status.WARN: 1, Status.FAIL: 2}


@dataclass(frozen=True)
class Verdict:
    """What a check function returns."""

    status: Status
    detail: str
    reason: Reason | None = None
    fix: str | None = None
    data: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CheckResult:
    id: str
    title: str
    status: Status
    detail: str
    reason: Reason | None
    fix: str | None
    duration_s: float
    data: Mapping[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "title": self.title, "status": self.status.value,
                "detail": self.detail, "reason": self.reason.value if self.reason else None,
                "fix": self.fix, "duration_s": round(self.duration_s, 3),
                "data": dict(self.data)}


@dataclass(frozen=True)
class HostFacts:
    """The facts about this process that checks read (injected by tests)."""

    os_name: str
    system: str
    euid: int | None
    egid: int | None

    @classmethod
    def current(cls) -> HostFacts:
        geteuid = getattr(os, "geteuid", None)
        getegid = getattr(os, "getegid", None)
        return cls(os.name, platform.system() or "unknown",
                   geteuid() if geteuid else None, getegid() if getegid else None)


@dataclass(frozen=True)
class DoctorRequest:
    check_timeout_s: float = CHECK_TIMEOUT_S
    probe_timeout_s: float = PROBE_TIMEOUT_S
    workload: str | None = None  # with it: `sbx run`'s planning for it, creating nothing
    kits: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    allow_privileged: bool = False


@dataclass
class DoctorState:
    """Facts shared between checks (each check runs after the ones before it finished)."""

    ctx: AppContext
    host: HostFacts
    request: DoctorRequest
    config: Config | None = None
    config_error: SbxError | None = None
    engine: EngineInfo | None = None
    egress: EgressProbes = field(default_factory=lambda: DEFAULT_EGRESS_PROBES)
    engine_error: SbxError | None = None  # why the engine check did not pass


@dataclass(frozen=True)
class Check:
    id: str
    title: str
    run: Callable[[DoctorState], Verdict]
    needs_engine: bool = False
    # When the check times out, this is the reason given (a hung engine is unreachable).
    timeout_reason: Reason = Reason.DOCKER_UNREACHABLE
    # Seconds; None means DoctorRequest.check_timeout_s.
    timeout_s: Callable[[DoctorRequest], float] | None = None
    # Verdict used without running the check when the engine check did not pass.
    without_engine: Verdict | None = None


@dataclass(frozen=True)
class DoctorReport:
    checks: tuple[CheckResult, ...]

    @property
    def failed(self) -> bool:
        return any(check.status is Status.FAIL for check in self.checks)

    @property
    def exit_status(self) -> ExitStatus:
        # DENIED (1): "doctor found a failure", documented with ExitStatus; warnings pass.
        return ExitStatus.DENIED if self.failed else ExitStatus.OK

    def counts(self) -> dict[str, int]:
        return {status.value: sum(1 for c in self.checks if c.status is status)
                for status in Status}

    def as_dict(self) -> dict[str, Any]:
        return {"checks": [check.as_dict() for check in self.checks], "summary": self.counts()}


# -- the checks --------------------------------------------------------------------------------


def check_platform(state: DoctorState) -> Verdict:
    from sbx.domain.sandbox.requirements import check_host

    host = state.host
    try:
        check_host(host.os_name)  # the rule `sbx run` applies
    except SbxError as error:
        return Verdict(Status.FAIL, f"{host.system} ({host.os_name}) is not a unix host",
                       error.reason, error.reason.info.fix)
    return Verdict(Status.OK, f"{host.system} (posix)")


def check_config(state: DoctorState) -> Verdict:
    try:
        config = state.ctx.load_config()
    except ConfigError as error:
        state.config_error = error
        problems = error.details.get("problems") or []
        file = error.details.get("file")
        if problems and file:
            listed = "; ".join(f"{file}:{p['line']}: {p['key']}: {p['message']}"
                               for p in problems)
            detail = f"{len(problems)} problem{'s' if len(problems) != 1 else ''}: {listed}"
        else:
            detail = error.message.replace("\n", " ")
        return Verdict(Status.FAIL, detail, Reason.INVALID_CONFIG,
                       error.hint or Reason.INVALID_CONFIG.info.fix,
                       {"problems": list(problems),
                        "invalid_sections": list(error.details.get("invalid_sections", []))})
    state.config = config
    if not config.exists:
        return Verdict(Status.OK, f"no file at {config.path}; built-in defaults",
                       data={"file": str(config.path), "exists": False})
    from_file = sum(1 for _key, _value, source in config.provenance() if source != "default")
    return Verdict(Status.OK, f"{config.path} is valid ({from_file} setting"
                   f"{'s' if from_file != 1 else ''} from the file)",
                   data={"file": str(config.path), "exists": True})


def check_identity(state: DoctorState) -> Verdict:
    host = state.host
    parts: list[str] = []
    findings: list[Verdict] = []
    if host.euid is None:
        parts.append("process identity unknown on this platform")
    else:
        parts.append(f"sbx runs as uid {host.euid} gid {host.egid}")
        if host.euid == 0:
            findings.append(Verdict(
                Status.WARN, "", Reason.ROOT_USER,
                "Run sbx as an unprivileged user in the `docker` group; as root, a bug in sbx "
                "runs with root's rights (sandboxes still run as a non-root user)."))
    if state.config is None:
        parts.append("sandbox user unknown (the config is invalid)")
    else:
        user = state.config.sandbox.user
        parts.append(f"sandbox fallback user {user.value}:{user.value} ({user.source})")
        if user.value == 0:
            findings.append(Verdict(Status.FAIL, "", Reason.ROOT_USER,
                                    Reason.ROOT_USER.info.fix))
    worst = max(findings, key=lambda f: _SEVERITY[f.status], default=None)
    if worst is None:
        return Verdict(Status.OK, "; ".join(parts))
    return Verdict(worst.status, "; ".join(parts), worst.reason, worst.fix)


def check_engine(state: DoctorState) -> Verdict:
    from sbx.domain.sandbox.requirements import check_engine as engine_rules

    try:
        info = state.ctx.driver.info()
    except SbxError as error:
        state.engine_error = error
        raise
    mode = "rootless" if info.rootless else "rootful"
    cgroup = f"cgroup v{info.cgroup_version or '?'} ({info.cgroup_driver or 'unknown driver'})"
    detail = f"Docker {info.version} (API {info.api_version}), {mode}, {cgroup}"
    data = {"version": info.version, "api_version": info.api_version, "rootless": info.rootless,
            "cgroup_version": info.cgroup_version, "cgroup_driver": info.cgroup_driver,
            "os": info.os}
    if not info.os or info.os == "linux":
        state.engine = info  # the other checks may use it, even when a rule below fails
    try:
        engine_rules(info)  # the rules `sbx run` refuses by
    except SbxError as error:
        if state.engine is None:
            state.engine_error = error
        return Verdict(Status.FAIL, f"{detail}; {error.message}", error.reason,
                       error.hint or error.reason.info.fix, data)
    return Verdict(Status.OK, detail, data=data)


def check_limits(state: DoctorState) -> Verdict:
    if state.config is None:
        return Verdict(Status.FAIL, "not probed: the config is invalid (see the config check)",
                       Reason.INVALID_CONFIG, "Fix the config file, then run `sbx doctor` again.")
    limits = sandbox_limits(state.config)
    driver: Inventory = state.ctx.driver
    candidates = probe_candidates(driver.local_images())
    if not candidates:
        return Verdict(Status.WARN, "not probed: no local image to run the probe in",
                       Reason.IMAGE_MISSING, _NO_PROBE_IMAGE_FIX)
    attempts: list[str] = []
    for ref in candidates[:MAX_PROBE_ATTEMPTS]:
        try:
            readings = run_probe(state.ctx, ref, limits, wait_s=PROBE_WAIT_S)
        except SbxError as error:
            if error.reason in (Reason.START_FAILED, Reason.CREATE_FAILED,
                                Reason.IMAGE_MISSING):
                attempts.append(f"{ref}: {error.message}")
                continue
            raise
        return judge_limits(limits, readings, ref)
    return Verdict(Status.WARN, "not probed: no local image could run /bin/sh ("
                   + "; ".join(attempts) + ")", Reason.IMAGE_MISSING, _NO_PROBE_IMAGE_FIX,
                   {"attempts": attempts})


_NO_PROBE_IMAGE_FIX: Final = (
    "Make a tiny image with /bin/sh present locally (e.g. `scripts/build-images.sh` builds "
    "sbx-test/busybox:1, or `docker load` a busybox image); sbx never pulls.")


def check_gc(state: DoctorState) -> Verdict:
    from sbx.usecases.gc.collect import survey

    if state.config is None:
        return Verdict(Status.WARN, "not counted: the config is invalid (see the config check)",
                       Reason.INVALID_CONFIG, "Fix the config file, then run `sbx doctor` again.")
    result = survey(state.ctx)
    if result.outcome == "skipped":
        return Verdict(Status.OK, "nothing to collect (no sandbox ever ran from this state "
                       "home)", data={"stale": {}})
    if result.failed:
        failure = result.failed[0]
        return Verdict(Status.WARN, f"not counted: {failure.message}", failure.reason,
                       failure.reason.info.fix)
    counts = {k: v for k, v in result.counts().items() if v}
    odd = len(result.reported)
    data = {"stale": counts, "unreadable_deadlines": odd}
    if not counts and not odd:
        return Verdict(Status.OK, "nothing stale", data=data)
    parts = [f"{count} {_plural(kind.replace('_', ' '), count)}" for kind, count in counts.items()]
    detail = ("stale: " + ", ".join(parts)) if parts else "nothing stale"
    if odd:
        detail += f"; {odd} kept with an unreadable deadline"
    return Verdict(Status.WARN, detail, Reason.CLEANUP_FAILED,
                   "Run `sbx gc` (or from cron, e.g. `*/10 * * * * sbx gc`); `sbx gc --dry-run` "
                   "lists what it would remove.", data)


def _plural(noun: str, count: int) -> str:
    if count == 1:
        return noun
    return noun + ("es" if noun.endswith("s") else "s")


# -- egress (SPEC §2.2, §8) ----------------------------------------------------------------------

PROXY_RUN_KIT: Final = "doctor-proxy"
# Starting (bounded by the ready line's wait) plus stopping (terminate, then kill) the proxy.
PROXY_CHECK_TIMEOUT_S: Final = 30.0
HOST_SERVICES_TIMEOUT_S: Final = 15.0  # `iptables -w 5 -S INPUT`, bounded at 10 s
_TCP_LISTEN: Final = "0A"
_ANY_ADDRESSES: Final = frozenset({"00000000", "0" * 32})  # 0.0.0.0 and :: in /proc/net/tcp*


class DoctorProxy(Protocol):
    """What the proxy check needs of a started proxy
    (:class:`sbx.domain.egress.plan.ProxyProcess`)."""

    @property
    def port(self) -> int: ...

    @property
    def pid(self) -> int: ...

    def alive(self) -> bool: ...

    def stop(self) -> None: ...


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _which_iptables() -> str | None:
    # The lookup BridgeGuard.install itself makes: what `sbx run` would find.
    from sbx.seams.host.firewall import iptables_binary

    return iptables_binary()


def _iptables_problem() -> str | None:
    """None when iptables can list the INPUT chain here (root with CAP_NET_ADMIN)."""
    from sbx.seams.host.firewall import (
        FirewallError,
        FirewallUnavailable,
        RuleListingInvalid,
        list_sbx_rules,
    )

    try:
        list_sbx_rules()
    except RuleListingInvalid:
        return None  # iptables answered; only an odd line did not parse
    except (FirewallUnavailable, FirewallError) as error:
        return str(error)
    return None


def _read_proc_net_tcp() -> tuple[str, ...]:
    from sbx.seams.host.procfs import tcp_tables

    return tcp_tables()


def _start_proxy(config_json: str, run_dir: Path, run_id: str) -> DoctorProxy:
    from sbx.domain.egress.plan import start_proxy

    try:
        return start_proxy(config_json, run_dir, run_id)
    except OSError as error:  # the interpreter cannot be executed, the run dir not written...
        raise SbxError(Reason.PROXY_FAILED, f"cannot start the proxy: {error}",
                       details={"stderr": f"{type(error).__name__}: {error}"}) from None


@dataclass(frozen=True)
class EgressProbes:
    """How the egress checks look at the host (injected by tests)."""

    iptables: Callable[[], str | None] = _which_iptables
    iptables_problem: Callable[[], str | None] = _iptables_problem
    proc_net_tcp: Callable[[], Sequence[str]] = _read_proc_net_tcp
    start_proxy: Callable[[str, Path, str], DoctorProxy] = _start_proxy
    now: Callable[[], datetime] = _utcnow


DEFAULT_EGRESS_PROBES: EgressProbes = EgressProbes()


def check_egress_ca(state: DoctorState) -> Verdict:
    """The state home's CA: shown when valid, created when missing, never replaced here."""
    from sbx.domain.egress.ca import CA_CERT_FILE, CA_DIR, CertificateAuthority
    from sbx.domain.egress.ca import _load as load_ca  # read-only: no lock, no rotation

    now = state.egress.now()
    directory = state.ctx.state_home / CA_DIR
    loaded, problem = load_ca(directory, now)
    if loaded is not None or problem == "missing":
        if loaded is not None:
            certificate, key = loaded
            ca = CertificateAuthority(directory, certificate, key, origin="loaded")
            prefix = ""
        else:
            ca = CertificateAuthority.load_or_create(state.ctx.state_home, now=now)
            prefix = "created now (runs with a network policy use it): "
        info = ca.info(now)
        return Verdict(Status.OK, f"{prefix}{info['subject']}, valid until "
                       f"{ca.not_after:%Y-%m-%d} ({_days(info['days_left'])} left)",
                       data={**info, "created": bool(prefix)})
    replaced = (f"Nothing to do: the next run with a network policy replaces it (sandboxes "
                f"trust the new CA from then on); or remove {directory} to replace it now.")
    shown = _ca_summary(directory / CA_CERT_FILE, now)
    data: dict[str, Any] = {"path": str(directory / CA_CERT_FILE), "problem": problem}
    if problem == "expiring" and shown is not None:
        return Verdict(Status.WARN, f"{shown[0]} expires within 7 days", Reason.PROXY_FAILED,
                       replaced, {**data, "days_left": shown[1]})
    if problem in ("expired", "not_yet_valid"):
        what = "has expired" if problem == "expired" else "is not valid yet (check the clock)"
        return Verdict(Status.WARN, f"{shown[0] if shown else 'the CA'} {what}",
                       Reason.PROXY_FAILED, replaced, data)
    why = "unsafe (a symlink, another owner, or group/other access)" if problem == "unsafe" \
        else "unreadable (not a valid CA key and certificate)"
    return Verdict(Status.WARN, f"{directory} is {why}", Reason.PROXY_FAILED,
                   f"Remove {directory} (or make it and its files yours, mode 0700/0600); the "
                   f"next run with a network policy creates a new CA.", data)


def _ca_summary(path: Path, now: datetime) -> tuple[str, int] | None:
    from cryptography import x509

    from sbx.seams import owned

    try:  # what is reported is the CA sbx would use: this user's own file
        raw = owned.read_bytes(path, max_bytes=1024 * 1024)
        certificate = x509.load_pem_x509_certificate(raw or b"")
    except (OSError, ValueError, SbxError):
        return None
    after = certificate.not_valid_after_utc
    days = (after - now).days
    return (f"{certificate.subject.rfc4514_string()}, valid until {after:%Y-%m-%d} "
            f"({_days(days)} left)", days)


def _days(days: int) -> str:
    return f"{days} day{'s' if days != 1 else ''}"


def check_egress_proxy(state: DoctorState) -> Verdict:
    """Start a deny-everything proxy on 127.0.0.1, see its ready line, stop it.

    It runs like a run's proxy (its own process, the run id in its command line) from a run
    directory that records doctor's pid and the proxy's, so ``sbx gc`` stops it should doctor be
    killed in between; its CA is a throwaway one in that directory (the real one is the CA
    check's business, and doctor never rotates it).
    """
    from sbx.domain.egress.proxyconfig import ProxyConfig

    run_id = uuid.uuid4().hex
    run_dir = runrecord.run_dir(state.ctx.state_home, run_id)
    try:
        runrecord.create(state.ctx.state_home, runrecord.RunRecord(
            run_id=run_id, workload=PROXY_RUN_KIT,
            deadline=math.ceil(time.time() + PROXY_CHECK_TIMEOUT_S)))
    except SbxError as error:
        shutil.rmtree(run_dir, ignore_errors=True)
        return Verdict(Status.FAIL, f"cannot write the run directory {run_dir}: "
                       f"{error.message}", Reason.PROXY_FAILED,
                       "Make the state home writable (or point SBX_HOME elsewhere).",
                       {"run_id": run_id})
    proxy: DoctorProxy | None = None
    data: dict[str, Any] = {"run_id": run_id}
    try:
        home = run_dir / "home"
        home.mkdir(mode=0o700)
        config = ProxyConfig(run_id=run_id, state_home=home, audit_log=run_dir / "audit.jsonl",
                             network=None, listen_host="127.0.0.1", listen_port=0,
                             phase_file=run_dir / "proxy.phase")
        try:
            proxy = state.egress.start_proxy(config.to_json(), run_dir, run_id)
        except SbxError as error:
            if error.reason is not Reason.PROXY_FAILED:
                raise
            tail = str(error.details.get("stderr") or "").strip()
            last = tail.splitlines()[-1].strip() if tail else "no output"
            return Verdict(Status.FAIL, f"the proxy did not start: {last}", Reason.PROXY_FAILED,
                           "Read the proxy's error above; it must be able to import "
                           "sbx.proxy with this Python and bind a port on 127.0.0.1.",
                           {**data, "stderr": tail[-2000:]})
        runrecord.update(run_dir, proxy_pid=proxy.pid)
        port = proxy.port
        proxy.stop()
        if proxy.alive():
            return Verdict(Status.FAIL, f"the proxy (pid {proxy.pid}) did not stop",
                           Reason.PROXY_FAILED, "Run `sbx gc`: it stops orphaned proxies.",
                           {**data, "pid": proxy.pid})
        return Verdict(Status.OK, f"a deny-all proxy started, bound 127.0.0.1:{port} and "
                       "stopped", data={**data, "port": port})
    finally:
        if proxy is not None and proxy.alive():
            proxy.stop()
        if proxy is None or not proxy.alive():
            shutil.rmtree(run_dir, ignore_errors=True)  # else kept: `sbx gc` stops the proxy


def listening_ports(texts: Sequence[str]) -> list[int]:
    """TCP ports in LISTEN on 0.0.0.0 or :: in /proc/net/tcp and /proc/net/tcp6 text."""
    ports: set[int] = set()
    for text in texts:
        for line in text.splitlines()[1:]:
            fields = line.split()
            if len(fields) < 4 or fields[3] != _TCP_LISTEN:
                continue
            address, sep, port = fields[1].rpartition(":")
            if sep and address in _ANY_ADDRESSES:
                try:
                    ports.add(int(port, 16))
                except ValueError:
                    continue
    return sorted(ports)


def check_egress_host_services(state: DoctorState) -> Verdict:
    """Whether a sandbox network could reach host services on the gateway (SPEC §8)."""
    iptables = state.egress.iptables()
    euid = state.host.euid
    if euid == 0 and iptables is not None:
        problem = state.egress.iptables_problem()
        if problem is None:
            return Verdict(Status.OK, "closed per run by bridge firewall rules (root, "
                           f"{iptables})", data={"closed": True})
        why = f"iptables does not work here: {problem}"
        remedy = "give sbx CAP_NET_ADMIN on the host's network namespace"
    elif euid != 0:
        why, remedy = "sbx is not root", "run sbx as root"
    else:
        why, remedy = "iptables is missing", "install iptables"
    ports = listening_ports(state.egress.proc_net_tcp())
    data = {"closed": False, "why": why, "ports": ports}
    if not ports:
        return Verdict(Status.OK, f"no host TCP service listens on all interfaces (bridges stay "
                       f"open: {why})", data=data)
    listed = ", ".join(str(port) for port in ports)
    noun = f"ports {listed} listen" if len(ports) > 1 else f"port {listed} listens"
    return Verdict(Status.WARN, f"{noun} on all interfaces and a sandbox network could reach "
                   f"{'them' if len(ports) > 1 else 'it'} ({why}: cannot install bridge rules)",
                   Reason.HOST_SERVICES_EXPOSED, f"{remedy[0].upper()}{remedy[1:]}, or bind "
                   "those services to 127.0.0.1.", data)


PLAN_TIMEOUT_S: Final = 900.0  # the plan may build the kit image, as `sbx run` would


def check_workload(state: DoctorState) -> Verdict:
    """`sbx run`'s planning for the WORKLOAD, creating nothing (sbx.usecases.pipeline): a refusal
    is this check's failure, with the reason `sbx run` would give."""
    from sbx.usecases.pipeline import WorkloadRequest, dry_plan, explain_command, load, planned_user

    request = state.request
    assert request.workload is not None  # noqa: S101 - the check exists only with one
    workload = WorkloadRequest(workload=request.workload, kits=request.kits, args=request.args,
                               allow_privileged=request.allow_privileged)
    if state.engine is None:
        # Run refuses at the engine only once config and kits passed: the same order here,
        # without asking the engine again (its check already failed or timed out).
        load(state.ctx, workload)
        raise state.engine_error or SbxError(Reason.DOCKER_UNREACHABLE, _ENGINE_DOWN)
    planned = dry_plan(state.ctx, workload)
    user = planned_user(state.ctx, planned)
    kits = [k.reference for k in planned.kit_set.kits]
    skipped = planned.selection()["skipped"]
    modes = dict(planned.egress.modes) if planned.egress is not None else {}
    shown_user = f"{user.uid}:{user.gid} ({user.source})" if user is not None else \
        f"from the image's USER {planned.image.user!r} (resolved by sbx run)"
    detail = (f"sbx run would start {', '.join(kits)}: image {planned.image_tag} "
              f"({'built now' if planned.image_built else 'cached'}), user {shown_user}")
    data = {"kits": kits, "image": planned.image_tag, "image_built": planned.image_built,
            "user": f"{user.uid}:{user.gid}" if user is not None else None,
            "skipped": skipped, "credentials": modes,
            "explain": explain_command(planned.loaded)}
    if skipped:
        types = ", ".join(sorted({s["type"] for s in skipped}))
        credential = any(s["type"].endswith("/credential@1") for s in skipped)
        return Verdict(Status.WARN, f"{detail}; optional capabilities skipped: {types}",
                       Reason.CREDENTIAL_UNBOUND if credential
                       else Reason.UNSUPPORTED_CAPABILITY,
                       "Skipped capabilities are recorded; nothing to do unless the kit "
                       "needs them (`sbx secret set SERVICE` binds a credential).", data)
    return Verdict(Status.OK, detail, data=data)


KIT_CHECKS: Final[tuple[Check, ...]] = (
    Check("workload", "workload", check_workload,
          timeout_s=lambda request: max(request.check_timeout_s, PLAN_TIMEOUT_S)),
)


_ENGINE_DOWN: Final = "the engine check did not pass"

CHECKS: Final[tuple[Check, ...]] = (
    Check("platform", "platform", check_platform, timeout_reason=Reason.UNSUPPORTED_PLATFORM),
    Check("config", "config", check_config, timeout_reason=Reason.INVALID_CONFIG),
    Check("identity", "identity", check_identity, timeout_reason=Reason.ROOT_USER),
    Check("engine", "engine", check_engine),
    Check("limits", "resource limits", check_limits, needs_engine=True,
          timeout_s=lambda request: request.probe_timeout_s,
          without_engine=Verdict(Status.FAIL, f"not probed: {_ENGINE_DOWN}",
                                 Reason.DOCKER_UNREACHABLE,
                                 "Fix the engine first (see the engine check).")),
    Check("gc", "stale objects", check_gc, needs_engine=True,
          without_engine=Verdict(Status.WARN, f"not counted: {_ENGINE_DOWN}",
                                 Reason.DOCKER_UNREACHABLE,
                                 "Fix the engine first (see the engine check).")),
    Check("egress-ca", "egress CA", check_egress_ca, timeout_reason=Reason.PROXY_FAILED),
    Check("egress-proxy", "egress proxy", check_egress_proxy, timeout_reason=Reason.PROXY_FAILED,
          timeout_s=lambda request: max(request.check_timeout_s, PROXY_CHECK_TIMEOUT_S)),
    Check("egress-host-services", "host services", check_egress_host_services,
          timeout_reason=Reason.PROXY_FAILED,
          timeout_s=lambda request: max(request.check_timeout_s, HOST_SERVICES_TIMEOUT_S)),
)


# -- running checks ----------------------------------------------------------------------------


def diagnose(ctx: AppContext, request: DoctorRequest | None = None, *,
             checks: Sequence[Check] = CHECKS, host: HostFacts | None = None,
             egress: EgressProbes | None = None) -> DoctorReport:
    """Run ``checks`` in order, each bounded by its timeout; never hangs, never raises
    :class:`SbxError` (a check's error becomes its finding)."""
    req = request or DoctorRequest()
    state = DoctorState(ctx, host or HostFacts.current(), req,
                        egress=egress or DEFAULT_EGRESS_PROBES)
    results: list[CheckResult] = []
    if req.workload is not None:
        checks = (*checks, *KIT_CHECKS)
    for check in checks:
        if check.needs_engine and state.engine is None and check.without_engine is not None:
            results.append(_result(check, check.without_engine, 0.0))
            continue
        results.append(run_check(check, state))
    return DoctorReport(tuple(results))


def run_check(check: Check, state: DoctorState) -> CheckResult:
    timeout = check.timeout_s(state.request) if check.timeout_s else state.request.check_timeout_s
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["finding"] = check.run(state)
        except SbxError as error:
            box["finding"] = Verdict(Status.FAIL, error.message.replace("\n", " "),
                                     error.reason, error.hint or error.reason.info.fix)
        except BaseException as exc:  # re-raised in the caller: a bug gets a crash report
            box["error"] = exc

    started = time.monotonic()
    # A daemon thread: if the check hangs for good, doctor still exits.
    worker = threading.Thread(target=target, name=f"sbx-doctor-{check.id}", daemon=True)
    worker.start()
    worker.join(timeout)
    elapsed = time.monotonic() - started
    if worker.is_alive():
        return _result(check, Verdict(
            Status.FAIL, f"timed out after {timeout:g}s", check.timeout_reason,
            check.timeout_reason.info.fix), elapsed)
    if "error" in box:
        raise box["error"]
    finding: Verdict = box["finding"]
    return _result(check, finding, elapsed)


def _result(check: Check, finding: Verdict, elapsed: float) -> CheckResult:
    return CheckResult(check.id, check.title, finding.status, finding.detail, finding.reason,
                       finding.fix if finding.status is not Status.OK else None, elapsed,
                       finding.data)


# -- the limit probe ---------------------------------------------------------------------------


@dataclass(frozen=True)
class LimitReading:
    name: str  # memory | swap | pids | cpu
    asked: str
    read: str
    enforced: bool

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "asked": self.asked, "read": self.read,
                "enforced": self.enforced}


def probe_candidates(local: Sequence[tuple[str, int]]) -> list[str]:
    """Preferred probe images that are present, then every other local image, smallest first."""
    present = [ref for ref, _size in local]
    preferred = [ref for ref in PROBE_IMAGES if ref in present]
    others = [ref for ref, _size in sorted(local, key=lambda item: (item[1], item[0]))
              if ref not in preferred]
    return list(dict.fromkeys([*preferred, *others]))


def run_probe(ctx: AppContext, image_ref: str, limits: Limits, *,
              wait_s: float = PROBE_WAIT_S) -> dict[str, str]:
    """Run the probe container with ``limits`` in ``image_ref``; return what it read.

    The container gets sbx's hardened shape (read-only, no capabilities, no network, the
    configured user) and helper labels; it is removed on every path. A run directory recording
    doctor's pid lets ``sbx gc`` remove it should doctor be killed in between.
    """
    from sbx.domain.sandbox.hardening import DEFAULT_WORKSPACE, build_spec
    from sbx.domain.sandbox.identity import FALLBACK_HOME

    driver: ProbeEngine = ctx.driver
    image = driver.image(image_ref)
    if image is None:
        raise SbxError(Reason.IMAGE_MISSING, f"{image_ref} is not present locally")
    config = ctx.load_config()
    uid = config.sandbox.user.value
    run_id = uuid.uuid4().hex
    deadline = math.ceil(time.time() + wait_s + PROBE_TIMEOUT_S)
    labels = label_keys.object_labels(home_hash=ctx.home_hash, run_id=run_id,
                                      deadline=deadline, kits=[PROBE_KIT],
                                      role=label_keys.ROLE_HELPER)
    spec = build_spec(image=image.id, uid=uid, gid=uid, limits=limits,
                      workspace_target=DEFAULT_WORKSPACE, workspace_bind=None, extra_binds=(),
                      command=(), entrypoint=("/bin/sh", "-c", PROBE_SCRIPT), env={},
                      home=FALLBACK_HOME, labels=labels, image_labels=image.labels,
                      engine_log=True)
    run_dir, owner = _write_probe_record(ctx.state_home, run_id, deadline, image_ref)
    container_id: str | None = None
    try:
        container_id = driver.create(spec)
        runrecord.update(run_dir, container_id=container_id)
        driver.start(container_id)
        if driver.wait(container_id, wait_s) is None:
            driver.kill(container_id)
            # Not an image problem (the next image would not help): the engine is stuck.
            raise SbxError(Reason.DOCKER_UNREACHABLE,
                           f"the probe in {image_ref} did not finish within {wait_s:g}s")
        output = b"".join(chunk for stream, chunk in driver.output(container_id)
                          if stream == "stdout")
    finally:
        removed = container_id is None or _remove_quietly(driver, container_id)
        if removed:
            shutil.rmtree(run_dir, ignore_errors=True)
        if owner is not None:
            os.close(owner)  # from now on gc may take what is left
    return parse_probe_output(output.decode("utf-8", "replace"))


def _remove_quietly(driver: Containers, container_id: str) -> bool:
    try:
        return driver.remove_container(container_id)
    except SbxError:
        return False  # the run directory stays, so `sbx gc` removes the probe later


def _write_probe_record(state_home: Path, run_id: str, deadline: int,
                        image_ref: str) -> tuple[Path, int | None]:
    """The probe's run directory, with its owner lock held (gc leaves a probe alone while
    doctor reads it, even once it has exited)."""
    return runrecord.create(state_home, runrecord.RunRecord(
        run_id=run_id, deadline=deadline, workload=PROBE_KIT, image=image_ref),
        owner_lock=True)


def parse_probe_output(text: str) -> dict[str, str]:
    readings: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip():
            readings[key.strip()] = value.strip()
    return readings


def compare_limits(limits: Limits, readings: Mapping[str, str]) -> list[LimitReading]:
    """Each configured limit against what the probe read from its own cgroup (v1 or v2)."""
    version = readings.get("cgroup", "")
    asked_memory = limits.memory_bytes
    asked_cpu = limits.cpu_millis
    out: list[LimitReading] = []

    memory_raw = readings.get("memory")
    memory = _bytes_value(memory_raw, version)
    out.append(LimitReading("memory", _size(asked_memory), _shown(memory_raw, memory, _size),
                            memory is not None
                            and abs(memory - asked_memory) < MEMORY_SLACK_BYTES))

    # swap = memory (SPEC §5): v2 shows the swap allowed beyond memory (must be 0), v1 the
    # memory+swap total (must equal memory).
    if version == "2" and "swap" in readings:
        swap = _bytes_value(readings["swap"], version)
        out.append(LimitReading("swap", "none beyond memory", _swap_shown(swap, readings["swap"]),
                                swap == 0))
    elif version == "1" and "memsw" in readings:
        memsw = _bytes_value(readings["memsw"], version)
        extra = memsw - memory if memsw is not None and memory is not None else None
        out.append(LimitReading("swap", "none beyond memory",
                                _swap_shown(extra, readings["memsw"]), extra == 0))

    pids_raw = readings.get("pids")
    pids = int(pids_raw) if pids_raw is not None and pids_raw.isdigit() else None
    shown_pids = "unlimited" if pids_raw == "max" else (pids_raw or "unreadable")[:40]
    out.append(LimitReading("pids", str(limits.pids), shown_pids, pids == limits.pids))

    millis = _cpu_millis(readings, version)
    out.append(LimitReading("cpu", _cpus(asked_cpu),
                            _cpus(millis) if millis is not None else _cpu_raw(readings, version),
                            millis is not None and abs(millis - asked_cpu) <= 1))
    return out


def judge_limits(limits: Limits, readings: Mapping[str, str], image_ref: str) -> Verdict:
    compared = compare_limits(limits, readings)
    version = readings.get("cgroup", "?")
    data = {"cgroup_version": version, "probe_image": image_ref,
            "limits": [reading.as_dict() for reading in compared]}
    missing = [r for r in compared if not r.enforced]
    if missing:
        listed = ", ".join(f"{r.name} (asked {r.asked}, read {r.read})" for r in missing)
        return Verdict(Status.FAIL, f"not enforced: {listed}", Reason.RESOURCE_LIMITS_UNENFORCED,
                       Reason.RESOURCE_LIMITS_UNENFORCED.info.fix,
                       {**data, "unenforced": [r.name for r in missing]})
    shown = ", ".join(f"{r.name} {r.asked}" for r in compared if r.name != "swap")
    swap_note = "" if any(r.name == "swap" for r in compared) else "; swap not checked " \
        "(no swap accounting)"
    return Verdict(Status.OK, f"{shown} enforced (cgroup v{version}, probe {image_ref})"
                   f"{swap_note}", data=data)


def _bytes_value(raw: str | None, version: str) -> int | None:
    """Bytes, or None for unlimited/unreadable."""
    if raw is None or not raw.isdigit():
        return None  # v2 "max", garbage, or missing
    value = int(raw)
    if version == "1" and value >= UNLIMITED_V1_BYTES:
        return None  # v1 says "unlimited" with a huge page-aligned number
    return value


def _cpu_millis(readings: Mapping[str, str], version: str) -> int | None:
    if version == "2":
        quota, _, period = readings.get("cpu", "").partition(" ")
    else:
        quota, period = readings.get("cpu_quota", ""), readings.get("cpu_period", "")
    if not quota.isdigit() or not period.isdigit() or int(period) == 0:
        return None  # "max" (v2) or -1 (v1): no quota
    return round(int(quota) * 1000 / int(period))


def _cpu_raw(readings: Mapping[str, str], version: str) -> str:
    raw = readings.get("cpu" if version == "2" else "cpu_quota")
    if raw is None:
        return "unreadable"
    return "unlimited" if raw.startswith("max") or raw == "-1" else raw[:40]


def _swap_shown(extra: int | None, raw: str) -> str:
    if extra is None:
        return "unlimited" if raw == "max" or raw.isdigit() else (raw[:40] or "unreadable")
    return "none" if extra == 0 else f"{_size(extra)} beyond memory"


def _shown(raw: str | None, value: int | None, fmt: Callable[[int], str]) -> str:
    if value is not None:
        return fmt(value)
    if raw is None:
        return "unreadable"
    return "unlimited" if raw == "max" or raw.isdigit() else raw[:40]


def _size(number: int) -> str:
    for unit, name in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if number >= unit and number % unit == 0:
            return f"{number // unit} {name}"
    return f"{number} bytes"


def _cpus(millis: int) -> str:
    return f"{millis / 1000:.3f} CPUs"


__all__ = ["CHECKS", "CHECK_TIMEOUT_S", "DEFAULT_EGRESS_PROBES", "PROBE_IMAGES", "PROBE_SCRIPT",
           "PROBE_TIMEOUT_S", "PROXY_CHECK_TIMEOUT_S", "Check", "CheckResult", "DoctorProxy",
           "DoctorReport", "DoctorRequest", "DoctorState", "EgressProbes", "Verdict",
           "HostFacts", "LimitReading", "Status", "check_config", "check_egress_ca",
           "check_egress_host_services", "check_egress_proxy", "check_engine", "check_gc",
           "check_identity", "check_limits", "check_platform", "compare_limits",
           "diagnose", "judge_limits", "listening_ports",
           "parse_probe_output", "probe_candidates", "run_check", "run_probe"]
