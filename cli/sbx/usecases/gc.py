"""`sbx gc`: remove what crashed or killed runs left behind, by label only (SPEC §2.5).

The algorithm follows DuDuClaw's sweep (PEERS A.7), with sbx's additions (run records with pids,
proxies, networks, volumes, per-run images and host firewall rules). In order:

1. **Skip** a state home that never ran a sandbox (no ``runs/`` directory and no audit log)
   without contacting the engine: cron on a fresh machine costs nothing.
2. **Lock** ``<state>/gc.lock`` with a non-blocking ``flock``; when another gc holds it, do
   nothing and exit 0 (a dry run reads only and takes no lock).
3. **List** containers (all states), networks, volumes and images (all, untagged included)
   labelled with this home's hash, and parse every entry strictly. A failed listing or one
   entry that does not parse means **nothing is deleted** — not even run directories — and the
   failure is reported and audited.
4. **Decide** per object (pure functions, unit-tested on their own). Whatever its state, an
   object whose run's owner is alive (it holds ``runs/<id>/owner.lock``, taken before the run
   creates anything) is never touched; the lock is looked at again right before each removal,
   so a run that started after gc read its run directories is seen too.

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
   - a per-run image (``sbx-run/<run id>:1``, committed by the create step with the run's
     labels) is removed by the same rule as a network or volume once no container uses it
     (judged after this pass's containers are gone). An image of this home tagged with anything
     else than its run's ``sbx-run/`` name is never removed;
   - a host firewall rule (INPUT, commented ``sbx-run-<run id>``) is removed only when its run
     is **known to this home** (a run directory, or a labelled object of this home, carries
     that id) and that run is not live and over: its deadline + grace passed, its recorded sbx
     process is gone, or the bridge the rule names no longer exists. Rules of any other run are
     never touched (another home may own them). Without iptables or root the rules are not
     checked (a note under ``-v``/``--json``, never a failure); a rule listing that fails or
     has one line that does not parse removes no rule and keeps every run directory (they are
     what tells a later pass which rules are this home's);
   - a run directory (``runs/<32 hex>``, a real directory, never a symlink; other entries are
     never touched) is removed when no remaining object (a firewall rule included) carries its
     run id, the process it records is gone, and it is older than the grace. A record that
     cannot be read makes it wait at least :data:`UNREADABLE_RECORD_FLOOR_S` whatever the
     grace, because a starting run writes it a moment after creating the directory;
   - a proxy process recorded in a run directory (``proxy_pid``) is stopped before that
     directory is removed, and only if it is alive **and** its ``/proc/<pid>/cmdline`` contains
     the run id: an unrelated process that reused the pid is never signalled.

5. **Remove** in batches of ``[gc] batch_size`` (at most :data:`MAX_BATCHES` per invocation;
   the rest is deferred to the next one), confirming after each batch, with one listing, that
   every removed object is gone. Failures are audited as ``cleanup_failed {reason, count}``.
"""

from __future__ import annotations

import contextlib
import dataclasses
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
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar

from sbx.base import labels as label_keys
from sbx.base.errors import SbxError
from sbx.base.reasons import ExitStatus, Reason
from sbx.domain.sandbox.runrecord import OWNER_LOCK, RUN_RECORD, RUNS_DIR
from sbx.domain.sandbox.sources import NAMED_PREFIX, STAGING_ROOT, release_points, stale_staging
from sbx.seams import audit, owned
from sbx.seams.host import processes
from sbx.seams.host.firewall import (
    FirewallError,
    FirewallUnavailable,
    RuleListingInvalid,
    SbxRule,
    bridge_exists,
    list_sbx_rules,
    remove_rule,
)

if TYPE_CHECKING:
    from sbx.seams.engine import Containers, Images, Inventory, Networks, RawListing

    class GcEngine(Inventory, Containers, Networks, Images, Protocol):
        """The roles gc uses: listings, and removal of every kind of object."""
    from sbx.usecases.context import AppContext
from sbx.usecases.workspace_check import BASELINE_FILE

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
IMAGE_ID: Final = re.compile(r"^sha256:[0-9a-f]{64}$")
RUN_IMAGE_REPOSITORY: Final = "sbx-run/"
UNTAGGED: Final = "<none>:<none>"
KINDS: Final = ("container", "network", "volume", "image", "firewall_rule", "run_dir", "proxy",
                 "staging", "cached_image")
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
    named: bool = False  # --named: also remove stopped named sandboxes


@dataclass(frozen=True)
class GcItem:
    """One object gc removed (or would remove) or kept, and why (a stable token)."""

    kind: str  # container | network | volume | image | firewall_rule | run_dir | proxy
    id: str  # full id, volume name, image id, rule spec, run directory name, or pid
    run_id: str | None
    why: str
    detail: str = ""

    @property
    def short(self) -> str:
        return _short(self.id)

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
    # what the check of a crashed run's writable directories found (sbx.usecases.workspace_check)
    workspace_warnings: list[str] = field(default_factory=list)

    @property
    def exit_status(self) -> ExitStatus:
        return Reason.CLEANUP_FAILED.exit_status if self.failed else ExitStatus.OK

    @property
    def reported(self) -> list[GcItem]:
        """Kept objects a human must look at (a deadline sbx cannot read)."""
        return [item for item in self.kept if item.why in REPORTED_KEPT]

    def counts(self) -> dict[str, int]:
        counter = Counter(item.kind for item in self.removed)
        return {kind: counter.get(kind, 0) for kind in KINDS}

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
            "workspace_warnings": self.workspace_warnings,
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
    named: bool = False  # a named sandbox's (label dev.sbx.name): `sbx rm` removes it
    name: str | None = None  # the label's value; trusted only as :func:`trust_names` says


@dataclass(frozen=True)
class SharedEntry:
    """A network or a volume (``id`` is the network id or the volume name)."""

    kind: str
    id: str
    run_id: str | None
    deadline_raw: str | None
    named: bool = False
    name: str | None = None


@dataclass(frozen=True)
class ImageEntry:
    id: str  # sha256:<64 hex>
    tags: tuple[str, ...]
    run_id: str | None
    deadline_raw: str | None
    named: bool = False
    name: str | None = None


@dataclass(frozen=True)
class RunDirState:
    pid: int | None
    deadline: int | None
    proxy_pid: int | None
    named: bool = False  # the run that created a named sandbox: kept with it
    name: str | None = None  # that sandbox's name, as sbx recorded it
    # Whether the sbx process that owns the run still holds its owner lock (runs/<id>/
    # owner.lock): None for runs without one. Unlike a pid, a lock cannot be reused.
    owner_alive: bool | None = None


@dataclass(frozen=True)
class RunDir:
    name: str
    path: Path
    real_dir: bool
    age_s: float
    record: RunDirState | None  # None: missing or unreadable run.json


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
    return ContainerEntry(ident, state, _run_label(labels), labels.get(label_keys.DEADLINE),
                          name=label_keys.value(labels, label_keys.NAME))


def _parse_network(entry: object, home_hash: str) -> SharedEntry:
    if not isinstance(entry, dict):
        raise ListingInvalid("a network entry is not an object")
    ident = entry.get("Id")
    if not isinstance(ident, str) or not FULL_ID.match(ident):
        raise ListingInvalid(f"a network entry has no valid id ({_clip(ident)})")
    labels = _labels(entry, f"network {ident[:12]}", home_hash)
    return SharedEntry("network", ident, _run_label(labels), labels.get(label_keys.DEADLINE),
                       name=label_keys.value(labels, label_keys.NAME))


def parse_images(raw: Sequence[Any], home_hash: str) -> tuple[ImageEntry, ...]:
    """Parse every image entry strictly; raise :class:`ListingInvalid` on the first bad one."""
    return tuple(_parse_image(entry, home_hash) for entry in raw)


def _parse_image(entry: object, home_hash: str) -> ImageEntry:
    if not isinstance(entry, dict):
        raise ListingInvalid("an image entry is not an object")
    ident = entry.get("Id")
    if not isinstance(ident, str) or not IMAGE_ID.match(ident):
        raise ListingInvalid(f"an image entry has no valid id ({_clip(ident)})")
    tags = entry.get("RepoTags")
    if tags is None:
        tags = []
    if not isinstance(tags, list) or not all(isinstance(t, str) and t for t in tags):
        raise ListingInvalid(f"image {_short(ident)} has unreadable tags ({_clip(tags)})")
    labels = _labels(entry, f"image {_short(ident)}", home_hash)
    return ImageEntry(ident, tuple(tags), _run_label(labels), labels.get(label_keys.DEADLINE),
                      name=label_keys.value(labels, label_keys.NAME))


def _parse_volume(entry: object, home_hash: str) -> SharedEntry:
    if not isinstance(entry, dict):
        raise ListingInvalid("a volume entry is not an object")
    name = entry.get("Name")
    if not isinstance(name, str) or not name:
        raise ListingInvalid(f"a volume entry has no valid name ({_clip(name)})")
    labels = _labels(entry, f"volume {name[:24]}", home_hash)
    return SharedEntry("volume", name, _run_label(labels), labels.get(label_keys.DEADLINE),
                       name=label_keys.value(labels, label_keys.NAME))


def _clip(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


# -- run directories and processes -------------------------------------------------------------


def proc_cmdline(pid: int) -> str | None:
    """``pid``'s arguments, space-separated (None when they cannot be read)."""
    args = processes.cmdline(pid)
    return None if args is None else b" ".join(args).decode("utf-8", "replace")


def read_run_dirs(state_home: Path, now: float) -> list[RunDir]:
    """Every ``runs/<run id>`` entry; anything else under ``runs/`` is ignored, never touched."""
    root = state_home / RUNS_DIR
    owned.check_tree(root)  # what it finds there must be this user's to judge
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
            if record is None and owner_alive(path):
                # Its owner holds the lock but has not written the record yet (or it broke).
                record = RunDirState(None, None, None, owner_alive=True)
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


def _read_record(path: Path) -> RunDirState | None:
    try:
        raw = owned.read_prefix(path, MAX_RECORD_BYTES + 1)  # this user's own record only
    except (OSError, SbxError):
        return None
    if raw is None:
        return None
    if len(raw) > MAX_RECORD_BYTES:
        return None
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):  # not UTF-8, not JSON, or nested too deep to read
        return None
    if not isinstance(data, dict):
        return None
    name = data.get("name") if isinstance(data.get("name"), str) and data.get("name") else None
    return RunDirState(_int(data.get("pid")), _int(data.get("deadline")),
                       _int(data.get("proxy_pid")), named=name is not None, name=name,
                       owner_alive=owner_alive(path.parent))


def owner_alive(run_dir: Path) -> bool | None:
    """Whether the run's owner holds ``owner.lock`` (None: the run has none)."""
    try:
        fd = owned.open_file(run_dir / OWNER_LOCK)
    except (OSError, SbxError):
        return None
    if fd is None:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return None
    finally:
        os.close(fd)  # releases what was just taken
    return False


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

    def run_live(self, record: RunDirState | None) -> bool:
        """The sbx process of a run is alive (inside its deadline + grace: past it, a live pid
        is a reused one or a hung run whose container goes by its deadline anyway)."""
        if record is None:
            return False
        if record.owner_alive is not None:
            return record.owner_alive
        if record.pid is None:
            return False
        if record.deadline is not None and self.past(record.deadline):
            return False
        return self.alive(record.pid)

    def run_over(self, run: RunDir | None) -> bool:
        """Positive evidence that a run ended: its owner lock is free, or its record names an
        sbx process that is gone."""
        return (run is not None and run.real_dir and run.record is not None
                and (run.record.owner_alive is not None or run.record.pid is not None)
                and not self.run_live(run.record))


_Entry = TypeVar("_Entry", ContainerEntry, SharedEntry, ImageEntry)


def recorded_names(state_home: Path, runs: Mapping[str, RunDir]) -> dict[str, str]:
    """run id -> the name of the sandbox it created, as sbx recorded it: in the run's own
    record and in the named sandbox's record (this user's own files, sbx.seams.owned)."""
    from sbx.domain.sandbox.records import SandboxStore

    names = {run_id: run.record.name for run_id, run in runs.items()
             if run.record is not None and run.record.name is not None}
    store = SandboxStore(state_home)
    for name in store.names():
        try:
            record = store.load(name)
        except SbxError:
            continue
        if record is not None:
            names[record.run_id] = record.name
    return names


def trust_names(entry: _Entry, names: Mapping[str, str]) -> _Entry:
    """``entry`` named only when sbx recorded that its run made the sandbox its label names:
    a ``dev.sbx.name`` an image carried (or anyone else set) is not sbx's word."""
    trusted = entry.name is not None and entry.run_id is not None \
        and names.get(entry.run_id) == entry.name
    return dataclasses.replace(entry, named=trusted)


def judge_container(entry: ContainerEntry, runs: Mapping[str, RunDir],
                    clock: Clock) -> tuple[bool, str, str]:
    """``(remove, why, detail)`` for one container."""
    if entry.named:
        return False, *_NAMED
    if _owner_holds(entry.run_id, runs):
        return False, *_LIVE
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
    run = runs.get(entry.run_id) if entry.run_id is not None else None
    if run is not None and run.record is not None and run.record.owner_alive is False \
            and run.age_s >= clock.grace_s:
        # A one-shot sandbox never outlives its sbx process for longer than the grace.
        return True, "owner_gone", (f"the sbx process that owned it is gone (its owner lock "
                                    f"is free; grace {clock.grace_s}s)")
    return False, "inside_deadline", f"{entry.state}, deadline in {int(deadline - clock.now)}s"


def judge_shared(entry: SharedEntry, runs: Mapping[str, RunDir],
                 clock: Clock) -> tuple[bool, str, str]:
    """``(candidate, why, detail)`` for a network or volume; a candidate is removed only when
    no container still uses it."""
    if entry.named:
        return False, *_NAMED
    if _owner_holds(entry.run_id, runs):
        return False, *_LIVE
    deadline = _deadline(entry.deadline_raw)
    if deadline is None:
        return False, *_deadline_problem(entry.deadline_raw)
    if clock.past(deadline):
        return True, "deadline_passed", f"its deadline passed {int(clock.now - deadline)}s ago"
    if entry.run_id is not None and clock.run_over(runs.get(entry.run_id)):
        return True, "run_over", "the sbx process of its run is gone"
    left = int(deadline - clock.now)
    return False, "inside_deadline", f"its run may be live (deadline in {left}s)"


def judge_image(entry: ImageEntry, runs: Mapping[str, RunDir],
                clock: Clock) -> tuple[bool, str, str]:
    """``(candidate, why, detail)`` for an image of this home; a candidate is removed only when
    no container uses it. Only a run's own image qualifies: it names its run, and every tag it
    has is that run's ``sbx-run/<run id>:...`` (or it has none)."""
    if entry.named:
        return False, *_NAMED
    if entry.run_id is None:
        return False, "not_a_run_image", "it names no run; sbx removes only per-run images"
    own = f"{RUN_IMAGE_REPOSITORY}{entry.run_id}:"
    foreign = [tag for tag in entry.tags if tag != UNTAGGED and not tag.startswith(own)]
    if foreign:
        return False, "foreign_tag", (f"also tagged {_clip(foreign[0])}; sbx removes only its "
                                      "per-run images")
    return judge_shared(SharedEntry("image", entry.id, entry.run_id, entry.deadline_raw),
                        runs, clock)


def judge_rule(rule: SbxRule, runs: Mapping[str, RunDir], known: Mapping[str, int | None],
               clock: Clock, bridge_up: Callable[[str], bool]) -> tuple[bool, str, str]:
    """``(remove, why, detail)`` for one host firewall rule commented with a run id.

    ``known`` maps the run ids of this home's labelled objects to their latest readable
    deadline (None: none readable). A run neither there nor in ``runs`` belongs to no one this
    home knows: its rule is never touched.
    """
    run = runs.get(rule.run_id)
    if run is not None and run.record is not None and run.record.named:
        return False, *_NAMED
    if run is None and rule.run_id not in known:
        return False, "not_this_home", "its run is not one of this state home's (never touched)"
    record = run.record if run is not None else None
    if clock.run_live(record):
        return False, "live", "the sbx process of its run is alive"
    deadline = known.get(rule.run_id)
    if record is not None and record.deadline is not None:
        deadline = record.deadline if deadline is None else max(deadline, record.deadline)
    if deadline is not None and clock.past(deadline):
        return True, "deadline_passed", (
            f"its run's deadline passed {int(clock.now - deadline)}s ago")
    if clock.run_over(run):
        return True, "run_over", "the sbx process of its run is gone"
    if rule.bridge is not None and not bridge_up(rule.bridge):
        return True, "bridge_gone", f"interface {rule.bridge} no longer exists"
    if deadline is None:
        return False, "no_evidence", "nothing shows its run is over"
    return False, "inside_deadline", (
        f"its run may be live (deadline in {int(deadline - clock.now)}s)")


_NAMED: Final = ("named", "a named sandbox's: `sbx rm NAME` removes it (`sbx gc --named` "
                          "or `[gc] named_ttl` for stopped ones)")
_LIVE: Final = ("live", "the sbx process that owns it is alive (it holds its run's owner lock)")


def _owner_holds(run_id: str | None, runs: Mapping[str, RunDir]) -> bool:
    """The run's owner holds its owner lock: whatever the object's state, it is the owner's."""
    run = runs.get(run_id) if run_id is not None else None
    return run is not None and run.record is not None and run.record.owner_alive is True


def judge_run_dir(run: RunDir, in_use: Set[str], clock: Clock) -> tuple[bool, str, str]:
    """``(remove, why, detail)`` for one run directory."""
    if not run.real_dir:
        return False, "not_a_directory", "not a real directory (never followed or removed)"
    if run.record is not None and run.record.named:
        return False, *_NAMED
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
        owned.ensure_directory(state_home)
        fd = owned.open_lock(path)
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
class Firewall:
    """How gc sees and changes the host firewall (injected by tests)."""

    list_rules: Callable[[], list[SbxRule]] = list_sbx_rules
    remove_rule: Callable[[SbxRule], None] = remove_rule
    bridge_exists: Callable[[str], bool] = bridge_exists


@dataclass(frozen=True)
class Processes:
    """How gc sees and stops processes (injected by tests)."""

    alive: Callable[[int], bool] = processes.pid_alive
    cmdline: Callable[[int], str | None] = proc_cmdline
    signal: Callable[[int, int], None] = processes.send_signal
    sleep: Callable[[float], None] = time.sleep


def collect(ctx: AppContext, request: GcRequest, *, clock: Callable[[], float] = time.time,
            processes: Processes | None = None, firewall: Firewall | None = None) -> GcResult:
    """Run gc for ``ctx``'s state home (see the module docstring for the rules)."""
    procs = processes or Processes()
    rules = firewall or Firewall()
    state_home = ctx.state_home
    if not ran_before(state_home):
        return GcResult("skipped", request.dry_run, request.grace_s,
                        note="this state home never ran a sandbox; the engine was not contacted")
    config = ctx.load_config()  # an invalid config refuses (invalid_config), never defaults
    grace = request.grace_s if request.grace_s is not None else config.gc.grace_seconds.value
    batch = config.gc.batch_size.value
    if request.dry_run:
        return _Collector(ctx, request, grace, batch, clock, procs, rules,
                          image_idle_s=config.gc.image_idle_seconds.value).run()
    with gc_lock(state_home) as acquired:
        if not acquired:
            return GcResult("locked", request.dry_run, grace,
                            note=f"another sbx gc holds {state_home / LOCK_FILE}; nothing done")
        result = _Collector(ctx, request, grace, batch, clock, procs, rules,
                            image_idle_s=config.gc.image_idle_seconds.value).run()
        ttl = config.gc.named_ttl.value
        if result.outcome == "done" and (request.named or ttl is not None):
            _stopped_named(ctx, result, 0 if request.named or ttl is None else ttl, clock())
    _audit(state_home, result)
    return result


def _stopped_named(ctx: AppContext, result: GcResult, ttl: int, now: float) -> None:
    """Named sandboxes are never gc's to take, unless ``--named`` or ``[gc] named_ttl`` says
    so: then the stopped ones (never a running one) stopped for at least ``ttl`` seconds."""
    from sbx.domain.sandbox.records import SandboxStore
    from sbx.usecases.named import remove

    store = SandboxStore(ctx.state_home)
    for name in store.names():
        try:
            record = store.load(name)
            if record is None or record.container_id is None:
                continue
            finished = ctx.driver.container_finished_at(record.container_id)
            if finished is None or now - finished < ttl:
                continue
            remove(ctx, [name])
        except SbxError as error:
            result.failed.append(GcFailure("named_remove_failed", error.reason,
                                           f"named sandbox {name}: {error.message}", name))
            continue
        result.removed.append(GcItem("named", name, record.run_id, "stopped",
                                     f"stopped {int(now - finished)}s ago"))


def survey(ctx: AppContext, *, clock: Callable[[], float] = time.time) -> GcResult:
    """What ``sbx gc`` would do now with the configured grace (doctor's count): a dry run."""
    return collect(ctx, GcRequest(dry_run=True), clock=clock)


class _Collector:
    def __init__(self, ctx: AppContext, request: GcRequest, grace: int, batch: int,
                 clock: Callable[[], float], procs: Processes, firewall: Firewall, *,
                 image_idle_s: int) -> None:
        self.ctx = ctx
        self.image_idle_s = image_idle_s
        self.dry_run = request.dry_run
        self.batch = max(1, batch)
        self.procs = procs
        self.firewall = firewall
        self.clock = Clock(clock(), grace, procs.alive)
        self.result = GcResult("done", request.dry_run, grace)

    @property
    def driver(self) -> GcEngine:
        return self.ctx.driver

    def run(self) -> GcResult:
        runs_list = read_run_dirs(self.ctx.state_home, self.clock.now)
        selector = label_keys.home_selector(self.ctx.home_hash)
        try:
            raw = self.driver.list_labelled(selector)
            listing = parse_listing(raw, self.ctx.home_hash)
            images = parse_images(self.driver.list_labelled_images(selector), self.ctx.home_hash)
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
        names = recorded_names(self.ctx.state_home, runs)
        listing = Listing(tuple(trust_names(c, names) for c in listing.containers),
                          tuple(trust_names(e, names) for e in listing.shared))
        images = tuple(trust_names(i, names) for i in images)
        remaining: set[str] = set()  # run ids of objects that stay
        containers = self._plan_containers(listing.containers, runs, remaining)
        shared = self._plan_shared(listing.shared, runs, remaining, {c.id for c in containers})
        self._remove("container", containers, remaining)
        self._remove_shared(shared, remaining)
        # Images only once their containers are gone: whoever still uses one keeps it.
        gone = {item.id for item in self.result.removed if item.kind == "container"}
        self._remove("image", self._plan_images(images, runs, remaining, gone), remaining)
        if not self._firewall_rules(runs, _known_runs(listing, images), remaining):
            self._keep_all_run_dirs(runs_list, "firewall_listing_failed",
                                    "nothing shows which firewall rules are this home's")
            return self.result
        self._run_dirs(runs_list, remaining)
        self._orphan_staging({run.name for run in runs_list}, remaining)
        self._image_cache(self.image_idle_s)
        return self.result

    def _image_cache(self, idle_s: int) -> None:
        """Cached images (kit builds, assemblies, prepared images) nobody used within the
        grace: this home's use marks go, and an image no home marks goes with its cache tags
        (sbx.domain.sandbox.imagecache)."""
        from sbx.domain.sandbox.imagecache import (
            CACHE_REPOSITORIES,
            USE_REPOSITORY,
            judge_cached,
            marked_by,
            removal_order,
        )

        home = self.ctx.home_hash
        try:  # only this home's images are inspected: the cost follows this home, not all
            images = self.driver.cached_images(
                [USE_REPOSITORY, *CACHE_REPOSITORIES],
                inspect=lambda ident, tags: marked_by(home, ident, tags))
        except SbxError as error:
            self._fail("cached_image_list_failed", error.reason,
                       f"listing the cached images failed, none was removed: {error.message}")
            return
        decisions = []
        for image in images:
            users = (self._users("image", image.id, None, set(), set())
                     if marked_by(home, image.id, image.tags) else 0)
            if users is None:
                continue
            decision = judge_cached(image, home_hash=home, now=self.clock.now,
                                    grace_s=idle_s, users=users)
            if decision.untag:
                decisions.append(decision)
            else:
                self.result.kept.append(GcItem("cached_image", image.id, None, decision.why,
                                               decision.detail))
        limit = self.batch * MAX_BATCHES
        for index, decision in enumerate(removal_order(decisions)):
            item = GcItem("cached_image", decision.image_id, None, decision.why,
                          f"{decision.detail}; removes {', '.join(decision.untag)}")
            if index >= limit:
                self.result.deferred += 1
                self.result.kept.append(GcItem("cached_image", decision.image_id, None,
                                               "deferred", f"over this pass's limit of {limit}"))
                continue
            if self.dry_run:
                self.result.removed.append(item)
                continue
            self._untag(item, decision.untag)

    def _untag(self, item: GcItem, tags: Sequence[str]) -> None:
        for tag in tags:
            try:
                done = self.driver.untag_image(tag)
            except SbxError as error:
                self._fail("cached_image_remove_failed", Reason.CLEANUP_FAILED,
                           f"could not remove the tag {tag}: {error.message}", item.id)
                return
            if not done:  # a container or a child image took it meanwhile: kept
                self.result.kept.append(GcItem("cached_image", item.id, None, "in_use",
                                               f"the engine keeps {tag}: still in use"))
                return
        self.result.removed.append(item)

    # -- planning ------------------------------------------------------------------------

    def _admit(self, item: GcItem, removable: bool, planned: list[GcItem], limit: int,
               remaining: set[str]) -> None:
        """Plan a removable item while the pass has room; otherwise keep it (deferred when it
        was removable), and keep its run in ``remaining`` so its run directory stays too."""
        if removable and len(planned) < limit:
            planned.append(item)
            return
        if removable:
            item = GcItem(item.kind, item.id, item.run_id, "deferred",
                          f"over this pass's limit of {limit}; next gc ({item.detail})")
            self.result.deferred += 1
        self.result.kept.append(item)
        _note_run(remaining, item.run_id)

    def _users(self, kind: str, ident: str, run_id: str | None, leaving: set[str],
               remaining: set[str]) -> int | None:
        """How many containers (other than those this pass removes) use the object; None when
        that cannot be checked (recorded as a failure; the object and its run are kept)."""
        try:
            return len(set(self.driver.object_users(kind, ident)) - leaving)
        except SbxError as error:
            self._fail(f"{kind}_remove_failed", error.reason,
                       f"could not check who uses {kind} {_short(ident)}: {error.message}",
                       ident)
            _note_run(remaining, run_id)
            return None

    def _plan_containers(self, entries: Sequence[ContainerEntry], runs: Mapping[str, RunDir],
                         remaining: set[str]) -> list[GcItem]:
        planned: list[GcItem] = []
        limit = self.batch * MAX_BATCHES
        for entry in entries:
            remove, why, detail = judge_container(entry, runs, self.clock)
            item = GcItem("container", entry.id, entry.run_id, why, detail)
            self._admit(item, remove, planned, limit, remaining)
        return planned

    def _plan_shared(self, entries: Sequence[SharedEntry], runs: Mapping[str, RunDir],
                     remaining: set[str], leaving: set[str]) -> list[GcItem]:
        planned: list[GcItem] = []
        limit = self.batch * MAX_BATCHES
        for entry in entries:
            candidate, why, detail = judge_shared(entry, runs, self.clock)
            if candidate:
                users = self._users(entry.kind, entry.id, entry.run_id, leaving, remaining)
                if users is None:
                    continue
                if users:
                    candidate, why = False, "in_use"
                    detail = f"used by {users} container(s)"
            item = GcItem(entry.kind, entry.id, entry.run_id, why, detail)
            self._admit(item, candidate, planned, limit, remaining)
        return planned

    def _plan_images(self, entries: Sequence[ImageEntry], runs: Mapping[str, RunDir],
                     remaining: set[str], gone: set[str]) -> list[GcItem]:
        planned: list[GcItem] = []
        limit = self.batch * MAX_BATCHES
        for entry in entries:
            candidate, why, detail = judge_image(entry, runs, self.clock)
            if candidate:
                users = self._users("image", entry.id, entry.run_id, gone, remaining)
                if users is None:
                    continue
                if users:
                    candidate, why = False, "in_use"
                    detail = f"used by {users} container(s)"
            item = GcItem("image", entry.id, entry.run_id, why, detail)
            self._admit(item, candidate, planned, limit, remaining)
        return planned

    def _firewall_rules(self, runs: Mapping[str, RunDir], known: Mapping[str, int | None],
                        remaining: set[str]) -> bool:
        """Plan and remove this home's stale firewall rules; False when the rules could not be
        listed or parsed (then none is removed)."""
        if not runs and not known:
            return True  # no run of this home is known: no rule can be this home's
        try:
            rules = self.firewall.list_rules()
        except FirewallUnavailable as unavailable:
            self.result.note = f"host firewall rules were not checked ({unavailable})"
            return True
        except FirewallError as error:
            self._fail("firewall_list_failed", Reason.CLEANUP_FAILED,
                       f"listing the host firewall rules failed, no rule was removed: {error}")
            return False
        except RuleListingInvalid as problem:
            self._fail("firewall_list_invalid", Reason.CLEANUP_FAILED,
                       f"the host firewall listing has a line sbx cannot parse ({problem}); "
                       "no rule was removed")
            return False
        planned: list[tuple[SbxRule, GcItem]] = []
        limit = self.batch * MAX_BATCHES
        for rule in rules:
            remove, why, detail = judge_rule(rule, runs, known, self.clock,
                                             self.firewall.bridge_exists)
            item = GcItem("firewall_rule", rule.text, rule.run_id, why, detail)
            if remove and len(planned) < limit:
                planned.append((rule, item))
                continue
            if remove:
                item = GcItem("firewall_rule", rule.text, rule.run_id, "deferred",
                              f"over this pass's limit of {limit}; next gc ({detail})")
                self.result.deferred += 1
            self.result.kept.append(item)
            if why != "not_this_home":
                _note_run(remaining, rule.run_id)
        self._remove_rules(rules, planned, remaining)
        return True

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
                   "volume": self.driver.remove_volume,
                   "image": self.driver.remove_image}[kind]
        for start in range(0, len(planned), self.batch):
            attempted: list[GcItem] = []
            for item in planned[start:start + self.batch]:
                if self._owner_now(item, remaining):
                    continue
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
            still = self._present(kind, [item.id for item in attempted])
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

    def _present(self, kind: str, idents: list[str]) -> set[str]:
        if kind != "image":
            return self.driver.present(kind, idents)
        # Images are confirmed with one listing of this home's images.
        listed = self.driver.list_labelled_images(label_keys.home_selector(self.ctx.home_hash))
        return {str(entry.get("Id")) for entry in listed if isinstance(entry, dict)} & set(idents)

    def _remove_rules(self, listed: list[SbxRule], planned: list[tuple[SbxRule, GcItem]],
                      remaining: set[str]) -> None:
        if self.dry_run:
            self.result.removed.extend(item for _rule, item in planned)
            return
        # Identical rules are listed once each and `-D` removes one at a time, so removals are
        # confirmed by count: after a batch, each spec must be down by what was removed.
        expected = Counter(rule.spec for rule in listed)
        for start in range(0, len(planned), self.batch):
            attempted: list[tuple[SbxRule, GcItem]] = []
            for rule, item in planned[start:start + self.batch]:
                if self._owner_now(item, remaining):
                    continue
                try:
                    self.firewall.remove_rule(rule)
                except (FirewallError, FirewallUnavailable) as error:
                    self._fail("firewall_rule_remove_failed", Reason.CLEANUP_FAILED,
                               f"could not remove the firewall rule of run {rule.run_id[:12]} "
                               f"({rule.text}): {error}", rule.text)
                    _note_run(remaining, rule.run_id)
                    continue
                expected[rule.spec] -= 1
                attempted.append((rule, item))
            self._confirm_rules(attempted, expected, remaining)

    def _confirm_rules(self, attempted: list[tuple[SbxRule, GcItem]],
                       expected: Counter[tuple[str, ...]], remaining: set[str]) -> None:
        if not attempted:
            return
        try:
            now = Counter(rule.spec for rule in self.firewall.list_rules())
        except (FirewallError, FirewallUnavailable, RuleListingInvalid) as error:
            for rule, _item in attempted:
                self._fail("firewall_rule_remove_failed", Reason.CLEANUP_FAILED,
                           f"could not confirm that the firewall rule of run {rule.run_id[:12]} "
                           f"is gone: {error}", rule.text)
                _note_run(remaining, rule.run_id)
            return
        excess = {spec: now[spec] - count for spec, count in expected.items()
                  if now[spec] > count}
        for rule, item in reversed(attempted):
            if excess.get(rule.spec, 0) > 0:
                excess[rule.spec] -= 1
                self._fail("firewall_rule_remove_failed", Reason.CLEANUP_FAILED,
                           f"the firewall rule of run {rule.run_id[:12]} is still present after "
                           f"its removal ({rule.text})", rule.text)
                _note_run(remaining, rule.run_id)
                expected[rule.spec] += 1
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
            if self._owner_now(item, set()) or not self._release_staging(run.name):
                continue
            self._check_workspace(run)
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

    def _check_workspace(self, run: RunDir) -> None:
        """A run whose sbx died before its after-run check: the check, from its baseline."""
        if not (run.path / BASELINE_FILE).exists():
            return
        from sbx.usecases.workspace_check import check_named

        check_named(self.ctx, run.path, run.name, self.result.workspace_warnings.append,
                    since=f" (run {run.name[:12]}, which ended without sbx)")

    def _release_staging(self, run_id: str) -> bool:
        """Unmount a finished run's staging points (sbx.domain.sandbox.sources); False on a failure.
        Only unmount and rmdir: a staging point is never deleted recursively."""
        for staged_run, points in stale_staging(self.ctx.home_hash):
            if staged_run != run_id:
                continue
            problems = release_points(points)
            with contextlib.suppress(OSError):
                (STAGING_ROOT / self.ctx.home_hash / run_id).rmdir()
            if problems:
                self._fail("staging_release_failed", Reason.CLEANUP_FAILED,
                           "; ".join(problems), run_id)
                return False
            self.result.removed.append(GcItem("staging", run_id, run_id, "run_over",
                                              f"{len(points)} staging mount(s)"))
        return True

    def _orphan_staging(self, run_dirs: set[str], remaining: set[str]) -> None:
        """Staging points of runs that left no run directory and no object behind, once they
        are older than the grace (a starting run writes its run directory first)."""
        for run_id, _points in stale_staging(self.ctx.home_hash):
            if run_id in run_dirs or run_id in remaining or run_id.startswith(NAMED_PREFIX):
                continue  # a named sandbox's points go with `sbx rm`
            try:
                age = self.clock.now - (STAGING_ROOT / self.ctx.home_hash / run_id).stat().st_mtime
            except OSError:
                continue
            if age < self.clock.grace_s or self.dry_run:
                continue
            self._release_staging(run_id)

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

    def _owner_now(self, item: GcItem, remaining: set[str]) -> bool:
        """Right before a removal: whether the item's run has an owner now (one that started
        after gc read the run directories); then the item is kept."""
        if item.run_id is None or owner_alive(self.ctx.state_home / RUNS_DIR / item.run_id) \
                is not True:
            return False
        self.result.kept.append(GcItem(item.kind, item.id, item.run_id, *_LIVE))
        _note_run(remaining, item.run_id)
        return True

    # -- bookkeeping ---------------------------------------------------------------------

    def _fail(self, kind: str, reason: Reason, message: str, target: str | None = None) -> None:
        self.result.failed.append(GcFailure(kind, reason, message, target))

    def _keep_all_run_dirs(self, runs: list[RunDir], why: str,
                           detail: str = "nothing is removed when the listing fails") -> None:
        self.result.kept.extend(GcItem("run_dir", run.name, run.name, why, detail)
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
    if IMAGE_ID.match(ident):
        ident = ident.removeprefix("sha256:")
    return ident[:12] if FULL_ID.match(ident) else ident


def _known_runs(listing: Listing, images: Sequence[ImageEntry]) -> dict[str, int | None]:
    """Run id → latest readable deadline, for every run one of this home's objects names."""
    known: dict[str, int | None] = {}
    entries: list[ContainerEntry | SharedEntry | ImageEntry] = [
        *listing.containers, *listing.shared, *images]
    for entry in entries:
        if entry.run_id is None:
            continue
        deadline = _deadline(entry.deadline_raw)
        before = known.get(entry.run_id)
        known[entry.run_id] = deadline if before is None else (
            before if deadline is None else max(before, deadline))
    return known


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


__all__ = ["CONTAINER_STATES", "KINDS", "LOCK_FILE", "MAX_BATCHES", "RUNS_DIR", "RUN_RECORD",
           "UNREADABLE_RECORD_FLOOR_S", "Clock", "ContainerEntry", "Firewall", "GcFailure",
           "GcItem", "GcRequest", "GcResult", "ImageEntry", "Listing", "ListingInvalid",
           "Processes", "RunDir", "RunDirState", "SharedEntry", "collect", "gc_lock",
           "judge_container", "judge_image", "judge_rule", "judge_run_dir", "judge_shared",
           "parse_images", "parse_listing", "proc_cmdline", "ran_before",
           "read_run_dirs", "survey"]
