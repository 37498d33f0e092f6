"""`sbx ls` and the lookups of a named sandbox by its record and its labels."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from sbx.base import labels as label_keys
from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.sandbox import runrecord
from sbx.domain.sandbox.records import NAME_PATTERN, SandboxRecord, check_name
from sbx.usecases import runstore
from sbx.usecases.context import AppContext
from sbx.usecases.idlestop import IdleStopped, stopped_mark
from sbx.usecases.sandboxstore import SandboxStore

if TYPE_CHECKING:
    from sbx.seams.engine import OwnedObject
@dataclass(frozen=True)
class SandboxStatus:
    name: str
    workload: str
    kits: list[str]
    status: str
    workspace: str | None
    created: float
    home_bounded: bool
    run_id: str = ""  # accepted wherever a name is (full, or its first ID_PREFIX characters)
    stopped: IdleStopped | None = None  # why it is stopped, when its keeper stopped it
    engine: str | None = None  # its [engines] entry (None: the environment's engine)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "workload": self.workload, "kits": self.kits,
                "status": self.status, "workspace": self.workspace,
                "created": round(self.created, 3), "home_bounded": self.home_bounded,
                "run_id": self.run_id, "engine": self.engine,
                "reason": None if self.stopped is None else self.stopped.reason.value,
                "stopped": None if self.stopped is None else self.stopped.as_dict()}


def sandbox_names(ctx: AppContext) -> list[str]:
    """The names recorded in this state home, without asking the engine (`sbx ls -q`)."""
    return SandboxStore(ctx.state_home).names()


def list_sandboxes(ctx: AppContext, *, include_runs: bool) -> list[SandboxStatus]:
    store = SandboxStore(ctx.state_home)
    records = [r for r in (store.load(name) for name in store.names()) if r is not None]
    return statuses(ctx, records, include_runs=include_runs)


def statuses(ctx: AppContext, records: list[SandboxRecord], *, include_runs: bool,
             engine: str | None = None) -> list[SandboxStatus]:
    """``records`` with their state on ``ctx``'s engine (and its one-shot runs)."""
    owned = ctx.driver.list_owned(label_keys.home_selector(ctx.home_hash))
    states = {o.id: o.state for o in owned if o.kind == "container"}
    found = []
    sandboxes: dict[str, str] = {}  # container id -> the name sbx recorded for it
    for record in records:
        sandboxes[record.container_id or ""] = record.name
        state = states.get(record.container_id or "", "missing")
        found.append(status_of(ctx, record, state, engine))
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
                                       obj.state, None, 0.0, True,
                                       obj.labels.get(label_keys.RUN, ""), engine=engine))
    return found


def stopped_why(ctx: AppContext, record: SandboxRecord, state: str) -> IdleStopped | None:
    """Why a stopped sandbox is stopped, when its keeper stopped it for being idle."""
    if state == "running":
        return None
    return stopped_mark(runrecord.run_dir(ctx.state_home, record.run_id))


def status_of(ctx: AppContext, record: SandboxRecord, state: str,
              engine: str | None) -> SandboxStatus:
    return SandboxStatus(record.name, record.workload, record.kits, state,
                         record.workspace or record.request.get("workspace_copy"),
                         record.created, bool(record.request.get("home_bounded")),
                         record.run_id, stopped_why(ctx, record, state), engine=engine)


ID_PREFIX: Final = 12  # the run id as `sbx ls --all` shows it
_ID_WORD: Final = re.compile(r"[0-9a-f]{12,32}")


@dataclass(frozen=True)
class OneShotRun:
    """A running one-shot sandbox, named by its run id (only `sbx stop` takes one)."""

    run_id: str
    container_id: str


def pick(word: str, named: Mapping[str, str], runs: Mapping[str, str]) -> str | OneShotRun | None:
    """Which sandbox a run id (full, or a prefix of at least 12 characters) names: the name of
    a named sandbox (``named``: run id -> name), a one-shot run (``runs``: run id -> container
    id), or None. Two matches are refused: a prefix must name one sandbox."""
    if not _ID_WORD.fullmatch(word):
        return None
    found: list[str | OneShotRun] = [name for run_id, name in named.items()
                                     if run_id.startswith(word)]
    found += [OneShotRun(run_id, container) for run_id, container in runs.items()
              if run_id.startswith(word) and run_id not in named]
    if len(found) > 1:
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"{word} is the start of more than one run id",
                       hint="Give more of the id (`sbx ls --all` lists them) or the name.")
    return found[0] if found else None


def find_sandbox(ctx: AppContext, word: str) -> SandboxRecord | OneShotRun:
    """The sandbox ``word`` names: a named sandbox by its name, else by its run id; else a
    running one-shot run by its id."""
    store = SandboxStore(ctx.state_home)
    valid = NAME_PATTERN.fullmatch(word) is not None
    record = store.load(word) if valid else None
    if record is not None and record.container_id is not None:
        return record
    if _ID_WORD.fullmatch(word):
        by_run = {}
        for name in store.names():
            other = store.load(name)
            if other is not None and other.container_id is not None:
                by_run[other.run_id] = name
        runs = {}
        if not any(run_id.startswith(word) for run_id in by_run):
            for obj in ctx.driver.list_owned(label_keys.home_selector(ctx.home_hash)):
                run_id = obj.labels.get(label_keys.RUN, "")
                if obj.kind == "container" and runrecord.RUN_ID.fullmatch(run_id) \
                        and obj.labels.get(label_keys.ROLE) == label_keys.ROLE_SANDBOX:
                    runs[run_id] = obj.id
        found = pick(word, by_run, runs)
        if isinstance(found, OneShotRun):
            return found
        if found is not None:
            named = store.load(found)
            if named is not None:
                return named
    if not valid:
        check_name(word)
    raise SbxError(Reason.INVALID_ARGUMENT, f"no sandbox named {word}",
                   hint="`sbx ls --all` lists them; `sbx run --name NAME WORKLOAD` creates one.")


def load_named(ctx: AppContext, name: str, *, command: str = "this command") -> SandboxRecord:
    """The named sandbox ``name`` (or its run id) names; a one-shot run's id is refused: only
    `sbx stop` takes one."""
    found = find_sandbox(ctx, name)
    if isinstance(found, OneShotRun):
        raise one_shot_refused(name, found, command)
    return found


def one_shot_refused(word: str, run: OneShotRun, command: str) -> SbxError:
    return SbxError(Reason.INVALID_ARGUMENT,
                    f"{word} is a one-shot run, which {command} does not take: a one-shot "
                    "sandbox has no name to come back to",
                    hint=f"Stop it with `sbx stop {run.run_id[:ID_PREFIX]}`; for a sandbox to "
                         "attach to or exec in, run with `--name NAME`.",
                    details={"run_id": run.run_id})


def owned_objects(ctx: AppContext, name: str, *, recorded_only: bool = False) -> list[OwnedObject]:
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
    record = runstore.read(runrecord.run_dir(ctx.state_home, run_id))
    name = record.get("name") if record is not None else None
    return name if isinstance(name, str) else None
