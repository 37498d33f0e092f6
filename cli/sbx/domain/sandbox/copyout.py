"""A sandbox's archive onto the host (`sbx cp NAME:SRC DEST`), symlink-safe.

The tar comes from the engine, but what it holds is the sandbox's: every entry is untrusted.
Each is checked before anything of it is written, and everything is written into a private
directory made next to the destination, through directory descriptors opened without
following links; only a complete, checked copy is renamed into place. So nothing the archive
says can write outside the destination: not an absolute or ``..`` name, not a link (a link
leading out is refused, and no path is ever resolved through one), not a hard link, device,
FIFO or setuid/setgid file (refused), and not more than the copy's size bound.
"""

from __future__ import annotations

import contextlib
import posixpath
import stat
import tarfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Final

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.seams.host import dirfds, files, lookup

DEFAULT_MAX_BYTES: Final = 1024 * 1024 * 1024  # --max-size default: 1 GiB of file data
MAX_ENTRIES: Final = 100_000
CHUNK: Final = 1024 * 1024
HEADER_SLACK: Final = 1024 * 1024


@dataclass(frozen=True)
class Copied:
    path: str  # where the copy now is on the host
    files: int
    bytes: int


def refuse(rule: str, message: str, **details: object) -> SbxError:
    return SbxError(Reason.COPY_REFUSED, f"{message} (rule {rule}); nothing was copied",
                    details={"rule": rule, **details})


def member_parts(name: str) -> tuple[str, ...]:
    """The components of an archive entry's name, refused when it is absolute, climbs with
    ``..``, or is empty; ``.`` components are dropped."""
    if name.startswith("/") or "\\" in name or "\0" in name:
        raise refuse("absolute_entry", f"the archive holds an entry named {name!r}", entry=name)
    parts = tuple(p for p in PurePosixPath(name).parts if p != ".")
    if not parts or ".." in parts:
        raise refuse("parent_entry", f"the archive holds an entry named {name!r}", entry=name)
    return parts


def check_member(member: tarfile.TarInfo, parts: tuple[str, ...]) -> None:
    """Refuse what a copy never writes: hard links, devices, FIFOs, setuid/setgid files, and
    a symbolic link whose target leads out of the copy (absolute, or climbing past its
    root)."""
    name = member.name
    if member.islnk():
        raise refuse("hard_link", f"the archive holds a hard link {name!r}", entry=name)
    if member.ischr() or member.isblk() or member.isfifo() or member.isdev():
        raise refuse("device_entry", f"the archive holds a device or FIFO {name!r}", entry=name)
    if not (member.isfile() or member.isdir() or member.issym()):
        raise refuse("special_entry", f"the archive holds {name!r} of an unknown type",
                     entry=name)
    if member.mode & (stat.S_ISUID | stat.S_ISGID):
        raise refuse("setuid_entry", f"the archive holds a setuid/setgid entry {name!r}",
                     entry=name)
    if member.issym() and not link_stays_inside(parts, member.linkname):
        raise refuse("link_escapes", f"the archive's link {name!r} leads out of the copy "
                     f"(to {member.linkname!r})", entry=name, target=member.linkname)


def link_stays_inside(parts: tuple[str, ...], target: str) -> bool:
    """Whether a link at ``parts`` pointing at ``target`` stays within the copy's top entry,
    read lexically (the first check; :func:`links_escaping` resolves them all at the end,
    when links through links are there to follow). A link that is the copy itself never
    does: it would lead to the destination's neighbours."""
    if len(parts) < 2 or not target or target.startswith("/") or "\0" in target:
        return False
    depth = len(parts) - 1  # how deep under the top entry the link's directory is, plus one
    for part in PurePosixPath(target).parts:
        if part == "..":
            depth -= 1
        elif part != ".":
            depth += 1
        if depth < 1:
            return False
    return True


def links_escaping(top: Path) -> list[str]:
    """Every link under ``top`` (a private tree only this copy wrote) whose resolution,
    through whatever other links it meets, leaves ``top``."""
    root = lookup.real_path(str(top))
    found = []
    for path, resolved in files.links_below(top):
        if resolved != root and not resolved.startswith(root + "/"):
            found.append(posixpath.relpath(path, top))
    return found


class _Stream:
    """A file-like view of the engine's chunks for ``tarfile`` (stream mode), counting what
    arrives against a bound (tar headers and padding included)."""

    def __init__(self, chunks: Iterable[bytes], limit: int) -> None:
        self._chunks: Iterator[bytes] = iter(chunks)
        self._pending = bytearray()  # consumed from the front: CPython moves no bytes for it
        self.received = 0
        self._limit = limit

    def allow(self, extra: int) -> None:
        """Room for one more entry's header (its pax records and padding)."""
        self._limit += extra

    def read(self, size: int = -1) -> bytes:
        while size < 0 or len(self._pending) < size:
            chunk = next(self._chunks, None)
            if chunk is None:
                break
            self.received += len(chunk)
            if self.received > self._limit:
                raise refuse("too_large", "the archive from the sandbox is larger than the "
                             f"copy's bound of {self._limit} bytes", bound=self._limit)
            self._pending += chunk
        if size < 0 or size >= len(self._pending):
            data = bytes(self._pending)
            self._pending.clear()
        else:
            data = bytes(self._pending[:size])
            del self._pending[:size]
        return data


def extract(chunks: Iterable[bytes], destination: Path, *, max_bytes: int = DEFAULT_MAX_BYTES,
            source_name: str) -> Copied:
    """Extract the engine's archive of ``source_name`` as ``destination`` (Docker's `cp`: a
    missing destination becomes the copy; an existing directory receives it under the source's
    name; an existing file is replaced by a file)."""
    target = destination / source_name if lookup.is_directory_checked(destination) \
        else destination
    if lookup.is_link_checked(target) or (lookup.exists_checked(target)
                                          and not lookup.is_file_checked(target)):
        raise refuse("destination_exists", f"{target} exists and is not a regular file",
                     path=str(target))
    parent = target.parent
    if not lookup.is_directory_checked(parent):
        raise SbxError(Reason.INVALID_ARGUMENT, f"{parent} is not a directory",
                       hint="Create the destination's directory first.")
    staging = Path(_private_dir(parent))
    try:
        copied = _extract_into(staging, chunks, max_bytes)
        top = staging / copied.path
        escaping = links_escaping(top) if lookup.is_directory_checked(top) else []
        if escaping:
            raise refuse("link_escapes", f"the archive's links lead out of the copy: "
                         f"{', '.join(sorted(escaping)[:5])}", entries=sorted(escaping))
        if lookup.is_directory_checked(top) and lookup.exists_checked(target):
            raise refuse("destination_exists", f"{target} is a file; the copy is a directory",
                         path=str(target))
        files.rename_over(top, target)
        return Copied(str(target), copied.files, copied.bytes)
    finally:
        files.remove_tree(staging, ignore_errors=True)


def _private_dir(parent: Path) -> str:
    return files.private_directory(parent, ".sbx-cp-")


def _extract_into(root: Path, chunks: Iterable[bytes], max_bytes: int) -> Copied:
    # The entries' own sizes are held to max_bytes below, before any of their data is read;
    # the stream to that plus each entry's header as it comes, and a little slack.
    stream = _Stream(chunks, max_bytes + HEADER_SLACK)
    total = 0
    count_files = 0
    top: str | None = None
    root_fd = dirfds.open_top(root)
    try:
        with tarfile.open(fileobj=stream, mode="r|") as archive:  # type: ignore[call-overload]
            for count, member in enumerate(archive, start=1):
                if count > MAX_ENTRIES:
                    raise refuse("too_many_entries", f"the archive holds more than "
                                 f"{MAX_ENTRIES} entries", bound=MAX_ENTRIES)
                stream.allow(1536 + len(member.name) + len(member.linkname))
                parts = member_parts(member.name)
                check_member(member, parts)
                if top is None:
                    top = parts[0]
                elif parts[0] != top:
                    raise refuse("second_root", f"the archive holds {member.name!r} beside "
                                 f"{top!r}", entry=member.name)
                if member.isfile():
                    total += member.size
                    if total > max_bytes:
                        raise refuse("too_large", f"the copy holds more than its bound of "
                                     f"{max_bytes} bytes", bound=max_bytes)
                    count_files += 1
                _write(root_fd, parts, member, archive.extractfile(member)
                       if member.isfile() else None)
    except tarfile.TarError as exc:
        raise refuse("bad_archive", f"the archive from the sandbox does not read as tar "
                     f"({exc})") from exc
    finally:
        dirfds.close(root_fd)
    if top is None:
        raise refuse("empty_archive", "the sandbox sent an empty archive")
    return Copied(top, count_files, total)


def _write(root_fd: int, parts: tuple[str, ...], member: tarfile.TarInfo,
           data: IO[bytes] | None) -> None:
    """One checked entry, under ``root_fd``, every directory opened without following links
    (a directory the archive made earlier is reopened; a link in its place is refused)."""
    with _opened_parent(root_fd, parts[:-1]) as parent_fd:
        name = parts[-1]
        if member.isdir():
            with contextlib.suppress(FileExistsError):
                dirfds.make_directory_at(parent_fd, name, 0o700)
            fd = _open_dir(parent_fd, name, member.name)
            try:
                dirfds.set_descriptor_mode(fd, (member.mode & 0o777) | 0o700)
            finally:
                dirfds.close(fd)
        elif member.issym():
            dirfds.make_link_at(parent_fd, name, member.linkname)
        else:
            try:
                created = dirfds.create_file_at(parent_fd, name, 0o600)
            except FileExistsError:
                raise refuse("duplicate_entry", f"the archive holds {member.name!r} twice",
                             entry=member.name) from None
            with created as out:
                left = member.size
                while data is not None and left > 0 and (chunk := data.read(min(CHUNK, left))):
                    out.write(chunk)
                    left -= len(chunk)
                dirfds.set_descriptor_mode(out.fileno(), member.mode & 0o777)


@contextlib.contextmanager
def _opened_parent(root_fd: int, parts: tuple[str, ...]) -> Iterator[int]:
    fds: list[int] = []
    current = root_fd
    try:
        for index, part in enumerate(parts):
            current = _open_dir(current, part, "/".join(parts[:index + 1]))
            fds.append(current)
        yield current
    finally:
        for fd in fds:
            dirfds.close(fd)


def _open_dir(parent_fd: int, name: str, shown: str) -> int:
    try:
        return dirfds.open_directory_in(parent_fd, name)
    except (FileNotFoundError, NotADirectoryError, OSError) as exc:
        raise refuse("entry_through_link", f"the archive writes under {shown!r}, which is not "
                     "a directory it made", entry=shown) from exc


__all__ = ["DEFAULT_MAX_BYTES", "MAX_ENTRIES", "Copied", "check_member", "extract",
           "link_stays_inside", "links_escaping", "member_parts", "refuse"]
