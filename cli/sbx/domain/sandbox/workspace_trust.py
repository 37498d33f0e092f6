"""A writable workspace must not become a way to run code on its owner's host.

The workspace is the user's project, and the user runs tools in it on the host after the agent
is done: git above all (and a shell prompt runs ``git status`` in every directory entered),
Mercurial, and the tools of :mod:`sbx.domain.sandbox.hostfiles`. Unless the user trusts the
workspace (``--trust-workspace``), for the workspace and every read-write directory ``--mount``:

- **Before the run** (:func:`protect`), one bounded walk (:mod:`sbx.domain.sandbox.workspace_scan`)
  finds every git directory, ``.git`` pointer and ``.hg`` in the tree; each is pinned read-only
  where git reads configuration and hooks (:func:`sbx.domain.sandbox.gitdirs.gitdir_pins`), and
  so are the files the host's git configs name inside the tree (includes, ``core.hooksPath``,
  programs by path). What was found is the baseline.
- **After the run** (:func:`after_run`, on every exit path, and for a named sandbox whenever a
  session with it ends), the same walk again: what git would act on that the run created or
  changed — a planted repository's config and hooks, a ``.git`` pointer, operation state,
  redirects, symbolic links in a git directory, an index with paths git never writes, a
  Mercurial config — is moved into a quarantine (:mod:`sbx.domain.sandbox.quarantine`), never
  deleted; gitlinks the run added and every host-executed file it created or changed are
  reported. Under ``--trust-workspace`` everything is reported and nothing moved.
"""

from __future__ import annotations

import contextlib
import posixpath
import stat
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from sbx.base.errors import SbxError
from sbx.domain.sandbox import gitconfig, gitdirs, gitindex, quarantine, workspace_scan
from sbx.domain.sandbox.gitdirs import GitDirState, Stat, stat_of
from sbx.domain.sandbox.gitindex import read_bytes as read_index_bytes
from sbx.domain.sandbox.sources import OpenedSource, Pin, open_checked, open_child
from sbx.domain.sandbox.workspace_scan import TreeScan
from sbx.seams.host import dirfds

MAX_PINNED_REPOSITORIES: Final = 32  # nested repositories pinned (all are checked after)
MAX_PINS: Final = 400
MAX_CHECKED_REPOSITORIES: Final = 256
MAX_GITLINKS_SHOWN: Final = 50
_ATTRIBUTE_DRIVERS: Final = ("filter=", "diff=", "merge=")


@dataclass
class Baseline:
    """What a protected directory held before the run (JSON-safe, for named sandboxes)."""

    root: str
    started_ns: int
    tree: TreeScan
    gitdirs: dict[str, GitDirState] = field(default_factory=dict)
    named: dict[str, str] = field(default_factory=dict)  # path -> role (config|hooks|program)
    named_stats: dict[str, Stat] = field(default_factory=dict)
    trusted: bool = False

    def as_json(self) -> dict[str, Any]:
        return {"root": self.root, "started_ns": self.started_ns, "tree": self.tree.as_json(),
                "gitdirs": {k: v.as_json() for k, v in self.gitdirs.items()},
                "named": self.named,
                "named_stats": {k: list(v) for k, v in self.named_stats.items()},
                "trusted": self.trusted}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Baseline:
        gitdir_data = data.get("gitdirs") or {}
        named_stats = data.get("named_stats") or {}
        return cls(root=str(data["root"]), started_ns=int(data["started_ns"]),
                   tree=TreeScan.from_json(dict(data.get("tree") or {})),
                   gitdirs={str(k): GitDirState.from_json(v) for k, v in gitdir_data.items()},
                   named={str(k): str(v) for k, v in (data.get("named") or {}).items()},
                   named_stats={str(k): gitdirs.stat_from_json(v)
                                for k, v in named_stats.items()},
                   trusted=data.get("trusted") is True)


@dataclass
class Protection:
    pins: list[Pin]
    baseline: Baseline
    notes: list[str]


@dataclass(frozen=True)
class Finding:
    root: str  # the protected directory (host path)
    path: str  # relative to it
    what: str
    tool: str
    action: str  # a quarantine action, or quarantine.REPORTED
    moved_to: str | None = None
    problem: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"root": self.root, "path": self.path, "what": self.what, "tool": self.tool,
                "action": self.action, "moved_to": self.moved_to, "problem": self.problem}


@dataclass
class Report:
    root: str
    findings: list[Finding] = field(default_factory=list)
    complete: bool = True
    quarantine: str | None = None
    problem: str | None = None  # the check itself could not be made


# -- before the run ----------------------------------------------------------------------------


def protect(root: OpenedSource, target: str, *, trust: bool,
            env: Mapping[str, str]) -> Protection:
    """Pins for the directory open at ``root`` (mounted at ``target``) and its baseline."""
    notes: list[str] = []
    pins: list[Pin] = []
    baseline = baseline_of(root, trusted=trust, env=env, target=target, notes=notes, pins=pins)
    return Protection(pins, baseline, notes)


def baseline_of(root: OpenedSource, *, trusted: bool, env: Mapping[str, str],
                target: str | None = None, notes: list[str] | None = None,
                pins: list[Pin] | None = None) -> Baseline:
    """What the directory open at ``root`` holds now; with ``target``, its pins are made
    (into ``pins``) between the walk and the look at its git directories, which they change."""
    started = time.time_ns()
    tree = workspace_scan.scan(root.fd)
    notes = notes if notes is not None else []
    if not tree.complete:
        notes.append(
            f"{root.path} is too large to check in full for repositories and files host tools "
            f"run ({workspace_scan.SCAN_ENTRIES} entries or {workspace_scan.SCAN_SECONDS:g} s); "
            "beyond that, what the run creates or changes is judged by its change time")
    named = _named_paths(root, tree, env)
    if target is not None and not trusted and pins is not None:
        pins += _pins(root, target, tree, named, notes)
    baseline = Baseline(root=root.path, started_ns=started, tree=tree, named=named,
                        trusted=trusted)
    for relative in list(tree.gitdirs)[:MAX_CHECKED_REPOSITORIES]:
        fd = gitdirs.open_relative(root.fd, relative)
        if fd is not None:
            try:
                baseline.gitdirs[relative] = gitdirs.state(fd)
            finally:
                dirfds.close(fd)
    for relative in named:
        with contextlib.suppress(OSError):
            baseline.named_stats[relative] = stat_of(dirfds.own_status_at(root.fd, relative))
    return baseline


def _pins(root: OpenedSource, target: str, tree: TreeScan, named: Mapping[str, str],
          notes: list[str]) -> list[Pin]:
    base = target.rstrip("/")
    budget = [MAX_PINS]
    pins: list[Pin] = []
    prefix = f"{base}/"
    if tree.gitdirs.get("") == "bare":  # the workspace is itself a git directory
        pins += gitdirs.gitdir_pins(root, base, budget=budget)
    git = open_child(root, ".git")  # the workspace's own: a link here refuses the run
    if git is not None:
        if stat.S_ISDIR(git.mode):
            pins.append(Pin(git, f"{base}/.git", False))  # pins the name: it cannot be renamed
            pins += gitdirs.gitdir_pins(git, f"{base}/.git", budget=budget)
        elif stat.S_ISREG(git.mode):
            pins.append(Pin(git, f"{base}/.git", True))
        else:
            git.close()
    skipped = 0
    nested = [p for p in tree.gitdirs if p not in ("", ".git")]
    for index, relative in enumerate(nested):
        if index >= MAX_PINNED_REPOSITORIES or budget[0] <= 0:
            skipped = len(nested) - index
            break
        pins += _nested_pins(root, relative, f"{base}/{relative}", budget, notes)
    read_only = {pin.target[len(prefix):] for pin in pins if pin.read_only}
    for relative in [*(p for p in tree.gitfiles if p != ".git"),
                     *(p for p in tree.hg if posixpath.basename(p) in
                       workspace_scan.HG_FILES), *named,
                     workspace_scan.WORKSPACE_QUARANTINE]:
        if any(relative == r or relative.startswith(r + "/") for r in read_only):
            continue
        if budget[0] <= 0:
            skipped += 1
            continue
        opened = _open_nested(root, relative, notes)
        if opened is not None:
            pins.append(Pin(opened, f"{base}/{relative}", True))
            budget[0] -= 1
    if skipped:
        notes.append(f"{root.path}: {skipped} repositories or git files were not pinned "
                     f"read-only (more than {MAX_PINNED_REPOSITORIES} repositories or "
                     f"{MAX_PINS} pins); what the run changes in them is checked after it")
    return pins


def _nested_pins(root: OpenedSource, relative: str, target: str, budget: list[int],
                 notes: list[str]) -> list[Pin]:
    opened = _open_nested(root, relative, notes)
    if opened is None:
        return []
    try:
        pins = gitdirs.gitdir_pins(opened, target, budget=budget)
    except SbxError as error:
        notes.append(f"{root.path}/{relative} is not pinned read-only ({error.message}); what "
                     "the run changes in it is checked after it")
        opened.close()
        return []
    return [Pin(opened, target, False), *pins]


def _open_nested(root: OpenedSource, relative: str, notes: list[str]) -> OpenedSource | None:
    """``relative`` below ``root``, one component at a time, never through a link."""
    current: OpenedSource | None = root
    try:
        for part in relative.split("/"):
            assert current is not None  # noqa: S101 - loop invariant
            child = open_child(current, part)
            if current is not root:
                current.close()
            current = child
            if current is None:
                return None
    except SbxError as error:
        notes.append(f"{root.path}/{relative} is not pinned read-only ({error.message})")
        return None
    return current if current is not root else None


def _named_paths(root: OpenedSource, tree: TreeScan, env: Mapping[str, str]) -> dict[str, str]:
    """Files inside the tree that the host's git configs (and the tree's own, pinned) make
    git read or run: includes, ``core.hooksPath``, programs by path."""
    home = env.get("HOME")
    found: dict[str, str] = {}
    configs: list[tuple[str, str | None]] = [(path, None)
                                             for path in gitconfig.host_config_files(env)]
    for gitdir, kind in tree.gitdirs.items():
        worktree = posixpath.dirname(gitdir) if kind == "dir" else None
        for name in ("config", "config.worktree"):
            configs.append((posixpath.join(root.path, gitdir, name), worktree))
    worktrees = [posixpath.dirname(p) for p, kind in tree.gitdirs.items() if kind == "dir"]
    for config, worktree in configs:
        bases = [worktree] if worktree is not None else worktrees or [""]
        for base in bases:
            for named in gitconfig.named_paths(config, worktree=posixpath.join(root.path, base),
                                               home=home):
                inside = _inside(named.path, root.path)
                if inside is not None:
                    found.setdefault(inside, named.role)
    return found


def _inside(path: str, root: str) -> str | None:
    if path.startswith(root.rstrip("/") + "/"):
        return path[len(root.rstrip("/")) + 1:]
    return None


# -- after the run -----------------------------------------------------------------------------


def after_run(baseline: Baseline, *, run_id: str) -> Report:
    """Check the protected directory against its baseline; quarantine and report."""
    report = Report(root=baseline.root)
    try:
        root = open_checked(baseline.root)
    except SbxError as error:
        report.problem = error.message
        report.complete = False
        return report
    try:
        _check(root, baseline, run_id, report)
    finally:
        root.close()
    return report


@dataclass
class _Check:
    root: OpenedSource
    baseline: Baseline
    report: Report
    jail: quarantine.Quarantine | None

    def changed(self, path: str, now: Stat, before: Mapping[str, Stat], *,
                known_complete: bool) -> bool:
        if path in before:
            return before[path] != now
        return known_complete or now[4] >= self.baseline.started_ns

    def act(self, path: str, what: str, tool: str, *, move: bool) -> None:
        moved = quarantine.Moved(quarantine.REPORTED)
        if move and self.jail is not None:
            moved = self.jail.move(path, what)
        elif move:
            moved = quarantine.Moved(quarantine.REPORTED, problem="not moved: the workspace is "
                                                                  "trusted (--trust-workspace)")
        self.record(path, what, tool, moved)

    def record(self, path: str, what: str, tool: str, moved: quarantine.Moved) -> None:
        self.report.findings.append(Finding(self.baseline.root, path, what, tool,
                                            moved.action, moved.moved_to, moved.problem))


def _check(root: OpenedSource, baseline: Baseline, run_id: str, report: Report) -> None:
    tree = workspace_scan.scan(root.fd, entries=workspace_scan.AFTER_SCAN_ENTRIES,
                               seconds=workspace_scan.AFTER_SCAN_SECONDS,
                               quarantine_known=baseline.tree.quarantine)
    jail = None if baseline.trusted else quarantine.Quarantine(root.fd, baseline.root, run_id)
    check = _Check(root, baseline, report, jail)
    report.complete = tree.complete and baseline.tree.complete
    before_tree = baseline.tree
    complete = before_tree.complete
    known = {*tree.gitdirs, *tree.gitfiles}
    pending = list(tree.gitdirs.items())[:MAX_CHECKED_REPOSITORIES]
    while pending:
        relative, kind = pending.pop(0)
        for nested in _repository(check, relative, kind, known):
            known.add(nested)  # a gitlink's repository the walk did not reach
            status = _lstat_at(root.fd, nested)
            if status is not None and status[0] == "d":
                if len(known) < MAX_CHECKED_REPOSITORIES:
                    pending.append((nested, "dir"))
            elif status is not None:
                tree.gitfiles[nested] = status
    if len(tree.gitdirs) > MAX_CHECKED_REPOSITORIES:
        report.complete = False
    for relative, now in sorted(tree.gitfiles.items()):
        if check.changed(relative, now, before_tree.gitfiles, known_complete=complete):
            check.act(relative, "a .git file or link, which git follows to another git "
                                "directory", "git", move=True)
    _mercurial(check, tree)
    _named(check)
    for relative, now in sorted(tree.files.items()):
        if check.changed(relative, now, before_tree.files, known_complete=complete):
            check.act(relative, "created or changed", tree.tools.get(relative, ""), move=False)
    for relative, now in sorted(tree.attributes.items()):
        if (check.changed(relative, now, before_tree.attributes, known_complete=complete)
                and _names_drivers(root.fd, relative)):
            check.act(relative, "names filter, diff or merge drivers the host's git config "
                                "may define", "git", move=False)
    if jail is not None:
        report.quarantine = jail.close()


def _repository(check: _Check, relative: str, kind: str,
                known: set[str]) -> list[str]:
    """Check one git directory; the gitlinks of its index whose repository the walk did not
    reach (each a ``.git`` to check as well)."""
    fd = gitdirs.open_relative(check.root.fd, relative)
    if fd is None:
        return []
    baseline = check.baseline
    try:
        before = baseline.gitdirs.get(relative)
        after = gitdirs.state(fd, quarantine_known=before is not None
                              and gitdirs.QUARANTINE_DIR in before.entries)
        if not after.complete:
            check.report.complete = False
        if before is None and relative not in baseline.tree.gitdirs:
            top = after.entries.get("HEAD") or _stat_at(fd)
            if top is not None and (baseline.tree.complete or top[4] >= baseline.started_ns):
                check.act(relative, "a git repository created during the run; its config "
                                    "and hooks were checked", "git", move=False)
        for finding in gitdirs.compare(before, after, fd, started_ns=baseline.started_ns):
            path = f"{relative}/{finding.path}" if relative else finding.path
            if finding.action == gitdirs.CLEAN_INDEX:
                _clean_index(check, path, finding.what)
            else:
                check.act(path, finding.what, "git", move=finding.action == gitdirs.QUARANTINE)
        worktree = posixpath.dirname(relative) if kind == "dir" else None
        new = gitdirs.new_gitlinks(before, after)
        for link in new[:MAX_GITLINKS_SHOWN]:
            check.act(f"{relative}/index", f"a gitlink to {link}: the owner's `git status` "
                                           "runs git inside it", "git", move=False)
        unreached = []
        if worktree is not None:
            for link in after.gitlinks:
                nested = posixpath.join(worktree, link, ".git") if worktree else f"{link}/.git"
                if nested not in known and _lstat_at(check.root.fd, nested) is not None:
                    unreached.append(nested)
        return unreached
    finally:
        dirfds.close(fd)


def _clean_index(check: _Check, path: str, what: str) -> None:
    """An index with paths git never writes: rewritten without them (the staged work stays),
    the original quarantined; moved whole when it cannot be rewritten."""
    if check.jail is None:
        check.act(path, what, "git", move=True)
        return
    parent, _, name = path.rpartition("/")
    directory = gitdirs.open_relative(check.root.fd, parent)
    if directory is None:
        check.act(path, what, "git", move=True)
        return
    temporary = f"{name}.sbx-cleaned"
    try:
        data = read_index_bytes(directory, name)
        cleaned = gitindex.without_unsafe(data) if isinstance(data, bytes) else None
        if cleaned is None or not dirfds.write_new_at(directory, temporary, cleaned, 0o644):
            check.act(path, f"{what}; `git reset` rebuilds the index from HEAD", "git",
                      move=True)
            return
        moved = check.jail.move(path, what)
        if moved.action == quarantine.QUARANTINED:
            dirfds.rename_at(directory, temporary, name)
            moved = quarantine.Moved(moved.action, moved.moved_to,
                                     "the index was rewritten without those entries")
        else:
            dirfds.unlink_at(directory, temporary)
        check.record(path, what, "git", moved)
    except OSError as error:
        check.record(path, what, "git", quarantine.Moved(quarantine.LEFT,
                                                         problem=error.strerror))
    finally:
        dirfds.close(directory)


def _stat_at(fd: int) -> Stat | None:
    try:
        return stat_of(dirfds.status_of(fd))
    except OSError:
        return None


def _lstat_at(fd: int, relative: str) -> Stat | None:
    """The stat of ``relative`` below ``fd`` (no link followed on the way), or None."""
    parent = gitdirs.open_relative(fd, posixpath.dirname(relative))
    if parent is None:
        return None
    try:
        return stat_of(dirfds.own_status_at(parent, posixpath.basename(relative)))
    except OSError:
        return None
    finally:
        dirfds.close(parent)


def _mercurial(check: _Check, tree: TreeScan) -> None:
    before = check.baseline.tree.hg
    for relative, now in sorted(tree.hg.items()):
        name = posixpath.basename(relative)
        if name == ".hg":
            if relative not in before and relative != ".hg" and check.changed(
                    relative, now, before, known_complete=check.baseline.tree.complete):
                check.act(relative, "a Mercurial repository created during the run",
                          "mercurial", move=False)
            continue
        if not check.changed(relative, now, before,
                             known_complete=check.baseline.tree.complete):
            continue
        if name == "sharedpath":
            check.act(relative, "a Mercurial share pointer: hg reads the config where it "
                                "points", "mercurial", move=True)
        elif not _harmless_hgrc(check.root.fd, relative):
            check.act(relative, "a Mercurial config: its hooks and extensions run on the host",
                      "mercurial", move=True)


def _harmless_hgrc(fd: int, relative: str) -> bool:
    """Only a [paths] section, as `hg clone` writes (no %include, no other section)."""
    text = gitdirs.read_relative(fd, relative)
    if text is None:
        return False
    section = None
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped[0] in "#;":
            continue
        if stripped.startswith("["):
            section = stripped.lower()
            if section != "[paths]":
                return False
        elif section is None or stripped.startswith("%"):
            return False
    return True


def _named(check: _Check) -> None:
    """Files the host's git configs name: pinned when they existed; created ones moved."""
    baseline = check.baseline
    for relative, role in sorted(baseline.named.items()):
        try:
            now = stat_of(dirfds.own_status_at(check.root.fd, relative))
        except OSError:
            continue
        before = baseline.named_stats.get(relative)
        if before == now:
            continue
        what = {"config": "a file the git config includes",
                "hooks": "the hooks directory the git config names (core.hooksPath)"}.get(
                    role, "a program the git config runs")
        check.act(relative, what, "git", move=before is None)


def _names_drivers(fd: int, relative: str) -> bool:
    text = gitdirs.read_relative(fd, relative)
    return text is None or any(driver in text for driver in _ATTRIBUTE_DRIVERS)


__all__ = ["MAX_PINNED_REPOSITORIES", "Baseline", "Finding", "Protection", "Report",
           "after_run", "baseline_of", "protect"]
