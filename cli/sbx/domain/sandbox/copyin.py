"""`sbx cp` arguments and the host's side of a copy into a sandbox.

Docker's syntax: exactly one of SRC and DEST is ``NAME:PATH`` (a local path with a colon is
written ``./a:b``); a relative sandbox path is relative to its root, as with ``docker cp``.

Where a copy may write in the sandbox: only a mount it may write itself (its workspace when it
is read-write, its HOME volume, its volumes). Never its read-only root, never a read-only mount
(the pinned git paths of a workspace, --mount :ro), and never a tmpfs (/tmp, a private
workspace): the engine's archive endpoint writes beneath a tmpfs, where the sandbox would not
see the files. The engine refuses read-only roots and mounts too; this is the check with a
reason and the mount it found.

The archive made of a host path never follows a link (a link is copied as a link), holds no
device, FIFO or socket (refused), drops setuid/setgid/sticky bits, gives every entry to the
sandbox's user, and is held to the copy's size bound before anything is sent.
"""

from __future__ import annotations

import posixpath
import re
import stat
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Final

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.sandbox.copyout import MAX_ENTRIES, refuse
from sbx.seams.engine import SandboxMount
from sbx.seams.host import files, lookup
from sbx.seams.host.files import EntryStatus

_SANDBOX_ARG: Final = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.-]*):(.*)$")
SPOOL_BYTES: Final = 8 * 1024 * 1024  # an archive larger than this is spooled to disk


@dataclass(frozen=True)
class CopyArgs:
    name: str  # the sandbox
    sandbox_path: str  # absolute, normalised
    host_path: str
    into_sandbox: bool


def parse_copy_args(source: str, destination: str) -> CopyArgs:
    """Which side is the sandbox's (``NAME:PATH``); both or neither is refused."""
    src, dst = _SANDBOX_ARG.match(source), _SANDBOX_ARG.match(destination)
    if (src is None) == (dst is None):
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"sbx cp copies between the host and one sandbox: exactly one of "
                       f"{source!r} and {destination!r} must be NAME:PATH",
                       hint="sbx cp NAME:/workspace/out.txt ./  or  sbx cp ./in.txt "
                            "NAME:/workspace/ (write a local path with a colon as ./a:b)")
    match = src or dst
    assert match is not None  # noqa: S101 - one of them matched, checked above
    raw = match.group(2)
    if not raw or "\0" in raw:
        raise SbxError(Reason.INVALID_ARGUMENT, f"{match.group(0)!r} names no path",
                       hint=f"Give a path: {match.group(1)}:/workspace/FILE")
    path = posixpath.normpath(posixpath.join("/", raw))
    host = destination if src is not None else source
    return CopyArgs(match.group(1), path, host, into_sandbox=dst is not None)


def mount_for(path: str, mounts: Sequence[SandboxMount]) -> SandboxMount | None:
    """The mount ``path`` is on (the deepest whose target holds it); None: the root."""
    best: SandboxMount | None = None
    for mount in mounts:
        target = mount.target.rstrip("/") or "/"
        holds = path == target or path.startswith(target + "/") or target == "/"
        if holds and (best is None or len(target) > len(best.target.rstrip("/"))):
            best = mount
    return best


def check_writable(path: str, mounts: Sequence[SandboxMount], name: str) -> SandboxMount:
    """The writable mount a copy into ``path`` lands on, or the refusal that says why not."""
    mount = mount_for(path, mounts)
    writable = [m.target for m in mounts if m.writable and m.kind != "tmpfs"]
    where = ("; it may write to " + ", ".join(sorted(writable))) if writable else ""
    if mount is None:
        raise refuse("read_only_root", f"{path} is on {name}'s read-only root{where}",
                     path=path)
    if mount.kind == "tmpfs":
        raise refuse("tmpfs_target", f"{path} is on {name}'s tmpfs {mount.target}, which the "
                     f"engine cannot write into{where}", path=path, mount=mount.target)
    if not mount.writable:
        raise refuse("read_only_mount", f"{path} is on {name}'s read-only mount "
                     f"{mount.target} (a pinned or :ro path){where}", path=path,
                     mount=mount.target)
    return mount


def archive_of(source: Path, name: str, *, uid: int, gid: int,
               max_bytes: int) -> tuple[IO[bytes], int]:
    """A tar of ``source`` (not followed when it is a link) whose top entry is ``name``,
    owned by uid:gid, rewound, and the number of files in it; refused past ``max_bytes`` of
    file data or with a special file in it."""
    entries = list(_walk(source))
    if len(entries) > MAX_ENTRIES:
        raise refuse("too_many_entries", f"{source} holds more than {MAX_ENTRIES} entries",
                     bound=MAX_ENTRIES)
    total = sum(info.st_size for _path, info in entries if stat.S_ISREG(info.st_mode))
    if total > max_bytes:
        raise refuse("too_large", f"{source} holds {total} bytes, more than the copy's bound "
                     f"of {max_bytes}", bound=max_bytes, size=total)
    spool = files.spooled_buffer(SPOOL_BYTES)
    try:
        _fill(spool, entries, source, name, uid, gid)
    except BaseException:
        spool.close()
        raise
    spool.seek(0)
    return spool, sum(1 for _path, info in entries if stat.S_ISREG(info.st_mode))


def _fill(spool: IO[bytes], entries: Sequence[tuple[str, EntryStatus]], source: Path,
          name: str, uid: int, gid: int) -> None:
    with tarfile.open(fileobj=spool, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for path, info in entries:
            relative = posixpath.relpath(path, source)
            member = tarfile.TarInfo(name if relative == "." else f"{name}/{relative}")
            member.mode = info.st_mode & 0o777
            member.uid, member.gid = uid, gid
            member.mtime = int(info.st_mtime)
            if stat.S_ISDIR(info.st_mode):
                member.type = tarfile.DIRTYPE
                archive.addfile(member)
            elif stat.S_ISLNK(info.st_mode):
                member.type = tarfile.SYMTYPE
                member.linkname = lookup.link_target(path)
                archive.addfile(member)
            elif stat.S_ISREG(info.st_mode):
                data, opened = files.open_unfollowed(path)
                with data:
                    if not stat.S_ISREG(opened.st_mode) or opened.st_size != info.st_size:
                        raise refuse("source_changed", f"{path} changed while it was copied",
                                     path=path)
                    member.size = opened.st_size
                    archive.addfile(member, data)


def _walk(source: Path) -> list[tuple[str, EntryStatus]]:
    try:
        top = lookup.link_status(source)
    except OSError as exc:
        raise SbxError(Reason.INVALID_ARGUMENT, f"cannot copy {source}: {exc.strerror}") from exc
    found = [(str(source), top)]
    if stat.S_ISDIR(top.st_mode):
        found += files.tree_entries(source)  # never into a link
    for path, info in found:
        if not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)
                or stat.S_ISLNK(info.st_mode)):
            raise refuse("device_entry", f"{path} is a device, FIFO or socket", path=path)
    return found


__all__ = ["CopyArgs", "archive_of", "check_writable", "mount_for", "parse_copy_args"]
