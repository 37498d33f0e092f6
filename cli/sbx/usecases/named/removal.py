"""`sbx stop` and `sbx rm`: a named sandbox stopped, or removed with everything it owns."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable, Sequence

from sbx.base import labels as label_keys
from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.egress.policystore import PolicyStore
from sbx.domain.sandbox import runrecord
from sbx.domain.sandbox.records import NAME_PATTERN, check_name
from sbx.domain.sandbox.sources import Staging
from sbx.seams import audit
from sbx.seams.host import firewall
from sbx.usecases import keeper
from sbx.usecases.context import AppContext
from sbx.usecases.named.listing import (
    OneShotRun,
    find_sandbox,
    one_shot_refused,
    owned_objects,
)
from sbx.usecases.namedrecord import STOP_TIMEOUT_S, check_workspace
from sbx.usecases.sandboxstore import SandboxStore


def stop(ctx: AppContext, names: Sequence[str],
         on_warning: Callable[[str], None] = lambda _text: None, *,
         timeout_s: int = STOP_TIMEOUT_S) -> list[str]:
    """Stop each sandbox (SIGTERM, then SIGKILL after ``timeout_s``); the keeper then stops
    its proxy; then its writable directories are checked. A one-shot run's id stops that run
    (its own sbx then cleans up as on any exit). Returns what was stopped, as given."""
    if timeout_s < 0:
        raise SbxError(Reason.INVALID_ARGUMENT, f"-t {timeout_s}: the grace is a number of "
                       "seconds, 0 or more", hint="e.g. sbx stop -t 0 NAME")
    stopped = []
    for name in names:
        found = find_sandbox(ctx, name)
        if isinstance(found, OneShotRun):
            ctx.driver.stop(found.container_id, timeout_s)
            stopped.append(name)
            continue
        record = found
        assert record.container_id is not None  # noqa: S101 - find_sandbox checks
        ctx.driver.stop(record.container_id, timeout_s)
        keeper.stop_keeper(runrecord.run_dir(ctx.state_home, record.run_id), record.run_id,
                           wait_s=keeper.STOP_WAIT_S)
        check_workspace(ctx, record, on_warning, stopped=True)
        stopped.append(name)
    return stopped


def all_names(ctx: AppContext) -> list[str]:
    """Every named sandbox of this state home: recorded ones and any half-made one whose
    objects carry a name label (what `sbx rm --all` removes)."""
    names = set(SandboxStore(ctx.state_home).names())
    for obj in ctx.driver.list_owned(label_keys.home_selector(ctx.home_hash)):
        label = label_keys.value(obj.labels, label_keys.NAME)
        if label and NAME_PATTERN.fullmatch(label):
            names.add(label)
    return sorted(names)


def _name_for_rm(ctx: AppContext, store: SandboxStore, word: str) -> str:
    """The sandbox name ``word`` stands for: itself, or the name of the sandbox whose run id
    it is (a one-shot run's id is refused: `sbx stop` ends those)."""
    if NAME_PATTERN.fullmatch(word) and store.load(word) is not None:
        return word
    try:
        found = find_sandbox(ctx, word)
    except SbxError:
        return check_name(word)  # a half-made sandbox has objects but no record
    if isinstance(found, OneShotRun):
        raise one_shot_refused(word, found, "sbx rm")
    return found.name


def remove(ctx: AppContext, names: Sequence[str],
           on_warning: Callable[[str], None] = lambda _text: None) -> list[str]:
    """Remove each sandbox and everything it owns: container, volumes (HOME included),
    network and firewall rules, proxy, staging points, per-sandbox image, run directory, the
    record. Objects are found by label too, so a half-created sandbox goes as well."""
    removed = []
    store = SandboxStore(ctx.state_home)
    driver = ctx.driver
    for word in names:
        name = _name_for_rm(ctx, store, word)
        with store.locked(name):
            record = store.load(name)
            objects = owned_objects(ctx, name)
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
                guard = firewall.BridgeGuard(str(record.request["bridge"]), record.run_id)
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
