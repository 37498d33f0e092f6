"""What git reads and executes out of a git directory, pinned before a run and checked after.

Pinned read-only inside the sandbox (:func:`gitdir_pins`): ``config``, ``config.worktree``,
``hooks``, ``info``, ``commondir`` and ``objects/info/alternates`` where present; ``worktrees``
(the admin directories of the owner's other worktrees, whose ``commondir`` and state git
follows from outside the workspace) and ``modules`` as a whole, with each submodule's own git
directory writable again inside it and pinned the same way. Missing ``hooks``, ``info``,
``modules``, ``worktrees`` and ``config`` are created empty first, so the sandbox cannot
create them. Objects, refs, logs and the index stay writable: ``git add``, ``commit``,
``branch`` and ``stash`` work.

Checked after the run (:func:`state` before and after, :func:`compare`), because git writes
them in ordinary use and they cannot be pinned: operation state that drives commands
(``rebase-merge/git-rebase-todo``'s ``exec`` lines, ``sequencer/``, ``MERGE_*``, ...),
redirects (``commondir``, alternates) created during the run, symbolic links (git appends to
``logs/HEAD`` and writes ``COMMIT_EDITMSG`` through them, anywhere on the host), the index
(:mod:`sbx.domain.sandbox.gitindex`), and — in a git directory the sandbox created or one
sbx could not pin — a config with keys that run programs, and hooks.
"""

from __future__ import annotations

import contextlib
import stat
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from sbx.domain.sandbox import gitconfig, gitindex
from sbx.domain.sandbox.sources import OpenedSource, Pin, open_child
from sbx.seams.host import dirfds
from sbx.seams.host.dirfds import Status

QUARANTINE_DIR: Final = "sbx-quarantine"
GIT_READ_ONLY: Final = ("config", "config.worktree", "hooks", "info", "commondir",
                        "worktrees", QUARANTINE_DIR)
GIT_CREATED_DIRS: Final = ("hooks", "info", "modules", "worktrees")
ALTERNATES: Final = ("alternates", "http-alternates")
# Files and directories of an operation in progress, which the next `git <op> --continue`
# (or `git commit`) acts on.
OPERATION_STATE: Final = frozenset({
    "rebase-merge", "rebase-apply", "sequencer", "MERGE_HEAD", "MERGE_MSG", "MERGE_MODE",
    "MERGE_RR", "MERGE_AUTOSTASH", "AUTO_MERGE", "CHERRY_PICK_HEAD", "REVERT_HEAD",
    "SQUASH_MSG", "BISECT_START", "BISECT_LOG", "BISECT_TERMS", "BISECT_NAMES",
    "BISECT_EXPECTED_REV", "BISECT_ANCESTORS_OK", "BISECT_HEAD", "BISECT_FIRST_PARENT",
    "BISECT_RUN", "NOTES_MERGE_PARTIAL", "NOTES_MERGE_REF", "NOTES_MERGE_WORKTREE",
})
_RECORDED: Final = frozenset({"config", "config.worktree", "commondir", "gitdir", "index",
                              "HEAD"})
_RECORDED_TREES: Final = frozenset({"hooks", "info"}) | OPERATION_STATE
GITDIR_ENTRIES: Final = 50_000  # entries looked at in one git directory
MAX_SUBMODULES: Final = 256

# A stat as the checks compare it: (kind, inode, size, mtime ns, ctime ns); the ctime cannot
# be set back by the sandbox, so a rewrite that restores size and mtime is still seen.
Stat = tuple[str, int, int, int, int]


def stat_of(status: Status) -> Stat:
    mode = status.st_mode
    kind = ("d" if stat.S_ISDIR(mode) else "l" if stat.S_ISLNK(mode)
            else "f" if stat.S_ISREG(mode) else "o")
    return (kind, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns)


# -- pins --------------------------------------------------------------------------------------


def gitdir_pins(git: OpenedSource, base: str, *, budget: list[int]) -> list[Pin]:
    """The read-only binds of one git directory (and its submodules') at container ``base``."""
    create_missing(git)
    pins: list[Pin] = []
    for name in GIT_READ_ONLY:
        part = open_child(git, name)
        if part is not None:
            pins.append(Pin(part, f"{base}/{name}", True))
    objects = open_child(git, "objects")
    if objects is not None:
        info = open_child(objects, "info") if stat.S_ISDIR(objects.mode) else None
        objects.close()
        if info is not None:
            for name in ALTERNATES:
                part = open_child(info, name) if stat.S_ISDIR(info.mode) else None
                if part is not None:
                    pins.append(Pin(part, f"{base}/objects/info/{name}", True))
            info.close()
    budget[0] -= len(pins)
    modules = open_child(git, "modules")
    if modules is not None and stat.S_ISDIR(modules.mode):
        pins.append(Pin(modules, f"{base}/modules", True))
        pins += _submodule_pins(modules, f"{base}/modules", budget)
    elif modules is not None:
        modules.close()
    return pins


def create_missing(git: OpenedSource) -> None:
    """Empty ``hooks``, ``info``, ``modules``, ``worktrees`` and ``config`` where missing,
    owned like the git directory: what exists can be pinned, what does not could be created."""
    for name in GIT_CREATED_DIRS:
        dirfds.make_owned_directory(git.fd, name, 0o755, git.uid, git.gid)
    dirfds.create_owned_empty(git.fd, "config", 0o644, git.uid, git.gid)


def _submodule_pins(modules: OpenedSource, base: str, budget: list[int]) -> list[Pin]:
    """Each submodule's git directory writable again inside the read-only ``modules`` (names
    with "/" are grouped in plain directories, which stay read-only), pinned like the top."""
    pins: list[Pin] = []
    pending = [(modules, base)]
    seen = 0
    while pending and seen < MAX_SUBMODULES and budget[0] > 0:
        directory, where = pending.pop()
        for name in dirfds.sorted_names(directory.fd):
            child = open_child(directory, name)
            if child is None or not stat.S_ISDIR(child.mode):
                if child is not None:
                    child.close()
                continue
            seen += 1
            path = f"{where}/{name}"
            if not dirfds.exists_at(child.fd, "HEAD"):
                pending.append((child, path))
                continue
            pins.append(Pin(child, path, False))
            pins += gitdir_pins(child, path, budget=budget)
        if directory is not modules:
            directory.close()
    for directory, _where in pending:
        if directory is not modules:
            directory.close()
    return pins


# -- state before and after ----------------------------------------------------------------


@dataclass
class GitDirState:
    """What of one git directory the after-run check compares (paths relative to it)."""

    entries: dict[str, Stat] = field(default_factory=dict)
    subdirs: list[str] = field(default_factory=list)  # module and worktree git directories
    gitlinks: list[str] = field(default_factory=list)  # of its own index
    complete: bool = True

    def as_json(self) -> dict[str, object]:
        return {"entries": {k: list(v) for k, v in self.entries.items()},
                "subdirs": self.subdirs, "gitlinks": self.gitlinks, "complete": self.complete}

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> GitDirState:
        entries = data.get("entries")
        subdirs = data.get("subdirs")
        gitlinks = data.get("gitlinks")
        return cls(
            entries={str(k): stat_from_json(v) for k, v in entries.items()}
            if isinstance(entries, dict) else {},
            subdirs=[str(s) for s in subdirs] if isinstance(subdirs, list) else [],
            gitlinks=[str(g) for g in gitlinks] if isinstance(gitlinks, list) else [],
            complete=data.get("complete") is True)


def stat_from_json(value: object) -> Stat:
    if isinstance(value, list) and len(value) == 5:
        return (str(value[0]), int(value[1]), int(value[2]), int(value[3]), int(value[4]))
    return ("?", 0, 0, 0, 0)


def state(fd: int, *, quarantine_known: bool = True) -> GitDirState:
    """The state of the git directory open at ``fd`` (bounded; ``complete`` says whether it
    was looked at whole). sbx's quarantine is looked into only when it was not there before
    (then the sandbox made it); one that was is pinned read-only."""
    found = GitDirState()
    budget = [GITDIR_ENTRIES]
    # (directory fd, its path, how to look at it, the git directory it belongs to)
    pending: list[tuple[int, str, str, str]] = []
    top = dirfds.open_directory_at(fd, ".")
    if top is None:
        found.complete = False
        return found
    pending.append((top, "", "gitdir", ""))
    try:
        while pending:
            directory, where, mode, owner = pending.pop()
            if mode == "quarantine" and (quarantine_known or owner):
                dirfds.close(directory)
                continue
            try:
                _look(directory, where, mode, owner, found, pending, budget)
            finally:
                dirfds.close(directory)
    finally:
        for directory, *_rest in pending:
            dirfds.close(directory)
    summary = gitindex.read_index(fd)
    found.gitlinks = sorted(set(summary.gitlinks))
    return found


def _look(directory: int, where: str, mode: str, owner: str, found: GitDirState,
          pending: list[tuple[int, str, str, str]], budget: list[int]) -> None:
    try:
        scan = dirfds.listing(directory)
    except OSError:
        found.complete = False
        return
    for entry in sorted(scan, key=lambda e: e.name):
        budget[0] -= 1
        if budget[0] < 0:
            found.complete = False
            return
        name = entry.name
        path = f"{where}/{name}" if where else name
        link = dirfds.is_link(entry)
        is_dir = not link and dirfds.is_directory(entry)
        record, descend = _classify(name, mode, link, is_dir, directory)
        if record or link or name == ".git":
            with contextlib.suppress(OSError):
                found.entries[path] = stat_of(dirfds.own_status(entry))
        if not is_dir or descend is None:
            continue
        child = dirfds.open_directory_at(directory, name)
        if child is None:
            found.complete = False
            continue
        child_owner = owner
        if descend == "gitdir":
            found.subdirs.append(path)
            child_owner = path
        pending.append((child, path, descend, child_owner))


def _classify(name: str, mode: str, link: bool, is_dir: bool,
              directory: int) -> tuple[bool, str | None]:
    """(record this entry, how to look inside it or None)."""
    if link:
        return True, None
    if mode == "all":
        return True, "all"
    if mode == "objects":
        return False, "all" if name == "info" else "links"
    if mode == "lfs":
        return False, None if name == "objects" else "links"  # git-lfs's store: data, large
    if mode == "modules":
        if not is_dir:
            return False, None
        child = dirfds.open_directory_at(directory, name)
        is_gitdir = child is not None and dirfds.exists_at(child, "HEAD")
        if child is not None:
            dirfds.close(child)
        return is_gitdir, "gitdir" if is_gitdir else "modules"
    if mode == "worktrees":
        return is_dir, "gitdir" if is_dir else None
    if mode in ("links", "quarantine"):
        return False, "links"
    # the top of a git directory
    if name == QUARANTINE_DIR:
        return True, "quarantine"
    if name in _RECORDED or name.startswith("sharedindex."):
        return True, None
    if name in _RECORDED_TREES:
        return True, "all" if is_dir else None
    if name in ("objects", "modules", "worktrees"):
        return True, name
    if name == "lfs":
        return False, "lfs"
    return False, "links"


# -- the comparison ----------------------------------------------------------------------------


QUARANTINE: Final = "quarantine"
CLEAN_INDEX: Final = "clean index"  # rewritten without the unsafe entries
REPORT: Final = "report"


@dataclass(frozen=True)
class GitFinding:
    path: str  # relative to the git directory
    what: str  # a short description
    action: str  # QUARANTINE or REPORT


def compare(before: GitDirState | None, after: GitDirState, fd: int, *,
            started_ns: int) -> list[GitFinding]:
    """What the run left in the git directory open at ``fd`` that git would act on.

    ``before`` None: the directory was not looked at before the run (created by the sandbox,
    or beyond the scan's bound): an entry counts as new when its ctime is after the start.
    """
    findings: list[GitFinding] = []
    done: set[str] = set()
    old = before.entries if before is not None else {}
    old_subdirs = set(before.subdirs) if before is not None else set()

    def changed(path: str, now: Stat) -> bool:
        if before is None or (not before.complete and path not in old):
            return now[4] >= started_ns
        return old.get(path) != now

    def add(path: str, what: str, action: str = QUARANTINE) -> None:
        if not any(path == d or path.startswith(d + "/") for d in done):
            done.add(path)
            findings.append(GitFinding(path, what, action))

    for subdir in sorted(set(after.subdirs) - old_subdirs):
        now = after.entries.get(subdir)
        if now is not None and changed(subdir, now):
            add(subdir, "a submodule or worktree git directory created during the run")
    for path, now in sorted(after.entries.items()):
        if not changed(path, now):
            continue
        owner = max((s for s in after.subdirs if path.startswith(s + "/")), key=len,
                    default="")
        rest = path[len(owner) + 1:] if owner else path
        what = _what(rest, now, fd, path, owner)
        if what is not None:
            add(path if what[1] != "state" else _state_root(owner, rest), what[0])
    for path in gitindex_changes(before, after, fd, changed):
        add(path, "index entries git never writes itself (paths with .git, . or ..): "
                  "`git checkout -- .` would write them out", CLEAN_INDEX)
    return findings


def _state_root(owner: str, rest: str) -> str:
    first = rest.split("/", 1)[0]
    return f"{owner}/{first}" if owner else first


def _what(rest: str, now: Stat, fd: int, path: str, owner: str) -> tuple[str, str] | None:
    """(why an entry that was created or changed matters, its kind) or None."""
    first = rest.split("/", 1)[0]
    if now[0] == "l":
        return "a symbolic link in the git directory, which git writes through", "link"
    if rest.endswith("/.git") or rest == ".git" or "/.git/" in f"/{rest}/":
        return "a repository planted inside the git directory", "nested"
    if first in OPERATION_STATE:
        return f"operation state ({first}) that `git ... --continue` or `git commit` acts on", \
            "state"
    if now[0] != "f":
        return None
    if rest in ("config", "config.worktree"):
        if _harmless_config(fd, path):
            return None
        return "a git config with keys that run programs, or that sbx cannot read", "config"
    if first == "hooks" and not rest.endswith(".sample"):
        return "a git hook", "hook"
    if rest == "info/attributes":
        return "attributes that name filter and diff drivers", "attributes"
    if rest == "commondir" and not (owner.startswith("worktrees/")
                                    and _reads(fd, path) in ("../..", "../../")):
        return "a commondir: git would read its config and hooks from elsewhere", "redirect"
    if rest in ("objects/info/alternates", "objects/info/http-alternates"):
        return "object alternates pointing outside the repository", "redirect"
    return None


def gitindex_changes(before: GitDirState | None, after: GitDirState, fd: int,
                     changed: Callable[[str, Stat], bool]) -> list[str]:
    """Indexes (this git directory's and its submodules') that hold unsafe paths."""
    out = []
    for owner in ["", *after.subdirs]:
        name = f"{owner}/index" if owner else "index"
        now = after.entries.get(name)
        if now is None or not changed(name, now):
            continue
        directory = open_relative(fd, owner) if owner else dirfds.duplicate(fd)
        if directory is None:
            continue
        try:
            summary = gitindex.read_index(directory)
        finally:
            dirfds.close(directory)
        if summary.unsafe:
            out.append(name)
    return out


def new_gitlinks(before: GitDirState | None, after: GitDirState) -> list[str]:
    old = set(before.gitlinks) if before is not None else set()
    return [link for link in after.gitlinks if link not in old]


def _harmless_config(fd: int, path: str) -> bool:
    text = read_relative(fd, path)
    if text is None:
        return False
    entries = gitconfig.parse(text)
    return entries is not None and gitconfig.is_harmless(entries)


def _reads(fd: int, path: str) -> str:
    return (read_relative(fd, path) or "").strip()


def open_relative(fd: int, relative: str) -> int | None:
    """The directory at ``relative`` below ``fd``, opened one component at a time without
    following a symbolic link (None when that is not possible)."""
    current = dirfds.duplicate(fd)
    for part in [p for p in relative.split("/") if p]:
        child = dirfds.open_directory_at(current, part)
        dirfds.close(current)
        if child is None:
            return None
        current = child
    return current


def read_relative(fd: int, relative: str) -> str | None:
    """A small text file at ``relative`` below ``fd`` (no symbolic link followed)."""
    parent, _, name = relative.rpartition("/")
    directory = open_relative(fd, parent)
    if directory is None:
        return None
    try:
        return gitconfig.read_limited(name, dir_fd=directory, follow=False)
    finally:
        dirfds.close(directory)


def config_files(state_: GitDirState) -> Iterable[str]:
    """The configs of a git directory and its submodules (relative to it)."""
    for owner in ["", *state_.subdirs]:
        for name in ("config", "config.worktree"):
            path = f"{owner}/{name}" if owner else name
            if path in state_.entries:
                yield path


__all__ = ["ALTERNATES", "CLEAN_INDEX", "GIT_CREATED_DIRS", "GIT_READ_ONLY", "OPERATION_STATE",
           "QUARANTINE", "QUARANTINE_DIR", "REPORT", "GitDirState", "GitFinding", "Stat",
           "compare", "config_files", "create_missing", "gitdir_pins", "new_gitlinks",
           "open_relative", "read_relative", "stat_from_json", "stat_of", "state"]
