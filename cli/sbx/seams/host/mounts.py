"""Mounts sbx makes on the host for staging (as root): bind mounts of opened descriptors,
their release, and sized volume file systems (``mkfs.ext4`` in a sparse file, loop-mounted).
libc's ``mount``/``umount2`` through ctypes, imported only when something is staged (a run
without host mounts does not pay for it); the tools through :mod:`sbx.seams.host.processes`.
What to stage and what a failure means is :mod:`sbx.domain.sandbox.sources`'s."""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any, Final

from sbx.seams.host import processes
from sbx.seams.host.processes import SubprocessError

TOOL_TIMEOUT_S: Final = 60
_MS_BIND: Final = 4096
_MS_REC: Final = 16384
_MS_PRIVATE: Final = 1 << 18
_MNT_DETACH: Final = 2


class ToolFailed(OSError):
    """``mkfs.ext4`` or ``mount`` exited non-zero; ``output`` is what it said (clipped)."""

    def __init__(self, tool: str, output: str) -> None:
        super().__init__(f"{tool}: {output}")
        self.output = output


@functools.cache
def _libc() -> Any:
    import ctypes
    import ctypes.util

    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _errno() -> int:
    import ctypes

    return ctypes.get_errno()


def bind_descriptor(fd: int, point: Path) -> int:
    """Bind-mount exactly the object open as ``fd`` (an ``O_PATH`` descriptor) onto ``point``,
    made private (it propagates into no other mount namespace); 0, or the errno it failed with."""
    libc = _libc()
    if libc.mount(f"/proc/self/fd/{fd}".encode(), str(point).encode(), None, _MS_BIND,
                  None) != 0:
        return _errno()
    libc.mount(None, str(point).encode(), None, _MS_PRIVATE | _MS_REC, None)
    return 0


def chown_descriptor(fd: int, uid: int, gid: int) -> None:
    """Give the object an ``O_PATH`` descriptor holds to ``uid:gid`` (through its /proc link:
    exactly that object, whatever its path now names)."""
    os.chown(f"/proc/self/fd/{fd}", uid, gid)


def detach(point: Path) -> int:
    """Unmount ``point`` lazily (``MNT_DETACH``); 0, or the errno (EINVAL: not mounted)."""
    if _libc().umount2(str(point).encode(), _MNT_DETACH) != 0:
        return _errno()
    return 0


def make_ext4(image: Path, *, uid: int, gid: int) -> None:
    """An ext4 file system in ``image`` (no journal, no reserved blocks, its root owned by
    ``uid:gid``); raises :class:`ToolFailed`, OSError or SubprocessError (a timeout)."""
    _tool(["mkfs.ext4", "-q", "-F", "-m", "0", "-O", "^has_journal",
           "-E", f"root_owner={uid}:{gid}", str(image)])


def loop_mount(image: Path, point: Path) -> None:
    """Mount the file system in ``image`` on ``point`` (loop, ``nosuid,nodev``; the loop
    device goes with the unmount); raises :class:`ToolFailed`, OSError or SubprocessError."""
    _tool(["mount", "-o", "loop,nosuid,nodev", str(image), str(point)])


def _tool(argv: list[str]) -> None:
    done = processes.run(argv, timeout=TOOL_TIMEOUT_S)
    if done.returncode != 0:
        text = (done.stderr or done.stdout).decode("utf-8", "replace")
        raise ToolFailed(argv[0], text.strip()[:200])


__all__ = ["SubprocessError", "ToolFailed", "bind_descriptor", "detach", "loop_mount",
           "make_ext4"]
