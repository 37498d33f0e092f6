"""Mounts sbx makes on the host for staging (as root): bind mounts of opened descriptors,
their release, and sized volume file systems (``mkfs.ext4`` in a sparse file, loop-mounted).
libc's ``mount``/``umount2`` through ctypes, imported only when something is staged (a run
without host mounts does not pay for it); ``mkfs.ext4`` through
:mod:`sbx.seams.host.processes`. The loop device is set up here with the kernel's own loop
ioctls, as mount(8) does, without a child process: a named sandbox's volume is mounted again
on every start.
What to stage and what a failure means is :mod:`sbx.domain.sandbox.sources`'s."""

from __future__ import annotations

import errno
import fcntl
import functools
import os
import struct
from pathlib import Path
from typing import Any, Final

from sbx.seams.host import processes
from sbx.seams.host.processes import SubprocessError

TOOL_TIMEOUT_S: Final = 60
_MS_BIND: Final = 4096
_MS_REC: Final = 16384
_MS_PRIVATE: Final = 1 << 18
_MNT_DETACH: Final = 2
_MS_NOSUID: Final = 2
_MS_NODEV: Final = 4
# <linux/loop.h>
_LOOP_SET_FD: Final = 0x4C00
_LOOP_CLR_FD: Final = 0x4C01
_LOOP_SET_STATUS64: Final = 0x4C04
_LOOP_GET_STATUS64: Final = 0x4C05
_LOOP_CTL_GET_FREE: Final = 0x4C82
_LO_FLAGS_AUTOCLEAR: Final = 4
_LOOP_MAJOR: Final = 7
_LO_NAME_SIZE: Final = 64
# struct loop_info64: device, inode, rdevice, offset, sizelimit; number, encrypt type, key
# size, flags; file name, crypt name, key; init[2]
_LOOP_INFO64: Final = struct.Struct("=5Q4I64s64s32s2Q")
_LOOP_TRIES: Final = 16  # another process may take the free device between the two calls


class ToolFailed(OSError):
    """``mkfs.ext4`` or ``mount`` exited non-zero; ``output`` is what it said (clipped)."""

    def __init__(self, tool: str, output: str) -> None:
        super().__init__(f"{tool}: {output}")
        self.output = output


@functools.cache
def _libc() -> Any:
    import ctypes

    # the interpreter's own libc: find_library("c") would run ldconfig as a child process
    return ctypes.CDLL(None, use_errno=True)


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
    """Mount the ext4 file system in ``image`` on ``point`` (loop, ``nosuid,nodev``; the loop
    device goes with the unmount: autoclear); raises :class:`ToolFailed` (what failed and
    why) or OSError."""
    try:
        backing = os.open(image, os.O_RDWR | os.O_CLOEXEC)
    except OSError as exc:
        raise ToolFailed("mount", f"{image}: {exc.strerror}") from None
    try:
        device, loop = _attach_loop(backing, image)
    finally:
        os.close(backing)
    try:
        if _libc().mount(device.encode(), str(point).encode(), b"ext4",
                         _MS_NOSUID | _MS_NODEV, None) != 0:
            code = _errno()
            _clear(loop)
            raise ToolFailed("mount", f"{image} on {point}: {os.strerror(code)}")
    finally:
        os.close(loop)  # autoclear: the device is freed with the unmount (or just now)


def _attach_loop(backing: int, image: Path) -> tuple[str, int]:
    """A free loop device bound to ``backing`` with autoclear: its path and an open fd."""
    control = os.open("/dev/loop-control", os.O_RDWR | os.O_CLOEXEC)
    try:
        for _ in range(_LOOP_TRIES):
            number = fcntl.ioctl(control, _LOOP_CTL_GET_FREE)
            device = f"/dev/loop{number}"
            loop = os.open(device, os.O_RDWR | os.O_CLOEXEC)
            try:
                fcntl.ioctl(loop, _LOOP_SET_FD, backing)
            except OSError as exc:
                os.close(loop)
                if exc.errno == errno.EBUSY:
                    continue  # taken meanwhile: ask for another
                raise ToolFailed("mount", f"{image}: loop device: {exc.strerror}") from None
            name = os.fsencode(str(image))[:_LO_NAME_SIZE - 1]
            try:
                fcntl.ioctl(loop, _LOOP_SET_STATUS64, _LOOP_INFO64.pack(
                    0, 0, 0, 0, 0, 0, 0, 0, _LO_FLAGS_AUTOCLEAR, name, b"", b"", 0, 0))
            except OSError as exc:
                _clear(loop)
                os.close(loop)
                raise ToolFailed("mount", f"{image}: loop device: {exc.strerror}") from None
            return device, loop
    finally:
        os.close(control)
    raise ToolFailed("mount", f"{image}: no free loop device after {_LOOP_TRIES} tries")


def mounted_image(point: Path) -> tuple[int, int] | None:
    """The (device, inode) of the file whose loop device is mounted at ``point`` as
    :func:`loop_mount` mounts it (the only mount there, its root, ext4, ``nosuid,nodev``);
    None when anything else, or nothing, is mounted there."""
    target = str(point)
    found = []
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as info:
            for line in info:
                fields = line.split()
                if len(fields) > 4 and _unescape(fields[4]) == target:
                    found.append(fields)
    except OSError:
        return None
    if len(found) != 1:
        return None
    fields = found[0]
    try:
        tail = fields[fields.index("-") + 1:]
    except ValueError:
        return None
    options = set(fields[5].split(","))
    if fields[3] != "/" or len(tail) < 2 or tail[0] != "ext4" \
            or not {"nosuid", "nodev"} <= options or not tail[1].startswith("/dev/loop"):
        return None
    try:
        loop = os.open(tail[1], os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        rdev = os.fstat(loop).st_rdev  # the very device the mount is of, and a loop device
        if os.major(rdev) != _LOOP_MAJOR or f"{os.major(rdev)}:{os.minor(rdev)}" != fields[2]:
            return None
        status = fcntl.ioctl(loop, _LOOP_GET_STATUS64, bytes(_LOOP_INFO64.size))
    except OSError:
        return None
    finally:
        os.close(loop)
    device, inode, _rdevice, offset, limit = _LOOP_INFO64.unpack(status)[:5]
    return (device, inode) if offset == 0 and limit == 0 else None


def _unescape(field: str) -> str:
    """A mountinfo path: space, tab, newline and backslash are octal escapes there."""
    for code in ("\\040", "\\011", "\\012", "\\134"):
        field = field.replace(code, chr(int(code[1:], 8)))
    return field


def _clear(loop: int) -> None:
    try:
        fcntl.ioctl(loop, _LOOP_CLR_FD)
    except OSError:
        return


def _tool(argv: list[str]) -> None:
    done = processes.run(argv, timeout=TOOL_TIMEOUT_S)
    if done.returncode != 0:
        text = (done.stderr or done.stdout).decode("utf-8", "replace")
        raise ToolFailed(argv[0], text.strip()[:200])


__all__ = ["SubprocessError", "ToolFailed", "bind_descriptor", "detach", "loop_mount",
           "make_ext4", "mounted_image"]
