"""A host tree looked at and changed through directory descriptors: each call names one entry
of a directory already open (``dir_fd``) and never follows a link at that entry, so a tree the
sandbox (or whoever made a directory sbx copies) could write cannot steer a look or a write
elsewhere by swapping a name for a link; what is written goes to a path only inside a
directory sbx itself made. Which entries to look at, and what they mean, is the domain's
(:mod:`sbx.domain.sandbox.workspace_scan`, :mod:`sbx.domain.sandbox.gitdirs`,
:mod:`sbx.domain.sandbox.workspace_trust`, :mod:`sbx.domain.sandbox.skillstore`); these
functions only do."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import IO, Final

# A listing's entry (its name and type as the directory gave them; its status looked up once,
# when first asked) and a status, as the callers hold them.
Entry = os.DirEntry[str]
Status = os.stat_result

_DIRECTORY_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def close(fd: int) -> None:
    """Close the descriptor ``fd``."""
    os.close(fd)


def duplicate(fd: int) -> int:
    """A second descriptor of what ``fd`` holds open; raises OSError."""
    return os.dup(fd)


def status_of(fd: int) -> Status:
    """The status of what ``fd`` holds open; raises OSError."""
    return os.fstat(fd)


def own_status_at(dir_fd: int, name: str) -> Status:
    """The status of ``name`` in the directory ``dir_fd`` (a link there itself, not what it
    names; a ``name`` of several components follows links before its last); raises OSError."""
    return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)


def exists_at(dir_fd: int, name: str) -> bool:
    """Whether anything (a link included) is at ``name`` in the directory ``dir_fd``."""
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return False
    return True


def open_directory_at(dir_fd: int, name: str) -> int | None:
    """A readable descriptor of the directory ``name`` in ``dir_fd`` (``.``: that directory
    again); None when it is no directory, a link, or cannot be opened."""
    try:
        return os.open(name, _DIRECTORY_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None


def open_directory_if(dir_fd: int, name: str, inode: int) -> int | None:
    """As :func:`open_directory_at`, but only when what is opened has inode ``inode``: None
    when ``name`` now names another directory than the one that was listed."""
    fd = open_directory_at(dir_fd, name)
    if fd is None:
        return None
    try:
        if os.fstat(fd).st_ino == inode:
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def listing(fd: int) -> list[Entry]:
    """The entries of the directory open (readable) at ``fd``, in the order it lists them;
    raises OSError."""
    with os.scandir(fd) as entries:
        return list(entries)


def is_link(entry: Entry) -> bool:
    """Whether the listed ``entry`` is a symbolic link."""
    return entry.is_symlink()


def is_directory(entry: Entry) -> bool:
    """Whether the listed ``entry`` is a directory itself (a link to one is not); raises
    OSError when its type must be looked up and cannot be."""
    return entry.is_dir(follow_symlinks=False)


def own_status(entry: Entry) -> Status:
    """The status of the listed ``entry`` itself (a link's own); raises OSError."""
    return entry.stat(follow_symlinks=False)


def sorted_names(fd: int) -> list[str]:
    """The names in the directory ``fd`` holds (an ``O_PATH`` descriptor will do: it is opened
    again to be read), sorted; [] when it cannot be read."""
    try:
        opened = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=fd)
    except OSError:
        return []
    try:
        return sorted(os.listdir(opened))
    except OSError:
        return []
    finally:
        os.close(opened)


def make_owned_directory(dir_fd: int, name: str, mode: int, uid: int, gid: int) -> bool:
    """Make the directory ``name`` in ``dir_fd`` with ``mode`` and give it to ``uid:gid``
    (when that is allowed; the link itself, were one put there since); False when something
    is at ``name`` already. Raises OSError for any other failure to make it."""
    try:
        os.mkdir(name, mode, dir_fd=dir_fd)
    except FileExistsError:
        return False
    with contextlib.suppress(OSError):
        os.chown(name, uid, gid, dir_fd=dir_fd, follow_symlinks=False)
    return True


def create_owned_empty(dir_fd: int, name: str, mode: int, uid: int, gid: int) -> bool:
    """Create the empty file ``name`` in ``dir_fd`` with ``mode``, never through a link, and
    give it to ``uid:gid`` when that is allowed; False when something is at ``name`` already.
    Raises OSError for any other failure to create it."""
    try:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode,
                     dir_fd=dir_fd)
    except FileExistsError:
        return False
    with contextlib.suppress(OSError):
        os.fchown(fd, uid, gid)
    os.close(fd)
    return True


def write_new_at(dir_fd: int, name: str, data: bytes, mode: int) -> bool:
    """Write ``data`` to the new file ``name`` in ``dir_fd`` (never through a link, never over
    anything there) with ``mode``, owned like the directory when that is allowed, and sync it;
    False when it cannot be created or written (what was written is removed again)."""
    owner = os.fstat(dir_fd)
    try:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     mode, dir_fd=dir_fd)
    except OSError:
        return False
    try:
        with contextlib.suppress(OSError):
            os.fchown(fd, owner.st_uid, owner.st_gid)
        os.write(fd, data)
        os.fsync(fd)
    except OSError:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=dir_fd)
        return False
    os.close(fd)
    return True


def rename_at(dir_fd: int, old: str, new: str) -> None:
    """Rename ``old`` to ``new``, both in the directory ``dir_fd``; raises OSError."""
    os.rename(old, new, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


def unlink_at(dir_fd: int, name: str) -> None:
    """Remove the file (or link) ``name`` from the directory ``dir_fd``; raises OSError."""
    os.unlink(name, dir_fd=dir_fd)


def open_directory(name: str | Path, dir_fd: int | None = None) -> int:
    """A readable descriptor of the directory at ``name`` (in ``dir_fd``, when given), never
    through a link at its last component; raises OSError (NotADirectoryError for a file)."""
    return os.open(name, _DIRECTORY_FLAGS, dir_fd=dir_fd)


def open_file_at(dir_fd: int, name: str) -> int:
    """A readable descriptor of ``name`` in ``dir_fd``, never through a link and never waiting
    (a FIFO or a device opens at once: the caller checks the kind); raises OSError."""
    return os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
                   dir_fd=dir_fd)


def names_at(fd: int) -> list[str]:
    """The names in the directory open (readable) at ``fd``, as it lists them; raises
    OSError."""
    return os.listdir(fd)


def link_text_at(dir_fd: int, name: str) -> str:
    """What the link ``name`` in ``dir_fd`` says, as written; raises OSError."""
    return os.readlink(name, dir_fd=dir_fd)


def read_once(fd: int, limit: int) -> bytes:
    """One read of at most ``limit`` bytes from ``fd``; raises OSError."""
    return os.read(fd, limit)


def copy_to_new_file(source: int, target: Path, mode: int, limit: int) -> int | None:
    """Copy the rest of ``source`` into the new file ``target`` (made ``0600``, never through a
    link, never over anything), then give it ``mode``: the bytes copied, or None as soon as more
    than ``limit`` were read (the copy stops there, short, its mode still ``0600``). Raises
    OSError."""
    copied = 0
    out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                  0o600)
    try:
        while chunk := os.read(source, 1 << 20):
            copied += len(chunk)
            if copied > limit:
                return None
            view = memoryview(chunk)
            while view:
                view = view[os.write(out, view):]
        os.fchmod(out, mode)
    finally:
        os.close(out)
    return copied


# -- moving, locking and writing entries (the quarantine, a copy's destination, git's index) --

_NEW_FILE_FLAGS: Final = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_READ_CHUNK: Final = 1 << 20


def open_top(path: Path) -> int:
    """The directory at ``path`` opened as a descriptor to work below (refused when ``path``
    itself is a link); the caller closes it. Raises OSError."""
    return os.open(path, _DIRECTORY_FLAGS)


def open_directory_in(dir_fd: int, name: str) -> int:
    """The directory ``name`` in ``dir_fd`` opened (never through a link: ELOOP); the caller
    closes it. Raises OSError."""
    return os.open(name, _DIRECTORY_FLAGS, dir_fd=dir_fd)


def rename_between(dir_fd: int, name: str, new_dir_fd: int, new_name: str) -> None:
    """Rename ``name`` in ``dir_fd`` to ``new_name`` in ``new_dir_fd`` (one rename, never a
    copy: another file system raises EXDEV); raises OSError."""
    os.rename(name, new_name, src_dir_fd=dir_fd, dst_dir_fd=new_dir_fd)


def set_mode_at(dir_fd: int, name: str, mode: int) -> None:
    """Give ``name`` in ``dir_fd`` (not followed when it is a link) ``mode``; raises OSError."""
    os.chmod(name, mode, dir_fd=dir_fd, follow_symlinks=False)


def set_descriptor_mode(fd: int, mode: int) -> None:
    """Give what ``fd`` holds open ``mode``; raises OSError."""
    os.fchmod(fd, mode)


def make_directory_at(dir_fd: int, name: str, mode: int) -> None:
    """A directory ``name`` in ``dir_fd`` made with ``mode`` (under the umask); raises
    FileExistsError when anything is there, or another OSError."""
    os.mkdir(name, mode, dir_fd=dir_fd)


def give_at(dir_fd: int, name: str, uid: int, gid: int) -> None:
    """Give ``name`` in ``dir_fd`` (not followed when it is a link) to ``uid:gid``; raises
    OSError."""
    os.chown(name, uid, gid, dir_fd=dir_fd, follow_symlinks=False)


def read_regular_at(dir_fd: int, name: str, max_bytes: int) -> bytes | None:
    """The whole of the file ``name`` in ``dir_fd``, opened without waiting (a FIFO never
    blocks) and never through a link; None when it is no regular file or larger than
    ``max_bytes`` (unread). Raises FileNotFoundError when nothing is there, another OSError
    when it cannot be opened or read."""
    fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
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


def make_link_at(dir_fd: int, name: str, target: str) -> None:
    """A symbolic link ``name`` in ``dir_fd`` pointing at ``target`` (as written); raises
    FileExistsError when anything is there, or another OSError."""
    os.symlink(target, name, dir_fd=dir_fd)


def create_file_at(dir_fd: int, name: str, mode: int) -> IO[bytes]:
    """A new file ``name`` in ``dir_fd`` with ``mode`` (under the umask), open to write; raises
    FileExistsError when anything is there (a link included), or another OSError."""
    return os.fdopen(os.open(name, _NEW_FILE_FLAGS, mode, dir_fd=dir_fd), "wb")


def write_owned_at(dir_fd: int, name: str, data: bytes, *, mode: int, uid: int,
                   gid: int) -> None:
    """``data`` written in one write to ``name`` in ``dir_fd``, created with ``mode`` or
    emptied first (never through a link), and given to ``uid:gid`` where this user may (a
    refusal of that is ignored). Raises OSError."""
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                 mode, dir_fd=dir_fd)
    try:
        with contextlib.suppress(OSError):
            os.fchown(fd, uid, gid)
        os.write(fd, data)
    finally:
        os.close(fd)


__all__ = ["Entry", "Status", "close", "copy_to_new_file", "create_file_at",
           "create_owned_empty", "duplicate", "exists_at", "give_at", "is_directory",
           "is_link", "link_text_at", "listing", "make_directory_at", "make_link_at",
           "make_owned_directory", "names_at", "open_directory", "open_directory_at",
           "open_directory_if", "open_directory_in", "open_file_at", "open_top", "own_status",
           "own_status_at", "read_once", "read_regular_at", "rename_at", "rename_between",
           "set_descriptor_mode", "set_mode_at", "sorted_names", "status_of", "unlink_at",
           "write_new_at", "write_owned_at"]
