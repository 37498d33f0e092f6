"""`sbx gc` itself: skip a home that never ran, take the lock, run one pass, audit it; and the
stopped named sandboxes when ``--named`` or ``[gc] named_ttl`` asks."""

from __future__ import annotations

import errno
import fcntl
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Final

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.sandbox.runrecord import RUNS_DIR
from sbx.seams import audit, owned
from sbx.usecases import fleet
from sbx.usecases.gc import everywhere
from sbx.usecases.gc.collector import Collector
from sbx.usecases.gc.result import GcFailure, GcItem, GcRequest, GcResult
from sbx.usecases.gc.sweep import Firewall, Processes
from sbx.usecases.named.removal import remove
from sbx.usecases.sandboxstore import SandboxStore

if TYPE_CHECKING:
    from sbx.usecases.context import AppContext

LOCK_FILE: Final = "gc.lock"


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
    def collector(on: AppContext) -> Collector:
        return Collector(on, request, grace, batch, clock, procs, rules,
                         image_idle_s=config.gc.image_idle_seconds.value)

    def passes() -> GcResult:
        engines = fleet.every_engine(ctx)
        if len(engines) == 1 and engines[0][0] is None:  # one engine, as without [engines]
            return collector(ctx).run()
        return everywhere.run_everywhere(engines, collector)

    if request.dry_run:
        return passes()
    with gc_lock(state_home) as acquired:
        if not acquired:
            return GcResult("locked", request.dry_run, grace,
                            note=f"another sbx gc holds {state_home / LOCK_FILE}; nothing done")
        result = passes()
        ttl = config.gc.named_ttl.value
        if result.outcome == "done" and (request.named or ttl is not None):
            _stopped_named(ctx, result, 0 if request.named or ttl is None else ttl, clock())
    _audit(state_home, result)
    return result


def _stopped_named(ctx: AppContext, result: GcResult, ttl: int, now: float) -> None:
    """Named sandboxes are never gc's to take, unless ``--named`` or ``[gc] named_ttl`` says
    so: then the stopped ones (never a running one) stopped for at least ``ttl`` seconds."""

    store = SandboxStore(ctx.state_home)
    for name in store.names():
        try:
            record = store.load(name)
            if record is None or record.container_id is None:
                continue
            on = fleet.for_record(ctx, record)  # on the engine it lives on
            finished = on.driver.container_finished_at(record.container_id)
            if finished is None or now - finished < ttl:
                continue
            remove(on, [name])
        except SbxError as error:
            result.failed.append(GcFailure("named_remove_failed", error.reason,
                                           f"named sandbox {name}: {error.message}", name))
            continue
        result.removed.append(GcItem("named", name, record.run_id, "stopped",
                                     f"stopped {int(now - finished)}s ago"))


def survey(ctx: AppContext, *, clock: Callable[[], float] = time.time) -> GcResult:
    """What ``sbx gc`` would do now with the configured grace (doctor's count): a dry run."""
    return collect(ctx, GcRequest(dry_run=True), clock=clock)


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

