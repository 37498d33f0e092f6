"""`sbx skills` against a real sandbox: a skill added with `sbx skills add` is at the kit's
agent-skills@1 path on the next run, and gone on the run after `sbx skills rm`; hostile
sources are refused with their reasons and leave the store as it was."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.docker

DOCKERFILE = "FROM sbx-base/bookworm:1\nUSER agent\nWORKDIR /workspace\n"
Runner = Callable[..., Any]
KitMaker = Callable[..., Path]
SKILLS = "/home/agent/.claude/skills"
PROBE = (f"cat {SKILLS}/checker/SKILL.md 2>/dev/null || echo skill=absent; "
         f"ls -l {SKILLS}/checker/run.sh 2>/dev/null || true")


@pytest.fixture
def env(state_home: Path, tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "SBX_HOME": str(state_home), "SBX_CONFIG": os.devnull,
            "SBX_SKILLS": str(tmp_path / "store")}


def _source(tmp_path: Path) -> Path:
    source = tmp_path / "src" / "checker"
    source.mkdir(parents=True)
    (source / "SKILL.md").write_text("---\ndescription: Checks things\n---\n# checker skill\n")
    (source / "run.sh").write_text("#!/bin/sh\n")
    (source / "run.sh").chmod(0o4700)
    return source


def _run(sbx_cli: Runner, kit: Path, env: dict[str, str]) -> str:
    result = sbx_cli(["run", "--json", str(kit), "--", "sh", "-c", PROBE], env=env)
    envelope = result.envelope()
    assert envelope["status"] == "ok", (envelope, result.stderr)
    return str(envelope["data"]["stdout"])


def test_added_skill_is_seen_and_removed_one_is_gone(
        kit_factory: KitMaker, sbx_cli: Runner, env: dict[str, str], tmp_path: Path) -> None:
    kit = kit_factory("skillkit", DOCKERFILE, f"""capabilities:
  - type: com.docker.sandbox/agent-skills@1
    config:
      path: {SKILLS}
""")
    added = sbx_cli(["skills", "add", str(_source(tmp_path))], env=env)
    assert added.exit_code == 0, added.stderr
    listed = sbx_cli(["skills", "ls"], env=env)
    assert "checker" in listed.stdout and "Checks things" in listed.stdout
    out = _run(sbx_cli, kit, env)
    assert "# checker skill" in out
    assert "-rwxr-xr-x" in out  # the copy's mode: readable by the sandbox's user, no setuid
    removed = sbx_cli(["skills", "rm", "checker"], env=env)
    assert removed.exit_code == 0, removed.stderr
    assert "skill=absent" in _run(sbx_cli, kit, env)
    again = sbx_cli(["skills", "rm", "checker"], env=env)
    assert again.exit_code == 2 and "(skill_not_found)" in again.stderr


def test_hostile_sources_are_refused_and_nothing_is_written(
        sbx_cli: Runner, env: dict[str, str], tmp_path: Path) -> None:
    store = Path(env["SBX_SKILLS"])
    source = _source(tmp_path)
    (tmp_path / "secret").write_text("host secret")
    (source / "leak").symlink_to(tmp_path / "secret")
    out = sbx_cli(["skills", "add", str(source)], env=env)
    assert out.exit_code == 125 and "(skill_source_unsafe)" in out.stderr
    assert "leak" in out.stderr and "host secret" not in out.stdout + out.stderr
    (source / "leak").unlink()
    (source / "up").symlink_to("../../secret")
    out = sbx_cli(["skills", "add", str(source)], env=env)
    assert out.exit_code == 125 and "(skill_source_unsafe)" in out.stderr
    (source / "up").unlink()
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(source / "agent.sock"))
        out = sbx_cli(["skills", "add", str(source)], env=env)
        assert out.exit_code == 125 and "socket" in out.stderr
    finally:
        server.close()
        (source / "agent.sock").unlink()
    for name in ("../escape", ".hidden", "-rf", "a" * 256):
        out = sbx_cli(["skills", "add", str(source), "--name", name], env=env)
        assert out.exit_code == 2 and "(skill_name_invalid)" in out.stderr, name
    assert not (store.parent / "escape").exists()
    assert not store.exists() or os.listdir(store) == []
    assert sbx_cli(["skills", "add", str(source)], env=env).exit_code == 0  # now clean
    assert os.listdir(store) == ["checker"]
