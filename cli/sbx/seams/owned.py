"""What sbx reads back from its state home must be its own.

A state file that another user could have written, or swapped for their own, is not sbx's
state: a planted plan-cache entry or descriptor verdict would run their command with the
victim's consent. So every file sbx trusts is read through here, and so is every directory it
keeps such files in:

- every directory on the way from ``/`` to it (symbolic links followed as the kernel does, the
  directory holding each link included) must let nobody else rename or replace its entries:
  owned by this user or root, and not writable by group or others unless sticky (``/tmp``);
- the state home itself and everything in it must be this user's;
- a file must be a regular file (no symlink, FIFO or device), this user's, with one link, and
  without the mode bits that let others change it (or, for secrets, read it).

Anything else is refused with ``state_unsafe`` (the secret store's files with
``secret_store_unsafe``), naming the path, what is wrong and the command that fixes it: an
unsafe state file is never read as a miss, since that would hide the attack.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.seams.state import unwritable

WRITE_BITS: Final = 0o022  # group/other write: someone else could change it
PRIVATE_BITS: Final = 0o077  # any group/other bit: someone else could read it, too
MAX_LINKS: Final = 40  # as the kernel's MAXSYMLINKS
_TMP_PREFIX: Final = ".tmp-"


def refuse(path: Path | str, problem: str, fix: str, *,
           reason: Reason = Reason.STATE_UNSAFE) -> SbxError:
    """The refusal of a state path nobody but this user may control."""
    return SbxError(reason, f"refusing to trust {path}: {problem}", hint=fix,
                    details={"path": str(path), "problem": problem})


def _uid() -> int:
    return os.geteuid()


def _check_directory(path: str, info: os.stat_result, reason: Reason, *,
                     own: bool = False) -> None:
    """One directory of a trusted path: see the module docstring."""
    uid = _uid()
    if info.st_uid != uid and (own or info.st_uid != 0):
        raise refuse(path, f"it is owned by uid {info.st_uid}, not by this user (uid {uid}), "
                           "who could swap what sbx keeps there",
                     f"Point SBX_HOME at a directory you own, or (as root) "
                     f"`chown {uid} {path}`.", reason=reason)
    mode = stat.S_IMODE(info.st_mode)
    if mode & WRITE_BITS and not mode & stat.S_ISVTX:
        who = "other users" if mode & 0o002 else "its group"
        raise refuse(path, f"its mode {mode:04o} lets {who} replace what is in it",
                     f"`chmod go-w {path}`", reason=reason)


def _walk(path: str) -> Iterator[tuple[str, os.stat_result]]:
    """Each existing directory the kernel passes through to resolve ``path``, ``path`` itself
    included when it is one. Stops at the first missing component (sbx creates the rest) or a
    component that is not a directory."""
    absolute = path if path.startswith("/") else os.path.join(os.getcwd(), path)
    pending = deque(absolute.split("/"))
    current = "/"
    yield current, os.lstat(current)
    links = 0
    while pending:
        name = pending.popleft()
        if name in ("", "."):
            continue
        if name == "..":  # `current` is resolved, so its lexical parent is the real one
            current = os.path.dirname(current)
            continue
        candidate = os.path.join(current, name)
        try:
            info = os.lstat(candidate)
        except (FileNotFoundError, NotADirectoryError):
            return
        except PermissionError as error:  # the directory above may not be searched
            raise PermissionError(error.errno, error.strerror, current) from None
        if stat.S_ISLNK(info.st_mode):
            links += 1
            if links > MAX_LINKS:
                raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
            target = os.readlink(candidate)
            if target.startswith("/"):
                current = "/"
            pending.extendleft(reversed(target.split("/")))
            continue
        if not stat.S_ISDIR(info.st_mode):
            return
        yield candidate, info
        current = candidate


def check_tree(path: Path | str, *, reason: Reason = Reason.STATE_UNSAFE) -> None:
    """Refuse when anyone but this user (or root) could replace ``path`` or anything on the
    way to it; a missing part is fine (whoever creates it checks again)."""
    try:
        for directory, info in _walk(os.fspath(path)):
            _check_directory(directory, info, reason)
    except ValueError:  # a NUL in the path: there is nothing there to trust
        raise refuse(path, "it is not a usable path", "Point SBX_HOME at a directory.",
                     reason=reason) from None
    except PermissionError as error:  # not someone else's doing: this user may not look
        where = error.filename if isinstance(error.filename, str) else os.fspath(path)
        raise unwritable(Path(where), error, action="look up what is in") from None
    except OSError as error:
        where = error.filename if isinstance(error.filename, str) else os.fspath(path)
        raise refuse(path, f"{where} cannot be looked up ({error.strerror})",
                     f"Check the owner and mode of {where} (`ls -ld {where}`).",
                     reason=reason) from None


def check_home(home: Path, source: str) -> None:
    """The state home: its whole tree is trusted, so it must be this user's own directory
    (not group or world writable) in directories nobody else can rename it out of."""
    try:
        info = os.stat(home)
    except (OSError, ValueError):
        info = None  # missing (created later), or check_tree says why not
    if info is not None and stat.S_ISDIR(info.st_mode) and info.st_uid != _uid():
        raise refuse(home, f"the state home ({source}) is owned by uid {info.st_uid}, not by "
                           f"this user (uid {_uid()}): its caches could run their commands",
                     f"Point {source} at a directory you own (it is created if missing).")
    check_tree(home)


def ensure_directory(directory: Path, *, mode: int = 0o700,
                     reason: Reason = Reason.STATE_UNSAFE) -> Path:
    """Create ``directory`` (parents too, each with ``mode``) and check it as a trusted
    path: one that already existed, or that someone else created first, is refused when it
    is not safe."""
    missing: list[Path] = []
    current = directory
    while not os.path.lexists(current) and current != current.parent:
        missing.append(current)
        current = current.parent
    for part in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(part, mode)
    check_tree(directory, reason=reason)
    info = os.stat(directory)
    if not stat.S_ISDIR(info.st_mode):
        raise refuse(directory, "it is not a directory",
                     f"Move it aside (`mv {directory} {directory}.old`); sbx recreates it.",
                     reason=reason)
    if info.st_uid != _uid():
        raise refuse(directory, f"it is owned by uid {info.st_uid}, not by this user",
                     f"Remove it (`rm -r {directory}`) if nobody else needs it; sbx "
                     "recreates it.", reason=reason)
    return directory


# An atomic replace between open and fstat is retried this often before refusing.
_REPLACED_RETRIES = 20


def open_file(path: Path, *, forbidden_bits: int = WRITE_BITS,
              reason: Reason = Reason.STATE_UNSAFE, flags: int = os.O_RDONLY,
              create: bool = False) -> int | None:
    """An open descriptor of a trusted file (None when it does not exist and ``create`` is
    false): no symlink, FIFO or device, this user's, one link, none of ``forbidden_bits``;
    every directory on the way checked. The caller closes it."""
    check_tree(path.parent, reason=reason)
    open_flags = flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    if create:
        open_flags |= os.O_CREAT
    for _attempt in range(_REPLACED_RETRIES):
        try:
            fd = os.open(path, open_flags, 0o600)
        except FileNotFoundError:
            return None
        except OSError as error:
            if error.errno == errno.ELOOP:
                raise refuse(path, "it is a symlink", f"Remove the link (`rm {path}`); sbx "
                             "writes the file again when it needs it.", reason=reason) from None
            if error.errno == errno.ENXIO:  # a socket, or a FIFO nobody writes
                raise refuse(path, "it is not a regular file",
                             f"Remove it (`rm -r {path}`).", reason=reason) from None
            raise
        try:
            info = os.fstat(fd)
            if info.st_nlink == 0 and stat.S_ISREG(info.st_mode):
                # An atomic writer renamed a new file over this one after we opened it:
                # open the name again rather than read a version nobody can see any more.
                os.close(fd)
                continue
            _check_file(path, info, forbidden_bits, reason)
        except BaseException:
            os.close(fd)
            raise
        return fd
    raise refuse(path, f"it was replaced {_REPLACED_RETRIES} times while being opened",
                 "Stop whatever is rewriting it, then try again.", reason=reason)


def _check_file(path: Path, info: os.stat_result, forbidden_bits: int,
                reason: Reason) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise refuse(path, "it is not a regular file", f"Remove it (`rm -r {path}`).",
                     reason=reason)
    if info.st_uid != _uid():
        raise refuse(path, f"it is owned by uid {info.st_uid}, not by this user (uid {_uid()})",
                     f"Remove it (`rm {path}`); sbx writes it again when it needs it.",
                     reason=reason)
    if info.st_nlink != 1:
        raise refuse(path, f"it has {info.st_nlink} hard links, so it may be changed through "
                           "another name", f"Remove it (`rm {path}`); sbx writes it again when "
                           "it needs it.", reason=reason)
    mode = stat.S_IMODE(info.st_mode)
    if mode & forbidden_bits:
        private = bool(forbidden_bits & 0o044)
        who = "read or change" if private else "change"
        fix = f"chmod 600 {path}" if private else f"chmod go-w {path}"
        raise refuse(path, f"its mode {mode:04o} lets other users {who} it",
                     f"If nobody else could have touched it, `{fix}`; otherwise remove it "
                     f"(`rm {path}`).", reason=reason)


def read_file(path: Path, *, max_bytes: int, forbidden_bits: int = WRITE_BITS,
              reason: Reason = Reason.STATE_UNSAFE) -> tuple[bytes, os.stat_result] | None:
    """A trusted file's bytes and status, or None when it does not exist; a file larger than
    ``max_bytes`` is refused unread."""
    fd = open_file(path, forbidden_bits=forbidden_bits, reason=reason)
    if fd is None:
        return None
    try:
        info = os.fstat(fd)
        if info.st_size > max_bytes:
            raise refuse(path, f"it is larger than {max_bytes} bytes",
                         f"Remove it (`rm {path}`).", reason=reason)
        chunks: list[bytes] = []
        remaining = max_bytes + 1
        while remaining > 0:
            chunk = os.read(fd, remaining)
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        data = b"".join(chunks)
        if len(data) > max_bytes:
            raise refuse(path, f"it is larger than {max_bytes} bytes",
                         f"Remove it (`rm {path}`).", reason=reason)
        return data, info
    finally:
        os.close(fd)


def read_prefix(path: Path, limit: int, *, reason: Reason = Reason.STATE_UNSAFE) -> bytes | None:
    """Up to ``limit`` bytes of a trusted file (None when it does not exist): the caller
    tells a file longer than it wants apart by asking for one byte more."""
    fd = open_file(path, reason=reason)
    if fd is None:
        return None
    with os.fdopen(fd, "rb") as handle:
        return handle.read(limit)


def read_bytes(path: Path, *, max_bytes: int) -> bytes | None:
    """:func:`read_file`'s bytes only."""
    loaded = read_file(path, max_bytes=max_bytes)
    return None if loaded is None else loaded[0]


def open_lock(path: Path, *, reason: Reason = Reason.STATE_UNSAFE) -> int:
    """A lock file's descriptor, created when missing (lock it with ``fcntl.flock``)."""
    fd = open_file(path, flags=os.O_RDWR, create=True, reason=reason)
    assert fd is not None  # noqa: S101 - O_CREAT either opens or raises
    os.set_blocking(fd, True)
    return fd


def write_file(path: Path, data: bytes, *, mode: int = 0o600, durable: bool = True) -> None:
    """Atomically replace ``path`` with ``data``: a fresh temporary file in the same directory
    (O_CREAT|O_EXCL|O_NOFOLLOW, created with ``mode``), fsync, rename, fsync the directory.
    Caches and run records, which a crash may lose, skip the fsyncs (``durable=False``)."""
    tmp = path.with_name(f"{_TMP_PREFIX}{path.name}-{os.urandom(8).hex()}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, mode)
    try:
        try:
            os.fchmod(fd, mode)  # the umask may have cleared bits that `mode` asks for
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if durable:
        fsync_directory(path.parent)


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


MAX_CACHE_BYTES: Final = 64 * 1024 * 1024


def read_cache(path: Path, *, max_bytes: int = MAX_CACHE_BYTES) -> Any:
    """A cache entry's JSON, or None for a miss (missing, damaged, not JSON). An entry that is
    not this user's own is refused (``state_unsafe``), never a miss: a miss would hide it."""
    raw = read_bytes(path, max_bytes=max_bytes)
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


def write_cache(path: Path, value: Any) -> bool:
    """Store a cache entry (its directory made and checked first); False when it cannot be
    written, which only costs time. A directory that is not this user's own is refused."""
    try:
        ensure_directory(path.parent)
        write_file(path, json.dumps(value).encode("utf-8"), durable=False)
    except (OSError, ValueError, TypeError):
        return False
    return True


__all__ = ["MAX_LINKS", "PRIVATE_BITS", "WRITE_BITS", "check_home", "check_tree",
           "ensure_directory", "fsync_directory", "open_file", "open_lock", "read_bytes",
           "read_cache", "read_file", "read_prefix", "refuse", "write_cache",
           "write_file"]
