"""What is at a host path as the kernel sees it now: its kind, where its links lead, its
status, the first bytes of a file the user names (or of a kit's own file, read only when it
is a regular file within a size limit), and the files sbx ships in its own package (located by
the caller through ``importlib.resources``, read here). What a path may be, and what a refusal
says, is the domain's (:mod:`sbx.domain.sandbox.mounts`, :mod:`sbx.domain.sandbox.kitpins`...);
these functions only look."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable


def absolute_from_cwd(path: str | Path) -> str:
    """``path`` made absolute against the current directory, lexically normalised."""
    return os.path.abspath(path)


def joined_to_cwd(path: Path) -> Path:
    """``path`` made absolute as pathlib makes it: joined to the current directory when
    relative, with nothing normalised and no link resolved."""
    return path.absolute()


def is_directory(path: str | Path) -> bool:
    """Whether ``path`` is a directory (links followed); False when it cannot be looked up."""
    return os.path.isdir(path)


def is_regular_file(path: str) -> bool:
    """Whether ``path`` is a regular file (links followed); False when it cannot be looked up."""
    return os.path.isfile(path)


def is_file_checked(path: Path) -> bool:
    """Whether ``path`` is a regular file (links followed), as pathlib's ``is_file`` tells:
    False when nothing is there or a link loops; any other failure to look it up (no
    permission on a directory on the way) raises OSError."""
    return path.is_file()


def is_directory_checked(path: Path) -> bool:
    """Whether ``path`` is a directory (links followed), as pathlib's ``is_dir`` tells: False
    when nothing is there or a link loops; any other failure to look it up raises OSError."""
    return path.is_dir()


def is_link_checked(path: Path) -> bool:
    """Whether ``path`` itself is a symbolic link, as pathlib's ``is_symlink`` tells: False
    when nothing is there; any other failure to look it up raises OSError."""
    return path.is_symlink()


def exists_checked(path: Path) -> bool:
    """Whether anything is at ``path`` (links followed), as pathlib's ``exists`` tells: False
    when nothing is there or a link dangles or loops; any other failure raises OSError."""
    return path.exists()


def is_link(path: str) -> bool:
    """Whether ``path`` itself is a symbolic link."""
    return os.path.islink(path)


def link_status(path: str | Path) -> os.stat_result:
    """``lstat`` of ``path``: a link itself, not what it points to; raises OSError."""
    return os.lstat(path)


def link_target(path: str) -> str:
    """What the symbolic link at ``path`` points to, as written; raises OSError."""
    return os.readlink(path)


def lexists(path: str) -> bool:
    """Whether anything is at ``path``, a dangling symbolic link included."""
    return os.path.lexists(path)


def real_path(path: str) -> str:
    """``path`` with every symbolic link resolved (a missing tail kept as written)."""
    return os.path.realpath(path)


def resolved(path: Path) -> Path:
    """``path`` absolute with every link resolved, as pathlib resolves it (a missing tail kept
    as written; a link loop raises RuntimeError)."""
    return path.resolve()


def subdirectory_names(directory: Path, limit: int) -> list[str]:
    """The names of the directories (links followed) among the first ``limit`` entries of
    ``directory``, in the order it lists them; [] when it cannot be listed."""
    names: list[str] = []
    try:
        with os.scandir(directory) as entries:
            for count, entry in enumerate(entries):
                if count >= limit:
                    break
                try:
                    if entry.is_dir():
                        names.append(entry.name)
                except OSError:
                    continue
    except OSError:
        return []
    return names


def status(path: str | Path) -> os.stat_result:
    """``stat`` of ``path``, links followed; raises OSError (ValueError for a NUL)."""
    return os.stat(path)


def read_head(path: Path, limit: int) -> bytes:
    """At most ``limit`` bytes from the start of the file at ``path``; raises OSError."""
    with path.open("rb") as handle:
        return handle.read(limit)


def read_start_if_regular(path: str, limit: int, *, parent: int | None = None,
                          follow: bool = True) -> bytes | None:
    """What one read of at most ``limit`` bytes gives from the start of the file at ``path``
    (a relative one below the open directory ``parent``, when given; a link at its end refused
    unless ``follow``), opened without waiting (a FIFO never blocks); None when it is no
    regular file. Raises OSError."""
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | (0 if follow else os.O_NOFOLLOW)
    fd = os.open(path, flags, dir_fd=parent)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, limit)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class BoundedRead:
    """What :func:`read_if_regular` found: whether the file was a regular one, its size when
    opened, and its first bytes (None when it was no regular file or over the limit: unread)."""

    regular: bool
    size: int
    head: bytes | None


def read_if_regular(path: Path, limit: int) -> BoundedRead:
    """Open ``path`` without waiting (a FIFO or a device never blocks) and read at most
    ``limit`` + 1 bytes of it, but only when it is a regular file of at most ``limit`` bytes:
    the byte over tells a file that grew since apart. Raises OSError (ValueError for a NUL)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        regular = stat.S_ISREG(info.st_mode)
        if not regular or info.st_size > limit:
            return BoundedRead(regular, info.st_size, None)
        with os.fdopen(fd, "rb", closefd=False) as handle:
            return BoundedRead(True, info.st_size, handle.read(limit + 1))
    finally:
        os.close(fd)


def resource_text(entry: Traversable) -> str:
    """The text (UTF-8) of a file shipped in the package; raises OSError."""
    return entry.read_text(encoding="utf-8")


def resource_bytes(entry: Traversable) -> bytes:
    """The bytes of a file shipped in the package; raises OSError."""
    return entry.read_bytes()


def resource_entries(directory: Traversable) -> list[Traversable]:
    """The entries of a directory shipped in the package, in no particular order."""
    return list(directory.iterdir())


__all__ = ["BoundedRead", "absolute_from_cwd", "exists_checked", "is_directory",
           "is_directory_checked", "is_file_checked", "is_link", "is_link_checked",
           "is_regular_file", "joined_to_cwd", "lexists", "link_status", "link_target",
           "read_head", "read_if_regular", "read_start_if_regular", "real_path", "resolved",
           "resource_bytes", "resource_entries", "resource_text", "status",
           "subdirectory_names"]
