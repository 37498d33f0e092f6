"""The audit log: JSONL ``{timestamp, event_type, run_id, severity, details}`` (SPEC §7).

Appended under the state home, one line per event, with O_APPEND so concurrent writers never
interleave partial lines. Never a secret value: callers pass only names, codes and counts.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

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
# sbx pull pinned a kit: {reference, digest, previous_digest, widenings}
KIT_PULLED: Final = "kit_pulled"
# sbx pull: a widening was approved (terminal or --accept) / refused: {reference, digest,
# previous_digest, widenings, via}
KIT_WIDENING_ACCEPTED: Final = "kit_widening_accepted"
KIT_WIDENING_REFUSED: Final = "kit_widening_refused"


def audit_path(state_home: Path) -> Path:
    return state_home / AUDIT_FILE


def record(state_home: Path, event_type: str, *, run_id: str | None, severity: str,
           details: Mapping[str, Any]) -> None:
    entry = {
        "timestamp": datetime.now(UTC).isoformat(timespec="milliseconds"),
        "event_type": event_type,
        "run_id": run_id,
        "severity": severity,
        "details": dict(details),
    }
    state_home.mkdir(parents=True, exist_ok=True, mode=0o700)
    _append(audit_path(state_home), entry)


def record_at(path: Path, event_type: str, *, run_id: str | None, severity: str,
              details: Mapping[str, Any]) -> None:
    """:func:`record` into an explicit audit file (the egress proxy is handed its path)."""
    entry = {
        "timestamp": datetime.now(UTC).isoformat(timespec="milliseconds"),
        "event_type": event_type,
        "run_id": run_id,
        "severity": severity,
        "details": dict(details),
    }
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    _append(path, entry)


def _append(path: Path, entry: Mapping[str, Any]) -> None:
    line = (json.dumps(entry, sort_keys=True, default=str) + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def read_events(state_home: Path) -> Iterator[dict[str, Any]]:
    path = audit_path(state_home)
    if not path.exists():
        return
    with path.open(encoding="utf-8") as handle:
        for raw in handle:
            line = raw.strip()
            if not line:
                continue
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(event, dict):
                yield event


__all__ = ["AUDIT_FILE", "CAPABILITY_SKIPPED", "CLEANUP_FAILED", "GC_REMOVED", "SANDBOX_FINISHED",
           "SANDBOX_STARTED", "SANDBOX_UNAVAILABLE", "SECRET_REMOVED", "SECRET_SET", "audit_path",
           "read_events", "record", "EGRESS_DENIED", "record_at", "KIT_PULLED",
           "KIT_WIDENING_ACCEPTED", "KIT_WIDENING_REFUSED"]
