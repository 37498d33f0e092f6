"""Mount sources as they were checked, not as they are named: closing the check-to-use race.

The mount policy judges a path string; the engine resolves that string again when it starts the
container, seconds later (after builds, the proxy start, the create step). Anything that can
change the path in between (a process of the user's, another sandbox with that directory in its
read-write workspace) could swap a checked directory for a symbolic link to ``~/.ssh``. So:

1. :func:`open_checked` opens the canonical path the policy approved one component at a time
   with ``O_PATH | O_NOFOLLOW``: no component may be a symbolic link at that moment, so the
   descriptor names exactly the directory (or file) that was checked. Its type is checked on
   the descriptor itself (sockets, devices and FIFOs are refused), and its owner is read from
   it too.
2. :class:`Staging` (when sbx runs as root) bind-mounts each opened descriptor onto a private
   staging point (``/run/sbx/<home>/<run>/<n>``, root-only, made private so it propagates
   nowhere) and hands the engine that path: whatever happens to the original path afterwards,
   the engine mounts what was checked.
3. Without root (no mount privilege), the engine gets the canonical path and, right after the
   start, :func:`verify_mounts` compares what the container really has at each target (device
   and path inside the file system, from the container's ``mountinfo``) with the opened
   descriptor; a difference stops the sandbox at once (``mount_blocked``, rule
   ``source_changed``). That leaves a window of milliseconds in which a swapped mount is
   visible: the README states it as a residual risk of running sbx without root.
"""

from __future__ import annotations

import contextlib
import errno
import os
import posixpath
import stat
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Final

from sbx.base.errors import MountBlocked, SbxError
from sbx.base.reasons import Reason
from sbx.domain.sandbox.mountrules import SOURCE_CHANGED, SOURCE_UNREADABLE
from sbx.domain.sandbox.mounts import check_file_type

STAGING_ROOT: Final = Path("/run/sbx")
NAMED_PREFIX: Final = "named-"  # a named sandbox's staging directory: named-<name>
MIN_FILESYSTEM_BYTES: Final = 256 * 1024  # the smallest ext4 mkfs makes
_CHANGED_HINT: Final = ("The path changed between the check and the mount; run again, and find "
                        "out what is modifying it.")


@dataclass
class OpenedSource:
    """One checked host path, held open so that exactly it is mounted."""

    path: str  # the canonical path the policy approved
    fd: int  # O_PATH descriptor of that object
    device: int
    inode: int
    mode: int
    uid: int
    gid: int

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.mode)

    def close(self) -> None:
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1


@dataclass(frozen=True)
class Pin:
    """An opened host source and where it goes in the sandbox."""

    source: OpenedSource
    target: str  # container path
    read_only: bool


def open_checked(path: str) -> OpenedSource:
    """Open ``path`` (absolute, canonical) without following a single symbolic link."""
    parts = [part for part in path.split("/") if part]
    flags = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
    current = os.open("/", flags | os.O_DIRECTORY)
    try:
        for index, part in enumerate(parts):
            try:
                opened = os.open(part, flags, dir_fd=current)
            except OSError as exc:
                raise _changed(path, f"{part!r} cannot be opened ({exc.strerror})") from exc
            os.close(current)
            current = opened
            status = os.fstat(current)
            if stat.S_ISLNK(status.st_mode):
                raise _changed(path, f"{part!r} is now a symbolic link")
            if index < len(parts) - 1 and not stat.S_ISDIR(status.st_mode):
                raise _changed(path, f"{part!r} is no longer a directory")
        status = os.fstat(current)
        check_file_type(path, path, status.st_mode)
        source = OpenedSource(path=path, fd=current, device=status.st_dev,
                              inode=status.st_ino, mode=status.st_mode, uid=status.st_uid,
                              gid=status.st_gid)
    except BaseException:
        with contextlib.suppress(OSError):
            os.close(current)
        raise
    return source


def open_child(parent: OpenedSource, name: str) -> OpenedSource | None:
    """Open ``name`` directly inside an opened directory, never through a symbolic link; None
    when it does not exist. A symbolic link there is refused (it cannot be pinned)."""
    flags = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(name, flags, dir_fd=parent.fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _changed(f"{parent.path}/{name}", f"it cannot be opened ({exc.strerror})") from exc
    status = os.fstat(fd)
    if stat.S_ISLNK(status.st_mode):
        os.close(fd)
        raise MountBlocked(
            f"{parent.path}/{name} is a symbolic link; sbx cannot keep it read-only "
            f"(rule {SOURCE_CHANGED})", rule=SOURCE_CHANGED, path=f"{parent.path}/{name}",
            hint="Replace the link with what it points to, or pass --trust-workspace.")
    return OpenedSource(path=f"{parent.path}/{name}", fd=fd, device=status.st_dev,
                        inode=status.st_ino, mode=status.st_mode, uid=status.st_uid,
                        gid=status.st_gid)


def _changed(path: str, why: str) -> MountBlocked:
    return MountBlocked(f"mount source {path} changed while it was being checked: {why} "
                        f"(rule {SOURCE_CHANGED})", rule=SOURCE_CHANGED, path=path,
                        hint=_CHANGED_HINT)


SOCKET_SCAN_ENTRIES: Final = 100_000
SOCKET_SCAN_SECONDS: Final = 1.0


def sockets_inside(source: OpenedSource, *, entries: int = SOCKET_SCAN_ENTRIES,
                   seconds: float = SOCKET_SCAN_SECONDS) -> tuple[list[str], bool]:
    """(sockets found below an opened directory, whether the whole tree was scanned).

    A socket in a mounted directory is a door to whatever listens on it (an engine, an agent,
    a desktop bus); the scan is bounded in entries and time so a huge tree costs at most that.
    Symbolic links are not followed.
    """
    found: list[str] = []
    if not source.is_dir:
        return found, True
    deadline = time.monotonic() + seconds
    budget = entries
    try:
        top = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=source.fd)
    except OSError:
        return found, False
    pending: list[tuple[int, str]] = [(top, source.path)]
    complete = True
    try:
        while pending:
            fd, path = pending.pop()
            try:
                with os.scandir(fd) as scan:
                    for entry in scan:
                        budget -= 1
                        if budget < 0 or time.monotonic() > deadline:
                            complete = False
                            break
                        if entry.is_dir(follow_symlinks=False):
                            with contextlib.suppress(OSError):
                                child = os.open(entry.name, os.O_RDONLY | os.O_DIRECTORY
                                                | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
                                pending.append((child, f"{path}/{entry.name}"))
                        elif not entry.is_file(follow_symlinks=False) \
                                and not entry.is_symlink() and _is_socket(entry):
                            # Only entries that are neither files, directories nor links (the
                            # directory listing says so for free) cost a stat.
                            found.append(f"{path}/{entry.name}")
            finally:
                os.close(fd)
            if not complete:
                break
    finally:
        for fd, _path in pending:
            with contextlib.suppress(OSError):
                os.close(fd)
    return found, complete


def _is_socket(entry: os.DirEntry[str]) -> bool:
    try:
        return stat.S_ISSOCK(entry.stat(follow_symlinks=False).st_mode)
    except OSError:
        return False


# -- staging (root) -------------------------------------------------------------------------


def staging_available() -> bool:
    """Whether this process may bind-mount (root on Linux)."""
    return os.geteuid() == 0 and os.uname().sysname == "Linux"


@dataclass
class Staging:
    """Private staging points for one run; :meth:`release` unmounts and removes them."""

    directory: Path
    points: list[Path] = field(default_factory=list)
    # What each point holds, in order, so a named sandbox's later start re-stages the same
    # points: {"kind": "bind", "path": ...} or {"kind": "fs", "image": ..., "mode": ...}.
    log: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def for_run(cls, home_hash: str, run_id: str) -> Staging:
        return cls(STAGING_ROOT / home_hash / run_id)

    @classmethod
    def for_named(cls, home_hash: str, name: str) -> Staging:
        """A named sandbox's points: at the same paths on every start (the container's
        configuration names them), released and re-staged each time."""
        staging = cls(STAGING_ROOT / home_hash / f"{NAMED_PREFIX}{name}")
        with contextlib.suppress(OSError):
            staging.points = sorted((p for p in staging.directory.iterdir()
                                     if p.name.isdigit()), key=lambda p: int(p.name))
        return staging

    def stage(self, source: OpenedSource) -> str:
        """Bind-mount exactly the opened object onto a new staging point; return its path."""
        self._ensure_directory()
        point = self.directory / str(len(self.points))
        if source.is_dir:
            point.mkdir(mode=0o700)
        else:
            point.touch(mode=0o600)
        self.points.append(point)
        self.log.append({"kind": "bind", "path": source.path})
        code = _host_mounts().bind_descriptor(source.fd, point)
        if code != 0:
            raise MountBlocked(
                f"staging {source.path} for the sandbox failed ({os.strerror(code)}) "
                f"(rule {SOURCE_UNREADABLE})", rule=SOURCE_UNREADABLE, path=source.path,
                hint="Run `sbx doctor`; sbx needs to bind-mount as root to pin mount sources.")
        return str(point)

    def stage_filesystem(self, image: Path, size: int, *, uid: int, gid: int,
                         mode: int | None) -> str:
        """A fresh file system of ``size`` bytes (ext4 in a sparse file ``image``, loop-mounted
        ``nosuid,nodev`` on a new staging point, its root owned by ``uid:gid``): a volume whose
        size the kernel enforces. The loop device goes with the unmount (autoclear)."""
        mounts = _host_mounts()
        self._ensure_directory()
        point = self.directory / str(len(self.points))
        point.mkdir(mode=0o700)
        self.points.append(point)
        self.log.append({"kind": "fs", "image": str(image)})
        size = max(size, MIN_FILESYSTEM_BYTES)
        try:
            image.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            with image.open("wb") as handle:
                handle.truncate(size)
            mounts.make_ext4(image, uid=uid, gid=gid)
            mounts.loop_mount(image, point)
            os.chmod(point, mode if mode is not None else 0o755)
            with contextlib.suppress(OSError):
                (point / "lost+found").rmdir()  # mkfs's, not the sandbox's
        except (OSError, mounts.SubprocessError) as exc:
            raise SbxError(Reason.CREATE_FAILED,
                           f"could not make a {size}-byte file system for a volume: {exc}",
                           hint="sbx needs mkfs.ext4 and loop devices for sized volumes "
                                "(e2fsprogs, util-linux).") from exc
        return str(point)

    def mounted_filesystems(self, log: Sequence[Mapping[str, Any]]) -> set[Path]:
        """The points of a named sandbox's earlier start that still hold the file system the
        log names there: the loop device mounted on the point is backed by the very file
        (device and inode) that ``image`` is now. A start keeps them mounted."""
        mounts = _host_mounts()
        held: set[Path] = set()
        for index, entry in enumerate(log):
            point = self.directory / str(index)
            if entry.get("kind") != "fs" or point not in self.points:
                continue
            try:
                info = os.stat(str(entry["image"]))
            except (OSError, KeyError, ValueError):
                continue
            if mounts.mounted_image(point) == (info.st_dev, info.st_ino):
                held.add(point)
        return held

    def remount_filesystem(self, image: Path, *, held: bool = False) -> str:
        """A file system made by :meth:`stage_filesystem` before (a named sandbox's volume),
        mounted again on the next point; ``held``: that point still holds it (it was not
        released, :meth:`mounted_filesystems`), so it stays as it is."""
        mounts = _host_mounts()
        self._ensure_directory()
        point = self.directory / str(len(self.points))
        if held:
            self.points.append(point)
            self.log.append({"kind": "fs", "image": str(image)})
            return str(point)
        point.mkdir(mode=0o700)
        self.points.append(point)
        self.log.append({"kind": "fs", "image": str(image)})
        try:
            mounts.loop_mount(image, point)
        except mounts.ToolFailed as failed:
            raise SbxError(Reason.CREATE_FAILED,
                           f"could not mount the volume file system {image}: {failed.output}",
                           hint="`sbx rm` the sandbox and create it again if the file is gone."
                           ) from None
        except (OSError, mounts.SubprocessError) as exc:
            raise SbxError(Reason.CREATE_FAILED,
                           f"could not mount the volume file system {image}: {exc}",
                           hint="Check that `mount` works on this host, then retry.") from exc
        return str(point)

    def _ensure_directory(self) -> None:
        if not self.points:
            for directory in (STAGING_ROOT, self.directory.parent, self.directory):
                with contextlib.suppress(FileExistsError):
                    directory.mkdir(mode=0o700)

    def release(self, keep: Collection[Path] = ()) -> list[str]:
        """Unmount and remove every staging point but those in ``keep`` (never a recursive
        delete: a point that is still mounted is left alone and reported)."""
        problems = release_points([point for point in self.points if point not in keep])
        for directory in (self.directory, self.directory.parent):
            with contextlib.suppress(OSError):
                directory.rmdir()
        self.points.clear()
        return problems


def _host_mounts() -> ModuleType:
    """The host's mount seam (:mod:`sbx.seams.host.mounts`)."""
    # Deferred: only a run that stages something pays for importing ctypes and subprocess.
    from sbx.seams.host import mounts

    return mounts


def release_points(points: Sequence[Path]) -> list[str]:
    mounts = _host_mounts()
    problems: list[str] = []
    for point in reversed(points):
        code = mounts.detach(point)
        if code not in (0, errno.EINVAL, errno.ENOENT):  # EINVAL: not mounted (any more)
            problems.append(f"could not unmount staging point {point}: {os.strerror(code)}")
            continue
        try:
            if point.is_dir() and not point.is_symlink():
                point.rmdir()
            else:
                point.unlink()
        except OSError as exc:
            if exc.errno != errno.ENOENT:
                problems.append(f"could not remove staging point {point}: {exc.strerror}")
    return problems


def stale_staging(home_hash: str) -> Iterator[tuple[str, list[Path]]]:
    """(run id, staging points) under this home's staging directory, for ``sbx gc``."""
    home = STAGING_ROOT / home_hash
    try:
        runs = sorted(home.iterdir())
    except OSError:
        return
    for run in runs:
        try:
            points = sorted((p for p in run.iterdir()), key=lambda p: p.name)
        except OSError:
            continue
        yield run.name, points


# -- verification (no root) -----------------------------------------------------------------


@dataclass(frozen=True)
class MountEntry:
    mount_point: str
    root: str  # the path inside its file system that is mounted there
    device: tuple[int, int]


def parse_mountinfo(text: str) -> list[MountEntry]:
    """``/proc/<pid>/mountinfo`` lines → entries (malformed lines are skipped)."""
    entries: list[MountEntry] = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 5 or ":" not in fields[2]:
            continue
        major, _, minor = fields[2].partition(":")
        if not (major.isdigit() and minor.isdigit()):
            continue
        entries.append(MountEntry(mount_point=_unescape(fields[4]), root=_unescape(fields[3]),
                                  device=(int(major), int(minor))))
    return entries


def _unescape(text: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as \ooo (three octal digits).
    out: list[str] = []
    index = 0
    while index < len(text):
        code = text[index + 1:index + 4]
        if text[index] == "\\" and len(code) == 3 and all(c in "01234567" for c in code):
            out.append(chr(int(code, 8)))
            index += 4
            continue
        out.append(text[index])
        index += 1
    return "".join(out)


def root_in_filesystem(path: str, host_mounts: Sequence[MountEntry]) -> str | None:
    """The path of host ``path`` inside its file system (what a bind mount of it shows as its
    ``root`` in mountinfo): the deepest host mount containing it (the last one listed when
    several share a mount point), its root plus the rest of the path."""
    best: MountEntry | None = None
    best_length = -1
    for entry in host_mounts:
        point = entry.mount_point
        if point in ("/", path) or path.startswith(point + "/"):
            length = 0 if point == "/" else len(point)
            if length >= best_length:
                best, best_length = entry, length
    if best is None:
        return None
    rest = path if best.mount_point == "/" else path[len(best.mount_point):]
    parts = [p for p in (*best.root.split("/"), *rest.split("/")) if p]
    return posixpath.normpath("/" + "/".join(parts))


def mount_mismatches(expected: Sequence[tuple[str, OpenedSource]], container_mountinfo: str,
                     host_mountinfo: str) -> list[str]:
    """For each (container target, opened source): a description of how the container's
    mount differs from the source; empty when every one is exactly what was checked."""
    container = {e.mount_point: e for e in parse_mountinfo(container_mountinfo)}
    host = parse_mountinfo(host_mountinfo)
    problems: list[str] = []
    for target, source in expected:
        entry = container.get(target)
        if entry is None:
            problems.append(f"{target}: not mounted")
            continue
        device = (os.major(source.device), os.minor(source.device))
        root = root_in_filesystem(source.path, host)
        if entry.device != device or (root is not None and entry.root != root):
            problems.append(f"{target}: mounts {entry.root} on {entry.device[0]}:"
                            f"{entry.device[1]}, not the checked {source.path}")
    return problems


__all__ = ["NAMED_PREFIX", "STAGING_ROOT", "MountEntry", "OpenedSource", "Pin",
           "Staging", "mount_mismatches", "open_checked", "open_child", "parse_mountinfo",
           "release_points", "root_in_filesystem", "sockets_inside", "stale_staging",
           "staging_available"]
