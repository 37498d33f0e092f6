"""`sbx explain RUN_ID`: the refusals the audit log recorded for one run, each with its fix."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from sbx.base.errors import SbxError
from sbx.base.reasons import DETAILS, REGISTRY, Reason
from sbx.domain.egress.fixes import Fix, KitFix, body_lines
from sbx.seams import audit

RUN_EVENTS: Final = frozenset({audit.SANDBOX_STARTED, audit.SANDBOX_FINISHED,
                               audit.SANDBOX_UNAVAILABLE, audit.EGRESS_DENIED,
                               audit.EGRESS_FAILED})


@dataclass(frozen=True)
class RecordedRefusal:
    event: str
    timestamp: str
    blocked: str
    rule: str
    code: str
    fix: str
    explain: str
    command: str | None = None  # the narrowest fix to paste (`sbx policy ...`), if one helps
    fix_lines: tuple[str, ...] = ()  # the fix as the 403 body printed it
    sandbox: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"event": self.event, "timestamp": self.timestamp, "blocked": self.blocked,
                "rule": self.rule, "code": self.code, "fix": self.fix, "explain": self.explain,
                "command": self.command, "fix_lines": list(self.fix_lines),
                "sandbox": self.sandbox}


@dataclass(frozen=True)
class RunExplanation:
    run_id: str | None
    workload: str | None
    refusals: tuple[RecordedRefusal, ...]
    audit_log: str
    skipped_lines: int = 0  # audit log lines that were not well-formed events

    def as_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "workload": self.workload, "audit_log": self.audit_log,
                "refusals": [r.as_dict() for r in self.refusals],
                "skipped_lines": self.skipped_lines}


def _egress_target(details: Mapping[str, Any]) -> str:
    host = str(details.get("host") or "")
    shown = f"[{host}]" if ":" in host else host
    port = details.get("port")
    method = details.get("method")
    path = details.get("path")
    if method in (None, "CONNECT") or not path:
        return f"{shown}:{port}" if port else shown
    scheme = str(details.get("scheme") or "https")
    default = 443 if scheme == "https" else 80
    where = shown if port in (None, default) else f"{shown}:{port}"
    return f"{method} {scheme}://{where}{path}"


def _refusal(event: Mapping[str, Any], prefix: str) -> RecordedRefusal | None:
    details = event.get("details") or {}
    if not isinstance(details, Mapping):
        return None
    kind = event.get("event_type")
    stamp = str(event.get("timestamp") or "")
    if kind in (audit.EGRESS_DENIED, audit.EGRESS_FAILED):
        target = _egress_target(details)
        phase = details.get("phase")
        phase_flag = " --phase install" if phase == "install" else ""
        code = str(details.get("code") or "")
        sandbox = details.get("sandbox") if isinstance(details.get("sandbox"), str) else None
        own = f"sbx explain {sandbox}" if sandbox else prefix
        command = (f"sbx explain {code}" if kind == audit.EGRESS_FAILED
                   else f"{own}{phase_flag} {shlex.join(target.split(' '))}")
        method = details.get("method") or "CONNECT"
        where = f"{details.get('host')}:{details.get('port')}"
        blocked = f"{method} {where}" + (f" {details['path']}" if details.get("path") else "")
        fix_lines, paste = _recorded_fix(details)
        if not fix_lines and code in DETAILS:
            fix_lines = (f"fix: {DETAILS[code].fix}",)
        text = REGISTRY[Reason.EGRESS_DENIED].fix if kind == audit.EGRESS_DENIED else (
            DETAILS[code].fix if code in DETAILS else REGISTRY[Reason.PROXY_FAILED].fix)
        return RecordedRefusal(kind, stamp, f"{blocked} ({phase or 'runtime'} phase)",
                               str(details.get("rule") or "-"), code, text, command, paste,
                               fix_lines, sandbox)
    if kind == audit.SANDBOX_UNAVAILABLE:
        code = str(details.get("reason") or "")
        try:
            reason = Reason(code)
        except ValueError:
            return RecordedRefusal(kind, stamp, "the run did not start", "-", code, "-",
                                   "sbx explain --list")
        workload = details.get("workload", "?")
        return RecordedRefusal(kind, stamp, f"the run of {workload} did not start",
                               "-", code, REGISTRY[reason].fix, f"sbx explain {code}")
    return None


def _recorded_fix(details: Mapping[str, Any]) -> tuple[tuple[str, ...], str | None]:
    """The fix the proxy recorded with a refusal, as its body printed it."""
    raw = details.get("fix")
    suggestion = details.get("suggestion")
    suggestion = suggestion if isinstance(suggestion, str) else None
    if not isinstance(raw, Mapping):
        return tuple(body_lines(None, suggestion)), None
    command = raw.get("command") if isinstance(raw.get("command"), str) else None
    kit_raw = raw.get("kit")
    kit = None
    if isinstance(kit_raw, Mapping):
        lines = kit_raw.get("lines")
        kit = KitFix(str(kit_raw.get("kit") or ""),
                     kit_raw.get("file") if isinstance(kit_raw.get("file"), str) else None,
                     str(kit_raw.get("under") or ""),
                     tuple(str(x) for x in lines) if isinstance(lines, list) else ())
    fix = Fix(command, str(raw.get("text") or ""), kit)
    return tuple(body_lines(fix, suggestion)), command


def explain_run(state_home: Path, run_id: str | None) -> RunExplanation:
    """The refusals of ``run_id`` (None: the last run recorded)."""
    # Lines that are not well-formed events (a torn write, foreign or damaged bytes) are
    # skipped and counted: they must not hide the runs recorded around them.
    log_read = audit.read_log(state_home)
    events = [e for e in log_read.events if e.get("event_type") in RUN_EVENTS
              and isinstance(e.get("run_id"), str) and e.get("run_id")]
    log = str(audit.audit_path(state_home))
    skipped = log_read.skipped
    if run_id is None:
        if not events:
            return RunExplanation(None, None, (), log, skipped)
        run_id = str(events[-1]["run_id"])
    mine = [e for e in events if e.get("run_id") == run_id]
    if not mine:
        raise SbxError(Reason.INVALID_ARGUMENT, f"no run {run_id} in the audit log {log}",
                       hint="`sbx explain --last` shows the last run's refusals.")
    workload: str | None = None
    prefix = "sbx explain WORKLOAD [--kit MIXIN]..."
    for event in mine:
        details = event.get("details") or {}
        if event.get("event_type") == audit.SANDBOX_STARTED and isinstance(details, Mapping):
            workload = str(details.get("workload") or "") or None
            listed = details.get("kits")
            kits = [str(k) for k in (listed if isinstance(listed, list) else [])
                    if k != workload]
            recorded = details.get("explain")
            if isinstance(recorded, str) and recorded.startswith("sbx explain "):
                prefix = recorded  # the run's own request: absolute paths, its --arg values
            elif workload:
                prefix = " ".join(["sbx explain", shlex.quote(workload),
                                   *(f"--kit {shlex.quote(k)}" for k in kits)])
        elif event.get("event_type") == audit.SANDBOX_UNAVAILABLE and isinstance(details,
                                                                                 Mapping):
            workload = workload or (str(details.get("workload") or "") or None)
    refusals = tuple(r for r in (_refusal(e, prefix) for e in mine) if r is not None)
    return RunExplanation(run_id, workload, refusals, log, skipped)
