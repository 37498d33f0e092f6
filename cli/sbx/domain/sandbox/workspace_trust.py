"""A read-write workspace must not become a way to run code on its owner's host.

The workspace is the user's project, and the user runs tools in it on the host after the agent
is done. Some files there are executed or obeyed by those tools: ``.git/config``
(``core.fsmonitor``, ``core.sshCommand``, filters, aliases), ``.git/hooks``, ``.envrc`` (direnv),
``.vscode/tasks.json``, CI definitions, pre-commit configuration. So, unless the user trusts the
workspace (``--trust-workspace``):

- **Git's own files are read-only inside the sandbox** (:func:`git_pins`): the ``.git``
  directory is bind-mounted onto itself (so it cannot be renamed away and replaced), and its
  ``config``, ``config.worktree``, ``hooks`` and ``info`` — and those of every submodule under
  ``.git/modules`` — read-only on top. Objects, refs and the index stay writable, so the agent
  can still commit. A ``.git`` *file* (a worktree's or submodule's gitdir link) is read-only as
  a whole. Missing ``hooks``/``info`` directories and a missing ``config`` are created empty
  (owned like ``.git``) first, or the sandbox could create them.
- **Everything else host tools execute is reported** (:func:`snapshot` before the run,
  :func:`changes` after): a new or changed ``.envrc``, editor task and launch files,
  devcontainer and CI definitions, hook managers' files, and any ``.git`` created below the
  workspace root (a nested repository whose config the sandbox wrote).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Mapping
from typing import Final

from sbx.domain.sandbox.sources import OpenedSource, Pin, open_child

GIT_READ_ONLY: Final = ("config", "config.worktree", "hooks", "info")
GIT_CREATED_DIRS: Final = ("hooks", "info")
MAX_SUBMODULES: Final = 256
# Files host tools execute or obey, relative to the workspace root; directories end in "/".
HOST_EXECUTED: Final = (
    ".envrc", ".env.local", ".vscode/", ".idea/runConfigurations/", ".devcontainer/",
    ".github/workflows/", ".gitlab-ci.yml", ".circleci/", ".pre-commit-config.yaml",
    ".husky/", ".git/", ".gitmodules", ".lefthook.yml", "lefthook.yml", ".githooks/",
)
SCAN_DEPTH: Final = 4  # nested repositories are looked for this deep
SCAN_ENTRIES: Final = 20_000  # and in at most this many directory entries
_SKIP_DIRS: Final = frozenset({".git", "node_modules", ".venv", "venv", "__pycache__",
                               "target", "dist", "build", ".tox", ".mypy_cache"})


def git_pins(workspace: OpenedSource, target: str) -> list[Pin]:
    """The binds that keep the workspace's git configuration read-only in the sandbox."""
    git = open_child(workspace, ".git")
    if git is None:
        return []
    base = f"{target.rstrip('/')}/.git"
    if stat.S_ISREG(git.mode):
        return [Pin(git, base, True)]
    if not stat.S_ISDIR(git.mode):
        git.close()
        return []
    pins = [Pin(git, base, False)]  # pins the name: a mount point cannot be renamed
    pins += _read_only_parts(git, base)
    modules = open_child(git, "modules")
    if modules is not None and stat.S_ISDIR(modules.mode):
        pins += _submodule_pins(modules, f"{base}/modules")
    if modules is not None:
        modules.close()
    return pins


def _read_only_parts(git: OpenedSource, base: str) -> list[Pin]:
    _create_missing(git)
    pins: list[Pin] = []
    for name in GIT_READ_ONLY:
        part = open_child(git, name)
        if part is not None:
            pins.append(Pin(part, f"{base}/{name}", True))
    return pins


def _create_missing(git: OpenedSource) -> None:
    """Empty ``hooks``/``info`` and ``config`` where they are missing, owned like ``.git``:
    what exists can be mounted read-only, what does not could be created by the sandbox."""
    for name in GIT_CREATED_DIRS:
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o755, dir_fd=git.fd)
            os.chown(name, git.uid, git.gid, dir_fd=git.fd, follow_symlinks=False)
    try:
        fd = os.open("config", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644,
                     dir_fd=git.fd)
    except FileExistsError:
        return
    os.fchown(fd, git.uid, git.gid)
    os.close(fd)


def _submodule_pins(modules: OpenedSource, base: str) -> list[Pin]:
    """config and hooks of every submodule git keeps under .git/modules (nested ones too, and
    modules whose names hold "/", grouped in plain directories)."""
    pins: list[Pin] = []
    pending = [(modules, base)]
    seen = 0
    while pending and seen < MAX_SUBMODULES:
        directory, where = pending.pop()
        try:
            for name in _listdir(directory):
                child = open_child(directory, name)
                if child is None:
                    continue
                if not stat.S_ISDIR(child.mode):
                    child.close()
                    continue
                seen += 1
                path = f"{where}/{name}"
                if not _has(child, "HEAD"):
                    pending.append((child, path))  # a grouping directory: look inside
                    continue
                pins += _read_only_parts(child, path)
                nested = open_child(child, "modules")
                child.close()
                if nested is not None and stat.S_ISDIR(nested.mode):
                    pending.append((nested, f"{path}/modules"))
                elif nested is not None:
                    nested.close()
        finally:
            if directory is not modules:
                directory.close()
    for directory, _where in pending:
        if directory is not modules:
            directory.close()
    return pins


def _has(directory: OpenedSource, name: str) -> bool:
    try:
        os.stat(name, dir_fd=directory.fd, follow_symlinks=False)
    except OSError:
        return False
    return True


def _listdir(directory: OpenedSource) -> list[str]:
    try:
        fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=directory.fd)
    except OSError:
        return []
    try:
        return sorted(os.listdir(fd))
    finally:
        os.close(fd)


# -- what host tools would execute, before and after ----------------------------------------

Snapshot = Mapping[str, tuple[int, int, int]]  # relative path -> (inode, size, mtime ns)


def snapshot(root: str) -> dict[str, tuple[int, int, int]]:
    """Stat of every host-executed file under ``root`` (bounded), plus nested ``.git``s."""
    found: dict[str, tuple[int, int, int]] = {}
    budget = [SCAN_ENTRIES]
    for entry in HOST_EXECUTED:
        if entry == ".git/":
            for name in ("config", "config.worktree"):
                _stat_into(found, root, f".git/{name}")
            _walk_into(found, root, ".git/hooks", budget, depth=1)
        elif entry.endswith("/"):
            _walk_into(found, root, entry.rstrip("/"), budget, depth=3)
        else:
            _stat_into(found, root, entry)
    _nested_repositories(found, root, budget)
    return found


def changes(before: Snapshot, after: Snapshot) -> list[str]:
    """Host-executed files the run created or changed (sorted, relative to the workspace)."""
    return sorted(path for path, state in after.items() if before.get(path) != state)


def _stat_into(found: dict[str, tuple[int, int, int]], root: str, relative: str) -> None:
    try:
        status = os.lstat(os.path.join(root, relative))
    except OSError:
        return
    found[relative] = (status.st_ino, status.st_size, status.st_mtime_ns)


def _walk_into(found: dict[str, tuple[int, int, int]], root: str, relative: str,
               budget: list[int], *, depth: int) -> None:
    directory = os.path.join(root, relative)
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        budget[0] -= 1
        if budget[0] < 0:
            return
        path = f"{relative}/{entry.name}"
        _stat_into(found, root, path)
        if depth > 1 and entry.is_dir(follow_symlinks=False):
            _walk_into(found, root, path, budget, depth=depth - 1)


def _nested_repositories(found: dict[str, tuple[int, int, int]], root: str,
                         budget: list[int]) -> None:
    pending = [("", 0)]
    while pending and budget[0] > 0:
        relative, depth = pending.pop()
        try:
            entries = list(os.scandir(os.path.join(root, relative) if relative else root))
        except OSError:
            continue
        for entry in entries:
            budget[0] -= 1
            if budget[0] < 0:
                return
            path = f"{relative}/{entry.name}" if relative else entry.name
            if entry.name == ".git" and relative:
                _stat_into(found, root, path)
                _stat_into(found, root, f"{path}/config")
                _walk_into(found, root, f"{path}/hooks", budget, depth=1)
                continue
            if (depth + 1 < SCAN_DEPTH and entry.name not in _SKIP_DIRS
                    and entry.is_dir(follow_symlinks=False)):
                pending.append((path, depth + 1))


__all__ = ["GIT_READ_ONLY", "HOST_EXECUTED", "changes", "git_pins", "snapshot"]
