"""The host's side of a gc pass: firewall rules, run directories, staging mounts and orphaned
proxies, each checked against its run's owner lock right before it goes."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from sbx.base.reasons import Reason
from sbx.domain.sandbox.runrecord import RUNS_DIR
from sbx.domain.sandbox.sources import NAMED_PREFIX, STAGING_ROOT, release_points, stale_staging
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
from sbx.usecases.gc.judging import LIVE, Clock, judge_rule, judge_run_dir
from sbx.usecases.gc.listing import RunDir, owner_alive, proc_cmdline
from sbx.usecases.gc.result import GcFailure, GcItem, GcRequest, GcResult
from sbx.usecases.workspace_check import BASELINE_FILE, check_named

if TYPE_CHECKING:
    from sbx.usecases.context import AppContext

MAX_BATCHES: Final = 64
PROXY_TERM_WAIT_S: Final = 2.0
PROXY_KILL_WAIT_S: Final = 1.0
_POLL_S: Final = 0.05


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


class Sweep:
    """A pass's state, its bookkeeping and its removals on the host."""

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

    def limit(self) -> int:
        """How many objects of one kind this pass removes at most."""
        return self.batch * MAX_BATCHES

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
        limit = self.limit()
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
                note_run(remaining, rule.run_id)
        self._remove_rules(rules, planned, remaining)
        return True

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
                    note_run(remaining, rule.run_id)
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
                note_run(remaining, rule.run_id)
            return
        excess = {spec: now[spec] - count for spec, count in expected.items()
                  if now[spec] > count}
        for rule, item in reversed(attempted):
            if excess.get(rule.spec, 0) > 0:
                excess[rule.spec] -= 1
                self._fail("firewall_rule_remove_failed", Reason.CLEANUP_FAILED,
                           f"the firewall rule of run {rule.run_id[:12]} is still present after "
                           f"its removal ({rule.text})", rule.text)
                note_run(remaining, rule.run_id)
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
        self.result.kept.append(GcItem(item.kind, item.id, item.run_id, *LIVE))
        note_run(remaining, item.run_id)
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


def note_run(remaining: set[str], run_id: str | None) -> None:
    if run_id is not None:
        remaining.add(run_id)

