"""State homes in bad shape, made for real: a read-only bind mount and a tiny, full tmpfs.

Tests run as root in CI, and root ignores permission bits, so ``chmod`` cannot make a state
home unwritable there: a read-only *mount* (``EROFS``) and a full *filesystem* (``ENOSPC``)
stop root too. Both need root to mount; :func:`require_root` skips a test elsewhere (never in
CI, which is root). Every mount is unmounted when its block ends, even when the test fails.
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

TINY_TMPFS = "64k"


def require_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a read-only or a full state home needs root (CI runs as root)")


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True, timeout=30)


def _umount(target: Path) -> None:
    subprocess.run(["umount", "-l", str(target)], check=False, capture_output=True, timeout=30)


@contextmanager
def read_only(source: Path, target: Path) -> Iterator[Path]:
    """``target``: a read-only view of ``source`` (which stays writable, for setting up)."""
    require_root()
    target.mkdir(parents=True, exist_ok=True)
    _mount("--bind", str(source), str(target))
    try:
        _mount("-o", "remount,bind,ro", str(target))
        yield target
    finally:
        _umount(target)


@contextmanager
def full(target: Path, *, keep: tuple[str, ...] = ()) -> Iterator[Path]:
    """``target``: a tiny tmpfs holding the directories in ``keep`` (relative paths), then
    filled to the last byte, so every further write fails with ``ENOSPC``."""
    require_root()
    target.mkdir(parents=True, exist_ok=True)
    _mount("-t", "tmpfs", "-o", f"size={TINY_TMPFS},mode=0700", "tmpfs", str(target))
    try:
        for relative in keep:
            (target / relative).mkdir(parents=True, exist_ok=True)
        fill(target / ".filler")
        yield target
    finally:
        _umount(target)


def fill(path: Path) -> None:
    """Write ``path`` until the filesystem has no byte left."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        block = b"\0" * 4096
        while True:
            try:
                os.write(fd, block)
            except OSError as error:
                if error.errno != errno.ENOSPC:
                    raise
                if len(block) == 1:
                    return
                block = block[: len(block) // 2]
    finally:
        os.close(fd)


__all__ = ["TINY_TMPFS", "fill", "full", "read_only", "require_root"]
