"""Files only this user may read (the secret store, the CA's key, OAuth tokens, a run's proxy
config): created 0600 in 0700 directories this user owns, read only when nobody else could
have written or swapped them. The ownership checks and atomic writes are
:mod:`sbx.seams.owned`'s; a refusal here is ``secret_store_unsafe``."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import Final

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.seams import owned

PRIVATE_BITS: Final = 0o077  # group and other: none of them on a private file


def unsafe(path: Path, problem: str, fix: str) -> SbxError:
    """The refusal of a private file or directory that is not safe to use."""
    return SbxError(Reason.SECRET_STORE_UNSAFE, f"refusing to use {path}: {problem}", hint=fix,
                    details={"path": str(path), "problem": problem})


def ensure_private_dir(directory: Path) -> Path:
    """Create ``directory`` (and parents) as 0700, or check an existing one.

    An existing directory that is a symlink, not a directory or owned by another user, or one
    on a path someone else controls, is refused (``secret_store_unsafe``); group/other
    permission bits on one we own are removed, since tightening is always safe.
    """
    try:
        owned.ensure_directory(directory.parent, reason=Reason.SECRET_STORE_UNSAFE)
        with contextlib.suppress(FileExistsError):
            directory.mkdir(mode=0o700)
    except OSError as error:
        raise unsafe(directory, f"cannot create it ({error.strerror})",
                      "Make the state home writable (or point SBX_HOME elsewhere).") from None
    info = os.lstat(directory)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise unsafe(directory, "it is a symlink or not a directory",
                      f"Remove it (`rm {directory}`); sbx recreates it as a private directory.")
    if info.st_uid != os.geteuid():
        raise unsafe(directory, f"it is owned by uid {info.st_uid}, not by this user",
                      f"Remove it, or run sbx as its owner (uid {info.st_uid}).")
    if stat.S_IMODE(info.st_mode) & PRIVATE_BITS:
        os.chmod(directory, 0o700)
    return directory


def write_private_file(path: Path, data: bytes, *, mode: int = 0o600) -> None:
    """Atomically replace ``path`` with ``data`` (:func:`sbx.seams.owned.write_file`)."""
    owned.write_file(path, data, mode=mode)


def read_private_file(path: Path, *, max_bytes: int, forbidden_bits: int = PRIVATE_BITS,
                      ) -> tuple[bytes, os.stat_result] | None:
    """Read a private file, or None when it does not exist.

    Refuses (``secret_store_unsafe``) a symlink, a non-regular file, a file owned by another
    user or with another link, one with any of ``forbidden_bits`` (default: every group/other
    bit; a public certificate passes 0o022, group/other *write*), a file larger than
    ``max_bytes``, and a file in a directory someone else could swap it in
    (:mod:`sbx.seams.owned`, the check every state file passes).
    """
    try:
        return owned.read_file(path, max_bytes=max_bytes, forbidden_bits=forbidden_bits,
                               reason=Reason.SECRET_STORE_UNSAFE)
    except OSError as error:
        raise unsafe(path, f"cannot read it ({error.strerror})",
                      f"Check the file's owner and permissions (`ls -l {path}`).") from None


def create_new(path: Path, data: bytes, *, mode: int = 0o600) -> None:
    """Write ``data`` to a new file ``path`` (``mode``); FileExistsError when it exists: what a
    run writes once is never overwritten."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


__all__ = ["PRIVATE_BITS", "create_new", "ensure_private_dir", "read_private_file",
           "unsafe", "write_private_file"]
