"""The audit log: JSONL ``{timestamp, event_type, run_id, severity, details}`` (SPEC §7).

Appended under the state home, one line per event, with O_APPEND so concurrent writers never
interleave partial lines. Never a secret value: callers pass only names, codes and counts.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from sbx.seams import owned

AUDIT_FILE: Final = "audit.jsonl"

SANDBOX_UNAVAILABLE: Final = "sandbox_unavailable"
SANDBOX_STARTED: Final = "sandbox_started"
SANDBOX_FINISHED: Final = "sandbox_finished"
CAPABILITY_SKIPPED: Final = "capability_skipped"
CLEANUP_FAILED: Final = "cleanup_failed"
# sbx gc removed something: {container, network, volume, run_dir, proxy counts, grace_seconds}
GC_REMOVED: Final = "gc_removed"
# sbx secret set / rm: {service[, replaced]} (never the value)
SECRET_SET: Final = "secret_set"  # noqa: S105 -- an event name, not a password
SECRET_REMOVED: Final = "secret_removed"  # noqa: S105 -- an event name
# the egress proxy refused a connection or request: {host, port, method, path, rule, code, phase}
EGRESS_DENIED: Final = "egress_denied"
# the egress proxy could not carry an admitted request (502: DNS, connect, TLS, upstream...):
# the same details as egress_denied, ``code`` saying what failed
EGRESS_FAILED: Final = "egress_failed"
# sbx policy allow|deny / rm: {rule} (id, action, host, path, methods, phase, sandbox,
# expires) and, for an allow that widened what kits declared, {widenings, via}
POLICY_RULE_ADDED: Final = "policy_rule_added"
POLICY_RULE_REMOVED: Final = "policy_rule_removed"
# sbx pull pinned a kit: {reference, digest, previous_digest, widenings}
KIT_PULLED: Final = "kit_pulled"
# sbx pull: a widening was approved (terminal or --accept) / refused: {reference, digest,
# previous_digest, widenings, via}
KIT_WIDENING_ACCEPTED: Final = "kit_widening_accepted"
KIT_WIDENING_REFUSED: Final = "kit_widening_refused"
# a run created or changed files in its workspace that host tools execute: {paths}
WORKSPACE_HOST_CONFIG_CHANGED: Final = "workspace_host_config_changed"


def audit_path(state_home: Path) -> Path:
    return state_home / AUDIT_FILE


def entry(event_type: str, *, run_id: str | None, severity: str,
          details: Mapping[str, Any]) -> dict[str, Any]:
    """One event as it is written, stamped now."""
    return {
        "timestamp": datetime.now(UTC).isoformat(timespec="milliseconds"),
        "event_type": event_type,
        "run_id": run_id,
        "severity": severity,
        "details": dict(details),
    }


def record(state_home: Path, event_type: str, *, run_id: str | None, severity: str,
           details: Mapping[str, Any]) -> None:
    state_home.mkdir(parents=True, exist_ok=True, mode=0o700)
    _append(audit_path(state_home), entry(event_type, run_id=run_id, severity=severity,
                                          details=details))


def record_at(path: Path, event_type: str, *, run_id: str | None, severity: str,
              details: Mapping[str, Any]) -> None:
    """:func:`record` into an explicit audit file (the egress proxy is handed its path)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    _append(path, entry(event_type, run_id=run_id, severity=severity, details=details))


def append_entry(path: Path, entry: Mapping[str, Any]) -> None:
    """An event another process stamped (a proxy in a container), into ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    _append(path, entry)


def _append(path: Path, entry: Mapping[str, Any]) -> None:
    line = (json.dumps(entry, sort_keys=True, default=str) + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    try:
        os.write(fd, line)
    except OSError as error:
        # os.write names no file; a full disk must still say which file it could not append to.
        raise OSError(error.errno, error.strerror, str(path)) from error
    finally:
        os.close(fd)


# One event is a few hundred bytes; a longer line is not one sbx wrote.
MAX_LINE_BYTES: Final = 1024 * 1024
_FIELDS: Final = (("timestamp", str), ("event_type", str), ("severity", str), ("details", dict))


@dataclass
class AuditLog:
    """The well-formed events of the audit log, in order, and how many lines were not."""

    events: list[dict[str, Any]] = field(default_factory=list)
    skipped: int = 0


def read_log(state_home: Path) -> AuditLog:
    """Every well-formed event; a line that is not one (not UTF-8, not JSON, nested too deep,
    too long, not an object, a field of the wrong type) is skipped and counted — the log is
    append-only and may hold a torn or foreign line, which must not hide the others."""
    log = AuditLog()
    path = audit_path(state_home)
    # What explain reports must be what sbx wrote: this user's own log (sbx.seams.owned).
    fd = owned.open_file(path)
    if fd is None:
        return log
    os.set_blocking(fd, True)
    with os.fdopen(fd, "rb") as handle:
        while True:
            raw = handle.readline(MAX_LINE_BYTES + 1)
            if not raw:
                return log
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                while raw and not raw.endswith(b"\n"):  # the rest of the over-long line
                    raw = handle.readline(MAX_LINE_BYTES)
                log.skipped += 1
                continue
            if not raw.strip():
                continue
            event = _event(raw)
            if event is None:
                log.skipped += 1
            else:
                log.events.append(event)


def _event(raw: bytes) -> dict[str, Any] | None:
    try:
        event = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError included
        return None
    if not isinstance(event, dict):
        return None
    for name, kind in _FIELDS:
        if not isinstance(event.get(name), kind):
            return None
    run_id = event.get("run_id")
    return event if run_id is None or isinstance(run_id, str) else None


def read_events(state_home: Path) -> Iterator[dict[str, Any]]:
    yield from read_log(state_home).events


__all__ = ["AUDIT_FILE", "CAPABILITY_SKIPPED", "CLEANUP_FAILED", "GC_REMOVED", "SANDBOX_FINISHED",
           "SANDBOX_STARTED", "SANDBOX_UNAVAILABLE", "SECRET_REMOVED", "SECRET_SET", "audit_path",
           "read_events", "record", "EGRESS_DENIED", "EGRESS_FAILED", "POLICY_RULE_ADDED",
           "POLICY_RULE_REMOVED", "record_at", "KIT_PULLED", "AuditLog",
           "MAX_LINE_BYTES", "read_log",
           "KIT_WIDENING_ACCEPTED", "KIT_WIDENING_REFUSED", "WORKSPACE_HOST_CONFIG_CHANGED"]
