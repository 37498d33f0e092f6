"""`sbx cp` on a real engine: a round trip both ways with a named sandbox (its workspace and
its HOME volume), files owned by the sandbox's user inside; and the refusals: the read-only
root, a tmpfs, a pinned git path, a blocked host path, and archives the sandbox crafted (a
link leading out, a file past the size bound), each with its reason and nothing written."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.sbxproc import Finished, run_sbx

from .conftest import user_owned

pytestmark = pytest.mark.docker


@pytest.fixture
def env(state_home: Path) -> dict[str, str]:
    return {**os.environ, "SBX_HOME": str(state_home), "SBX_CONFIG": os.devnull}


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    subprocess.run(["git", "init", "-q", str(ws)], check=True, timeout=30)
    for path in (ws, *ws.rglob("*")):
        user_owned(path)
    return ws


@pytest.fixture
def sandbox(env: dict[str, str], busybox_kit: Path, workspace: Path) -> Iterator[str]:
    name = f"cp-{uuid.uuid4().hex[:8]}"
    created = run_sbx(["run", "--name", name, "-d", str(busybox_kit), str(workspace), "--",
                       "sleep", "600"], env=env)
    assert created.returncode == 0, created.stderr
    yield name
    run_sbx(["rm", "-f", name], env=env, timeout=120)


def _sh(env: dict[str, str], name: str, script: str) -> str:
    done = run_sbx(["exec", name, "--", "sh", "-c", script], env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout.decode()


def _cp(env: dict[str, str], cwd: Path, *args: str) -> Finished:
    return run_sbx(["cp", *args], env=env, cwd=cwd)


def test_round_trip_both_ways(env: dict[str, str], sandbox: str, tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_text("hello\n", encoding="utf-8")
    (src / "sub" / "b.bin").write_bytes(os.urandom(70_000))
    (src / "link").symlink_to("a.txt")
    os.chmod(src / "a.txt", 0o4755)  # noqa: S103 - a setuid bit, dropped on the way in
    into = _cp(env, tmp_path, "./src", f"{sandbox}:/workspace/")
    assert into.returncode == 0, into.stderr
    home = _sh(env, sandbox, "echo $HOME").strip()
    seen = _sh(env, sandbox, "cd /workspace/src && cat a.txt && stat -c '%u %a' a.txt "
               "&& readlink link && md5sum sub/b.bin | cut -c1-32; id -u")
    lines = seen.split()
    assert lines[0] == "hello" and lines[2] == "755" and lines[3] == "a.txt"
    assert lines[1] == lines[-1]  # owned by the sandbox's user
    import hashlib
    assert lines[4] == hashlib.md5((src / "sub" / "b.bin").read_bytes()).hexdigest()  # noqa: S324
    # into HOME (a volume), then out of it again as a directory, with --json
    assert _cp(env, tmp_path, str(src / "a.txt"), f"{sandbox}:{home}/copied.txt"
               ).returncode == 0
    _sh(env, sandbox, f"mkdir -p {home}/made/deep && echo out > {home}/made/deep/x "
                      f"&& ln -s deep/x {home}/made/rel && cat {home}/copied.txt")
    out = tmp_path / "out"
    back = _cp(env, tmp_path, "--json", f"{sandbox}:{home}/made", str(out))
    assert back.returncode == 0, back.stderr
    envelope = json.loads(back.stdout.decode().strip().splitlines()[-1])
    assert envelope["data"]["direction"] == "out" and envelope["data"]["files"] == 1
    assert (out / "deep" / "x").read_text() == "out\n"
    assert os.readlink(out / "rel") == "deep/x"
    # a file into an existing host directory lands under its own name
    assert _cp(env, tmp_path, f"{sandbox}:{home}/copied.txt", str(tmp_path)).returncode == 0
    assert (tmp_path / "copied.txt").read_text() == "hello\n"


@pytest.mark.parametrize(("target", "rule"), [
    ("/etc/", "read_only_root"),
    ("/tmp/", "tmpfs_target"),
    ("/workspace/.git/hooks/", "read_only_mount"),
])
def test_into_what_the_sandbox_may_not_write_is_refused(
        env: dict[str, str], sandbox: str, tmp_path: Path, target: str, rule: str) -> None:
    (tmp_path / "f").write_text("x", encoding="utf-8")
    done = _cp(env, tmp_path, "./f", f"{sandbox}:{target}")
    assert done.returncode == 125, done.stderr
    assert b"copy_refused" in done.stderr and rule.encode() in done.stderr
    assert b"Traceback" not in done.stderr


def test_a_blocked_host_path_is_refused(env: dict[str, str], sandbox: str,
                                        tmp_path: Path) -> None:
    done = _cp(env, tmp_path, f"{sandbox}:/etc/hostname", "/etc/")
    assert done.returncode == 125 and b"mount_blocked" in done.stderr, done.stderr


@pytest.mark.parametrize(("script", "rule"), [
    ("mkdir -p $HOME/evil && ln -s /etc $HOME/evil/esc", "link_escapes"),
    ("mkdir -p $HOME/evil/a && ln -s ../../.. $HOME/evil/a/up", "link_escapes"),
    ("mkdir -p $HOME/evil && ln -s . $HOME/evil/self && ln -s self/.. $HOME/evil/out",
     "link_escapes"),
    ("mkdir -p $HOME/evil && dd if=/dev/zero of=$HOME/evil/big bs=1024 count=3072 2>/dev/null",
     "too_large"),
])
def test_archives_the_sandbox_crafted_are_refused_and_nothing_is_written(
        env: dict[str, str], sandbox: str, tmp_path: Path, script: str, rule: str) -> None:
    home = _sh(env, sandbox, f"{script}; echo $HOME").strip().splitlines()[-1]
    dest = tmp_path / "dest"
    dest.mkdir()
    done = _cp(env, tmp_path, "--max-size", "1m", f"{sandbox}:{home}/evil", str(dest))
    assert done.returncode == 125, done.stderr
    assert b"copy_refused" in done.stderr and rule.encode() in done.stderr
    assert list(dest.iterdir()) == []  # not even a partial copy (nor its staging directory)


def test_bad_arguments_are_refused_with_a_reason(env: dict[str, str], tmp_path: Path) -> None:
    for args in (["a", "b"], ["x:/a", "y:/b"], ["nosuch:/a", "."]):
        done = _cp(env, tmp_path, *args)
        assert done.returncode == 2, (args, done.stderr)
        assert b"invalid_argument" in done.stderr and b"Traceback" not in done.stderr


@pytest.mark.parametrize("socket", ["1", "0"])
def test_both_transports_copy_and_refuse_alike(env: dict[str, str], sandbox: str,
                                               tmp_path: Path, socket: str) -> None:
    """The socket engine's own archive calls and the SDK's (SBX_ENGINE_SOCKET=0)."""
    env = {**env, "SBX_ENGINE_SOCKET": socket}
    (tmp_path / "f").write_bytes(b"both ways\n")
    assert _cp(env, tmp_path, "./f", f"{sandbox}:/workspace/f").returncode == 0
    _sh(env, sandbox, "mkdir -p $HOME/d && cp /workspace/f $HOME/d/g")
    home = _sh(env, sandbox, "echo $HOME").strip()
    back = _cp(env, tmp_path, f"{sandbox}:{home}/d", str(tmp_path / "back"))
    assert back.returncode == 0, back.stderr
    assert (tmp_path / "back" / "g").read_bytes() == b"both ways\n"
    refused = _cp(env, tmp_path, "./f", f"{sandbox}:/etc/")
    assert refused.returncode == 125 and b"read_only_root" in refused.stderr
    missing = _cp(env, tmp_path, f"{sandbox}:/nonexistent", str(tmp_path / "x"))
    assert missing.returncode == 2 and b"does not exist" in missing.stderr
