"""git-identity@1, decided by its handler: what it plans, what it refuses, how it is read."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sbx.base.errors import SbxError
from sbx.base.reasons import REGISTRY, Reason
from sbx.domain.kits import captypes
from sbx.domain.kits.captypes.git_identity import CONFIG_PATH, FIX, config_text
from sbx.domain.kits.compose import Contribution, compose
from sbx.domain.kits.rules import findings
from sbx.domain.sandbox.capabilities import SUPPORTED, plan_capabilities
from sbx.domain.sandbox.hardening import Limits
from sbx.seams.host.git import global_identity

NS = "com.docker.sandbox/"
GIT_IDENTITY = NS + "git-identity@1"
MIB = 1024 * 1024
LIMITS = Limits(memory_bytes=4096 * MIB, pids=128, cpu_millis=1000, tmp_bytes=256 * MIB,
                workspace_bytes=512 * MIB, home_bytes=512 * MIB)


def _plan(entry: dict[str, Any], identity: tuple[str, str] | None) -> Any:
    asked: list[bool] = []

    def read() -> tuple[str, str] | None:
        asked.append(True)
        return identity

    composition = compose([Contribution("kit", [entry])])
    plan = plan_capabilities(composition, limits=LIMITS, allow_privileged=False,
                             workspace_target="/workspace", kits={}, git_identity=read)
    return plan, asked


def test_the_type_is_supported_and_owned_by_its_module() -> None:
    assert GIT_IDENTITY in SUPPORTED
    assert captypes.handler(GIT_IDENTITY).types == (GIT_IDENTITY,)


def test_the_identity_becomes_a_system_config_and_nothing_else() -> None:
    plan, asked = _plan({"type": GIT_IDENTITY}, ("Ada Lovelace", "ada@example.com"))
    assert asked == [True]
    [file] = plan.lifecycle.files
    assert file.path == CONFIG_PATH
    assert file.content == ('[include]\n\tpath = /etc/gitconfig\n[user]\n\tname = "Ada Lovelace"'
                            '\n\temail = "ada@example.com"\n')
    # A system-level default: no GIT_AUTHOR_*/COMMITTER_* override, the global file stays free.
    assert plan.env == {"GIT_CONFIG_SYSTEM": CONFIG_PATH}
    assert not plan.skipped


def test_without_the_type_the_host_is_never_asked() -> None:
    plan, asked = _plan({"type": NS + "resources@1", "config": {"cpu": 1}}, ("a", "b@c"))
    assert asked == [] and plan.env == {} and not plan.lifecycle.files


def test_required_without_an_identity_refuses_with_the_fix() -> None:
    with pytest.raises(SbxError) as caught:
        _plan({"type": GIT_IDENTITY}, None)
    assert caught.value.reason is Reason.GIT_IDENTITY_MISSING
    assert "kit capabilities[0] (com.docker.sandbox/git-identity@1)" in caught.value.message
    assert caught.value.hint == f"Set one: {FIX}"
    assert "git config --global user.name" in REGISTRY[Reason.GIT_IDENTITY_MISSING].fix


def test_optional_without_an_identity_is_skipped_and_recorded() -> None:
    plan, _ = _plan({"type": GIT_IDENTITY, "optional": True}, None)
    [record] = plan.skipped
    assert (record.type, record.path) == (GIT_IDENTITY, "capabilities[0]")
    assert "no usable user.name" in record.reason
    assert plan.env == {} and not plan.lifecycle.files


@pytest.mark.parametrize("name", ["two\nlines", "nul\0", "   ", ""])
def test_a_value_that_cannot_be_one_config_value_is_no_identity(name: str) -> None:
    assert config_text(name, "a@b.example") is None
    with pytest.raises(SbxError) as caught:
        _plan({"type": GIT_IDENTITY}, (name, "a@b.example"))
    assert caught.value.reason is Reason.GIT_IDENTITY_MISSING


def test_quotes_and_backslashes_stay_inside_the_value() -> None:
    text = config_text('A "B" \\ C', "x@y.example")
    assert text is not None and '\tname = "A \\"B\\" \\\\ C"\n' in text


def test_any_config_is_a_schema_error_and_two_entries_a_singleton_error() -> None:
    doc = {"schemaVersion": "3", "kind": "workload", "name": "w",
           "capabilities": [{"type": GIT_IDENTITY}, {"type": GIT_IDENTITY, "config": {}}]}
    messages = [f.message for f in findings(doc)]
    assert any("singleton" in m for m in messages), messages


git = shutil.which("git")


@pytest.mark.skipif(git is None, reason="git is not installed")
def test_the_host_identity_is_the_global_one_never_the_repository_s(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    assert global_identity(env) is None  # nothing set
    (home / ".gitconfig").write_text("[user]\n\tname = Host User\n\temail = host@example.com\n",
                                     encoding="utf-8")
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True, env=env)
    subprocess.run(["git", "-C", str(repo), "config", "user.name", "Repo User"], check=True,
                   env=env)
    # Even run from inside the repository, with GIT_DIR pointing at it, the global pair wins.
    assert global_identity({**env, "GIT_DIR": str(repo / ".git"), "PWD": str(repo)}) == (
        "Host User", "host@example.com")
    (home / ".gitconfig").write_text("[user]\n\tname = Only A Name\n", encoding="utf-8")
    assert global_identity(env) is None  # half an identity is none
