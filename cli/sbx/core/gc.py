"""`sbx gc`: remove what crashed or killed runs left behind, by label only (SPEC §2.5).

The algorithm follows DuDuClaw's sweep (PEERS A.7), with sbx's additions (run records with pids,
proxies, networks and volumes). In order:

1. **Skip** a state home that never ran a sandbox (no ``runs/`` directory and no audit log)
   without contacting the engine: cron on a fresh machine costs nothing.
2. **Lock** ``<state>/gc.lock`` with a non-blocking ``flock``; when another gc holds it, do
   nothing and exit 0 (a dry run reads only and takes no lock).
3. **List** containers (all states), networks and volumes labelled with this home's hash, and
   parse every entry strictly. A failed listing or one entry that does not parse means **nothing
   is deleted** — not even run directories — and the failure is reported and audited.
4. **Decide** per object (pure functions, unit-tested on their own):

   - a container is removed when it is ``exited``/``dead``; or when its deadline label is more
     than the grace in the past; or when it is ``created`` (never started) and the sbx process
     recorded in its run directory is gone (*abandoned*). A missing or unreadable deadline is
     **never guessed**: the container is kept and reported. Every other container is kept: a
     live run is never touched inside its deadline + grace. A running container whose sbx was
     killed is removed once its deadline + grace has passed (the deadline is the backstop);
   - a network or volume is removed when no container uses it (other than containers removed
     in the same pass) and its run is over: its deadline + grace has passed, or its run
     directory records an sbx process that is gone. Without a readable deadline it is kept and
     reported;
   - a run directory (``runs/<32 hex>``, a real directory, never a symlink; other entries are
     never touched) is removed when no remaining object carries its run id, the process it
     records is gone, and it is older than the grace. A record that cannot be read makes it wait
     at least :data:`UNREADABLE_RECORD_FLOOR_S` whatever the grace, because a starting run
     writes it a moment after creating the directory;
   - a proxy process recorded in a run directory (``proxy_pid``) is stopped before that
     directory is removed, and only if it is alive **and** its ``/proc/<pid>/cmdline`` contains
     the run id: an unrelated process that reused the pid is never signalled.

5. **Remove** in batches of ``[gc] batch_size`` (at most :data:`MAX_BATCHES` per invocation;
   the rest is deferred to the next one), confirming after each batch, with one listing, that
   every removed object is gone. Failures are audited as ``cleanup_failed {reason, count}``.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import shutil
import signal
import stat
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence, Set
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from sbx import audit
from sbx import labels as label_keys
from sbx.errors import SbxError
from sbx.reasons import ExitStatus, Reason

if TYPE_CHECKING:
    from sbx.context import AppContext
    from sbx.driver import Driver, RawListing

RUNS_DIR: Final = "runs"
RUN_RECORD: Final = "run.json"
LOCK_FILE: Final = "gc.lock"
MAX_BATCHES: Final = 64
# A run writes its run.json right after creating its directory; a record that cannot be read is
# given at least this long (whatever --grace says) before the directory counts as abandoned.
UNREADABLE_RECORD_FLOOR_S: Final = 60
MAX_RECORD_BYTES: Final = 64 * 1024
PROXY_TERM_WAIT_S: Final = 2.0
PROXY_KILL_WAIT_S: Final = 1.0
_POLL_S: Final = 0.05

RUN_ID: Final = re.compile(r"^[0-9a-f]{32}$")
FULL_ID: Final = re.compile(r"^[0-9a-f]{64}$")
CONTAINER_STATES: Final = frozenset(
    {"created", "running", "paused", "restarting", "removing", "exited", "dead"})
FINISHED_STATES: Final = frozenset({"exited", "dead"})

# Why an object was kept, when that needs a human's attention (printed even without -v).
REPORTED_KEPT: Final = frozenset({"deadline_missing", "deadline_unreadable"})

# Failure kinds (the `reason` of a cleanup_failed audit record, as in PEERS A.6/A.7).
LIST_FAILED: Final = "list_failed"
LIST_INVALID: Final = "list_invalid"
DOCKER_UNREACHABLE: Final = "docker_unreachable"


# -- results -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class GcRequest:
    dry_run: bool = False
    grace_s: int | None = None  # None: [gc] grace_seconds from the config


@dataclass(frozen=True)
class GcItem:
    """One object gc removed (or would remove) or kept, and why (a stable token)."""

    kind: str  # container | network | volume | run_dir | proxy
    id: str  # full id, volume name, run directory name, or pid
    run_id: str | None
    why: str
    detail: str = ""

    @property
    def short(self) -> str:
        return self.id[:12] if FULL_ID.match(self.id) else self.id

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "id": self.id, "run_id": self.run_id, "why": self.why,
                "detail": self.detail}


@dataclass(frozen=True)
class GcFailure:
    kind: str  # list_failed | list_invalid | docker_unreachable | <kind>_remove_failed | ...
    reason: Reason
    message: str
    target: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "reason": self.reason.value, "message": self.message,
                "target": self.target}


@dataclass
class GcResult:
    outcome: str  # done | skipped (never ran a sandbox) | locked (another gc runs)
    dry_run: bool
    grace_s: int | None
    removed: list[GcItem] = field(default_factory=list)
    kept: list[GcItem] = field(default_factory=list)
    failed: list[GcFailure] = field(default_factory=list)
    deferred: int = 0
    note: str | None = None

    @property
    def exit_status(self) -> ExitStatus:
        return Reason.CLEANUP_FAILED.exit_status if self.failed else ExitStatus.OK

    @property
    def reported(self) -> list[GcItem]:
        """Kept objects a human must look at (a deadline sbx cannot read)."""
        return [item for item in self.kept if item.why in REPORTED_KEPT]

    def counts(self) -> dict[str, int]:
        counter = Counter(item.kind for item in self.removed)
        return {kind: counter.get(kind, 0)
                for kind in ("container", "network", "volume", "run_dir", "proxy")}

    def as_dict(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome,
            "dry_run": self.dry_run,
            "grace_seconds": self.grace_s,
            "removed": [item.as_dict() for item in self.removed],
            "kept": [item.as_dict() for item in self.kept],
            "failed": [failure.as_dict() for failure in self.failed],
            "deferred": self.deferred,
            "counts": self.counts(),
            "note": self.note,
        }


# -- parsed inputs -----------------------------------------------------------------------------


class ListingInvalid(Exception):
    """An entry of the engine's listing does not parse; gc then deletes nothing."""


@dataclass(frozen=True)
class ContainerEntry:
    id: str
    state: str
    run_id: str | None
    deadline_raw: str | None


@dataclass(frozen=True)
class SharedEntry:
    """A network or a volume (``id`` is the network id or the volume name)."""

    kind: str
    id: str
    run_id: str | None
    deadline_raw: str | None


@dataclass(frozen=True)
class RunRecord:
    pid: int | None
    deadline: int | None
    proxy_pid: int | None


@dataclass(frozen=True)
class RunDir:
    name: str
    path: Path
    real_dir: bool
    age_s: float
    record: RunRecord | None  # None: missing or unreadable run.json


@dataclass(frozen=True)
class Listing:
    containers: tuple[ContainerEntry, ...]
    shared: tuple[SharedEntry, ...]


def parse_listing(raw: RawListing, home_hash: str) -> Listing:
    """Parse every entry strictly; raise :class:`ListingInvalid` naming the first bad one."""
    containers = tuple(_parse_container(entry, home_hash) for entry in raw.containers)
    networks = tuple(_parse_network(entry, home_hash) for entry in raw.networks)
    volumes = tuple(_parse_volume(entry, home_hash) for entry in raw.volumes)
    return Listing(containers, networks + volumes)


def _labels(entry: Mapping[str, Any], what: str, home_hash: str) -> Mapping[str, str]:
    labels = entry.get("Labels")
    if not isinstance(labels, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        raise ListingInvalid(f"{what} has no readable labels")
    # The engine filtered by these labels; an entry without them means the listing cannot be
    # trusted at all.
    if labels.get(label_keys.MANAGED) != "true" or labels.get(label_keys.HOME) != home_hash:
        raise ListingInvalid(f"{what} lacks this state home's labels")
    return labels


def _run_label(labels: Mapping[str, str]) -> str | None:
    value = labels.get(label_keys.RUN)
    return value if value is not None and RUN_ID.match(value) else None


def _parse_container(entry: object, home_hash: str) -> ContainerEntry:
    if not isinstance(entry, dict):
        raise ListingInvalid("a container entry is not an object")
    ident = entry.get("Id")
    if not isinstance(ident, str) or not FULL_ID.match(ident):
        raise ListingInvalid(f"a container entry has no valid id ({_clip(ident)})")
    state = entry.get("State")
    if not isinstance(state, str) or state not in CONTAINER_STATES:
        raise ListingInvalid(f"container {ident[:12]} has an unknown state ({_clip(state)})")
    labels = _labels(entry, f"container {ident[:12]}", home_hash)
    return ContainerEntry(ident, state, _run_label(labels), labels.get(label_keys.DEADLINE))


def _parse_network(entry: object, home_hash: str) -> SharedEntry:
    if not isinstance(entry, dict):
        raise ListingInvalid("a network entry is not an object")
    ident = entry.get("Id")
    if not isinstance(ident, str) or not FULL_ID.match(ident):
        raise ListingInvalid(f"a network entry has no valid id ({_clip(ident)})")
    labels = _labels(entry, f"network {ident[:12]}", home_hash)
    return SharedEntry("network", ident, _run_label(labels), labels.get(label_keys.DEADLINE))


def _parse_volume(entry: object, home_hash: str) -> SharedEntry:
    if not isinstance(entry, dict):
        raise ListingInvalid("a volume entry is not an object")
    name = entry.get("Name")
    if not isinstance(name, str) or not name:
        raise ListingInvalid(f"a volume entry has no valid name ({_clip(name)})")
    labels = _labels(entry, f"volume {name[:24]}", home_hash)
    return SharedEntry("volume", name, _run_label(labels), labels.get(label_keys.DEADLINE))


def _clip(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


# -- run directories and processes -------------------------------------------------------------


def pid_alive(pid: int) -> bool:
    """True when ``pid`` names a live (non-zombie) process; unknown counts as alive."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return True
    fields = text.rpartition(")")[2].split()
    return not fields or fields[0] != "Z"


def proc_cmdline(pid: int) -> str | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return raw.replace(b"\0", b" ").decode("utf-8", "replace")


def read_run_dirs(state_home: Path, now: float) -> list[RunDir]:
    """Every ``runs/<run id>`` entry; anything else under ``runs/`` is ignored, never touched."""
    root = state_home / RUNS_DIR
    try:
        names = sorted(os.listdir(root))
    except FileNotFoundError:
        return []
    found = []
    for name in names:
        if not RUN_ID.match(name):
            continue
        path = root / name
        try:
            info = path.lstat()
        except FileNotFoundError:
            continue  # removed by its own run meanwhile
        real_dir = stat.S_ISDIR(info.st_mode)
        newest = info.st_mtime
        record = None
        if real_dir:
            newest = max(newest, _newest_entry(path))
            record = _read_record(path / RUN_RECORD)
        found.append(RunDir(name, path, real_dir, max(0.0, now - newest), record))
    return found


def _newest_entry(path: Path) -> float:
    newest = 0.0
    try:
        with os.scandir(path) as entries:
            for entry in entries:
                try:
                    newest = max(newest, entry.stat(follow_symlinks=False).st_mtime)
                except FileNotFoundError:
                    continue
    except OSError:
        return newest
    return newest


def _read_record(path: Path) -> RunRecord | None:
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_RECORD_BYTES + 1)
    except OSError:
        return None
    if len(raw) > MAX_RECORD_BYTES:
        return None
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict):
        return None
    return RunRecord(_int(data.get("pid")), _int(data.get("deadline")),
                     _int(data.get("proxy_pid")))


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


# -- decisions (pure) --------------------------------------------------------------------------


@dataclass(frozen=True)
class Clock:
    """What the decisions need to know about the present."""

    now: float
    grace_s: int
    alive: Callable[[int], bool]

    def past(self, deadline: int) -> bool:
        return self.now > deadline + self.grace_s

    def run_live(self, record: RunRecord | None) -> bool:
        """The sbx process of a run is alive (inside its deadline + grace: past it, a live pid
        is a reused one or a hung run whose container goes by its deadline anyway)."""
        if record is None or record.pid is None:
            return False
        if record.deadline is not None and self.past(record.deadline):
            return False
        return self.alive(record.pid)

    def run_over(self, run: RunDir | None) -> bool:
        """Positive evidence that a run ended: its record names an sbx process that is gone."""
        return (run is not None and run.real_dir and run.record is not None
                and run.record.pid is not None and not self.run_live(run.record))


def judge_container(entry: ContainerEntry, runs: Mapping[str, RunDir],
                    clock: Clock) -> tuple[bool, str, str]:
    """``(remove, why, detail)`` for one container."""
    if entry.state in FINISHED_STATES:
        return True, entry.state, f"the container is {entry.state}"
    if entry.state == "removing":
        return False, "removing", "the engine is already removing it"
    deadline = _deadline(entry.deadline_raw)
    if deadline is None:
        return False, *_deadline_problem(entry.deadline_raw)
    if clock.past(deadline):
        return True, "deadline_passed", (
            f"its deadline passed {int(clock.now - deadline)}s ago (grace {clock.grace_s}s)")
    if entry.state == "created" and entry.run_id is not None \
            and clock.run_over(runs.get(entry.run_id)):
        return True, "abandoned", "never started, and the sbx process that created it is gone"
    return False, "inside_deadline", f"{entry.state}, deadline in {int(deadline - clock.now)}s"


def judge_shared(entry: SharedEntry, runs: Mapping[str, RunDir],
                 clock: Clock) -> tuple[bool, str, str]:
    """``(candidate, why, detail)`` for a network or volume; a candidate is removed only when
    no container still uses it."""
    deadline = _deadline(entry.deadline_raw)
    if deadline is None:
        return False, *_deadline_problem(entry.deadline_raw)
    if clock.past(deadline):
        return True, "deadline_passed", f"its deadline passed {int(clock.now - deadline)}s ago"
    if entry.run_id is not None and clock.run_over(runs.get(entry.run_id)):
        return True, "run_over", "the sbx process of its run is gone"
    left = int(deadline - clock.now)
    return False, "inside_deadline", f"its run may be live (deadline in {left}s)"


def judge_run_dir(run: RunDir, in_use: Set[str], clock: Clock) -> tuple[bool, str, str]:
    """``(remove, why, detail)`` for one run directory."""
    if not run.real_dir:
        return False, "not_a_directory", "not a real directory (never followed or removed)"
    if run.name in in_use:
        return False, "in_use", "an object of this run is still present"
    if clock.run_live(run.record):
        return False, "live", "the sbx process of this run is alive"
    floor = clock.grace_s if run.record is not None and run.record.pid is not None else max(
        clock.grace_s, UNREADABLE_RECORD_FLOOR_S)
    if run.age_s <= floor:
        return False, "young", f"changed {int(run.age_s)}s ago (waits {floor}s)"
    if run.record is None or run.record.pid is None:
        return True, "unreadable_record", "no readable run record, unused and old"
    return True, "finished", "its sbx process is gone and nothing uses it"


def _deadline(raw: str | None) -> int | None:
    return int(raw) if raw is not None and raw.isascii() and raw.isdigit() else None


def _deadline_problem(raw: str | None) -> tuple[str, str]:
    if raw is None:
        return "deadline_missing", "it has no deadline label; sbx never guesses one"
    return "deadline_unreadable", f"its deadline label {_clip(raw)} is unreadable; sbx never " \
                                  "guesses one"


# -- the collector -----------------------------------------------------------------------------


def ran_before(state_home: Path) -> bool:
    """A state home that never ran a sandbox has neither ``runs/`` nor an audit log."""
    return (state_home / RUNS_DIR).is_dir() or audit.audit_path(state_home).exists()


@contextmanager
def gc_lock(state_home: Path) -> Iterator[bool]:
    """Hold ``<state>/gc.lock`` (non-blocking); yields False when another gc holds it."""
    path = state_home / LOCK_FILE
    try:
        state_home.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise SbxError(Reason.CLEANUP_FAILED, f"cannot open the gc lock {path}: {exc.strerror}",
                       hint="Check the state home's ownership and permissions.") from exc
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            yield False
            return
        yield True
    finally:
        os.close(fd)  # closing the descriptor releases the lock


@dataclass(frozen=True)
class Processes:
    """How gc sees and stops processes (injected by tests)."""

    alive: Callable[[int], bool] = pid_alive
    cmdline: Callable[[int], str | None] = proc_cmdline
    signal: Callable[[int, int], None] = os.kill
    sleep: Callable[[float], None] = time.sleep


def collect(ctx: AppContext, request: GcRequest, *, clock: Callable[[], float] = time.time,
            processes: Processes | None = None) -> GcResult:
    """Run gc for ``ctx``'s state home (see the module docstring for the rules)."""
    procs = processes or Processes()
    state_home = ctx.state_home
    if not ran_before(state_home):
        return GcResult("skipped", request.dry_run, request.grace_s,
                        note="this state home never ran a sandbox; the engine was not contacted")
    config = ctx.load_config()  # an invalid config refuses (invalid_config), never defaults
    grace = request.grace_s if request.grace_s is not None else config.gc.grace_seconds.value
    batch = config.gc.batch_size.value
    if request.dry_run:
        return _Collector(ctx, request, grace, batch, clock, procs).run()
    with gc_lock(state_home) as acquired:
        if not acquired:
            return GcResult("locked", request.dry_run, grace,
                            note=f"another sbx gc holds {state_home / LOCK_FILE}; nothing done")
        result = _Collector(ctx, request, grace, batch, clock, procs).run()
    _audit(state_home, result)
    return result


def survey(ctx: AppContext, *, clock: Callable[[], float] = time.time) -> GcResult:
    """What ``sbx gc`` would do now with the configured grace (doctor's count): a dry run."""
    return collect(ctx, GcRequest(dry_run=True), clock=clock)


class _Collector:
    def __init__(self, ctx: AppContext, request: GcRequest, grace: int, batch: int,
                 clock: Callable[[], float], procs: Processes) -> None:
        self.ctx = ctx
        self.dry_run = request.dry_run
        self.batch = max(1, batch)
        self.procs = procs
        self.clock = Clock(clock(), grace, procs.alive)
        self.result = GcResult("done", request.dry_run, grace)

    @property
    def driver(self) -> Driver:
        return self.ctx.driver

    def run(self) -> GcResult:
        runs_list = read_run_dirs(self.ctx.state_home, self.clock.now)
        try:
            raw = self.driver.list_labelled(label_keys.home_selector(self.ctx.home_hash))
            listing = parse_listing(raw, self.ctx.home_hash)
        except SbxError as error:
            kind = DOCKER_UNREACHABLE if error.reason is Reason.DOCKER_UNREACHABLE \
                else LIST_FAILED
            self._fail(kind, error.reason, f"listing this home's objects failed, nothing was "
                       f"removed: {error.message}")
            self._keep_all_run_dirs(runs_list, "listing_failed")
            return self.result
        except ListingInvalid as problem:
            self._fail(LIST_INVALID, Reason.CLEANUP_FAILED,
                       f"the engine's listing has an entry sbx cannot parse ({problem}); "
                       "nothing was removed")
            self._keep_all_run_dirs(runs_list, "listing_invalid")
            return self.result
        runs = {run.name: run for run in runs_list if run.real_dir}
        remaining: set[str] = set()  # run ids of objects that stay
        containers = self._plan_containers(listing.containers, runs, remaining)
        shared = self._plan_shared(listing.shared, runs, remaining, {c.id for c in containers})
        self._remove("container", containers, remaining)
        self._remove_shared(shared, remaining)
        self._run_dirs(runs_list, remaining)
        return self.result

    # -- planning ------------------------------------------------------------------------

    def _plan_containers(self, entries: Sequence[ContainerEntry], runs: Mapping[str, RunDir],
                         remaining: set[str]) -> list[GcItem]:
        planned: list[GcItem] = []
        limit = self.batch * MAX_BATCHES
        for entry in entries:
            remove, why, detail = judge_container(entry, runs, self.clock)
            item = GcItem("container", entry.id, entry.run_id, why, detail)
            if remove and len(planned) < limit:
                planned.append(item)
                continue
            if remove:
                item = GcItem("container", entry.id, entry.run_id, "deferred",
                              f"over this pass's limit of {limit}; next gc ({detail})")
                self.result.deferred += 1
            self.result.kept.append(item)
            _note_run(remaining, entry.run_id)
        return planned

    def _plan_shared(self, entries: Sequence[SharedEntry], runs: Mapping[str, RunDir],
                     remaining: set[str], leaving: set[str]) -> list[GcItem]:
        planned: list[GcItem] = []
        limit = self.batch * MAX_BATCHES
        for entry in entries:
            candidate, why, detail = judge_shared(entry, runs, self.clock)
            if candidate:
                try:
                    users = set(self.driver.object_users(entry.kind, entry.id)) - leaving
                except SbxError as error:
                    self._fail(f"{entry.kind}_remove_failed", error.reason,
                               f"could not check who uses {entry.kind} {_short(entry.id)}: "
                               f"{error.message}", entry.id)
                    _note_run(remaining, entry.run_id)
                    continue
                if users:
                    candidate, why = False, "in_use"
                    detail = f"used by {len(users)} container(s)"
            item = GcItem(entry.kind, entry.id, entry.run_id, why, detail)
            if candidate and len(planned) < limit:
                planned.append(item)
                continue
            if candidate:
                item = GcItem(entry.kind, entry.id, entry.run_id, "deferred",
                              f"over this pass's limit of {limit}; next gc ({detail})")
                self.result.deferred += 1
            self.result.kept.append(item)
            _note_run(remaining, entry.run_id)
        return planned

    # -- removal -------------------------------------------------------------------------

    def _remove_shared(self, planned: list[GcItem], remaining: set[str]) -> None:
        # Networks before volumes, so a volume is never left for a network's sake; each kind
        # is confirmed by its own listing.
        self._remove("network", [i for i in planned if i.kind == "network"], remaining)
        self._remove("volume", [i for i in planned if i.kind == "volume"], remaining)

    def _remove(self, kind: str, planned: list[GcItem], remaining: set[str]) -> None:
        if self.dry_run:
            self.result.removed.extend(planned)
            return
        remover = {"container": self.driver.remove_container,
                   "network": self.driver.remove_network,
                   "volume": self.driver.remove_volume}[kind]
        for start in range(0, len(planned), self.batch):
            attempted: list[GcItem] = []
            for item in planned[start:start + self.batch]:
                try:
                    remover(item.id)
                except SbxError as error:
                    self._fail(f"{kind}_remove_failed", Reason.CLEANUP_FAILED,
                               f"could not remove {kind} {item.short}: {error.message}", item.id)
                    _note_run(remaining, item.run_id)
                    continue
                attempted.append(item)
            self._confirm(kind, attempted, remaining)

    def _confirm(self, kind: str, attempted: list[GcItem], remaining: set[str]) -> None:
        if not attempted:
            return
        try:
            still = self.driver.present(kind, [item.id for item in attempted])
        except SbxError as error:
            for item in attempted:
                self._fail(f"{kind}_remove_failed", Reason.CLEANUP_FAILED,
                           f"could not confirm that {kind} {item.short} is gone: "
                           f"{error.message}", item.id)
                _note_run(remaining, item.run_id)
            return
        for item in attempted:
            if item.id in still:
                self._fail(f"{kind}_remove_failed", Reason.CLEANUP_FAILED,
                           f"{kind} {item.short} is still present after its removal", item.id)
                _note_run(remaining, item.run_id)
            else:
                self.result.removed.append(item)

    def _run_dirs(self, runs: list[RunDir], remaining: set[str]) -> None:
        for run in runs:
            remove, why, detail = judge_run_dir(run, remaining, self.clock)
            if not remove:
                self.result.kept.append(GcItem("run_dir", run.name, run.name, why, detail))
                continue
            if run.record is not None and run.record.proxy_pid is not None \
                    and not self._stop_proxy(run.name, run.record.proxy_pid):
                continue
            item = GcItem("run_dir", run.name, run.name, why, detail)
            if self.dry_run:
                self.result.removed.append(item)
                continue
            try:
                shutil.rmtree(run.path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                self._fail("directory_remove_failed", Reason.CLEANUP_FAILED,
                           f"could not remove run directory {run.name}: {exc.strerror}",
                           run.name)
                continue
            if os.path.lexists(run.path):
                self._fail("directory_remove_failed", Reason.CLEANUP_FAILED,
                           f"run directory {run.name} is still present after its removal",
                           run.name)
                continue
            self.result.removed.append(item)

    def _stop_proxy(self, run_id: str, pid: int) -> bool:
        """Stop a run's orphaned proxy; False (and a failure) when it would not stop."""
        procs = self.procs
        if not procs.alive(pid):
            return True
        cmdline = procs.cmdline(pid)
        if cmdline is None or run_id not in cmdline:
            # The pid was reused by an unrelated process: never signal it.
            self.result.kept.append(GcItem("proxy", str(pid), run_id, "not_ours",
                                           "the pid now belongs to another process"))
            return True
        item = GcItem("proxy", str(pid), run_id, "orphaned", "its run is over")
        if self.dry_run:
            self.result.removed.append(item)
            return True
        for sig, wait in ((signal.SIGTERM, PROXY_TERM_WAIT_S), (signal.SIGKILL, PROXY_KILL_WAIT_S)):
            try:
                procs.signal(pid, sig)
            except ProcessLookupError:
                break
            except PermissionError as exc:
                self._fail("proxy_stop_failed", Reason.CLEANUP_FAILED,
                           f"could not stop proxy {pid} of run {run_id}: {exc.strerror}", run_id)
                return False
            if _wait_gone(procs, pid, wait):
                break
        if procs.alive(pid):
            self._fail("proxy_stop_failed", Reason.CLEANUP_FAILED,
                       f"proxy {pid} of run {run_id} is still running after SIGKILL", run_id)
            return False
        self.result.removed.append(item)
        return True

    # -- bookkeeping ---------------------------------------------------------------------

    def _fail(self, kind: str, reason: Reason, message: str, target: str | None = None) -> None:
        self.result.failed.append(GcFailure(kind, reason, message, target))

    def _keep_all_run_dirs(self, runs: list[RunDir], why: str) -> None:
        self.result.kept.extend(GcItem("run_dir", run.name, run.name, why,
                                       "nothing is removed when the listing fails")
                                for run in runs)


def _wait_gone(procs: Processes, pid: int, seconds: float) -> bool:
    for _ in range(max(1, int(seconds / _POLL_S))):
        if not procs.alive(pid):
            return True
        procs.sleep(_POLL_S)
    return not procs.alive(pid)


def _note_run(remaining: set[str], run_id: str | None) -> None:
    if run_id is not None:
        remaining.add(run_id)


def _short(ident: str) -> str:
    return ident[:12] if FULL_ID.match(ident) else ident


def _audit(state_home: Path, result: GcResult) -> None:
    """``cleanup_failed {reason, count}`` per kind of failure, and one record of removals."""
    try:
        for kind, count in sorted(Counter(f.kind for f in result.failed).items()):
            audit.record(state_home, audit.CLEANUP_FAILED, run_id=None, severity="warning",
                         details={"reason": kind, "count": count, "source": "gc"})
        if result.removed:
            audit.record(state_home, audit.GC_REMOVED, run_id=None, severity="info",
                         details={**result.counts(), "grace_seconds": result.grace_s})
    except OSError:
        # An unwritable audit log must not hide gc's own result, which is still reported.
        return


__all__ = ["CONTAINER_STATES", "LOCK_FILE", "MAX_BATCHES", "RUNS_DIR", "RUN_RECORD",
           "UNREADABLE_RECORD_FLOOR_S", "Clock", "ContainerEntry", "GcFailure", "GcItem",
           "GcRequest", "GcResult", "Listing", "ListingInvalid", "Processes", "RunDir",
           "RunRecord", "SharedEntry", "collect", "gc_lock", "judge_container",
           "judge_run_dir", "judge_shared", "parse_listing", "pid_alive", "proc_cmdline",
           "ran_before", "read_run_dirs", "survey"]
