"""One bounded walk of a writable workspace: the repositories in it and the files host tools
run, before the run and after it.

Every directory is entered — build output, ``node_modules``, virtual environments, any depth —
breadth first, so the shallow part of a huge tree is seen first. The walk stops after
:data:`SCAN_ENTRIES` entries or :data:`SCAN_SECONDS` (the one after the run has a larger bound)
and says so; what the walk before the run did not see is then judged by its change time
(ctime, which the sandbox cannot set back) rather than trusted. Symbolic links are never
followed: a directory is opened only if it is the one that was listed (same inode).

Found: git directories (``.git`` directories, and any directory git would use as one when run
inside it: ``HEAD`` beside ``objects`` and ``refs``, or beside a ``commondir``), ``.git`` files
and links (gitdir pointers), Mercurial's ``.hg`` configuration, ``.gitattributes`` files, and
the files of :mod:`sbx.domain.sandbox.hostfiles`.
"""

from __future__ import annotations

import collections
import contextlib
import stat
import time
from dataclasses import dataclass, field
from typing import Final

from sbx.domain.sandbox import hostfiles
from sbx.domain.sandbox.gitdirs import Stat, stat_from_json, stat_of
from sbx.seams.host import dirfds
from sbx.seams.host.dirfds import Entry

SCAN_ENTRIES: Final = 200_000  # before the run: each run pays for it
SCAN_SECONDS: Final = 3.0
AFTER_SCAN_ENTRIES: Final = 500_000  # after it: what a sandbox planted hides in a larger tree
AFTER_SCAN_SECONDS: Final = 10.0
WORKSPACE_QUARANTINE: Final = ".sbx-quarantine"  # where a workspace without .git keeps it
BARE_MARKERS: Final = frozenset({"HEAD", "objects", "refs"})
# What Mercurial reads from a repository's .hg: its config (hooks, extensions) and the
# pointer to a shared store (whose config a share also reads).
HG_FILES: Final = ("hgrc", "hgrc-not-shared", "sharedpath")


@dataclass
class TreeScan:
    files: dict[str, Stat] = field(default_factory=dict)  # host-executed files
    tools: dict[str, str] = field(default_factory=dict)  # their tools
    attributes: dict[str, Stat] = field(default_factory=dict)  # .gitattributes files
    gitdirs: dict[str, str] = field(default_factory=dict)  # path -> "dir" | "bare"
    gitfiles: dict[str, Stat] = field(default_factory=dict)  # .git files and links
    hg: dict[str, Stat] = field(default_factory=dict)  # .hg dirs and their HG_FILES
    complete: bool = True
    entries: int = 0
    quarantine: bool = False  # sbx's quarantine was there (and so is pinned read-only)
    skip_quarantine: bool = field(default=True, repr=False, compare=False)

    def as_json(self) -> dict[str, object]:
        return {"files": _stats_json(self.files), "tools": self.tools,
                "attributes": _stats_json(self.attributes), "gitdirs": self.gitdirs,
                "gitfiles": _stats_json(self.gitfiles), "hg": _stats_json(self.hg),
                "complete": self.complete, "entries": self.entries,
                "quarantine": self.quarantine}

    @classmethod
    def from_json(cls, data: dict[str, object]) -> TreeScan:
        def stats(key: str) -> dict[str, Stat]:
            value = data.get(key)
            return {str(k): stat_from_json(v) for k, v in value.items()} \
                if isinstance(value, dict) else {}

        tools = data.get("tools")
        gitdirs = data.get("gitdirs")
        entries = data.get("entries")
        return cls(files=stats("files"),
                   tools={str(k): str(v) for k, v in tools.items()}
                   if isinstance(tools, dict) else {},
                   attributes=stats("attributes"),
                   gitdirs={str(k): str(v) for k, v in gitdirs.items()}
                   if isinstance(gitdirs, dict) else {},
                   gitfiles=stats("gitfiles"), hg=stats("hg"),
                   complete=data.get("complete") is True,
                   entries=entries if isinstance(entries, int) else 0,
                   quarantine=data.get("quarantine") is True)


def _stats_json(stats: dict[str, Stat]) -> dict[str, list[object]]:
    return {k: list(v) for k, v in stats.items()}


@dataclass(frozen=True)
class _Pending:
    path: str  # relative to the root ("" for the root)
    inode: int
    tool: str | None  # the tool that reads this whole tree, if any
    dependencies: bool  # inside node_modules / site-packages


def scan(root_fd: int, *, entries: int = SCAN_ENTRIES, seconds: float = SCAN_SECONDS,
         quarantine_known: bool = True) -> TreeScan:
    """Walk the directory open at ``root_fd`` (see the module docstring). sbx's quarantine at
    the root is passed over when ``quarantine_known`` (before the run; after it, when it was
    there before and so was pinned read-only); one the sandbox made is walked like the rest."""
    found = TreeScan(skip_quarantine=quarantine_known)
    deadline = time.monotonic() + seconds
    try:
        root_inode = dirfds.status_of(root_fd).st_ino
    except OSError:
        found.complete = False
        return found
    pending = collections.deque([_Pending("", root_inode, None, False)])
    while pending:
        item = pending.popleft()
        # the listed directory, or None when the path now names another (never walk a swap)
        fd = dirfds.open_directory_if(root_fd, item.path or ".", item.inode)
        if fd is None:
            found.complete = False
            continue
        try:
            if not _take_directory(fd, item, found, pending, entries, deadline):
                found.complete = False
                return found
        finally:
            dirfds.close(fd)
    return found


def _take_directory(fd: int, item: _Pending, found: TreeScan,
                    pending: collections.deque[_Pending], entries: int,
                    deadline: float) -> bool:
    """Look at one directory's entries; False when the bound was reached."""
    try:
        listing = dirfds.listing(fd)
    except OSError:
        found.complete = False
        return True
    names = {entry.name for entry in listing}
    if "HEAD" in names and _is_gitdir(names, listing):
        found.gitdirs[item.path] = "bare"
        return True  # a git directory: what git reads there is the git check's
    room = entries - found.entries
    within = room >= len(listing) and time.monotonic() <= deadline
    if not within:  # the bound: the rest of this directory goes unseen, but not its repositories
        room = max(room, 0)
        listing = listing[:room] + [e for e in listing[room:] if e.name in (".git", ".hg")]
    found.entries += len(listing)
    # Most entries are files no tool reads, decided on the name and the listing's type alone.
    interesting = hostfiles.may_matter
    root = not item.path
    watched = item.tool is not None
    is_directory = dirfds.is_directory
    for entry in listing:
        if watched or is_directory(entry) or interesting(entry.name, root=root):
            _take(fd, entry, item, found, pending)
    return within


def _is_gitdir(names: set[str], listing: list[Entry]) -> bool:
    """What git takes for a git directory when run inside it: a ``HEAD`` (a file, or a link
    into refs/) beside ``objects`` and ``refs``, or beside a ``commondir`` that has them."""
    if "HEAD" not in names or not (names >= BARE_MARKERS or "commondir" in names):
        return False
    head = next(e for e in listing if e.name == "HEAD")
    with contextlib.suppress(OSError):
        return not dirfds.is_directory(head)
    return False


def _take(fd: int, entry: Entry, item: _Pending, found: TreeScan,
          pending: collections.deque[_Pending]) -> None:
    name = entry.name
    link = dirfds.is_link(entry)
    is_dir = not link and dirfds.is_directory(entry)
    path = f"{item.path}/{name}" if item.path else name
    if name == ".git":
        if is_dir:
            found.gitdirs[path] = "dir"
        else:
            _record(found.gitfiles, path, entry)
        return
    if name == ".hg" and is_dir:
        _record(found.hg, path, entry)
        _hg_files(fd, path, found)
        return
    if not item.path and name == WORKSPACE_QUARANTINE and is_dir:
        found.quarantine = True
        if found.skip_quarantine:
            return
    if is_dir:
        dependencies = item.dependencies or name in hostfiles.DEPENDENCY_TREES
        tool = item.tool or hostfiles.watched_tree(path, name, in_dependencies=dependencies)
        with contextlib.suppress(OSError):
            pending.append(_Pending(path, entry.inode(), tool, dependencies))
        return
    if name == ".gitattributes":
        _record(found.attributes, path, entry)
    parent = item.path.rsplit("/", 1)[-1]
    tool = item.tool or hostfiles.tool_of(path, name, parent, in_dependencies=item.dependencies)
    if tool is None and item.path and "/" not in item.path:
        tool = hostfiles.shadowing_package(path)
    if tool is not None:
        _record(found.files, path, entry)
        found.tools[path] = tool


def _record(into: dict[str, Stat], path: str, entry: Entry) -> None:
    with contextlib.suppress(OSError):
        into[path] = stat_of(dirfds.own_status(entry))


def _hg_files(fd: int, path: str, found: TreeScan) -> None:
    """``.hg``'s own files, looked at from its parent's descriptor (``fd``)."""
    for name in HG_FILES:
        with contextlib.suppress(OSError):
            status = dirfds.own_status_at(fd, f".hg/{name}")
            if not stat.S_ISDIR(status.st_mode):
                found.hg[f"{path}/{name}"] = stat_of(status)


__all__ = ["AFTER_SCAN_ENTRIES", "AFTER_SCAN_SECONDS", "BARE_MARKERS", "HG_FILES",
           "SCAN_ENTRIES", "SCAN_SECONDS", "WORKSPACE_QUARANTINE", "TreeScan", "scan"]
