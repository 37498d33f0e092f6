"""The state home's failure modes as reasons, never as crashes.

sbx writes its state (audit log, run records, caches, the kit lock, the CA, secrets) under one
directory, :func:`sbx.base.paths.state_home`. That directory can be on a full disk or a read-only
mount, belong to someone else, or not be a directory at all; its files can be damaged. Each of
these is the user's environment, not a bug in sbx, so each becomes an :class:`SbxError`:

- :data:`~sbx.base.reasons.Reason.STATE_UNWRITABLE` — a write (or a directory needed for one)
  failed; the message names the path, the system's reason (``No space left on device``,
  ``Read-only file system``, ``Permission denied``...) and the fix for that reason;
- :data:`~sbx.base.reasons.Reason.STATE_CORRUPT` — a state file sbx reads back is not what it wrote
  (not UTF-8, not JSON, wrong shape, nested too deeply). sbx never guesses past it and never
  replaces it silently: a damaged kit lock read as empty would drop approved permissions.

Writers wrap their own writes (:func:`writing`), so the message names what was being written.
The error edge (``sbx.__main__``) additionally turns any remaining ``OSError`` whose path lies
inside the state home into ``state_unwritable`` (:func:`from_os_error`): a state write that a
module forgot to wrap still ends in a reason, not a crash report.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Final

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason

# errno → the fix for that cause ({path}: the path that failed; {home}: the state home).
_FIXES: Final[Mapping[int, str]] = {
    errno.ENOSPC: "The disk holding {home} is full: free space there, or point SBX_HOME at a "
                  "directory on another disk.",
    errno.EDQUOT: "This user's disk quota is used up: free space under {home}, or point "
                  "SBX_HOME at a directory with room.",
    errno.EROFS: "{home} is on a read-only filesystem: point SBX_HOME at a writable directory "
                 "(it is created if missing).",
    errno.EACCES: "This user may not write to {path}: fix its owner and mode, or point "
                  "SBX_HOME at a directory you own.",
    errno.EPERM: "This user may not write to {path}: fix its owner and mode, or point "
                 "SBX_HOME at a directory you own.",
    errno.ENOTDIR: "Something in {path} that must be a directory is a file: point SBX_HOME at "
                   "a directory (it is created if missing), or move the file away.",
    errno.EEXIST: "{path} is in the way: move it aside, or point SBX_HOME at another "
                  "directory.",
    errno.EISDIR: "{path} is a directory where sbx keeps a file: move it aside.",
    errno.ENAMETOOLONG: "The path is too long for this system: point SBX_HOME at a shorter "
                        "directory.",
    errno.ELOOP: "{path} is a symbolic link loop: remove the link, or point SBX_HOME at a "
                 "real directory.",
}
_DEFAULT_FIX: Final = ("Check that {home} is a writable directory on a disk with free space, "
                       "or point SBX_HOME at one (it is created if missing).")


def unwritable(path: Path, error: OSError, *, action: str,
               home: Path | None = None) -> SbxError:
    """``state_unwritable``: ``action`` (e.g. "write the run record") failed at ``path``."""
    cause = error.strerror or " ".join(str(error).split()) or type(error).__name__
    shown_home = home if home is not None else path
    fix = _FIXES.get(error.errno or 0, _DEFAULT_FIX).format(path=path, home=shown_home)
    return SbxError(Reason.STATE_UNWRITABLE, f"cannot {action} {path}: {cause}", hint=fix,
                    details={"path": str(path), "errno": errno.errorcode.get(error.errno or 0),
                             "action": action, "state_home": str(shown_home)})


def corrupt(path: Path, problem: str, *, what: str, fix: str | None = None) -> SbxError:
    """``state_corrupt`` for a state file at ``path`` that cannot be read back."""
    return SbxError(Reason.STATE_CORRUPT, f"{what} {path} is damaged: {problem}",
                    hint=fix or f"Move {path} aside (keep it to inspect), then run the command "
                                "again; sbx recreates what it needs.",
                    details={"path": str(path), "what": what, "problem": problem})


@contextmanager
def writing(path: Path, action: str, *, home: Path | None = None) -> Iterator[None]:
    """Turn an ``OSError`` raised while doing ``action`` at ``path`` into
    ``state_unwritable``."""
    try:
        yield
    except OSError as error:
        raise unwritable(path, error, action=action, home=home) from error


def check_home(home: Path, source: str) -> None:
    """Refuse a state home that cannot be one: a file, a path through a file, a path the
    system cannot even look up. A missing directory is fine (it is created on first write);
    whether it is writable is found out by the first write (read-only commands still work)."""
    try:
        info = os.stat(home)
    except FileNotFoundError:
        return
    except ValueError:
        raise SbxError(Reason.STATE_UNWRITABLE,
                       f"the state home {source}={home!r} is not a usable path (it contains NUL)",
                       hint="Point SBX_HOME at a directory.",
                       details={"path": str(home), "source": source}) from None
    except OSError as error:
        raise unwritable(home, error, action=f"use the state home ({source})",
                         home=home) from None
    if not stat.S_ISDIR(info.st_mode):
        raise SbxError(Reason.STATE_UNWRITABLE,
                       f"the state home {home} ({source}) is not a directory",
                       hint=f"Point {source} at a directory (it is created if missing), or move "
                            "the file away.",
                       details={"path": str(home), "source": source})


def from_os_error(error: OSError, home: Path | None) -> SbxError | None:
    """``state_unwritable`` when ``error`` is about a path inside ``home``, else None (a bug:
    the caller reports a crash).

    A write that fails for lack of space names no file (the data is flushed on ``close``), so
    "no space" without a file counts as the state home's when the disk holding it is in fact
    full.
    """
    if home is None:
        return None
    for name in (error.filename, error.filename2):
        if isinstance(name, str | bytes) and name and _inside(Path(os.fsdecode(name)), home):
            return unwritable(Path(os.fsdecode(name)), error, action="use the state home path",
                              home=home)
    if error.filename is None and error.errno in (errno.ENOSPC, errno.EDQUOT) \
            and _disk_full(home):
        return unwritable(home, error, action="write to the state home", home=home)
    return None


_NEARLY_FULL_BYTES: Final = 1024 * 1024


def _disk_full(home: Path) -> bool:
    """Whether the filesystem holding ``home`` (or its nearest existing parent) has no room."""
    path = Path(os.path.abspath(home))
    for candidate in (path, *path.parents):
        try:
            info = os.statvfs(candidate)
        except (OSError, ValueError):
            continue
        return info.f_bavail * info.f_frsize < _NEARLY_FULL_BYTES
    return False


def _inside(path: Path, home: Path) -> bool:
    try:
        candidate = Path(os.path.abspath(path))
        root = Path(os.path.abspath(home))
    except ValueError:
        return False
    return candidate == root or root in candidate.parents


__all__ = ["check_home", "corrupt", "from_os_error", "unwritable", "writing"]
