"""The after-run check of writable host directories, said and audited
(sbx.domain.sandbox.workspace_trust does the checking).

A one-shot run checks once its container is gone, on every exit path. A named sandbox keeps
the baselines taken at its creation in its run directory and is checked against them whenever
a session with it ends (its first run, ``attach``, ``exec``), when it is stopped or removed,
and before a stopped one starts again; what was quarantined is gone from the workspace, and
what is only reported is reported as changed since the sandbox was created.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from sbx.domain.sandbox import quarantine
from sbx.domain.sandbox.sources import open_checked
from sbx.domain.sandbox.workspace_trust import Baseline, Finding, Report, after_run, baseline_of
from sbx.seams import audit, owned, state
from sbx.usecases.context import AppContext

BASELINE_FILE: Final = "workspace-baseline.json"
MAX_BASELINE_BYTES: Final = 256 * 1024 * 1024  # far beyond what a bounded scan records
# Written by a check made once the sandbox had stopped: until it starts again, what changes
# in the workspace is the owner's own work, which its next start takes as the new baseline.
CHECKED_STOPPED: Final = "workspace-checked-stopped"
SHOWN: Final = 20
AUDITED: Final = 200
AVOID: Final = ("a read-only workspace (`--access ro`) keeps a sandbox from writing it at all; "
                "for agents that commit, a copy of the repository per agent (`--clone`) is "
                "coming")


@dataclass
class Outcome:
    findings: list[Finding] = field(default_factory=list)
    reports: list[Report] = field(default_factory=list)

    def paths(self, workspace: str | None) -> list[str]:
        """Each finding's path: relative for the workspace, absolute for a mount."""
        return [f.path if f.root == workspace else f"{f.root}/{f.path}" for f in self.findings]

    def as_json(self) -> list[dict[str, Any]]:
        return [finding.as_dict() for finding in self.findings]


def check(ctx: AppContext, baselines: Sequence[Baseline], *, run_id: str,
          on_warning: Callable[[str], None], since: str = "") -> Outcome:
    """Check each protected directory, warn about what was found and audit it."""
    outcome = Outcome()
    for baseline in baselines:
        report = after_run(baseline, run_id=run_id)
        outcome.reports.append(report)
        outcome.findings += report.findings
        for text in warnings(report, since=since):
            on_warning(text)
        if report.findings or not report.complete:
            _audit(ctx, run_id, report)
    if outcome.findings:
        on_warning(AVOID)
    return outcome


def warnings(report: Report, *, since: str = "") -> list[str]:
    """The human lines for one directory's report."""
    out: list[str] = []
    root = report.root
    moved = [f for f in report.findings if f.action != quarantine.REPORTED]
    kept = [f for f in report.findings if f.action == quarantine.REPORTED]
    if report.problem:
        out.append(f"{root} could not be checked after the run ({report.problem}); review it "
                   "before you run git or other tools there")
    if moved:
        where = report.quarantine
        place = (f"sbx moved them to {where} (closed, mode 000; {where}.json says where each "
                 "came from and how to put it back)") if where else "sbx neutralised them"
        out.append(f"the sandbox left things in {root} that git or other host tools would run "
                   f"or follow{since}; {place}: " + _listed(moved))
    if kept:
        out.append(f"the sandbox created or changed files in {root} that tools on this host "
                   f"run or obey{since}; review them before you run anything there: "
                   + _listed(kept))
    if not report.complete and not report.problem:
        out.append(f"{root} was too large to check in full after the run; what lies beyond "
                   "the scan's bound was judged by its change time")
    return out


def _listed(findings: Sequence[Finding]) -> str:
    shown = []
    for finding in findings[:SHOWN]:
        detail = finding.what if finding.tool == "git" or finding.what != "created or changed" \
            else f"{finding.tool}"
        if finding.action not in (quarantine.QUARANTINED, quarantine.REPORTED):
            detail += f"; {finding.action}"
        if finding.problem:
            detail += f": {finding.problem}"
        shown.append(f"{finding.path}: {detail}")
    more = len(findings) - SHOWN
    return "; ".join(shown) + (f"; and {more} more" if more > 0 else "")


def _audit(ctx: AppContext, run_id: str, report: Report) -> None:
    details = {"root": report.root, "paths": [f.path for f in report.findings][:AUDITED],
               "findings": [f.as_dict() for f in report.findings][:AUDITED],
               "complete": report.complete, "quarantine": report.quarantine,
               "problem": report.problem}
    with contextlib.suppress(OSError):
        audit.record(ctx.state_home, audit.WORKSPACE_HOST_CONFIG_CHANGED, run_id=run_id,
                     severity="warning", details=details)


# -- named sandboxes ---------------------------------------------------------------------------


def save(run_dir: Path, baselines: Sequence[Baseline]) -> None:
    """Keep a named sandbox's baselines for the checks after its later sessions."""
    if not baselines:
        return
    path = run_dir / BASELINE_FILE
    with state.writing(path, "keep the workspace baseline in", home=run_dir.parent.parent):
        owned.write_file(path, json.dumps([b.as_json() for b in baselines]).encode("utf-8"))


def load(run_dir: Path) -> list[Baseline] | None:
    """The baselines :func:`save` kept (none when nothing was protected); None when the file
    cannot be read; one that is not this user's own is refused (sbx.seams.owned): it would
    decide what the check calls unchanged."""
    try:
        raw = owned.read_bytes(run_dir / BASELINE_FILE, max_bytes=MAX_BASELINE_BYTES)
        if raw is None:
            return []
        data = json.loads(raw)
        return [Baseline.from_json(item) for item in data]
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None


def check_named(ctx: AppContext, run_dir: Path, run_id: str,
                on_warning: Callable[[str], None], *,
                since: str = " since it last started", stopped: bool = False) -> Outcome:
    """The check of a kept run's writable directories against the baselines of its (last)
    start: a named sandbox's, or a run whose sbx died (``sbx gc``). ``stopped``: nothing
    writes them any more (see :data:`CHECKED_STOPPED`)."""
    outcome = _check_kept(ctx, run_dir, run_id, on_warning, since)
    if stopped:
        with contextlib.suppress(OSError):
            (run_dir / CHECKED_STOPPED).touch()
    return outcome


def restarting(ctx: AppContext, run_dir: Path, run_id: str,
               on_warning: Callable[[str], None]) -> None:
    """Before a stopped named sandbox starts again: checked now unless that happened once it
    had stopped; then what is there becomes the baseline (the owner's work in between is the
    owner's)."""
    if not (run_dir / CHECKED_STOPPED).exists():
        _check_kept(ctx, run_dir, run_id, on_warning, " before it stopped")
    baselines = load(run_dir)
    if not baselines:
        return
    fresh = []
    for baseline in baselines:
        opened = open_checked(baseline.root)
        try:
            fresh.append(baseline_of(opened, trusted=baseline.trusted, env=ctx.env))
        finally:
            opened.close()
    save(run_dir, fresh)
    with contextlib.suppress(OSError):
        (run_dir / CHECKED_STOPPED).unlink()


def _check_kept(ctx: AppContext, run_dir: Path, run_id: str,
                on_warning: Callable[[str], None], since: str) -> Outcome:
    baselines = load(run_dir)
    if baselines is None:
        on_warning(f"the workspace baseline in {run_dir} cannot be read, so the sandbox's "
                   "workspace was not checked; review it before you run git or other tools "
                   "there")
        return Outcome()
    return check(ctx, baselines, run_id=run_id, on_warning=on_warning, since=since)


__all__ = ["BASELINE_FILE", "CHECKED_STOPPED", "Outcome", "check", "check_named", "load",
           "restarting", "save", "warnings"]
