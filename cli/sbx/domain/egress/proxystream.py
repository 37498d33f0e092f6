"""What a proxy in a container says on its stdout, the one stream its owner reads over the
engine's attach connection: its ready line, then one tagged line per request record, audit
event and phase acknowledgement. Both sides use these functions, so they cannot drift apart.

Each line is ``<TAG> <compact JSON>``. A line is at most :data:`MAX_LINE_BYTES`; the owner
drops anything longer or untagged, and never lets a line choose where it is written.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

RECORD: Final = "SBX-RECORD"  # a request log record (sbx.domain.egress.requestlog's shape)
AUDIT: Final = "SBX-AUDIT"  # an audit event ({timestamp, event_type, run_id, severity, details})
PHASE: Final = "SBX-PHASE"  # the phase now in force ("install" | "runtime"), as a JSON string
TAGS: Final = (RECORD, AUDIT, PHASE)
MAX_LINE_BYTES: Final = 1024 * 1024


def encode(tag: str, value: object) -> bytes:
    """One line; a value that does not serialise is written as text rather than lost."""
    try:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=True)
    except (TypeError, ValueError):
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=True, default=str)
    return f"{tag} {text}\n".encode("ascii")


def decode(line: bytes) -> tuple[str, Any] | None:
    """(tag, value) of a line the proxy wrote; None for anything else."""
    if len(line) > MAX_LINE_BYTES:
        return None
    tag, _, payload = line.rstrip(b"\n").partition(b" ")
    name = tag.decode("ascii", "replace")
    if name not in TAGS:
        return None
    try:
        value = json.loads(payload)
    except ValueError:
        return None
    if name == PHASE:
        return (name, value) if value in ("install", "runtime") else None
    return (name, value) if isinstance(value, Mapping) else None


__all__ = ["AUDIT", "MAX_LINE_BYTES", "PHASE", "RECORD", "TAGS", "decode", "encode"]
