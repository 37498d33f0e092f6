"""`sbx policy log`: what the sandboxes' proxies decided, from their request logs.

A subject is a named sandbox (its log follows it across stop/start), a run id (or a unique
prefix of at least 8 of its hex digits), or nothing: every log kept in the state home. The
summary groups records per sandbox and destination; ``follow`` tails the logs as the proxies
write them, until the followed one-shot run ends (or, for a named sandbox or every log, until
interrupted).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Final

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.egress import requestlog
from sbx.domain.sandbox import runrecord
from sbx.domain.sandbox.durations import parse_duration
from sbx.usecases.context import AppContext
from sbx.usecases.sandboxstore import SandboxStore

_HEX: Final = re.compile(r"[0-9a-f]{8,32}")
FOLLOW_POLL_S: Final = 0.2


@dataclass(frozen=True)
class LogSource:
    run_id: str
    directory: Path
    sandbox: str | None = None  # the named sandbox whose log this is


@dataclass
class HostSummary:
    sandbox: str
    destination: str
    allowed: int = 0
    denied: int = 0
    last_rule: str = "-"
    last_seen: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"sandbox": self.sandbox, "destination": self.destination,
                "allowed": self.allowed, "denied": self.denied, "last_rule": self.last_rule,
                "last_seen": self.last_seen}


@dataclass
class LogView:
    sources: list[LogSource]
    records: list[dict[str, Any]] = field(default_factory=list)
    skipped: int = 0

    def summary(self) -> list[HostSummary]:
        rows: dict[tuple[str, str], HostSummary] = {}
        for record in self.records:
            key = (shown_sandbox(record), destination(record))
            row = rows.setdefault(key, HostSummary(*key))
            if record.get("decision") == "allowed":
                row.allowed += 1
            else:
                row.denied += 1
            row.last_rule = rule_text(record)
            row.last_seen = str(record.get("time") or "")
        return sorted(rows.values(), key=lambda r: (r.sandbox, r.destination))


def shown_sandbox(record: Mapping[str, Any]) -> str:
    name = record.get("sandbox")
    return str(name) if name else str(record.get("run_id") or "?")[:12]


def destination(record: Mapping[str, Any]) -> str:
    host = str(record.get("host") or "?")
    shown = f"[{host}]" if ":" in host else host
    return f"{shown}:{record.get('port')}"


def rule_text(record: Mapping[str, Any]) -> str:
    rule = record.get("rule")
    if isinstance(rule, Mapping) and isinstance(rule.get("text"), str):
        return str(rule["text"])
    code = str(record.get("code") or "")
    return "deny by default" if code == "default_deny" else code or "-"


def sources(ctx: AppContext, subject: str | None) -> list[LogSource]:
    """The logs ``subject`` names (see the module docstring); refused when it names none."""
    root = ctx.state_home / requestlog.LOG_DIR
    store = SandboxStore(ctx.state_home)
    names = _named_run_ids(store)
    if subject is None:
        try:
            directories = sorted((p for p in root.iterdir() if p.is_dir()),
                                 key=lambda p: p.stat().st_mtime)
        except OSError:
            return []
        return [LogSource(p.name, p, names.get(p.name)) for p in directories]
    if subject in names.values():
        run_id = next(r for r, n in names.items() if n == subject)
        return [LogSource(run_id, root / run_id, subject)]
    if _HEX.fullmatch(subject):
        try:
            found = sorted(p.name for p in root.iterdir() if p.name.startswith(subject))
        except OSError:
            found = []
        if len(found) == 1:
            return [LogSource(found[0], root / found[0], names.get(found[0]))]
        if len(found) > 1:
            raise SbxError(Reason.INVALID_ARGUMENT,
                           f"{subject} is the start of {len(found)} run ids",
                           hint="Give more of the run id.")
    raise SbxError(Reason.INVALID_ARGUMENT,
                   f"no sandbox named {subject} and no request log of a run {subject}",
                   hint="`sbx ls --all` lists sandboxes and runs; `sbx policy log` alone shows "
                        "every log kept.")


def _named_run_ids(store: SandboxStore) -> dict[str, str]:
    """run id → the named sandbox (records that cannot be read are left out)."""
    out: dict[str, str] = {}
    for name in store.names():
        try:
            record = store.load(name)
        except SbxError:
            continue
        if record is not None:
            out[record.run_id] = name
    return out


def parse_since(text: str | None, now: float | None = None) -> float | None:
    """``--since``: a duration back from now (``10m``, ``2h``, ``7d``) or an ISO time."""
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return (time.time() if now is None else now) - parse_duration(
            text, flag="--since", days=True)
    if moment.tzinfo is None:
        moment = moment.astimezone()
    return moment.timestamp()


def keep(record: Mapping[str, Any], *, since: float | None, denied: bool) -> bool:
    if denied and record.get("decision") == "allowed":
        return False
    if since is not None:
        try:
            when = datetime.fromisoformat(str(record.get("time")).replace("Z", "+00:00"))
        except ValueError:
            return False
        if when.timestamp() < since:
            return False
    return True


def read(ctx: AppContext, subject: str | None, *, since: float | None,
         denied: bool) -> LogView:
    view = LogView(sources(ctx, subject))
    for source in view.sources:
        result = requestlog.read_records(source.directory)
        view.skipped += result.skipped
        view.records.extend(r for r in result.records if keep(r, since=since, denied=denied))
    view.records.sort(key=lambda r: str(r.get("time") or ""))
    return view


def follow(ctx: AppContext, subject: str | None, *, since: float | None, denied: bool,
           on_record: Callable[[dict[str, Any]], None], poll_s: float = FOLLOW_POLL_S,
           stop: Callable[[], bool] | None = None) -> None:
    """Print what is there (``on_record``), then each new record as it is written. Ends when
    the one-shot run followed is over, or when ``stop`` says so."""
    view = read(ctx, subject, since=since, denied=denied)
    for record in view.records:
        on_record(record)
    followers: dict[str, requestlog.Follower] = {}
    for source in view.sources:
        follower = requestlog.Follower(source.directory)
        follower.start_at_end()
        followers[source.run_id] = follower
    single = subject is not None
    try:
        while stop is None or not stop():
            if not single:  # every log: runs that start meanwhile are followed too
                for source in sources(ctx, None):
                    if source.run_id not in followers:
                        followers[source.run_id] = requestlog.Follower(source.directory)
            fresh: list[dict[str, Any]] = []
            for follower in followers.values():
                fresh.extend(follower.poll())
            for record in sorted(fresh, key=lambda r: str(r.get("time") or "")):
                if keep(record, since=since, denied=denied):
                    on_record(record)
            if single and _ended(ctx, view.sources):
                for follower in followers.values():  # what the proxy wrote as it stopped
                    for record in follower.poll():
                        if keep(record, since=since, denied=denied):
                            on_record(record)
                return
            time.sleep(poll_s)
    finally:
        for follower in followers.values():
            follower.close()


def _ended(ctx: AppContext, followed: Sequence[LogSource]) -> bool:
    """A one-shot run is over once its run directory is gone (named sandboxes never end a
    follow by themselves: they start again)."""
    return all(s.sandbox is None and not runrecord.run_dir(ctx.state_home, s.run_id).exists()
               for s in followed)


def records_of_run(state_home: Path, run_id: str, *, phase: str | None = None,
                   refused_only: bool = True) -> list[dict[str, Any]]:
    """One run's records (for the message of a failed install hook), oldest first."""
    result = requestlog.read_records(state_home / requestlog.LOG_DIR / run_id)
    return [r for r in result.records
            if (phase is None or r.get("phase") == phase)
            and (not refused_only or r.get("decision") != "allowed")]


def lines(records: Iterable[Mapping[str, Any]]) -> list[str]:
    return [record_line(r) for r in records]


def record_line(record: Mapping[str, Any]) -> str:
    """One record as a line for people."""
    method = record.get("method") or "CONNECT"
    scheme = str(record.get("scheme") or "https")
    host = str(record.get("host") or "?")
    shown = f"[{host}]" if ":" in host else host
    port = record.get("port")
    default = 443 if scheme == "https" else 80
    where = shown if port == default else f"{shown}:{port}"
    target = f"{scheme}://{where}{record.get('path') or ''}" if record.get("method") \
        else f"{shown}:{port}"
    status = record.get("status")
    decision = str(record.get("decision"))
    code = str(record.get("code") or "")
    extra = [] if decision == "allowed" else [code]
    creds = record.get("credentials") or []
    if creds:
        extra.append("credential " + ",".join(str(c) for c in creds))
    duration = record.get("duration_ms")
    moved = ""
    if record.get("bytes_up") is not None or record.get("bytes_down") is not None:
        moved = f" up={record.get('bytes_up') or 0}B down={record.get('bytes_down') or 0}B"
    return (f"{record.get('time')} {shown_sandbox(record)} {decision} {method} {target}"
            + (f" {status}" if status is not None else "")
            + (f" ({'; '.join(extra)})" if extra else "")
            + f" rule: {rule_text(record)}"
            + moved + (f" {duration}ms" if duration is not None else ""))


__all__ = ["HostSummary", "LogSource", "LogView", "destination", "follow", "keep", "lines",
           "parse_since", "read", "record_line", "records_of_run", "rule_text",
           "shown_sandbox", "sources"]
