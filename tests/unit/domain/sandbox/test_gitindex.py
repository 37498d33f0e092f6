"""The pure readers behind the workspace check: git's config (which keys run programs, which
files a config names) and git's index (gitlinks, paths git never writes), the latter on
indexes the real git wrote (versions 2 to 4, a split index), so the reader agrees with git."""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from sbx.domain.sandbox import gitconfig, gitindex

GIT = shutil.which("git")
needs_git = pytest.mark.skipif(GIT is None, reason="the real git writes the indexes read here")


# -- config ------------------------------------------------------------------------------------


def test_a_config_git_init_or_clone_writes_is_harmless() -> None:
    text = ("[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n"
            "\tlogallrefupdates = true\n[remote \"origin\"]\n\turl = https://example.invalid/r\n"
            "\tfetch = +refs/heads/*:refs/remotes/origin/*\n[branch \"main\"]\n"
            "\tremote = origin\n\tmerge = refs/heads/main\n[user]\n\tname = agent\n")
    entries = gitconfig.parse(text)
    assert entries is not None and gitconfig.is_harmless(entries)


@pytest.mark.parametrize("text", [
    "[core]\n\tfsmonitor = touch /tmp/x\n",
    "[core] fsmonitor = x\n",  # a key on the header's line
    "[CORE]\n\tFSMonitor = x\n",  # names are case-insensitive
    "[core]\n\tbare = false\n\tpager = \\\nless\n",  # a continuation
    "[alias]\n\tst = !sh -c 'touch x'\n",
    "[include]\n\tpath = elsewhere\n",
    "[includeIf \"gitdir:/\"]\n\tpath = elsewhere\n",
    "[core]\n\thooksPath = .githooks\n",
    "[core]\n\tworktree = /\n",
    "[filter \"x\"]\n\tclean = x\n",
    "[core.sub]\n\tx = 1\n",  # the legacy subsection form
])
def test_keys_that_run_programs_are_not_harmless(text: str) -> None:
    entries = gitconfig.parse(text)
    assert entries is not None and not gitconfig.is_harmless(entries)


@pytest.mark.parametrize("text", [
    "fsmonitor = x\n",  # a key before any section
    "[core\n\tx = 1\n",
    "[core]\n\tx = \"unterminated\n",
    "[core]\n\tx = bad \\q escape\n",
    "[core]\n\t= 1\n",
    "[core]\n\tpager = x \\",  # a continuation at the end of the file
])
def test_what_the_reader_does_not_understand_is_unreadable(text: str) -> None:
    assert gitconfig.parse(text) is None


def test_values_are_read_like_git_reads_them() -> None:
    entries = gitconfig.parse('[a "Sub \\"q\\""]\n\tk = "x ; y" # c\n\tflag\n\tm = 1 ; c\n')
    assert entries == [gitconfig.Entry("a", 'Sub "q"', "k", "x ; y"),
                       gitconfig.Entry("a", 'Sub "q"', "flag", None),
                       gitconfig.Entry("a", 'Sub "q"', "m", "1")]


def test_named_paths_follow_includes_hooks_path_and_programs(tmp_path: Path) -> None:
    work = tmp_path / "work"
    (work / ".git").mkdir(parents=True)
    (work / "shared.gitconfig").write_text("[core]\n\tpager = tools/pager.sh\n",
                                           encoding="utf-8")
    (work / ".git" / "config").write_text(
        "[include]\n\tpath = ../shared.gitconfig\n[core]\n\thooksPath = .husky\n"
        "[alias]\n\tx = !./scripts/run.sh --flag https://example.invalid/a/b\n"
        "[includeIf \"onbranch:main\"]\n\tpath = ~/extra.gitconfig\n", encoding="utf-8")
    found = gitconfig.named_paths(str(work / ".git" / "config"), worktree=str(work),
                                  home=str(tmp_path / "home"))
    assert {(Path(n.path).relative_to(tmp_path).as_posix(), n.role) for n in found} == {
        ("work/shared.gitconfig", "config"), ("work/.husky", "hooks"),
        ("work/scripts/run.sh", "program"), ("work/tools/pager.sh", "program"),
        ("home/extra.gitconfig", "config")}


def test_host_config_files_follow_gits_variables() -> None:
    assert gitconfig.host_config_files({"HOME": "/h"}) == [
        "/etc/gitconfig", "/h/.config/git/config", "/h/.gitconfig"]
    assert gitconfig.host_config_files({"HOME": "/h", "GIT_CONFIG_NOSYSTEM": "1",
                                        "GIT_CONFIG_GLOBAL": "/g"}) == ["/g"]


# -- index -------------------------------------------------------------------------------------


def _git(repo: Path, *args: str) -> str:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(repo),
           "GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@b",
           "GIT_COMMITTER_NAME": "a", "GIT_COMMITTER_EMAIL": "a@b"}
    return subprocess.run([str(GIT), "-C", str(repo), *args], check=True, capture_output=True,
                          text=True, env=env, timeout=30).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "file").write_text("x\n", encoding="utf-8")
    (repo / "dir").mkdir()
    (repo / "dir" / "deeper").write_text("y\n", encoding="utf-8")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "one")
    commit = _git(repo, "rev-parse", "HEAD").strip()
    _git(repo, "update-index", "--add", "--cacheinfo", f"160000,{commit},vendor/lib")
    return repo


def _summary(repo: Path) -> gitindex.IndexSummary:
    fd = os.open(repo / ".git", os.O_RDONLY | os.O_DIRECTORY)
    try:
        return gitindex.read_index(fd)
    finally:
        os.close(fd)


def _add_raw_entry(repo: Path, path: bytes, mode: int = 0o100755) -> None:
    """An entry (by default one no `git add` makes, as a sandbox can write it) added to a v2
    index."""
    data = (repo / ".git" / "index").read_bytes()
    _sig, _version, count = struct.unpack(">4sII", data[:12])
    entries, offset = [], 12
    for _ in range(count):
        length = struct.unpack(">H", data[offset + 60:offset + 62])[0] & 0xFFF
        size = (62 + length + 8) // 8 * 8
        entries.append(data[offset:offset + size])
        offset += size
    entry = struct.pack(">10I", 0, 0, 0, 0, 0, 0, mode, 0, 0, 0) + bytes(20)
    entry += struct.pack(">H", len(path)) + path
    entries.append(entry + b"\0" * ((62 + len(path) + 8) // 8 * 8 - len(entry)))
    entries.sort(key=lambda e: e[62:62 + (struct.unpack(">H", e[60:62])[0] & 0xFFF)])
    body = struct.pack(">4sII", b"DIRC", 2, len(entries)) + b"".join(entries)
    (repo / ".git" / "index").write_bytes(body + hashlib.sha1(body, usedforsecurity=False).digest())


@needs_git
@pytest.mark.parametrize("version", ["2", "3", "4"])
def test_gitlinks_are_found_in_every_index_version(repo: Path, version: str) -> None:
    _git(repo, "update-index", "--index-version", version)
    if version == "3":
        (repo / "later").write_text("z\n", encoding="utf-8")
        _git(repo, "add", "-N", "later")  # intent-to-add: an extended flag
    summary = _summary(repo)
    assert summary.readable and summary.gitlinks == ["vendor/lib"] and summary.unsafe == []


@needs_git
def test_a_split_index_is_read_with_its_shared_part(repo: Path) -> None:
    _git(repo, "update-index", "--split-index")
    assert list((repo / ".git").glob("sharedindex.*"))
    assert _summary(repo).gitlinks == ["vendor/lib"]


@needs_git
@pytest.mark.parametrize("path", [b".git/hooks/pre-commit", b"sub/../.git/hooks/x",
                                  b"a/.GIT/config", b"./x", b"/abs"])
def test_paths_git_never_writes_are_unsafe_and_dropped(repo: Path, path: bytes) -> None:
    _add_raw_entry(repo, path)
    summary = _summary(repo)
    assert summary.unsafe == [path.decode()]
    cleaned = gitindex.without_unsafe((repo / ".git" / "index").read_bytes())
    assert cleaned is not None
    (repo / ".git" / "index").write_bytes(cleaned)
    assert _summary(repo).unsafe == []
    # git reads what sbx wrote, with every other entry kept.
    assert _git(repo, "ls-files").split() == ["dir/deeper", "file", "vendor/lib"]
    _git(repo, "status", "--porcelain")


@needs_git
def test_a_split_index_is_not_rewritten(repo: Path) -> None:
    _git(repo, "update-index", "--split-index")
    assert gitindex.without_unsafe((repo / ".git" / "index").read_bytes()) is None


def test_what_is_not_an_index_is_unreadable(tmp_path: Path) -> None:
    (tmp_path / "index").write_bytes(b"DIRC" + b"\0" * 40)
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert not gitindex.read_index(fd).readable
        os.symlink("/etc/passwd", tmp_path / "linked")
        assert not gitindex.read_index(fd, "linked").readable  # never through a link
        assert gitindex.read_index(fd, "absent").readable  # absent: an empty index
    finally:
        os.close(fd)
