"""``--workspace-mode copy`` on real engines: the local one and a second engine host reached
over ssh:// (tests/support/enginehost.py).

The workspace arrives byte-exact in a volume of the sandbox, owned by its user, with a link
that points outside kept as a link (never followed: the target's bytes never cross); the host
directory is never written; nothing is created on the local engine when the far one runs it;
a workspace over ``[sandbox] workspace_copy_bytes`` or holding a socket is refused before
anything exists; a named sandbox keeps its copy across stop/start, `sbx cp` brings a result
out, and `sbx rm` removes the volume. A bound workspace on the far engine is refused with the
copy as its pastable fix.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import socket
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from sbx.base import labels
from sbx.base.paths import home_hash
from sbx.seams.driver import SdkEngine
from tests.support.sbxproc import run_sbx

from .conftest import BUSYBOX, FarHost, owned, user_owned

pytestmark = pytest.mark.docker

KIT = f'FROM {BUSYBOX}\nUSER agent\nWORKDIR /workspace\nCMD ["sh"]\n'
# Every file under the workspace with its digest, every link with its target, in one order.
LISTING = ("cd /workspace && find . -type f | sort | xargs sha256sum; "
           "find . -type l | sort | while read l; do echo \"$l -> $(readlink \"$l\")\"; done; "
           "stat -c '%u:%g %a' . sub")


@pytest.fixture
def kit(kit_factory: Callable[..., Path]) -> Path:
    return kit_factory("wscopy", KIT)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A project with a nested file, binary data, a hard link, a relative link and a link
    pointing outside it (at a secret the sandbox must never receive)."""
    outside = tmp_path / "outside-secret"
    outside.write_text("never copied\n", encoding="utf-8")
    ws = tmp_path / "project"
    (ws / "sub").mkdir(parents=True)
    (ws / "a.txt").write_text("hello\n", encoding="utf-8")
    (ws / "sub" / "data.bin").write_bytes(os.urandom(300_000))
    os.link(ws / "a.txt", ws / "hard.txt")
    (ws / "rel").symlink_to("sub/data.bin")
    (ws / "escape").symlink_to(outside)
    for path in (ws, *ws.rglob("*")):
        if not path.is_symlink():
            user_owned(path)
    return ws


def _expected(ws: Path) -> str:
    files = sorted(p for p in ws.rglob("*") if p.is_file() and not p.is_symlink())
    lines = [f"{hashlib.sha256(p.read_bytes()).hexdigest()}  ./{p.relative_to(ws)}"
             for p in files]
    links = sorted(p for p in ws.rglob("*") if p.is_symlink())
    lines += [f"./{p.relative_to(ws)} -> {os.readlink(p)}" for p in links]
    return "\n".join(lines) + "\n"


def _tree(ws: Path) -> dict[str, bytes]:
    return {str(p.relative_to(ws)): (os.readlink(p).encode() if p.is_symlink()
                                     else p.read_bytes() if p.is_file() else b"dir")
            for p in ws.rglob("*")}


def _local_env(state_home: Path, config: Path | None = None) -> dict[str, str]:
    return {**os.environ, "SBX_HOME": str(state_home),
            "SBX_CONFIG": str(config) if config is not None else os.devnull}


def _volumes(engine: SdkEngine, state_home: Path) -> list[str]:
    return [o.id for o in owned(engine, state_home) if o.kind == "volume"]


def test_a_copied_workspace_is_byte_exact_and_links_stay_links_on_the_local_engine(
        kit: Path, workspace: Path, state_home: Path, engine: SdkEngine) -> None:
    before = _tree(workspace)
    done = run_sbx(["run", "--rm", str(kit), str(workspace), "--workspace-mode", "copy",
                    "--", "sh", "-c", LISTING + "; echo planted > /workspace/new.txt; id -u; "
                    "cat /workspace/escape || echo dangling"],
                   env=_local_env(state_home), timeout=180)
    assert done.returncode == 0, done.stderr
    out = done.stdout.decode()
    assert out.startswith(_expected(workspace)), out
    rest = out[len(_expected(workspace)):].split("\n")
    uid = rest[2]
    assert rest[0] == f"{uid}:{uid} {oct(workspace.stat().st_mode & 0o777)[2:]}"  # the root too
    assert rest[1].startswith(f"{uid}:{uid} ") and uid != "0"
    assert "never copied" not in out and rest[3] == "dangling"  # the link was not followed
    assert _tree(workspace) == before  # nothing written back to the host
    assert _volumes(engine, state_home) == []  # the one-shot's volume went with it


def test_a_workspace_over_the_bound_is_refused_before_anything_exists(
        kit: Path, workspace: Path, state_home: Path, engine: SdkEngine,
        tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text("[sandbox]\nworkspace_copy_bytes = 100000\n", encoding="utf-8")
    done = run_sbx(["run", "--rm", str(kit), str(workspace), "--workspace-mode", "copy",
                    "--", "true"], env=_local_env(state_home, config), timeout=180)
    assert done.returncode == 125, done.stderr
    text = done.stderr.decode()
    assert "(workspace_copy_refused)" in text and "rule too_large" in text, text
    assert "workspace_copy_bytes = 200000" in text  # the fix names the key and a value
    assert owned(engine, state_home) == []  # no volume, no container was made
    config.write_text("[sandbox]\nworkspace_copy_bytes = 1000000\n", encoding="utf-8")
    again = run_sbx(["run", "--rm", str(kit), str(workspace), "--workspace-mode", "copy",
                     "--", "cat", "/workspace/a.txt"], env=_local_env(state_home, config),
                    timeout=180)
    assert (again.returncode, again.stdout) == (0, b"hello\n"), again.stderr


def test_a_socket_in_the_workspace_is_refused(kit: Path, workspace: Path, state_home: Path,
                                              engine: SdkEngine) -> None:
    listener = socket.socket(socket.AF_UNIX)
    try:
        listener.bind(str(workspace / "agent.sock"))
        done = run_sbx(["run", "--rm", str(kit), str(workspace), "--workspace-mode", "copy",
                        "--", "true"], env=_local_env(state_home), timeout=180)
    finally:
        listener.close()
    assert done.returncode == 125, done.stderr
    text = done.stderr.decode()
    assert "(workspace_copy_refused)" in text and "agent.sock" in text, text
    assert owned(engine, state_home) == []


def test_a_named_sandbox_keeps_its_copy_across_stop_and_start_and_rm_removes_it(
        kit: Path, workspace: Path, state_home: Path, engine: SdkEngine,
        tmp_path: Path) -> None:
    env = _local_env(state_home)
    name = f"wscopy-{uuid.uuid4().hex[:8]}"
    try:
        made = run_sbx(["create", "--name", name, str(kit), str(workspace),
                        "--workspace-mode", "copy"], env=env, timeout=180)
        assert made.returncode == 0, made.stderr
        volumes = _volumes(engine, state_home)
        assert len(volumes) >= 1 and any(v.endswith("-ws") for v in volumes), volumes
        wrote = run_sbx(["exec", name, "--", "sh", "-c", "echo result > /workspace/out.txt"],
                        env=env)
        assert wrote.returncode == 0, wrote.stderr
        assert run_sbx(["stop", name], env=env, timeout=120).returncode == 0
        assert run_sbx(["start", name], env=env, timeout=120).returncode == 0
        seen = run_sbx(["exec", name, "--", "sh", "-c",
                        "cat /workspace/out.txt /workspace/a.txt"], env=env)
        assert (seen.returncode, seen.stdout) == (0, b"result\nhello\n"), seen.stderr
        back = tmp_path / "back"
        back.mkdir()
        copied = run_sbx(["cp", f"{name}:/workspace/out.txt", str(back)], env=env)
        assert copied.returncode == 0, copied.stderr
        assert (back / "out.txt").read_text(encoding="utf-8") == "result\n"
        assert not (workspace / "out.txt").exists()  # the host copy never changed
    finally:
        removed = run_sbx(["rm", "-f", name], env=env, timeout=120)
    assert removed.returncode == 0, removed.stderr
    assert owned(engine, state_home) == []  # the workspace volume went with it


def test_a_copied_workspace_on_the_far_engine_over_ssh(
        far_host: FarHost, kit: Path, workspace: Path, state_home: Path,
        engine: SdkEngine) -> None:
    before = _tree(workspace)
    done = run_sbx(["run", "--rm", str(kit), str(workspace), "--workspace-mode", "copy",
                    "--", "sh", "-c", LISTING + "; cat /workspace/escape || echo dangling"],
                   env=far_host.env(state_home), timeout=300)
    assert done.returncode == 0, done.stderr
    out = done.stdout.decode()
    assert out.startswith(_expected(workspace)), out
    assert "never copied" not in out and out.rstrip().endswith("dangling")
    assert _tree(workspace) == before
    assert owned(engine, state_home) == []  # nothing on this machine's engine
    far_volumes = far_host.host.docker("volume", "ls", "-q", "--filter",
                                       f"label={labels.HOME}={home_hash(state_home)}")
    assert far_volumes.returncode == 0 and far_volumes.stdout.split() == []
    assert far_host.containers(state_home) == []


def test_a_bound_workspace_on_the_far_engine_is_refused_with_the_copy_as_its_fix(
        far_host: FarHost, kit: Path, workspace: Path, state_home: Path,
        engine: SdkEngine) -> None:
    done = run_sbx(["run", "--rm", str(kit), str(workspace), "--", "true"],
                   env=far_host.env(state_home), timeout=180)
    assert done.returncode == 125, done.stderr
    text = done.stderr.decode()
    assert "(engine_not_local)" in text and str(workspace) in text, text
    fix = shlex.join(["sbx", "run", str(kit), str(workspace), "--workspace-mode", "copy"])
    assert fix in text, text
    assert far_host.containers(state_home) == [] and owned(engine, state_home) == []


def test_a_kept_copy_is_found_again_by_the_directory_it_was_copied_from(
        kit: Path, workspace: Path, state_home: Path, engine: SdkEngine) -> None:
    env = _local_env(state_home)
    made = run_sbx(["create", str(kit), str(workspace), "--workspace-mode", "copy"], env=env,
                   timeout=180)
    assert made.returncode == 0, made.stderr
    name = made.stdout.decode().strip()
    try:
        assert name == f"wscopy-{workspace.name}"
        again = run_sbx(["create", str(kit), str(workspace), "--workspace-mode", "copy"],
                        env=env, timeout=180)
        assert again.returncode == 2 and f"{name} exists already".encode() in again.stderr
        listed = run_sbx(["ls"], env=env)
        assert str(workspace).encode() in listed.stdout
    finally:
        assert run_sbx(["rm", "-f", name], env=env, timeout=120).returncode == 0
    assert owned(engine, state_home) == []
