"""Whether a word on the command line is written as a path, and what is there: the check a
pull, a run and a kit validation make before anything of a kit is read (so it imports no
descriptor, schema or archive module)."""

from __future__ import annotations

import stat
from pathlib import Path

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.seams.host import lookup


def path_kind(path: Path, reference: str) -> str | None:
    """``"file"``, ``"dir"``, ``"other"`` or None (nothing there) for a path given on the
    command line; a path the system cannot even look up (too long, a NUL, a symlink loop, no
    permission) is ``invalid_argument``, never an unexpected error."""
    try:
        info = lookup.status(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except ValueError:
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"{shown(reference)} is not a usable path (it contains NUL)",
                       hint="Name a kit directory or a pulled kit reference.") from None
    except OSError as exc:
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"{shown(reference)} cannot be looked up: {exc.strerror}",
                       hint="Name a kit directory (a shorter, readable path) or a pulled kit "
                            "reference.") from None
    if stat.S_ISDIR(info.st_mode):
        return "dir"
    return "file" if stat.S_ISREG(info.st_mode) else "other"


def looks_like_path(reference: str) -> bool:
    """Whether ``reference`` is written as a file-system path (``./x``, ``../x``, ``/x``,
    ``~/x``, ``.``): a registry reference never starts so."""
    return reference in (".", "..", "~") or reference.startswith(("./", "../", "/", "~/"))


def shown(reference: str) -> str:
    """A reference as messages show it: quoted, and cut when it is very long."""
    return repr(reference if len(reference) <= 120 else reference[:117] + "...")


__all__ = ["looks_like_path", "path_kind", "shown"]
