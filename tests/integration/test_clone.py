"""--clone sandboxes on a real engine: three sandboxes of one repository commit in parallel,
each in its own checkout (the host repository never mounted); `sbx diff` shows each one's
changes; `sbx fetch` brings each as branch sbx/NAME, the host's work tree, index and
.git/config byte-identical, and hooks and config the sandbox planted never run on the host.
Refusals: not a repository, an unborn HEAD, no git in the image, a fetch of a sandbox
without a clone, a branch that would not fast-forward."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.support.sbxproc import Finished, run_sbx

pytestmark = pytest.mark.docker

BOOKWORM = "sbx-base/bookworm:1"  # scripts/build-images.sh: has git


@pytest.fixture
def env(state_home: Path) -> dict[str, str]:
    return {**os.environ, "SBX_HOME": str(state_home), "SBX_CONFIG": os.devnull}


@pytest.fixture
def git_kit(kit_factory: Callable[..., Path]) -> Path:
    return kit_factory("gitprobe", f"FROM {BOOKWORM}\nUSER agent\nWORKDIR /workspace\n"
                                   "CMD [\"sleep\", \"600\"]\n")


@pytest.fixture
def sleepy_busybox(kit_factory: Callable[..., Path]) -> Path:
    return kit_factory("nogit", "FROM sbx-test/busybox:1\nUSER agent\nWORKDIR /workspace\n"
                                "CMD [\"sleep\", \"600\"]\n")


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, check=True,
                          timeout=60)
    return done.stdout.decode()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.email", "host@example.invalid")
    _git(repo, "config", "user.name", "host")
    (repo / "README").write_text("base\n", encoding="utf-8")
    _git(repo, "add", "README")
    _git(repo, "commit", "-q", "-m", "base")
    (repo / "README").write_text("base\nhost edit, not committed\n", encoding="utf-8")
    (repo / "scratch.txt").write_text("untracked on the host\n", encoding="utf-8")
    return repo


@pytest.fixture
def names(cleanup: list[str]) -> list[str]:
    return cleanup  # the conftest's: removed after the test


def _snapshot(repo: Path) -> dict[str, bytes]:
    """The host's work tree, index and config, byte for byte."""
    seen = {str(p.relative_to(repo)): p.read_bytes() for p in repo.rglob("*")
            if p.is_file() and ".git" not in p.relative_to(repo).parts}
    seen[".git/index"] = (repo / ".git" / "index").read_bytes()
    seen[".git/config"] = (repo / ".git" / "config").read_bytes()
    seen[".git/HEAD"] = (repo / ".git" / "HEAD").read_bytes()
    return seen


def _sh(env: dict[str, str], name: str, script: str) -> Finished:
    return run_sbx(["exec", name, "--", "sh", "-c", script], env=env, timeout=120)


def test_three_clones_commit_diff_and_fetch(env: dict[str, str], git_kit: Path, repo: Path,
                                            names: list[str], tmp_path: Path) -> None:
    base = _git(repo, "rev-parse", "HEAD").strip()
    before = _snapshot(repo)
    marker = tmp_path / "hook-ran-on-host"
    tag = uuid.uuid4().hex[:6]
    for i in range(3):
        name = f"cl-{tag}-{i}"
        names.append(name)
        created = run_sbx(["create", "--clone", "--name", name, str(git_kit), str(repo)],
                          env=env, timeout=300)
        assert created.returncode == 0, created.stderr
    # the host repository is not mounted: the sandbox sees its own checkout on sbx/NAME
    first = _sh(env, names[0], "cd /workspace && git rev-parse --abbrev-ref HEAD && "
                "git rev-parse HEAD && cat README && ls -a && mount | grep -c ' /workspace ' "
                "|| true")
    assert first.returncode == 0, first.stderr
    lines = first.stdout.decode().split()
    assert lines[:3] == [f"sbx/{names[0]}", base, "base"]
    assert "scratch.txt" not in lines  # the host's untracked file stayed on the host

    def work(i: int) -> Finished:
        hook = f"#!/bin/sh\ntouch {marker} 2>/dev/null; exit 0\n"
        return _sh(env, names[i], f"""set -e; cd /workspace
git config user.email a{i}@example.invalid; git config user.name agent{i}
echo "from {i}" > file{i}.txt; git add file{i}.txt; git commit -q -m "commit {i}"
echo "more {i}" >> file{i}.txt; git commit -q -am "second {i}"
echo "uncommitted {i}" >> README; echo new > untracked{i}.txt
for h in post-checkout post-merge reference-transaction pre-auto-gc fsmonitor-watchman; do
  printf '{hook}' > .git/hooks/$h; chmod +x .git/hooks/$h; done
git config core.fsmonitor 'touch {marker} 2>/dev/null; exit 0'; git config core.hooksPath .git/hooks
git tag planted-{i}""")

    with ThreadPoolExecutor(max_workers=3) as pool:
        results = list(pool.map(work, range(3)))
    for done in results:
        assert done.returncode == 0, done.stderr

    for i, name in enumerate(names):
        shown = run_sbx(["diff", name], env=env, timeout=120)
        assert shown.returncode == 0, shown.stderr
        text = shown.stdout.decode()
        assert f"+from {i}" in text and f"+more {i}" in text  # committed
        assert f"+uncommitted {i}" in text and f"untracked{i}.txt" in text  # not committed
        assert all(f"file{j}.txt" not in text for j in range(3) if j != i)

    for i, name in enumerate(names):
        fetched = run_sbx(["fetch", name], env=env, timeout=120)
        assert fetched.returncode == 0, fetched.stderr
        log = _git(repo, "log", "--format=%s", f"sbx/{name}")
        assert log.split("\n")[:3] == [f"second {i}", f"commit {i}", "base"]
        assert _git(repo, "show", f"sbx/{name}:file{i}.txt") == f"from {i}\nmore {i}\n"
    assert sorted(_git(repo, "branch", "--format=%(refname:short)").split()) == \
        sorted(["main", *(f"sbx/{n}" for n in names)])
    assert _git(repo, "tag") == ""  # the tags the sandboxes made stayed there
    assert _snapshot(repo) == before
    assert not os.path.lexists(marker)
    # git on the host afterwards still runs none of it (nothing was written to .git/config)
    _git(repo, "status")
    _git(repo, "checkout", "-q", f"sbx/{names[0]}")
    _git(repo, "checkout", "-q", "main")
    assert not os.path.lexists(marker)

    # the host's branch moved on its own: a second fetch would drop that commit
    _git(repo, "branch", "-f", f"sbx/{names[1]}", "main")
    _git(repo, "checkout", "-q", f"sbx/{names[1]}")
    _git(repo, "commit", "-q", "--allow-empty", "-m", "host only")
    _git(repo, "checkout", "-q", "main")
    diverged = run_sbx(["fetch", names[1]], env=env, timeout=120)
    assert diverged.returncode == 125 and b"(branch_diverged)" in diverged.stderr
    assert b"--force" in diverged.stderr and b"branch -m" in diverged.stderr
    assert _git(repo, "log", "-1", "--format=%s", f"sbx/{names[1]}").strip() == "host only"
    forced = run_sbx(["fetch", "--force", names[1]], env=env, timeout=120)
    assert forced.returncode == 0, forced.stderr
    assert _git(repo, "log", "-1", "--format=%s", f"sbx/{names[1]}").strip() == "second 1"
    assert not os.path.lexists(marker)


def test_refusals(env: dict[str, str], git_kit: Path, sleepy_busybox: Path, repo: Path,
                  names: list[str], tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    refused = run_sbx(["create", "--clone", "--name", "cl-plain", str(git_kit), str(plain)],
                      env=env)
    assert refused.returncode == 125 and b"(not_a_repository)" in refused.stderr
    if os.geteuid() == 0:  # another user's repository: git's safe.directory, said as such
        foreign = tmp_path / "foreign"
        _git(tmp_path, "init", "-q", str(foreign))
        _git(foreign, "-c", "user.name=x", "-c", "user.email=x@example.invalid", "commit",
             "-q", "--allow-empty", "-m", "start")
        subprocess.run(["chown", "-R", "1000:1000", str(foreign)], check=True, timeout=60)
        refused = run_sbx(["create", "--clone", "--name", "cl-foreign", str(git_kit),
                           str(foreign)], env=env)
        assert refused.returncode == 125 and b"(not_a_repository)" in refused.stderr
        assert b"another user owns it" in refused.stderr, refused.stderr
    unborn = tmp_path / "unborn"
    _git(tmp_path, "init", "-q", str(unborn))
    refused = run_sbx(["create", "--clone", "--name", "cl-unborn", str(git_kit), str(unborn)],
                      env=env)
    assert refused.returncode == 125 and b"(head_unborn)" in refused.stderr
    nowhere = run_sbx(["create", "--clone", "--name", "cl-none", str(git_kit)], env=env)
    assert nowhere.returncode == 2 or b"needs a WORKSPACE" in nowhere.stderr

    name = f"cl-nogit-{uuid.uuid4().hex[:6]}"
    names.append(name)
    refused = run_sbx(["create", "--clone", "--name", name, str(sleepy_busybox), str(repo)],
                      env=env, timeout=300)
    assert refused.returncode == 125 and b"(git_missing)" in refused.stderr, refused.stderr
    assert b"no sandbox" in run_sbx(["exec", name, "--", "true"], env=env).stderr

    mounted = f"cl-mounted-{uuid.uuid4().hex[:6]}"
    names.append(mounted)
    made = run_sbx(["create", "--name", mounted, str(git_kit)], env=env, timeout=300)
    assert made.returncode == 0, made.stderr
    for command in ("diff", "fetch"):
        refused = run_sbx([command, mounted], env=env)
        assert refused.returncode == 125 and b"(not_a_clone)" in refused.stderr
    assert "sbx/" not in _git(repo, "branch")
    one_shot = run_sbx(["run", "--clone", "--rm", str(git_kit), str(repo)], env=env)
    assert one_shot.returncode == 2 and b"(invalid_argument)" in one_shot.stderr


def test_run_clone_detached_then_fetch(env: dict[str, str], git_kit: Path, repo: Path,
                                       names: list[str]) -> None:
    name = f"cl-run-{uuid.uuid4().hex[:6]}"
    names.append(name)
    made = run_sbx(["run", "--clone", "--name", name, "-d", str(git_kit), str(repo)],
                   env=env, timeout=300)
    assert made.returncode == 0, made.stderr
    done = _sh(env, name, "cd /workspace && git -c user.email=a@example.invalid -c "
               "user.name=a commit -q --allow-empty -m 'from run' && git status --short")
    assert done.returncode == 0, done.stderr
    again = run_sbx(["run", "--clone", "--name", name, "-d", str(git_kit), str(repo)], env=env)
    assert again.returncode == 2 and b"exists already" in again.stderr
    fetched = run_sbx(["fetch", "--json", name], env=env, timeout=120)
    assert fetched.returncode == 0, fetched.stderr
    data = json.loads(fetched.stdout)["data"]
    assert data["branch"] == f"sbx/{name}" and data["base"] == _git(repo, "rev-parse", "main"
                                                                     ).strip()
    assert _git(repo, "log", "-1", "--format=%s", f"sbx/{name}").strip() == "from run"


def _status(env: dict[str, str], name: str) -> str:
    listed = run_sbx(["ls", "--json"], env=env, timeout=60)
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)["data"]["sandboxes"]
    return str(next(r["status"] for r in rows if r["name"] == name))


def test_clone_survives_stop_and_stopped_diff_and_fetch_match_running(
        env: dict[str, str], git_kit: Path, repo: Path, names: list[str]) -> None:
    name = f"cl-vol-{uuid.uuid4().hex[:6]}"
    names.append(name)
    made = run_sbx(["create", "--clone", "--name", name, str(git_kit), str(repo)], env=env,
                   timeout=300)
    assert made.returncode == 0, made.stderr
    done = _sh(env, name, "set -e; cd /workspace; git config user.email a@example.invalid; "
               "git config user.name a; echo kept > kept.txt; git add kept.txt; "
               "git commit -q -m kept; echo dirty >> README; echo u > untracked.txt; "
               "git rev-parse HEAD")
    assert done.returncode == 0, done.stderr
    commit = done.stdout.decode().split()[-1]
    running = run_sbx(["diff", name], env=env, timeout=120)
    assert running.returncode == 0, running.stderr
    assert b"+kept" in running.stdout and b"+dirty" in running.stdout
    assert b"untracked.txt" in running.stdout

    stopped = run_sbx(["stop", name], env=env, timeout=120)
    assert stopped.returncode == 0, stopped.stderr
    before = _status(env, name)
    assert before != "running"
    # stopped: the same diff and the same fetch, through a helper; the sandbox stays stopped
    shown = run_sbx(["diff", name], env=env, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == running.stdout
    fetched = run_sbx(["fetch", "--json", name], env=env, timeout=120)
    assert fetched.returncode == 0, fetched.stderr
    assert json.loads(fetched.stdout)["data"]["commit"] == commit
    assert _git(repo, "rev-parse", f"sbx/{name}").strip() == commit
    assert _git(repo, "show", f"sbx/{name}:kept.txt") == "kept\n"
    assert _status(env, name) == before

    started = run_sbx(["start", name], env=env, timeout=300)
    assert started.returncode == 0, started.stderr
    after = _sh(env, name, "cd /workspace && git rev-parse HEAD && cat untracked.txt && "
                "git status --porcelain")
    assert after.returncode == 0, after.stderr
    lines = after.stdout.decode().splitlines()
    assert lines[:2] == [commit, "u"]  # the commit and the untracked file kept their stop
    # the diffs used an index of their own: the sandbox's still has untracked.txt untracked
    assert sorted(lines[2:]) == [" M README", "?? untracked.txt"]
    again = run_sbx(["fetch", "--json", name], env=env, timeout=120)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["data"]["commit"] == commit
