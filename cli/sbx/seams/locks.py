"""Per-name file locks, so concurrent runs build one image once instead of N times.

Twenty first runs of one kit at once used to build it twenty times: each build re-tagged the
same name and left the previous image dangling (19 of them). Whoever takes the lock for a tag
builds it; the others wait, then find it present. Locks live in the state home (concurrent
runs of one user share it); a lock that cannot be taken (an unwritable state home) costs only
the deduplication, never the run.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

from sbx.seams import owned


@contextlib.contextmanager
def name_lock(lock_dir: Path | None, name: str) -> Iterator[None]:
    """Hold an exclusive lock on ``name`` (any string, e.g. an image tag) while inside."""
    if lock_dir is None:
        yield
        return
    fd: int | None = None
    try:
        # Only this user's own lock files (sbx.seams.owned): an unsafe one is refused.
        owned.ensure_directory(lock_dir)
        digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:32]
        fd = owned.open_lock(lock_dir / f"{digest}.lock")
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError:
        if fd is not None:
            os.close(fd)
        fd = None
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)  # closing releases the lock


def open_lock_file(path: Path) -> int:
    """A private lock file's descriptor: 0600, created when missing, never opened through a link."""
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)


@contextlib.contextmanager
def holding(fd: int) -> Iterator[None]:
    """An exclusive lock on ``fd`` while inside; closing the descriptor after releases it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def try_lock(fd: int) -> bool:
    """Take the exclusive lock on ``fd`` if it is free; never waits (for callers that poll)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def release(fd: int) -> None:
    """Close a lock's descriptor, which releases the lock."""
    os.close(fd)


__all__ = ["holding", "name_lock", "open_lock_file", "release", "try_lock"]
