"""Entries reached by name below a directory held open as a descriptor (a workspace, its
quarantine, a copy's destination), each call the one system call it names and none of them
through a symbolic link: the path from the open directory to the entry cannot be swapped under
it. Which entries are touched, and what a failure means, is the domain's
(:mod:`sbx.domain.sandbox.quarantine`...)."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import IO, Final

DIRECTORY_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE_FLAGS: Final = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_READ_CHUNK: Final = 1 << 20


def open_top(path: Path) -> int:
    """The directory at ``path`` opened as a descriptor to work below (refused when ``path``
    itself is a link); the caller closes it. Raises OSError."""
    return os.open(path, DIRECTORY_FLAGS)


def entry_status(name: str, parent: int) -> os.stat_result:
    """``lstat`` of ``name`` in ``parent`` (a link is itself); raises OSError."""
    return os.stat(name, dir_fd=parent, follow_symlinks=False)


def descriptor_status(fd: int) -> os.stat_result:
    """``fstat`` of what ``fd`` holds open; raises OSError."""
    return os.fstat(fd)


def rename_entry(name: str, parent: int, new_name: str, new_parent: int) -> None:
    """Rename ``name`` in ``parent`` to ``new_name`` in ``new_parent`` (one rename, never a
    copy: another file system raises EXDEV); raises OSError."""
    os.rename(name, new_name, src_dir_fd=parent, dst_dir_fd=new_parent)


def link_target(name: str, parent: int) -> str:
    """What the symbolic link ``name`` in ``parent`` points to, as written; raises OSError."""
    return os.readlink(name, dir_fd=parent)


def remove_entry(name: str, parent: int) -> None:
    """Unlink ``name`` in ``parent`` (a link itself, never its target); raises OSError."""
    os.unlink(name, dir_fd=parent)


def set_entry_mode(name: str, mode: int, parent: int) -> None:
    """Give ``name`` in ``parent`` (not followed when it is a link) ``mode``; raises OSError."""
    os.chmod(name, mode, dir_fd=parent, follow_symlinks=False)


def set_descriptor_mode(fd: int, mode: int) -> None:
    """Give what ``fd`` holds open ``mode``; raises OSError."""
    os.fchmod(fd, mode)


def make_directory(name: str, mode: int, parent: int) -> None:
    """A directory ``name`` in ``parent`` made with ``mode`` (under the umask); raises
    FileExistsError when anything is there, or another OSError."""
    os.mkdir(name, mode, dir_fd=parent)


def give_entry(name: str, uid: int, gid: int, parent: int) -> None:
    """Give ``name`` in ``parent`` (not followed when it is a link) to ``uid:gid``; raises
    OSError."""
    os.chown(name, uid, gid, dir_fd=parent, follow_symlinks=False)


def open_directory(name: str, parent: int) -> int:
    """The directory ``name`` in ``parent`` opened (never through a link: ELOOP); the caller
    closes it. Raises OSError."""
    return os.open(name, DIRECTORY_FLAGS, dir_fd=parent)


def read_regular(name: str, parent: int, max_bytes: int) -> bytes | None:
    """The whole of the file ``name`` in ``parent``, opened without waiting (a FIFO never
    blocks) and never through a link; None when it is no regular file or larger than
    ``max_bytes`` (unread). Raises FileNotFoundError when nothing is there, another OSError
    when it cannot be opened or read."""
    fd = os.open(name, _READ_FLAGS, dir_fd=parent)
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode) or status.st_size > max_bytes:
            return None
        chunks = []
        while chunk := os.read(fd, _READ_CHUNK):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def make_link(target: str, name: str, parent: int) -> None:
    """A symbolic link ``name`` in ``parent`` pointing at ``target`` (as written); raises
    FileExistsError when anything is there, or another OSError."""
    os.symlink(target, name, dir_fd=parent)


def create_file(name: str, parent: int, mode: int) -> IO[bytes]:
    """A new file ``name`` in ``parent`` with ``mode`` (under the umask), open to write; raises
    FileExistsError when anything is there (a link included), or another OSError."""
    return os.fdopen(os.open(name, _NEW_FILE_FLAGS, mode, dir_fd=parent), "wb")


def write_owned_file(name: str, parent: int, data: bytes, *, mode: int, uid: int,
                     gid: int) -> None:
    """``data`` written in one write to ``name`` in ``parent``, created with ``mode`` or
    emptied first (never through a link), and given to ``uid:gid`` where this user may (a
    refusal of that is ignored). Raises OSError."""
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                 mode, dir_fd=parent)
    try:
        with contextlib.suppress(OSError):
            os.fchown(fd, uid, gid)
        os.write(fd, data)
    finally:
        os.close(fd)


def close(fd: int) -> None:
    """Close ``fd``; raises OSError."""
    os.close(fd)


__all__ = ["DIRECTORY_FLAGS", "close", "create_file", "descriptor_status", "entry_status",
           "give_entry", "link_target", "make_directory", "make_link", "open_directory",
           "open_top", "read_regular", "remove_entry", "rename_entry", "set_descriptor_mode",
           "set_entry_mode", "write_owned_file"]
