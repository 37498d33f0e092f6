"""The egress request log: one JSONL record per decision of a sandbox's proxy (schema below).

The proxy writes it (:class:`JsonlSink`, given a file path by its config: it knows nothing of
the state home, so the proxy can run beside a remote engine and write to a mounted path); the
CLI reads it (:func:`read_records`, :class:`Follower`) for ``sbx policy log`` and to name the
refusal behind a failed install hook. Bounded on disk: ``segment_bytes`` per file, rotated by
size into ``requests.jsonl.1`` … ``.{segments-1}`` (the oldest dropped), so one sandbox's log
never holds more than ``segment_bytes * segments``.

Schema (``v`` = :data:`SCHEMA_VERSION`; every key is always present, ``null`` when it does not
apply; readers must ignore keys they do not know):

``v`` 1 · ``time`` ISO-8601 UTC, milliseconds · ``sandbox`` the named sandbox or null ·
``run_id`` · ``phase`` install|runtime · ``mode`` ``intercepted`` (HTTPS request seen inside
TLS), ``plain`` (absolute-form HTTP), ``tunnel`` (a CONNECT carried as bytes), ``connect`` (a
CONNECT refused or failed before any tunnel) · ``method`` (null for a tunnel) · ``scheme`` ·
``host`` · ``port`` · ``path`` (no query, no fragment; null for a tunnel) · ``decision``
allowed|denied|failed · ``status`` the HTTP status the client got (the origin's when allowed;
the proxy's 403/407/502… otherwise; null for a tunnel) · ``reason`` the sbx reason code of a
refusal or failure (egress_denied, proxy_failed, proxy_client_refused…; null when allowed) ·
``code`` the detail code (``allowed``, ``default_deny``, ``destination_blocked``, ``dns_failed``…,
each explained by ``sbx explain CODE``) · ``rule`` the deciding rule: ``{"source": "kit", "kit",
"index", "phase", "action", "at", "text"}``, ``{"source": "user", "id", "phase", "action",
"text"}``, ``{"source": "proxy", "text"}``, or null (deny by default) · ``credentials`` the
services whose credential was injected (names only) · ``bytes_up`` / ``bytes_down`` body bytes
client → origin and back (a tunnel: every byte) · ``duration_ms`` · ``cause`` for a failure:
``{"kind": dns|connect|tls|upstream|upstream_status|protocol|limit|credential|internal,
"detail"}`` · ``fix`` for a refusal: the narrowest command that opens it (``sbx policy allow
...``, ``sbx policy rm ID``), or null.

Never in a record: a header, a cookie, a query string, a secret, a token, a sentinel (the
writer's ``scrub`` replaces any such value a client put into a host or path).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO, Final

from sbx.base.errors import SbxError
from sbx.seams import owned

SCHEMA_VERSION: Final = 1
LOG_FILE: Final = "requests.jsonl"
LOG_DIR: Final = "requests"  # under the state home: requests/<run id>/requests.jsonl
SEGMENT_BYTES: Final = 4 * 1024 * 1024
SEGMENTS: Final = 3  # the live file and two rotated ones: at most 12 MiB per sandbox
KEPT_RUN_LOGS: Final = 64  # one-shot runs whose logs are kept (named sandboxes always)
MAX_FIELD: Final = 512  # characters of a host or path kept
MAX_LINE_BYTES: Final = 64 * 1024
REDACTED: Final = "[redacted]"
DECISIONS: Final = ("allowed", "denied", "failed")
FIELDS: Final = ("v", "time", "sandbox", "run_id", "phase", "mode", "method", "scheme", "host",
                 "port", "path", "decision", "status", "reason", "code", "rule", "credentials",
                 "bytes_up", "bytes_down", "duration_ms", "cause", "fix")

# What failed, by detail code: the ``cause.kind`` of a failure record.
CAUSES: Final[dict[str, str]] = {
    "dns_failed": "dns", "connect_failed": "connect", "upstream_proxy_unreachable": "connect",
    "origin_untrusted": "tls", "origin_tls_failed": "tls", "certificate_failed": "tls",
    "upstream_failed": "upstream", "upstream_proxy_failed": "upstream",
    "upstream_proxy_refused": "upstream_status", "bad_request": "protocol",
    "not_a_proxy_request": "protocol", "ambiguous_framing": "protocol",
    "target_too_long": "limit", "head_too_large": "limit", "too_many_connections": "limit",
    "token_request_too_large": "limit", "credential_unbound": "credential",
    "token_store_failed": "credential", "token_store_locked": "credential",
    "token_request_unreadable": "protocol", "encoded_response": "upstream",
    "internal_error": "internal",
}


def log_path(directory: Path) -> Path:
    return directory / LOG_FILE


def segment_paths(directory: Path, segments: int = SEGMENTS) -> list[Path]:
    """The log's files, oldest first (``requests.jsonl.2``, ``.1``, then the live one)."""
    base = log_path(directory)
    return [*(base.with_name(f"{LOG_FILE}.{i}") for i in range(segments - 1, 0, -1)), base]


_SECOND: list[Any] = [None, ""]  # the last whole second formatted, and its text


def timestamp(now: float | None = None) -> str:
    """``2026-12-01T20:49:39.575Z`` (the second's text is made once per second)."""
    moment = time.time() if now is None else now
    second = int(moment)
    if _SECOND[0] != second:
        text = datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S")
        _SECOND[0], _SECOND[1] = second, text
    return f"{_SECOND[1]}.{int((moment - second) * 1000):03d}Z"


def bounded(text: str | None, scrub: Callable[[str], str] | None = None) -> str | None:
    """A host or path as logged: scrubbed of secrets and sentinels, at most :data:`MAX_FIELD`."""
    if text is None:
        return None
    if scrub is not None:
        text = scrub(text)
    return text if len(text) <= MAX_FIELD else text[:MAX_FIELD] + "..."


def scrubber(needles: Sequence[str]) -> Callable[[str], str]:
    """Replaces each of ``needles`` (secret values, sentinels; 4 characters or more) by
    :data:`REDACTED`."""
    kept = sorted({n for n in needles if len(n) >= 4}, key=len, reverse=True)

    def scrub(text: str) -> str:
        for needle in kept:
            if needle in text:
                text = text.replace(needle, REDACTED)
        return text

    return scrub


# -- writing (the proxy) ---------------------------------------------------------------------------


class JsonlSink:
    """Appends records to ``path`` (one line each, ``O_APPEND``), rotating by size. One writer
    per log at a time (a sandbox's proxy); a failed write is said once on ``report`` and the
    record dropped, never the request."""

    def __init__(self, path: Path, *, segment_bytes: int = SEGMENT_BYTES,
                 segments: int = SEGMENTS, report: Callable[[str], None] | None = None) -> None:
        self.path = path
        self.segment_bytes = max(1024, int(segment_bytes))
        self.segments = max(1, int(segments))
        self._report = report
        self._fd: int | None = None
        self._size = 0
        self._failed = False

    def _open(self) -> int:
        # this user's own directory and file only (sbx.seams.owned): a planted link or a file
        # someone else can read would take the records elsewhere
        owned.ensure_directory(self.path.parent)
        fd = owned.open_file(self.path, flags=os.O_WRONLY | os.O_APPEND, create=True)
        assert fd is not None  # noqa: S101 - O_CREAT either opens or raises
        os.set_blocking(fd, True)
        self._size = os.fstat(fd).st_size
        return fd

    def write(self, record: Mapping[str, Any]) -> None:
        try:
            text = json.dumps(record, separators=(",", ":"))
        except (TypeError, ValueError):  # a value no record should hold: written as text
            text = json.dumps(record, separators=(",", ":"), default=str)
        line = (text + "\n").encode("ascii")
        try:
            if self._fd is None:
                self._fd = self._open()
            if self._size and self._size + len(line) > self.segment_bytes:
                self._rotate()
            os.write(self._fd, line)
            self._size += len(line)
        except (OSError, SbxError) as error:
            if not self._failed and self._report is not None:
                why = error.message if isinstance(error, SbxError) else error.strerror
                self._report(f"cannot write the request log {self.path}: {why}; "
                             "records are dropped until it can")
            self._failed = True
            self.close()
            return
        self._failed = False

    def _rotate(self) -> None:
        self.close()
        paths = segment_paths(self.path.parent, self.segments)
        for older, newer in itertools.pairwise(paths):
            with contextlib.suppress(FileNotFoundError):
                os.replace(newer, older)
        if self.segments == 1:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
        self._fd = self._open()

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None


class NullSink:
    """No log configured: records are dropped."""

    def write(self, record: Mapping[str, Any]) -> None:
        return

    def close(self) -> None:
        return


# -- reading (the CLI) -----------------------------------------------------------------------------


def parse_line(raw: bytes) -> dict[str, Any] | None:
    """One record, or None for a line that is not one (torn, foreign, too long, another
    version's shape)."""
    if len(raw) > MAX_LINE_BYTES:
        return None
    try:
        record = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):
        return None
    if not isinstance(record, dict) or not isinstance(record.get("v"), int):
        return None
    if not isinstance(record.get("host"), str) or record.get("decision") not in DECISIONS:
        return None
    if not isinstance(record.get("time"), str):
        return None
    return record


@dataclass
class ReadResult:
    records: list[dict[str, Any]]
    skipped: int = 0


def read_records(directory: Path, *, segments: int = SEGMENTS) -> ReadResult:
    """Every well-formed record of one sandbox's log, oldest first; malformed lines are
    skipped and counted."""
    result = ReadResult([])
    for path in segment_paths(directory, segments):
        handle = _open_owned(path)  # an unsafe file is refused (state_unsafe), not skipped
        if handle is None:
            continue
        with handle:
            for raw in handle:
                if not raw.strip():
                    continue
                record = parse_line(raw)
                if record is None:
                    result.skipped += 1
                else:
                    result.records.append(record)
    return result


class Follower:
    """New records of a live log as they are written, across rotations: the open file is
    read to its end before a rotated-in new one is opened."""

    def __init__(self, directory: Path) -> None:
        self.path = log_path(directory)
        self._handle: Any = None
        self._inode: int | None = None
        self._partial = b""

    def start_at_end(self) -> None:
        """Skip what is there now (it was read with :func:`read_records`)."""
        self._handle = _open_owned(self.path)
        if self._handle is not None:
            self._handle.seek(0, os.SEEK_END)
            self._inode = os.fstat(self._handle.fileno()).st_ino

    def poll(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if self._handle is None:
            self._handle = _open_owned(self.path)
            if self._handle is None:
                return out
            self._inode = os.fstat(self._handle.fileno()).st_ino
        out.extend(self._drain())
        try:
            current = os.stat(self.path).st_ino
        except OSError:
            return out
        if current != self._inode:  # rotated: the rest of the old file is read above
            self._handle.close()
            self._handle = None
            self._partial = b""
            out.extend(self.poll())
        return out

    def _drain(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        data = self._handle.read()
        if not data:
            return out
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        for raw in lines:
            if raw.strip():
                record = parse_line(raw)
                if record is not None:
                    out.append(record)
        return out

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


def _open_owned(path: Path) -> BinaryIO | None:
    """A log file opened through sbx.seams.owned (None: it does not exist)."""
    try:
        fd = owned.open_file(path)
    except NotADirectoryError:
        return None
    if fd is None:
        return None
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def prune(root: Path, *, keep: int = KEPT_RUN_LOGS, protected: Sequence[str] = ()) -> None:
    """Drop the logs of all but the ``keep`` newest runs under ``root`` (``protected`` run ids
    — named sandboxes' — are never dropped), so many one-shot runs cannot fill the disk."""
    try:
        entries = [p for p in root.iterdir() if p.is_dir() and p.name not in protected]
    except OSError:
        return
    if len(entries) <= keep:
        return

    def mtime(path: Path) -> float:
        try:
            return path.stat().st_mtime
        except OSError:
            return 0.0

    for old in sorted(entries, key=mtime)[:len(entries) - keep]:
        for path in segment_paths(old):
            with contextlib.suppress(OSError):
                path.unlink()
        with contextlib.suppress(OSError):
            old.rmdir()


__all__ = ["CAUSES", "DECISIONS", "FIELDS", "KEPT_RUN_LOGS", "LOG_DIR", "LOG_FILE", "MAX_FIELD",
           "REDACTED", "SCHEMA_VERSION", "SEGMENTS", "SEGMENT_BYTES", "Follower", "JsonlSink",
           "NullSink", "ReadResult", "bounded", "log_path", "parse_line", "prune",
           "read_records", "scrubber", "segment_paths", "timestamp"]
