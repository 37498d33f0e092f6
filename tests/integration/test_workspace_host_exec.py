"""A read-write workspace must not run code on its owner's host, through anything git reads:
each attack is planted by a real sandbox, then the host's real git runs as the workspace's
owner (the non-root user sbx-tester, uid 4321: git trusts only its own repositories) and the
payload's marker must stay absent. Each attack's control plants the same thing on the host
without sbx and sees the marker appear, so a passing test proves the protection, not a broken
payload. The legitimate use (add, commit, branch, stash, a new repository) still works.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from sbx.base.paths import home_hash
from tests.support.sbxproc import SBX, Finished, run_sbx

from .conftest import TESTER, TESTER_UID, make_kit, reachable_by_others

pytestmark = pytest.mark.docker

BOOKWORM = "sbx-base/bookworm:1"
WAIT_S = 60.0


class Owner:
    """The workspace's owner on the host: runs commands as uid 4321 with its own HOME."""

    def __init__(self, root: Path) -> None:
        self.home = root / "owner-home"
        self.home.mkdir()
        (self.home / ".gitconfig").write_text(
            "[user]\n\tname = owner\n\temail = owner@example.invalid\n"
            "[init]\n\tdefaultBranch = main\n", encoding="utf-8")
        self.markers = root / "markers"  # outside every workspace: the sandbox cannot write it
        self.markers.mkdir()
        for path in (self.home, self.home / ".gitconfig", self.markers):
            os.chown(path, TESTER_UID, TESTER_UID)

    def run(self, *argv: str, cwd: Path | None = None,
            check: bool = False) -> subprocess.CompletedProcess[str]:
        reachable_by_others(self.home.parent)  # another pytest session may have reset it
        done = subprocess.run(
            ["setpriv", f"--reuid={TESTER_UID}", f"--regid={TESTER_UID}", "--init-groups",
             "env", "-i", f"HOME={self.home}", "PATH=/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM=1",
             "LANG=C", *argv], capture_output=True, text=True, timeout=60, check=False,
            cwd=cwd, stdin=subprocess.DEVNULL)
        if check:
            assert done.returncode == 0, (argv, done.stdout, done.stderr)
        return done

    def git(self, repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
        return self.run("git", "-C", str(repo), *args)

    def fired(self) -> list[str]:
        return sorted(p.name for p in self.markers.iterdir())


@pytest.fixture
def owner(tmp_path: Path) -> Owner:
    if os.geteuid() != 0:
        pytest.skip("running git as the workspace's owner needs root")
    try:
        pwd.getpwnam(TESTER)
    except KeyError:
        if os.environ.get("SBX_REQUIRE_ENGINE") == "1":
            pytest.fail(f"the test user {TESTER} is missing: run scripts/setup.sh")
        pytest.skip(f"the test user {TESTER} is missing")
    reachable_by_others(tmp_path)
    return Owner(tmp_path)


@pytest.fixture
def env(state_home: Path) -> dict[str, str]:
    return {**os.environ, "SBX_HOME": str(state_home), "SBX_CONFIG": os.devnull}


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_kit(tmp_path_factory.mktemp("kits"), "gitagent",
                    f"FROM {BOOKWORM}\nUSER agent\nWORKDIR /workspace\nCMD [\"bash\"]\n")


def new_repo(owner: Owner, path: Path, *, gitignore: str = "") -> Path:
    """A repository the owner made, with one commit, owned by the owner."""
    path.mkdir()
    os.chown(path, TESTER_UID, TESTER_UID)
    owner.run("git", "init", "-q", str(path), check=True)
    (path / "README").write_text("hello\n", encoding="utf-8")
    if gitignore:
        (path / ".gitignore").write_text(gitignore, encoding="utf-8")
    for name in ("README", ".gitignore"):
        if (path / name).exists():
            os.chown(path / name, TESTER_UID, TESTER_UID)
    owner.git(path, "add", "-A")
    done = owner.git(path, "commit", "-qm", "first")
    assert done.returncode == 0, done.stderr
    return path


def copy_of(repo: Path, owner: Owner) -> Path:
    """The same repository a second time, for the control that runs without sbx."""
    twin = repo.with_name(repo.name + "-control")
    shutil.copytree(repo, twin, symlinks=True)
    for directory, dirs, files in os.walk(twin):
        os.chown(directory, TESTER_UID, TESTER_UID)
        for name in (*dirs, *files):
            os.chown(os.path.join(directory, name), TESTER_UID, TESTER_UID,
                     follow_symlinks=False)
    return twin


def sandbox(kit: Path, repo: Path, script: str, env: dict[str, str], owner: Owner,
            *args: str, extra_env: Sequence[str] = ()) -> Finished:
    """``script`` run by bash inside a sandbox on ``repo`` (MARKERS names the host's marker
    directory, which the sandbox cannot reach; HOST_WS the workspace's host path)."""
    reachable_by_others(owner.home.parent)
    variables = [f"MARKERS={owner.markers}", f"HOST_WS={repo}", *extra_env]
    return run_sbx(["run", *args, *(f"-e{v}" for v in variables), str(kit), str(repo), "--",
                    "bash", "-c", script], env=env, timeout=180)


def control(repo: Path, script: str, owner: Owner) -> Path:
    """Plant ``script`` on a copy of ``repo`` on the host itself, as the owner, without sbx."""
    twin = copy_of(repo, owner)
    owner.run("env", f"SBX_WORKSPACE={twin}", f"MARKERS={owner.markers}", f"HOST_WS={twin}",
              "bash", "-c", script, check=False)
    return twin


def quarantined(repo: Path) -> list[dict[str, Any]]:
    """Every item any run moved into the repository's quarantine (from the manifests)."""
    base = repo / ".git" / "sbx-quarantine"
    if not base.is_dir():
        base = repo / ".sbx-quarantine"
    items: list[dict[str, Any]] = []
    for manifest in sorted(base.glob("*.json")) if base.is_dir() else []:
        items += json.loads(manifest.read_text(encoding="utf-8"))["moved"]
    return items


def moved_from(repo: Path) -> set[str]:
    return {item["from"] for item in quarantined(repo)}


def audit_findings(state_home: Path) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for line in (state_home / "audit.jsonl").read_text(encoding="utf-8").splitlines():
        event = json.loads(line)
        if event["event_type"] == "workspace_host_config_changed":
            found += event["details"]["findings"]
    return found


# -- nested repositories anywhere, and gitlinks to them ---------------------------------------

NESTED_DIRS = ("build/out", "node_modules/pkg", "dist/x", "target/debug/x", ".venv/src/x",
               "a/b/c/d/e/f/g")
PLANT_NESTED = r"""
cd "$SBX_WORKSPACE"
for d in build/out node_modules/pkg dist/x target/debug/x .venv/src/x a/b/c/d/e/f/g; do
  mkdir -p "$d" && git init -q "$d"
  git -C "$d" -c user.email=a@b.invalid -c user.name=a commit -q --allow-empty -m x
  git -C "$d" config core.fsmonitor "touch $MARKERS/fsmonitor-${d//\//_}"
  git update-index --add --cacheinfo "160000,$(git -C "$d" rev-parse HEAD),$d"
done 2>/dev/null
echo planted
"""


def test_planted_nested_repositories_run_nothing_anywhere(kit: Path, env: dict[str, str],
                                                          owner: Owner, tmp_path: Path,
                                                          state_home: Path) -> None:
    ignored = "build/\nnode_modules/\ndist/\ntarget/\n.venv/\n"
    repo = new_repo(owner, tmp_path / "project", gitignore=ignored)
    twin = control(repo, PLANT_NESTED, owner)
    owner.git(twin, "status")
    assert owner.fired(), "the control's git status ran nothing: the test proves nothing"
    for marker in owner.fired():
        (owner.markers / marker).unlink()

    result = sandbox(kit, repo, PLANT_NESTED, env, owner)
    assert result.returncode == 0, result.stderr
    assert b"planted" in result.stdout
    status = owner.git(repo, "status")  # as git status recurses through every gitlink
    assert status.returncode == 0, status.stderr
    for directory in NESTED_DIRS:
        owner.git(repo / directory, "status")  # a shell prompt in that directory
        owner.git(repo / directory, "log", "-1")
    assert owner.fired() == []
    stderr = result.stderr.decode()
    for directory in NESTED_DIRS:
        assert f"{directory}/.git/config" in stderr, stderr
        assert f"a gitlink to {directory}" in stderr
    assert {f"{d}/.git/config" for d in NESTED_DIRS} <= moved_from(repo)
    assert "--access ro" in stderr
    # The repositories themselves stay (a git init's HEAD, objects and refs are data).
    assert (repo / "build/out/.git/HEAD").is_file()
    assert {f["path"] for f in audit_findings(state_home)} >= {
        f"{d}/.git/config" for d in NESTED_DIRS}


PLANT_MODULES = r"""
cd "$SBX_WORKSPACE"
mkdir .git/modules/evil 2>/dev/null; echo "modules=$?"
mkdir .git/worktrees/evil 2>/dev/null; echo "worktrees=$?"
mkdir -p sub && printf 'gitdir: ../.git/modules/evil\n' > sub/.git
git init -q --bare "$SBX_WORKSPACE/.git/modules/evil" 2>/dev/null
git --git-dir=.git/modules/evil config core.fsmonitor "touch $MARKERS/modules" 2>/dev/null
git --git-dir=.git/modules/evil config core.worktree ../../../sub 2>/dev/null
git --git-dir=.git/modules/evil config core.bare false 2>/dev/null
git update-index --add --cacheinfo 160000,1111111111111111111111111111111111111111,sub
true
"""


def test_modules_and_worktrees_created_during_the_run_are_refused(
        kit: Path, env: dict[str, str], owner: Owner, tmp_path: Path) -> None:
    repo = new_repo(owner, tmp_path / "project")
    assert not (repo / ".git" / "modules").exists()  # not there at the start: made read-only
    twin = control(repo, PLANT_MODULES, owner)
    owner.git(twin, "status")
    assert owner.fired() == ["modules"], "the control ran nothing: the test proves nothing"
    (owner.markers / "modules").unlink()

    result = sandbox(kit, repo, PLANT_MODULES, env, owner)
    assert result.returncode == 0, result.stderr
    values = dict(line.split("=", 1) for line in result.stdout.decode().split())
    assert values["modules"] != "0" and values["worktrees"] != "0"
    assert list((repo / ".git" / "modules").iterdir()) == []
    assert list((repo / ".git" / "worktrees").iterdir()) == []
    owner.git(repo, "status")
    owner.git(repo / "sub", "status")
    assert owner.fired() == []
    assert "sub/.git" in moved_from(repo)  # the pointer it planted


PLANT_STATE = r"""
cd "$SBX_WORKSPACE"
head=$(git rev-parse HEAD)
mkdir -p .git/rebase-merge && cd .git/rebase-merge
printf 'exec touch %s/rebase\n' "$MARKERS" > git-rebase-todo
: > done; touch interactive; echo refs/heads/main > head-name
echo "$head" > onto; echo "$head" > orig-head
cd "$SBX_WORKSPACE"
mkdir -p .git/sequencer && printf 'exec touch %s/sequencer\n' "$MARKERS" > .git/sequencer/todo
echo "$head" > .git/MERGE_HEAD && echo "from the sandbox" > .git/MERGE_MSG
"""


def test_planted_operation_state_drives_nothing(kit: Path, env: dict[str, str],
                                                owner: Owner, tmp_path: Path) -> None:
    repo = new_repo(owner, tmp_path / "project")
    twin = control(repo, PLANT_STATE, owner)
    owner.git(twin, "rebase", "--continue")
    assert "rebase" in owner.fired(), "the control ran nothing: the test proves nothing"
    for marker in owner.fired():
        (owner.markers / marker).unlink()

    result = sandbox(kit, repo, PLANT_STATE, env, owner)
    assert result.returncode == 0, result.stderr
    for command in (("rebase", "--continue"), ("cherry-pick", "--continue"),
                    ("revert", "--continue"), ("commit", "--allow-empty", "-qm", "owner")):
        owner.git(repo, *command)
    assert owner.fired() == []
    assert moved_from(repo) >= {".git/rebase-merge", ".git/sequencer", ".git/MERGE_HEAD",
                                ".git/MERGE_MSG"}
    assert not (repo / ".git" / "rebase-merge").exists()
    assert b"operation state (rebase-merge)" in result.stderr


PLANT_REDIRECTS = r"""
cd "$SBX_WORKSPACE"
mkdir -p elsewhere && cp -r .git/objects .git/refs .git/HEAD elsewhere/
printf '[core]\n\trepositoryformatversion = 0\n\tfsmonitor = touch %s/commondir\n' "$MARKERS" \
  > elsewhere/config
echo ../elsewhere > .git/commondir
echo /tmp > .git/objects/info/alternates
ln -s "$VICTIM" .git/logs/HEAD.new && mv -f .git/logs/HEAD.new .git/logs/HEAD
ln -sf "$VICTIM" .git/COMMIT_EDITMSG
true
"""


def test_redirects_and_links_in_the_git_directory_are_quarantined(
        kit: Path, env: dict[str, str], owner: Owner, tmp_path: Path) -> None:
    repo = new_repo(owner, tmp_path / "project")
    victim = tmp_path / "victim-bashrc"  # a host file outside the workspace
    victim.write_text("# the owner's shell start-up\n", encoding="utf-8")
    os.chown(victim, TESTER_UID, TESTER_UID)
    script = PLANT_REDIRECTS.replace("$VICTIM", str(victim))
    twin = control(repo, script, owner)
    owner.git(twin, "status")
    assert owner.fired() == ["commondir"], "the control ran nothing: the test proves nothing"
    (owner.markers / "commondir").unlink()
    (twin / ".git" / "commondir").unlink()
    owner.git(twin, "commit", "--allow-empty", "-qm", "control")
    assert victim.read_text(encoding="utf-8") != "# the owner's shell start-up\n"
    victim.write_text("# the owner's shell start-up\n", encoding="utf-8")

    result = sandbox(kit, repo, script, env, owner)
    assert result.returncode == 0, result.stderr
    assert owner.git(repo, "status").returncode == 0
    done = owner.git(repo, "commit", "--allow-empty", "-qm", "owner")
    assert done.returncode == 0, done.stderr
    assert owner.fired() == []
    assert victim.read_text(encoding="utf-8") == "# the owner's shell start-up\n"
    assert moved_from(repo) >= {".git/commondir", ".git/objects/info/alternates",
                                ".git/logs/HEAD", ".git/COMMIT_EDITMSG"}


PLANT_INDEX = r"""
cd "$SBX_WORKSPACE"
blob=$(printf '#!/bin/sh\ntouch %s/index-hook\n' "$MARKERS" | git hash-object -w --stdin)
python3 - "$blob" <<'PY'
import hashlib, struct, sys
data = open(".git/index", "rb").read()
_sig, _version, count = struct.unpack(">4sII", data[:12])
entries, offset = [], 12
for _ in range(count):
    length = struct.unpack(">H", data[offset + 60:offset + 62])[0] & 0xFFF
    size = (62 + length + 8) // 8 * 8
    entries.append(data[offset:offset + size])
    offset += size
path = b".git/hooks/pre-commit"
entry = struct.pack(">10I", 0, 0, 0, 0, 0, 0, 0o100755, 0, 0, 0) + bytes.fromhex(sys.argv[1])
entry += struct.pack(">H", len(path)) + path
entries.append(entry + b"\0" * ((62 + len(path) + 8) // 8 * 8 - len(entry)))
entries.sort(key=lambda e: e[62:62 + (struct.unpack(">H", e[60:62])[0] & 0xFFF)])
body = struct.pack(">4sII", b"DIRC", 2, len(entries)) + b"".join(entries)
open(".git/index", "wb").write(body + hashlib.sha1(body).digest())
PY
git ls-files | grep -c pre-commit
"""


def test_an_index_with_a_path_into_git_is_quarantined(kit: Path, env: dict[str, str],
                                                       owner: Owner, tmp_path: Path) -> None:
    repo = new_repo(owner, tmp_path / "project")
    twin = control(repo, PLANT_INDEX, owner)
    owner.git(twin, "checkout", "--", ".")  # "discard my changes"
    owner.git(twin, "commit", "--allow-empty", "-qm", "control")
    assert owner.fired() == ["index-hook"], "the control ran nothing: the test proves nothing"
    (owner.markers / "index-hook").unlink()

    result = sandbox(kit, repo, PLANT_INDEX, env, owner)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[-1] == b"1"  # the entry was in the index when it ended
    owner.git(repo, "checkout", "--", ".")
    owner.git(repo, "commit", "--allow-empty", "-qm", "owner")
    assert owner.fired() == []
    assert not (repo / ".git" / "hooks" / "pre-commit").exists()
    assert ".git/index" in moved_from(repo)  # the original, kept
    # The index was rewritten without the entry: the owner's work and staging are intact.
    assert owner.git(repo, "ls-files").stdout.split() == ["README"]
    assert owner.git(repo, "status", "--porcelain").stdout == ""


PLANT_POINTERS = r"""
cd "$SBX_WORKSPACE"
git init -q --bare evil
git --git-dir=evil config core.bare false
git --git-dir=evil config core.worktree ..
git --git-dir=evil config core.fsmonitor "touch $MARKERS/bare"
mkdir -p deep/down && printf 'gitdir: %s/evil\n' "$HOST_WS" > deep/down/.git
true
"""


def test_planted_bare_repositories_and_gitdir_pointers_run_nothing(
        kit: Path, env: dict[str, str], owner: Owner, tmp_path: Path) -> None:
    repo = new_repo(owner, tmp_path / "project")
    twin = control(repo, PLANT_POINTERS, owner)
    owner.git(twin / "evil", "status")
    assert owner.fired() == ["bare"], "the control ran nothing: the test proves nothing"
    (owner.markers / "bare").unlink()

    result = sandbox(kit, repo, PLANT_POINTERS, env, owner)
    assert result.returncode == 0, result.stderr
    for where in (repo / "evil", repo / "evil" / "refs", repo / "deep" / "down"):
        owner.git(where, "status")
    assert owner.fired() == []
    assert moved_from(repo) >= {"evil/config", "deep/down/.git"}


# -- what the host's git config names in the tree ---------------------------------------------


def test_hooks_path_includes_and_nested_repositories_of_the_owner_stay_read_only(
        kit: Path, env: dict[str, str], owner: Owner, tmp_path: Path) -> None:
    repo = new_repo(owner, tmp_path / "project")
    hooks = repo / ".githooks"
    hooks.mkdir()
    shared = repo / "shared.gitconfig"
    shared.write_text("[alias]\n\tst = status\n", encoding="utf-8")
    vendor = repo / "vendor"
    vendor.mkdir()
    for path in (hooks, shared, vendor):
        os.chown(path, TESTER_UID, TESTER_UID)
    owner.git(repo, "config", "core.hooksPath", ".githooks")
    owner.git(repo, "config", "include.path", "../shared.gitconfig")
    new_repo(owner, vendor / "lib")  # the owner's own clone inside the project
    script = r"""
cd "$SBX_WORKSPACE"
printf '#!/bin/sh\ntouch %s/hook\n' "$MARKERS" > .githooks/pre-commit 2>/dev/null
echo "hooks=$?"
printf '[core]\n\tfsmonitor = touch %s/include\n' "$MARKERS" >> shared.gitconfig 2>/dev/null
echo "include=$?"
git -C vendor/lib config core.fsmonitor "touch $MARKERS/vendor" 2>/dev/null; echo "vendor=$?"
echo change >> README && git -c user.email=a@b.invalid -c user.name=a commit -qam agent
echo "commit=$?"
"""
    result = sandbox(kit, repo, script, env, owner)
    assert result.returncode == 0, result.stderr
    values = dict(line.split("=", 1) for line in result.stdout.decode().split())
    assert values["hooks"] != "0" and values["include"] != "0" and values["vendor"] != "0"
    assert values["commit"] == "0"
    owner.git(repo, "commit", "--allow-empty", "-qm", "owner")
    owner.git(repo, "status")
    owner.git(vendor / "lib", "status")
    assert owner.fired() == []
    assert owner.git(repo, "log", "-1", "--skip=1", "--format=%s").stdout.strip() == "agent"


# -- the report of other tools' files -----------------------------------------------------------

HOST_FILES = (".envrc", "sub/.envrc", "crates/a/.cargo/config.toml", "rust-toolchain.toml",
              "mise.toml", ".tool-versions", "web/.npmrc", ".yarnrc.yml", ".pdbrc",
              "sitecustomize.py", ".exrc", "sub/.nvim.lua", ".idea/workspace.xml",
              ".vscode/tasks.json", "json.py", "typing/__init__.py",
              ".venv/lib/python3.11/site-packages/evil.pth", ".dir-locals.el",
              ".pre-commit-config.yaml", ".github/workflows/ci.yml", ".gitmodules",
              "node_modules/.bin/.envrc", "os.cpython-311-x86_64-linux-gnu.so",
              "shutil.pyc", "json/__init__.pyc", "mise.production.toml", "pnpm-workspace.yaml",
              "sub/.lazy.lua", "lefthook.toml", ".config/mise/config.toml")


def test_files_other_host_tools_run_are_reported(kit: Path, env: dict[str, str],
                                                 owner: Owner, tmp_path: Path,
                                                 state_home: Path) -> None:
    repo = new_repo(owner, tmp_path / "project")
    (repo / ".npmrc").write_text("fund=false\n", encoding="utf-8")  # there before: unchanged
    os.chown(repo / ".npmrc", TESTER_UID, TESTER_UID)
    writes = "; ".join(f'mkdir -p "$(dirname {p})" && echo x > {p}' for p in HOST_FILES)
    script = (f'cd "$SBX_WORKSPACE"; {writes}; mkdir -p h/.hg; '
              "printf '[hooks]\\nupdate = touch x\\n' > h/.hg/hgrc; "
              "echo '*.bin diff=hexdump' > .gitattributes")
    result = sandbox(kit, repo, script, env, owner, "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout.decode().splitlines()[-1])["data"]
    by_path = {f["path"]: f for f in data["workspace_findings"]}
    expected = set(HOST_FILES) - {"node_modules/.bin/.envrc"}  # not read in dependencies
    assert expected <= set(by_path), sorted(expected - set(by_path))
    assert "node_modules/.bin/.envrc" not in by_path and ".npmrc" not in by_path
    assert by_path["crates/a/.cargo/config.toml"]["tool"] == "cargo"
    assert by_path["json.py"]["tool"] == "python"
    assert by_path[".gitattributes"]["action"] == "reported"
    assert by_path["h/.hg/hgrc"]["action"] == "quarantined"
    assert set(data["host_config_changed"]) >= expected
    assert {f["path"] for f in audit_findings(state_home)} >= expected
    for path in HOST_FILES:  # a report, not a block: the agent's files stay
        assert (repo / path).exists()


# -- the legitimate use -------------------------------------------------------------------------

AGENT_WORK = r"""
cd "$SBX_WORKSPACE"
set -e
export GIT_AUTHOR_NAME=agent GIT_AUTHOR_EMAIL=agent@example.invalid
export GIT_COMMITTER_NAME=agent GIT_COMMITTER_EMAIL=agent@example.invalid
git checkout -q -b feature
echo feature > feature.txt && git add feature.txt && git commit -qm "agent: feature"
echo wip >> README && git stash -q
git checkout -q main && git merge -q --no-edit feature
git branch topic
git tag -a v1 -m v1
git rebase -q feature topic
mkdir -p tools/new && cd tools/new && git init -q && echo y > y && git add y \
  && git commit -qm "a new project" && git remote add origin https://example.invalid/x.git
echo done
"""


def test_an_agent_can_still_add_commit_branch_and_stash(kit: Path, env: dict[str, str],
                                                        owner: Owner, tmp_path: Path) -> None:
    repo = new_repo(owner, tmp_path / "project")
    result = sandbox(kit, repo, AGENT_WORK, env, owner)
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert result.stdout.split()[-1] == b"done"
    log = owner.git(repo, "log", "main", "--format=%s").stdout.split("\n")
    assert log[:2] == ["agent: feature", "first"]
    branches = owner.git(repo, "branch", "--format=%(refname:short)").stdout.split()
    assert set(branches) >= {"main", "feature", "topic"}
    assert owner.git(repo, "stash", "list").stdout.count("WIP") == 1
    assert owner.git(repo, "tag").stdout.split() == ["v1"]
    assert owner.git(repo, "status", "--porcelain").returncode == 0
    # Nothing was moved; the new repository (a harmless config) is kept and reported.
    assert quarantined(repo) == []
    stderr = result.stderr.decode()
    assert "moved them" not in stderr
    assert "tools/new/.git: a git repository created" in stderr
    assert owner.git(repo / "tools" / "new", "log", "--format=%s").stdout.strip() == \
        "a new project"
    assert owner.git(repo / "tools" / "new", "remote", "get-url", "origin").stdout.strip() \
        == "https://example.invalid/x.git"


# -- every exit path, named sandboxes, trust ------------------------------------------------------

PLANT_AND_WAIT = r"""
cd "$SBX_WORKSPACE"
mkdir -p .git/rebase-merge
printf 'exec touch %s/late\n' "$MARKERS" > .git/rebase-merge/git-rebase-todo
mkdir -p build/x && git init -q build/x
git -C build/x config core.fsmonitor "touch $MARKERS/late"
touch planted
sleep 600
"""


def test_a_run_that_times_out_is_checked_too(kit: Path, env: dict[str, str], owner: Owner,
                                             tmp_path: Path) -> None:
    repo = new_repo(owner, tmp_path / "project")
    result = sandbox(kit, repo, PLANT_AND_WAIT, env, owner, "--timeout", "4s")
    assert result.returncode != 0
    assert (repo / "planted").exists(), result.stderr
    assert moved_from(repo) >= {".git/rebase-merge", "build/x/.git/config"}, result.stderr


def test_a_run_whose_sbx_was_killed_is_checked_by_gc(kit: Path, env: dict[str, str],
                                                     owner: Owner, tmp_path: Path) -> None:
    repo = new_repo(owner, tmp_path / "project")
    reachable_by_others(tmp_path)
    process = subprocess.Popen(
        [str(SBX), "run", "--timeout", "120s", f"-eMARKERS={owner.markers}", str(kit),
         str(repo), "--", "bash", "-c", PLANT_AND_WAIT], env=env, stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + WAIT_S
        while not (repo / "planted").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert (repo / "planted").exists()
    finally:
        process.send_signal(signal.SIGKILL)  # no cleanup and no check by this sbx
        process.wait(30)
    assert (repo / ".git" / "rebase-merge").exists()
    gc = run_sbx(["gc", "--grace", "0"], env=env, timeout=180)
    assert gc.returncode == 0, gc.stderr
    assert moved_from(repo) >= {".git/rebase-merge", "build/x/.git/config"}
    assert b"ended without sbx" in gc.stderr
    owner.git(repo, "rebase", "--continue")
    owner.git(repo / "build" / "x", "status")
    assert owner.fired() == []


@pytest.fixture
def named(env: dict[str, str]) -> Iterator[str]:
    name = f"ws-{uuid.uuid4().hex[:10]}"
    yield name
    run_sbx(["rm", "-f", name], env=env, timeout=120)


def test_a_named_sandbox_is_checked_when_exec_ends_and_when_it_stops(
        kit: Path, env: dict[str, str], owner: Owner, tmp_path: Path, named: str) -> None:
    repo = new_repo(owner, tmp_path / "project")
    started = run_sbx(["run", "--name", named, "-d", f"-eMARKERS={owner.markers}", str(kit),
                       str(repo), "--", "bash", "-c", PLANT_AND_WAIT], env=env, timeout=180)
    assert started.returncode == 0, started.stderr
    deadline = time.monotonic() + WAIT_S
    while not (repo / "planted").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert (repo / "planted").exists()
    # The end of an exec session checks what the running sandbox planted so far.
    done = run_sbx(["exec", named, "--", "true"], env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert moved_from(repo) >= {".git/rebase-merge", "build/x/.git/config"}
    assert b"since it last started" in done.stderr
    # Planted again behind sbx's back (a process of the sandbox): `sbx stop` checks once the
    # container has stopped.
    home8 = home_hash(Path(env["SBX_HOME"]))[:8]
    late = subprocess.run(["docker", "exec", "-u", str(TESTER_UID), f"sbx-{named}-{home8}",
                           "bash", "-c", "mkdir -p /workspace/.git/sequencer && echo 'exec "
                           "touch x' > /workspace/.git/sequencer/todo"],
                          capture_output=True, timeout=60, check=False)
    assert late.returncode == 0, late.stderr
    assert (repo / ".git" / "sequencer").exists()
    stopped = run_sbx(["stop", named], env=env, timeout=120)
    assert stopped.returncode == 0, stopped.stderr
    assert not (repo / ".git" / "sequencer").exists()
    assert b"sequencer" in stopped.stderr
    owner.git(repo, "rebase", "--continue")
    owner.git(repo / "build" / "x", "status")
    assert owner.fired() == []
    # While it is stopped the owner's own git work is the owner's: a merge left in progress
    # survives the restart and the next session's check.
    (repo / "other").write_text("x\n", encoding="utf-8")
    os.chown(repo / "other", TESTER_UID, TESTER_UID)
    owner.git(repo, "checkout", "-qb", "side")
    owner.git(repo, "add", "other")
    owner.git(repo, "commit", "-qm", "side")
    owner.git(repo, "checkout", "-q", "main")
    merge = owner.git(repo, "merge", "--no-commit", "--no-ff", "side")
    assert merge.returncode == 0, merge.stderr
    assert (repo / ".git" / "MERGE_HEAD").exists()
    restarted = run_sbx(["run", "--name", named, "-d", str(kit)], env=env, timeout=180)
    assert restarted.returncode == 0, restarted.stderr
    assert run_sbx(["exec", named, "--", "true"], env=env, timeout=120).returncode == 0
    assert (repo / ".git" / "MERGE_HEAD").exists()
    assert ".git/MERGE_HEAD" not in moved_from(repo)


def test_a_trusted_workspace_is_reported_and_nothing_moved(kit: Path, env: dict[str, str],
                                                           owner: Owner,
                                                           tmp_path: Path) -> None:
    repo = new_repo(owner, tmp_path / "project")
    result = sandbox(kit, repo, PLANT_STATE, env, owner, "--trust-workspace")
    assert result.returncode == 0, result.stderr
    assert (repo / ".git" / "rebase-merge" / "git-rebase-todo").exists()
    assert quarantined(repo) == []
    assert b"not moved: the workspace is trusted" in result.stderr


def test_submodules_stay_usable_and_pinned_without_root(tester_sbx: list[str], owner: Owner,
                                                        tmp_path: Path) -> None:
    """sbx as the non-root owner: the pins go to the engine unstaged and are verified."""
    root = tmp_path / "tester"
    root.mkdir()
    os.chown(root, TESTER_UID, TESTER_UID)
    library = new_repo(owner, root / "library")
    repo = new_repo(owner, root / "project")
    done = owner.run("git", "-c", "protocol.file.allow=always", "-C", str(repo), "submodule",
                     "add", "-q", str(library), "lib")
    assert done.returncode == 0, done.stderr
    owner.git(repo, "commit", "-qm", "with a submodule")
    kit = make_kit(root / "kits", "gitagent",
                   f"FROM {BOOKWORM}\nUSER agent\nWORKDIR /workspace\nCMD [\"bash\"]\n")
    home = root / "state"
    home.mkdir()
    for directory, dirs, files in os.walk(root / "kits"):
        os.chown(directory, TESTER_UID, TESTER_UID)
        for name in (*dirs, *files):
            os.chown(os.path.join(directory, name), TESTER_UID, TESTER_UID)
    os.chown(home, TESTER_UID, TESTER_UID)
    script = r"""
cd "$SBX_WORKSPACE/lib"
export GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@b.invalid GIT_COMMITTER_NAME=a
export GIT_COMMITTER_EMAIL=a@b.invalid
echo more >> README && git commit -qam "agent in the submodule"; echo "commit=$?"
git config core.fsmonitor "touch /tmp/x" 2>/dev/null; echo "config=$?"
mkdir "$SBX_WORKSPACE/.git/modules/other" 2>/dev/null; echo "module=$?"
"""
    reachable_by_others(root)
    result = run_sbx(["run", f"-eMARKERS={owner.markers}", str(kit), str(repo), "--", "bash",
                      "-c", script],
                     env={"PATH": "/usr/bin:/bin", "HOME": str(root), "SBX_HOME": str(home),
                          "SBX_CONFIG": os.devnull}, prefix=tester_sbx, timeout=180)
    assert result.returncode == 0, result.stderr
    values = dict(line.split("=", 1) for line in result.stdout.decode().split())
    assert values["commit"] == "0"  # the submodule's own git directory is writable
    assert values["config"] != "0" and values["module"] != "0"  # its config and modules not
    assert owner.git(repo / "lib", "log", "-1", "--format=%s").stdout.strip() == \
        "agent in the submodule"
    assert not (repo / ".git" / "modules" / "other").exists()
