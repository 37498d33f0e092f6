"""`sbx skills ls|add|rm` through the CLI: output, --json, refusals with their fix, exit
statuses, and `sbx explain` of each reason."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sbx.base.reasons import REGISTRY, Reason
from tests.conftest import run_cli


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "SBX_HOME": str(tmp_path / "state"),
            "SBX_SKILLS": str(tmp_path / "store"), "NO_COLOR": "1"}


def _skill(tmp_path: Path, name: str) -> Path:
    source = tmp_path / "src" / name
    source.mkdir(parents=True)
    (source / "SKILL.md").write_text(
        "---\ndescription: \"Checks \\u001b[31mthings\"\n---\nCheck things.\n")
    return source


def test_add_ls_rm(tmp_path: Path, env: dict[str, str]) -> None:
    source = _skill(tmp_path, "checker")
    added = run_cli(["skills", "add", str(source)], env=env, cwd=tmp_path)
    assert added.exit_code == 0, added.stderr
    assert added.stdout.startswith("added skill checker (")
    listed = run_cli(["skills", "ls"], env=env, cwd=tmp_path)
    assert "checker" in listed.stdout and "Checks [31mthings" in listed.stdout
    assert "\x1b" not in listed.stdout
    data = json.loads(run_cli(["skills", "ls", "--json"], env=env, cwd=tmp_path).stdout)
    assert [s["name"] for s in data["data"]["skills"]] == ["checker"]
    assert data["data"]["store"] == env["SBX_SKILLS"]
    again = run_cli(["skills", "add", str(source), "--name", "other", "--json"], env=env,
                    cwd=tmp_path)
    assert json.loads(again.stdout)["data"]["name"] == "other"
    gone = run_cli(["skills", "rm", "checker"], env=env, cwd=tmp_path)
    assert gone.exit_code == 0 and "removed skill checker" in gone.stdout
    assert sorted(os.listdir(env["SBX_SKILLS"])) == ["other"]


def test_refusals_carry_their_reason_and_a_fix(tmp_path: Path, env: dict[str, str]) -> None:
    source = _skill(tmp_path, "checker")
    assert run_cli(["skills", "add", str(source)], env=env, cwd=tmp_path).exit_code == 0
    exists = run_cli(["skills", "add", str(source)], env=env, cwd=tmp_path)
    assert exists.exit_code == 2 and "(skill_exists)" in exists.stderr
    assert f"sbx skills add {source} --name checker --force" in exists.stderr
    forced = run_cli(["skills", "add", str(source), "--force"], env=env, cwd=tmp_path)
    assert forced.exit_code == 0 and forced.stdout.startswith("replaced skill checker")
    missing = run_cli(["skills", "rm", "nope", "--json"], env=env, cwd=tmp_path)
    envelope = json.loads(missing.stdout)
    assert missing.exit_code == 2 and envelope["reason"] == "skill_not_found" and envelope["hint"]
    bad = run_cli(["skills", "add", str(source), "--name", "-rf"], env=env, cwd=tmp_path)
    assert bad.exit_code == 2 and "(skill_name_invalid)" in bad.stderr and "--name rf" in bad.stderr
    os.mkfifo(source / "pipe")
    unsafe = run_cli(["skills", "add", str(source), "--name", "x"], env=env, cwd=tmp_path)
    assert unsafe.exit_code == 125 and "(skill_source_unsafe)" in unsafe.stderr
    assert sorted(os.listdir(env["SBX_SKILLS"])) == ["checker"]


@pytest.mark.parametrize("reason", [r for r in Reason if r.value.startswith("skill_")])
def test_explain_answers_each_skills_reason(tmp_path: Path, env: dict[str, str],
                                            reason: Reason) -> None:
    done = run_cli(["explain", reason.value], env=env, cwd=tmp_path)
    assert done.exit_code == 0 and REGISTRY[reason].fix in " ".join(done.stdout.split())
