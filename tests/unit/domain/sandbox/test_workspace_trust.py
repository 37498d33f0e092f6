"""The workspace check's decisions on real directories (no engine): what the walk finds, what
each tool reads, what is pinned, and what a change after the run is — quarantined, reported
or nothing. The sandbox's writes are made directly here; tests/integration makes them from a
real sandbox and runs the host's git."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import struct
import time
from pathlib import Path

import pytest

from sbx.domain.sandbox import gitdirs, gitindex, hostfiles, quarantine, workspace_scan
from sbx.domain.sandbox.sources import open_checked
from sbx.domain.sandbox.workspace_trust import Baseline, after_run, protect
from tests.unit.domain.sandbox.test_gitindex import _add_raw_entry

README = Path(__file__).resolve().parents[4] / "README.md"


def _gitdir(path: Path, config: str = "[core]\n\trepositoryformatversion = 0\n") -> Path:
    """A git directory as git init leaves it (made by hand: no git needed)."""
    for sub in ("objects/info", "objects/pack", "refs/heads", "hooks", "info", "logs"):
        (path / sub).mkdir(parents=True, exist_ok=True)
    (path / "HEAD").write_text("ref: refs/heads/main\n", encoding="utf-8")
    (path / "config").write_text(config, encoding="utf-8")
    (path / "hooks" / "pre-commit.sample").write_text("#!/bin/sh\n", encoding="utf-8")
    (path / "info" / "exclude").write_text("", encoding="utf-8")
    return path


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    _gitdir(root / ".git")
    (root / "README").write_text("hi\n", encoding="utf-8")
    return root


def _protect(root: Path, *, trust: bool = False) -> tuple[Baseline, list[str]]:
    opened = open_checked(str(root))
    try:
        protection = protect(opened, "/workspace", trust=trust, env={"HOME": str(root.parent)})
        targets = [pin.target for pin in protection.pins]
        for pin in protection.pins:
            pin.source.close()
        return protection.baseline, targets
    finally:
        opened.close()


def _after(baseline: Baseline) -> dict[str, tuple[str, str]]:
    report = after_run(baseline, run_id="run1")
    assert report.problem is None
    return {f.path: (f.action, f.what) for f in report.findings}


# -- the tools' files ----------------------------------------------------------------------------


@pytest.mark.parametrize(("path", "tool"), [
    (".envrc", "direnv"), ("a/b/c/.envrc", "direnv"), ("node_modules/x/.envrc", None),
    ("crates/a/.cargo/config.toml", "cargo"), ("x/config.toml", None),
    ("rust-toolchain.toml", "cargo"), ("mise.toml", "mise"), ("a/mise/config.toml", "mise"),
    ("web/.npmrc", "npm, pnpm, yarn, bun"), (".yarnrc.yml", "npm, pnpm, yarn, bun"),
    (".pdbrc", "python"), ("deep/sitecustomize.py", "python"), ("json.py", "python"),
    ("os.pyc", "python"), ("src/json.py", None), ("mine.py", None),
    (".venv/lib/python3.11/site-packages/x.pth", "python"), ("x.pth", None),
    ("node_modules/a/site-packages/x.pth", "python"), ("sub/.nvim.lua", "vim, neovim"),
    (".exrc", "vim, neovim"), ("p/.dir-locals.el", "emacs"),
    ("a.code-workspace", "vs code"), (".gitmodules", "git"), ("sub/.gitmodules", None),
    (".gitlab-ci.yml", "ci"), ("sub/.gitlab-ci.yml", None), ("README", None),
    # Python's importer takes bytecode and extension modules from the current directory too.
    ("json.cpython-311-x86_64-linux-gnu.so", "python"), ("os.abi3.so", "python"),
    ("json.so", "python"), ("json.cpython-311.pyc", None), ("mine.so", None),
    ("lib/json.so", None),
    # mise per MISE_ENV and under .config; pnpm 10's settings; lazy.nvim; lefthook's formats.
    ("mise.production.toml", "mise"), ("a/.mise.dev.local.toml", "mise"),
    ("x/.config/mise.toml", "mise"), ("mise/config.local.toml", "mise"),
    ("mise.txt", None), ("pnpm-workspace.yaml", "npm, pnpm, yarn, bun"),
    ("pkg/.pnpmfile.mjs", "npm, pnpm, yarn, bun"), ("sub/.lazy.lua", "vim, neovim"),
    ("lefthook.toml", "hook managers"), (".lefthook.json", "hook managers"),
    ("lefthook-local.yaml", "hook managers"), (".config/lefthook.yml", "hook managers"),
    ("sub/lefthook.toml", None), (".pre-commit-config.yml", "hook managers"),
])
def test_each_tool_is_matched_where_it_reads(path: str, tool: str | None) -> None:
    name = path.rsplit("/", 1)[-1]
    parent = path.rsplit("/", 2)[-2] if "/" in path else ""
    dependencies = any(part in hostfiles.DEPENDENCY_TREES for part in path.split("/")[:-1])
    found = None
    if hostfiles.may_matter(name, root="/" not in path):
        found = hostfiles.tool_of(path, name, parent, in_dependencies=dependencies)
    assert found == tool


@pytest.mark.parametrize(("directory", "tool"), [
    (".vscode", "vs code"), ("sub/.idea", "jetbrains"), (".github/workflows", "ci"),
    ("sub/.github/workflows", None), (".husky", "hook managers"),
    ("x/.yarn/plugins", "npm, pnpm, yarn, bun"), (".config/mise/conf.d", "mise"),
    ("node_modules/p/.vscode", None), (".mise", "mise"), ("sub/.config/mise", "mise"),
])
def test_whole_trees_are_watched_for_their_tool(directory: str, tool: str | None) -> None:
    name = directory.rsplit("/", 1)[-1]
    dependencies = directory.startswith("node_modules/")
    assert hostfiles.watched_tree(directory, name, in_dependencies=dependencies) == tool


def test_a_package_named_like_a_library_module_is_matched_at_the_root() -> None:
    assert hostfiles.shadowing_package("typing/__init__.py") == "python"
    assert hostfiles.shadowing_package("json/__init__.pyc") == "python"
    assert hostfiles.shadowing_package("json/__init__.cpython-311-x86_64-linux-gnu.so") \
        == "python"
    assert hostfiles.may_matter("__init__.abi3.so", root=False)
    assert hostfiles.shadowing_package("json/decoder.py") is None
    assert hostfiles.shadowing_package("mine/__init__.py") is None


def test_the_readme_names_every_file_the_report_covers() -> None:
    text = README.read_text(encoding="utf-8")
    for tool, names in hostfiles.covered():
        for name in names:
            assert f"`{name}`" in text, (tool, name)


# -- the walk ------------------------------------------------------------------------------------


def test_the_walk_finds_repositories_anywhere_and_follows_no_link(workspace: Path,
                                                                  tmp_path: Path) -> None:
    deep = workspace / "node_modules" / "a" / "b" / "c" / "d" / "e" / "f" / "g"
    _gitdir(deep / ".git")
    bare = workspace / "build" / "cache.git"
    _gitdir(bare)
    (workspace / "dist").mkdir()
    (workspace / "dist" / ".git").write_text("gitdir: ../build/cache.git\n", encoding="utf-8")
    linked = workspace / "target" / "debug"
    linked.mkdir(parents=True)
    (linked / ".git").symlink_to(bare)
    (workspace / "h" / ".hg").mkdir(parents=True)
    (workspace / "h" / ".hg" / "hgrc").write_text("[paths]\n", encoding="utf-8")
    outside = tmp_path / "outside"
    _gitdir(outside / ".git")
    (workspace / "away").symlink_to(outside)  # a link to a directory is not entered
    fd = os.open(workspace, os.O_RDONLY | os.O_DIRECTORY)
    try:
        found = workspace_scan.scan(fd)
    finally:
        os.close(fd)
    assert found.complete
    assert found.gitdirs == {".git": "dir", "build/cache.git": "bare",
                             "node_modules/a/b/c/d/e/f/g/.git": "dir"}
    assert set(found.gitfiles) == {"dist/.git", "target/debug/.git"}
    assert set(found.hg) == {"h/.hg", "h/.hg/hgrc"}


def test_the_walk_says_when_it_stopped(workspace: Path) -> None:
    for index in range(50):
        (workspace / f"d{index}").mkdir()
    fd = os.open(workspace, os.O_RDONLY | os.O_DIRECTORY)
    try:
        found = workspace_scan.scan(fd, entries=20)
    finally:
        os.close(fd)
    assert not found.complete and found.entries <= 21  # the bound, and .git past it
    assert found.gitdirs == {".git": "dir"}  # a repository is looked at even past the bound


# -- pins ----------------------------------------------------------------------------------------


def test_pins_cover_git_configuration_submodules_and_the_owners_nested_repositories(
        workspace: Path) -> None:
    module = _gitdir(workspace / ".git" / "modules" / "lib")
    (module / "commondir").write_text("../..\n", encoding="utf-8")
    (workspace / ".git" / "objects" / "info" / "alternates").write_text("/x\n",
                                                                         encoding="utf-8")
    _gitdir(workspace / "vendor" / "dep" / ".git")
    (workspace / "lib").mkdir()
    (workspace / "lib" / ".git").write_text("gitdir: ../.git/modules/lib\n", encoding="utf-8")
    (workspace / ".githooks").mkdir()
    with (workspace / ".git" / "config").open("a", encoding="utf-8") as config:
        config.write("\thooksPath = .githooks\n")
    baseline, targets = _protect(workspace)
    ro = "/workspace/.git"
    assert {f"{ro}/config", f"{ro}/hooks", f"{ro}/info", f"{ro}/worktrees", f"{ro}/modules",
            f"{ro}/objects/info/alternates", f"{ro}/modules/lib", f"{ro}/modules/lib/config",
            f"{ro}/modules/lib/commondir", "/workspace/vendor/dep/.git",
            "/workspace/vendor/dep/.git/config", "/workspace/vendor/dep/.git/modules",
            "/workspace/lib/.git", "/workspace/.githooks"} <= set(targets)
    # What was missing was created, so it can be pinned (and the sandbox cannot create it).
    assert (workspace / ".git" / "worktrees").is_dir()
    assert (workspace / "vendor" / "dep" / ".git" / "modules").is_dir()
    assert baseline.named == {".githooks": "hooks"}


def test_a_trusted_workspace_gets_no_pins_but_a_baseline(workspace: Path) -> None:
    baseline, targets = _protect(workspace, trust=True)
    assert targets == [] and baseline.trusted and ".git" in baseline.gitdirs


# -- after the run -------------------------------------------------------------------------------


def test_ordinary_git_work_is_no_finding(workspace: Path) -> None:
    baseline, _ = _protect(workspace)
    git = workspace / ".git"
    (git / "refs" / "heads" / "main").write_text("0" * 40 + "\n", encoding="utf-8")
    (git / "logs" / "HEAD").write_text("a reflog line\n", encoding="utf-8")
    (git / "COMMIT_EDITMSG").write_text("msg\n", encoding="utf-8")
    (git / "ORIG_HEAD").write_text("0" * 40 + "\n", encoding="utf-8")
    (git / "objects" / "ab").mkdir()
    (git / "objects" / "ab" / "cdef").write_bytes(b"x")
    (git / "objects" / "info" / "commit-graph").write_bytes(b"x")
    (workspace / "src.py").write_text("print()\n", encoding="utf-8")
    assert _after(baseline) == {}


def test_what_git_would_act_on_is_quarantined_and_the_rest_reported(workspace: Path,
                                                                    tmp_path: Path) -> None:
    baseline, _ = _protect(workspace)
    git = workspace / ".git"
    (git / "rebase-merge").mkdir()
    (git / "rebase-merge" / "git-rebase-todo").write_text("exec x\n", encoding="utf-8")
    (git / "MERGE_MSG").write_text("m\n", encoding="utf-8")
    (git / "commondir").write_text("../elsewhere\n", encoding="utf-8")
    (git / "objects" / "info" / "alternates").write_text("/tmp\n", encoding="utf-8")
    (git / "logs" / "refs").mkdir()
    (git / "logs" / "refs" / "x").symlink_to(tmp_path / "victim")
    (git / "objects" / "pack").rmdir()
    (git / "objects" / "pack").symlink_to(tmp_path)
    _gitdir(workspace / "build" / "x" / ".git", "[core]\n\tfsmonitor = touch /tmp/p\n")
    (workspace / "build" / "x" / ".git" / "hooks" / "post-checkout").write_text("#!/bin/sh\n",
                                                                                encoding="utf-8")
    _gitdir(workspace / "kept" / ".git", "[core]\n\tbare = false\n[user]\n\tname = a\n")
    (workspace / "sub").mkdir()
    (workspace / "sub" / ".git").write_text("gitdir: /elsewhere\n", encoding="utf-8")
    (workspace / ".envrc").write_text("x\n", encoding="utf-8")
    (workspace / ".gitattributes").write_text("*.c diff=evil\n", encoding="utf-8")
    (workspace / "other.gitattributes").write_text("not read\n", encoding="utf-8")
    found = _after(baseline)
    moved = {path for path, (action, _what) in found.items()
             if action == quarantine.QUARANTINED}
    assert moved == {".git/rebase-merge", ".git/MERGE_MSG", ".git/commondir",
                     ".git/objects/info/alternates", ".git/logs/refs/x", ".git/objects/pack",
                     "build/x/.git/config", "build/x/.git/hooks/post-checkout", "sub/.git"}
    reported = {path for path, (action, _what) in found.items()
                if action == quarantine.REPORTED}
    assert reported == {"build/x/.git", "kept/.git", ".envrc", ".gitattributes"}
    assert (workspace / "kept" / ".git" / "config").exists()  # a harmless config stays
    assert not (git / "rebase-merge").exists() and not (workspace / "sub" / ".git").exists()
    # The quarantine: closed, with a manifest that says where each came from.
    run = git / "sbx-quarantine" / "run1"
    assert stat.S_IMODE(run.stat().st_mode) == 0
    manifest = json.loads((git / "sbx-quarantine" / "run1.json").read_text(encoding="utf-8"))
    assert {item["from"] for item in manifest["moved"]} == moved
    assert "chmod 700" in manifest["restore"]
    run.chmod(0o700)
    names = {p.name for p in run.iterdir()}
    assert len(names) == len(moved) and ".git" not in names  # no item keeps its name
    assert (tmp_path / "victim").exists() is False  # the link's target was never touched


def test_a_trusted_workspace_is_reported_and_nothing_moved(workspace: Path) -> None:
    baseline, _ = _protect(workspace, trust=True)
    (workspace / ".git" / "commondir").write_text("../x\n", encoding="utf-8")
    report = after_run(baseline, run_id="run1")
    assert [(f.path, f.action) for f in report.findings] == [(".git/commondir",
                                                              quarantine.REPORTED)]
    assert "trusted" in (report.findings[0].problem or "")
    assert (workspace / ".git" / "commondir").exists()


def test_a_baseline_kept_as_json_judges_the_same(workspace: Path) -> None:
    baseline, _ = _protect(workspace)
    kept = Baseline.from_json(json.loads(json.dumps(baseline.as_json())))
    assert kept.as_json() == baseline.as_json()
    (workspace / ".git" / "hooks" / "pre-push").write_text("#!/bin/sh\n", encoding="utf-8")
    (workspace / "mise.toml").write_text("x\n", encoding="utf-8")
    assert _after(kept) == {".git/hooks/pre-push": (quarantine.QUARANTINED, "a git hook"),
                            "mise.toml": (quarantine.REPORTED, "created or changed")}


def test_beyond_the_first_walk_the_change_time_decides(workspace: Path) -> None:
    old = workspace / "z" / "old"
    _gitdir(old / ".git", "[core]\n\tpager = less\n")  # the owner's, unsafe but not new
    baseline, _ = _protect(workspace)
    baseline.tree.complete = False  # as if the first walk had stopped before z/
    baseline.gitdirs.pop("z/old/.git")
    baseline.tree.gitdirs.pop("z/old/.git")
    baseline.started_ns = time.time_ns()
    time.sleep(0.01)
    _gitdir(workspace / "z" / "new" / ".git", "[core]\n\tpager = evil\n")
    found = _after(baseline)
    assert "z/new/.git/config" in found and found["z/new/.git/config"][0] == \
        quarantine.QUARANTINED
    assert not any(path.startswith("z/old") for path in found)


def test_a_gitlink_leads_to_a_planted_repository_beyond_the_walk(
        workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    body = struct.pack(">4sII", b"DIRC", 2, 0)
    digest = hashlib.sha1(body, usedforsecurity=False).digest()
    (workspace / ".git" / "index").write_bytes(body + digest)
    for index in range(40):
        (workspace / f"d{index:02}").mkdir()
    baseline, _ = _protect(workspace)
    deep = workspace / "zz" / "a" / "b"
    _gitdir(deep / ".git", "[core]\n\tfsmonitor = touch /tmp/p\n")
    (workspace / "zz" / "c").mkdir()
    (workspace / "zz" / "c" / ".git").write_text("gitdir: /x\n", encoding="utf-8")
    _add_raw_entry(workspace, b"zz/a/b", mode=0o160000)
    _add_raw_entry(workspace, b"zz/c", mode=0o160000)
    monkeypatch.setattr(workspace_scan, "AFTER_SCAN_ENTRIES", 30)  # stops before zz/
    report = after_run(baseline, run_id="run1")
    assert not report.complete
    found = {f.path: f.action for f in report.findings}
    assert found["zz/a/b/.git/config"] == quarantine.QUARANTINED
    assert found["zz/c/.git"] == quarantine.QUARANTINED
    assert {f.what for f in report.findings if f.path == ".git/index"} == {
        "a gitlink to zz/a/b: the owner's `git status` runs git inside it",
        "a gitlink to zz/c: the owner's `git status` runs git inside it"}


def test_an_index_with_a_path_into_git_is_rewritten_without_it(workspace: Path) -> None:
    body = struct.pack(">4sII", b"DIRC", 2, 0)
    digest = hashlib.sha1(body, usedforsecurity=False).digest()
    (workspace / ".git" / "index").write_bytes(body + digest)
    baseline, _ = _protect(workspace)
    _add_raw_entry(workspace, b".git/hooks/pre-commit")
    found = _after(baseline)
    assert found[".git/index"][0] == quarantine.QUARANTINED
    fd = os.open(workspace / ".git", os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert gitindex.read_index(fd).unsafe == []  # what is in place now
    finally:
        os.close(fd)


def test_gitdir_state_records_links_and_state_but_not_data(workspace: Path) -> None:
    (workspace / ".git" / "refs" / "heads" / "link").symlink_to("/etc")
    fd = os.open(workspace / ".git", os.O_RDONLY | os.O_DIRECTORY)
    try:
        state = gitdirs.state(fd)
    finally:
        os.close(fd)
    assert "refs/heads/link" in state.entries and "config" in state.entries
    assert "hooks/pre-commit.sample" in state.entries
    assert "refs/heads" not in state.entries and "objects/pack" not in state.entries


def test_the_warnings_say_what_moved_where_and_what_to_review(workspace: Path) -> None:
    from sbx.usecases.workspace_check import warnings

    baseline, _ = _protect(workspace)
    (workspace / ".git" / "commondir").write_text("../x\n", encoding="utf-8")
    (workspace / ".envrc").write_text("x\n", encoding="utf-8")
    report = after_run(baseline, run_id="run1")
    report.complete = False
    lines = warnings(report)
    assert len(lines) == 3
    assert f"{workspace}/.git/sbx-quarantine/run1" in lines[0] and ".git/commondir" in lines[0]
    assert ".envrc: direnv" in lines[1] and "review them" in lines[1]
    assert "too large to check in full" in lines[2]


def test_a_kept_baseline_that_cannot_be_read_is_said_not_trusted(tmp_path: Path) -> None:
    from sbx.usecases.workspace_check import BASELINE_FILE, load

    assert load(tmp_path) == []  # nothing was protected
    (tmp_path / BASELINE_FILE).write_text("{not json", encoding="utf-8")
    assert load(tmp_path) is None


def test_a_quarantine_the_sandbox_made_is_looked_into(tmp_path: Path) -> None:
    root = tmp_path / "plain"  # no .git: the quarantine is .sbx-quarantine at the root
    root.mkdir()
    baseline, _ = _protect(root)
    hidden = root / ".sbx-quarantine" / "fake"
    _gitdir(hidden / "repo" / ".git", "[core]\n\tfsmonitor = x\n")
    (hidden / "fake.json").write_text("{}", encoding="utf-8")
    (root / ".sbx-quarantine" / ".envrc").write_text("x\n", encoding="utf-8")
    found = _after(baseline)
    assert found[".sbx-quarantine/fake/repo/.git/config"][0] == quarantine.QUARANTINED
    assert ".sbx-quarantine/.envrc" in found
    # sbx's own quarantine, there before the next run, is passed over (and pinned read-only).
    again, targets = _protect(root)
    assert "/workspace/.sbx-quarantine" in targets
    assert _after(again) == {}
