"""A run's records: its run directory and owner lock under the state home (what gc and explain
find after a crash), and its events in the audit log."""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sbx.domain.sandbox import runrecord
from sbx.seams import audit
from sbx.usecases import runstore, workspace_check
from sbx.usecases.context import AppContext
from sbx.usecases.enginefit import refuse_local_only
from sbx.usecases.run.plan import RunPlan

_OWNER_LOCKS: dict[str, int] = {}  # run id -> its owner lock, held while the run lives


def claim(ctx: AppContext, run_id: str, *, again: bool = False) -> None:
    """The run's owner lock, taken before its plan creates anything (probe containers,
    images): ``sbx gc`` never touches what a live owner holds. ``again``: a recreated named
    sandbox's run directory, which exists and keeps its volumes."""
    _path, lock_fd = runstore.claim(ctx.state_home, run_id, again=again)
    _OWNER_LOCKS[run_id] = lock_fd


def unclaim(ctx: AppContext, run_id: str, *, again: bool = False) -> None:
    """A run refused before it started: its (empty) run directory goes with its lock; a
    recreation's (``again``) is the named sandbox's own and stays."""
    if not again:
        shutil.rmtree(runrecord.run_dir(ctx.state_home, run_id), ignore_errors=True)
    release_owner(run_id)


def release_owner(run_id: str) -> None:
    fd = _OWNER_LOCKS.pop(run_id, None)
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)


def open_run_dir(ctx: AppContext, plan: RunPlan) -> Path:
    """The run's record in the run directory it claimed, with the workspace baselines (for the
    check after a named sandbox's sessions, or gc's); a failure gives the claim back. A run
    the engine's place cannot hold is refused first, before anything exists here or there."""
    try:
        refuse_local_only(ctx.driver.location(), plan)
        run_dir = _write_run_dir(ctx, plan)
        if plan.workspace_baselines:
            workspace_check.save(run_dir, plan.workspace_baselines)
    except BaseException:
        unclaim(ctx, plan.run_id, again=plan.recreate)
        raise
    return run_dir


def _write_run_dir(ctx: AppContext, plan: RunPlan) -> Path:
    """Per-run state under the state home: lets gc and explain find what a crash left."""
    claimed = plan.run_id in _OWNER_LOCKS
    path, lock_fd = runstore.create(ctx.state_home, runrecord.RunRecord(
        run_id=plan.run_id, deadline=plan.deadline, workload=plan.facts.workload, pid=os.getpid(),
        kits=tuple(plan.references), image=plan.image_tag, run_image=plan.run_image_tag,
        volumes=(*plan.volume_names, *((plan.workspace_volume,) if plan.workspace_volume
                                       else ())), name=plan.name), owner_lock=True, claimed=claimed)
    if lock_fd is not None:
        _OWNER_LOCKS[plan.run_id] = lock_fd
    return path


def empty_but_volumes(run_dir: Path) -> None:
    """A recreated sandbox's run directory: what its container had goes, its volumes' file
    systems, the OAuth logins made inside it and the owner lock (held by the recreation,
    gc's sign of a live owner) stay."""
    for child in run_dir.iterdir() if run_dir.is_dir() else ():
        if child.name in ("volumes", runrecord.LOGINS_DIR, runrecord.OWNER_LOCK):
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                child.unlink()


def elapsed(started: float) -> float:
    return round(time.monotonic() - started, 3)


def audit_event(ctx: AppContext, event: str, run_id: str, severity: str,
                details: Mapping[str, Any]) -> None:
    try:
        audit.record(ctx.state_home, event, run_id=run_id, severity=severity, details=details)
    except OSError:
        # An unwritable audit log must not turn a finished run into a crash; the run's own
        # result still reaches the user.
        return


__all__ = ["audit_event", "claim", "elapsed", "empty_but_volumes", "open_run_dir",
           "release_owner", "unclaim"]
