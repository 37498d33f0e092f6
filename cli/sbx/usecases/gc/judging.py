"""gc's decisions, one pure function per kind of object: removed, or kept and why."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TypeVar

from sbx.base.errors import SbxError
from sbx.seams.host.firewall import SbxRule
from sbx.usecases.gc.listing import (
    RUN_IMAGE_REPOSITORY,
    UNTAGGED,
    ContainerEntry,
    ImageEntry,
    Listing,
    RunDir,
    RunDirState,
    SharedEntry,
    clip,
)
from sbx.usecases.sandboxstore import SandboxStore

# A run writes its run.json right after creating its directory; a record that cannot be read is
# given at least this long (whatever --grace says) before the directory counts as abandoned.
UNREADABLE_RECORD_FLOOR_S: Final = 60
FINISHED_STATES: Final = frozenset({"exited", "dead"})


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
        return False, *LIVE
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
    if entry.shared:
        return False, "shared", ("the state home's egress network for proxies beside the "
                                 "engine (no run's): kept for the next runs")
    if _owner_holds(entry.run_id, runs):
        return False, *LIVE
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
    has is that run's ``sbx-run/<run id>:...`` (or it has none). A template is user data."""
    if entry.template:
        return False, "template", ("an sbx template (user data); `sbx template rm TAG` "
                                   "removes it")
    if entry.named:
        return False, *_NAMED
    if entry.run_id is None:
        return False, "not_a_run_image", "it names no run; sbx removes only per-run images"
    own = f"{RUN_IMAGE_REPOSITORY}{entry.run_id}:"
    foreign = [tag for tag in entry.tags if tag != UNTAGGED and not tag.startswith(own)]
    if foreign:
        return False, "foreign_tag", (f"also tagged {clip(foreign[0])}; sbx removes only its "
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
LIVE: Final = ("live", "the sbx process that owns it is alive (it holds its run's owner lock)")


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
    return "deadline_unreadable", f"its deadline label {clip(raw)} is unreadable; sbx never " \
                                  "guesses one"


def known_runs(listing: Listing, images: Sequence[ImageEntry]) -> dict[str, int | None]:
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
