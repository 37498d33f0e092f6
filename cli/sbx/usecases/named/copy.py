"""`sbx cp`: files between the host and a named sandbox, through the engine's archive endpoint
(sbx.seams.engine.Files), both ways, running or stopped.

The host side passes the mount policy both ways (no copy reads or writes a blocked path, as
no mount may). Out of the sandbox, the archive is extracted by
:mod:`sbx.domain.sandbox.copyout` (untrusted entries, symlink-safe, bounded); into it, the
archive is made by :mod:`sbx.domain.sandbox.copyin`, which also decides where a copy may land
(a writable bind or volume: the workspace when read-write, HOME, volumes).
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.sandbox.copyin import archive_of, check_writable, mount_for, parse_copy_args
from sbx.domain.sandbox.copyout import extract, refuse
from sbx.domain.sandbox.mountpolicy import MountPolicy, check_inside_blocked
from sbx.domain.sandbox.mounts import check_source
from sbx.seams.engine import Files, PathStat, SandboxFiles
from sbx.usecases import fleet
from sbx.usecases.context import AppContext
from sbx.usecases.named.listing import load_named


@dataclass(frozen=True)
class CopyResult:
    sandbox: str
    into_sandbox: bool
    source: str
    destination: str
    files: int
    bytes: int

    def as_dict(self) -> dict[str, Any]:
        return {"sandbox": self.sandbox,
                "direction": "in" if self.into_sandbox else "out",
                "source": self.source, "destination": self.destination,
                "files": self.files, "bytes": self.bytes}


def copy(ctx: AppContext, source: str, destination: str, *, max_bytes: int) -> CopyResult:
    args = parse_copy_args(source, destination)
    ctx = fleet.for_sandbox(ctx, args.name)  # on the engine it lives on
    record = load_named(ctx, args.name)
    container_id = str(record.container_id)
    policy = MountPolicy.for_host(ctx.env, state_home=ctx.state_home)
    host = args.host_path if os.path.isabs(args.host_path) \
        else os.path.join(ctx.cwd, args.host_path)
    # mount_blocked: what a copy reads is what a mount could, and it writes nowhere blocked
    if args.into_sandbox:
        check_source(policy, host)
    else:
        check_inside_blocked(policy, host)
    driver = ctx.driver
    files = driver.sandbox_files(container_id)
    if args.into_sandbox:
        return _copy_in(driver, container_id, files, args.name, Path(host), args.sandbox_path,
                        max_bytes)
    mount = mount_for(args.sandbox_path, files.mounts)
    if mount is not None and mount.kind == "tmpfs":
        raise refuse("tmpfs_target", f"{args.sandbox_path} is on {args.name}'s tmpfs "
                     f"{mount.target}, which the engine cannot read",
                     path=args.sandbox_path, mount=mount.target)
    found = driver.archive_stat(container_id, args.sandbox_path)
    if found is None:
        raise SbxError(Reason.INVALID_ARGUMENT, f"{args.sandbox_path} does not exist in "
                       f"{args.name}", hint=f"`sbx exec {args.name} -- ls -la "
                       f"{posixpath.dirname(args.sandbox_path)}` shows what is there.")
    name = posixpath.basename(args.sandbox_path) or found.name
    chunks = driver.archive_read(container_id, args.sandbox_path)
    with contextlib.closing(chunks):  # type: ignore[type-var]
        copied = extract(chunks, Path(host), max_bytes=max_bytes, source_name=name)
    return CopyResult(args.name, False, f"{args.name}:{args.sandbox_path}", copied.path,
                      copied.files, copied.bytes)


def _copy_in(driver: Files, container_id: str, files: SandboxFiles, name: str, source: Path,
             path: str, max_bytes: int) -> CopyResult:
    if not os.path.lexists(source):
        raise SbxError(Reason.INVALID_ARGUMENT, f"{source} does not exist")
    found = driver.archive_stat(container_id, path)
    if found is not None and _is_dir(found):
        into, entry = path, source.name
    else:
        into, entry = posixpath.dirname(path) or "/", posixpath.basename(path)
        parent = driver.archive_stat(container_id, into)
        if parent is None or not _is_dir(parent):
            raise SbxError(Reason.INVALID_ARGUMENT, f"{into} is not a directory in {name}",
                           hint=f"Copy into an existing directory, e.g. {name}:/workspace/")
        if found is not None and source.is_dir() and not source.is_symlink():
            raise SbxError(Reason.INVALID_ARGUMENT,
                           f"cannot copy the directory {source} over the file {path}")
    final = posixpath.join(into, entry)
    check_writable(final, files.mounts, name)
    if found is not None and found.link_target:  # the engine follows it: so does the check
        check_writable(posixpath.normpath(posixpath.join(posixpath.dirname(path),
                                                         found.link_target)),
                       files.mounts, name)
    uid, _, gid = files.user.partition(":")
    if not uid.isdigit() or not gid.isdigit():
        raise SbxError(Reason.STATE_CORRUPT, f"{name}'s container has no numeric user "
                       f"({files.user!r})")
    archive, count = archive_of(source, entry, uid=int(uid), gid=int(gid), max_bytes=max_bytes)
    with archive:
        size = archive.seek(0, os.SEEK_END)
        archive.seek(0)
        driver.archive_write(container_id, into, archive)
    return CopyResult(name, True, str(source), f"{name}:{final}", count, size)


def _is_dir(found: PathStat) -> bool:
    return stat.S_ISDIR(found.mode)


__all__ = ["CopyResult", "copy"]
