"""State files written and read back whole: atomically replaced, strictly parsed.

JSON files in the state home that the permission gates trust (the kit lock, the kit
approvals). A write replaces the file atomically (temp file in the same directory, fsync,
rename), so a crash or a refusal never leaves a half-written file; a read of a damaged file is
a refusal (``state_corrupt``), never an empty state, which would forget what was approved; a
file that is not this user's own is refused (``state_unsafe``).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, TypeVar

from sbx.seams import owned, state

_T = TypeVar("_T")
MAX_STATE_BYTES: Final = 16 * 1024 * 1024  # a lock of thousands of kits is a few MiB


def read_state(path: Path, parse: Callable[[Any], _T], absent: _T, *, what: str,
               fix: str) -> _T:
    """A JSON state file read strictly: ``absent`` when there is no file, ``state_corrupt``
    (naming ``what``) when it cannot be read, is too large, is not UTF-8 JSON, or ``parse``
    raises ``ValueError`` on it."""
    try:  # this user's own file only (sbx.seams.owned): the gates trust what it says
        found = owned.read_prefix(path, MAX_STATE_BYTES + 1)
    except OSError as exc:
        raise state.corrupt(path, f"it cannot be read ({exc.strerror})", what=what,
                            fix=fix) from exc
    if found is None:
        return absent
    raw = found
    if len(raw) > MAX_STATE_BYTES:
        raise state.corrupt(path, f"it is larger than {MAX_STATE_BYTES} bytes", what=what,
                            fix=fix)
    try:
        return parse(json.loads(raw.decode("utf-8")))
    except UnicodeDecodeError as exc:
        raise state.corrupt(path, f"it is not UTF-8 text (byte offset {exc.start})",
                            what=what, fix=fix) from exc
    except RecursionError as exc:
        raise state.corrupt(path, "its JSON is nested too deeply", what=what,
                            fix=fix) from exc
    except ValueError as exc:  # not JSON, or not the file's shape
        problem = " ".join(str(exc).split())[:200]
        raise state.corrupt(path, problem, what=what, fix=fix) from exc


def write_atomic(path: Path, payload: bytes) -> None:
    """Write ``payload`` to ``path`` atomically; a full or read-only state home is
    ``state_unwritable`` (and the old file, if any, is left as it was)."""
    with state.writing(path, "write"):
        owned.ensure_directory(path.parent)
        fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            try:
                _write_all(fd, payload)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.chmod(temp, 0o600)
            os.replace(temp, path)
        except BaseException:
            Path(temp).unlink(missing_ok=True)
            raise


def _write_all(fd: int, payload: bytes) -> None:
    view = memoryview(payload)
    while view:
        view = view[os.write(fd, view):]


__all__ = ["MAX_STATE_BYTES", "read_state", "write_atomic"]
