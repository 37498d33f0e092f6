"""`sbx run claude|codex|gemini` runs the bundled agent kit by its short name, for real: the
official release answers through sbx's proxy with the real key (stand-in APIs on the tests'
local internet, as tests/integration/test_agents.py runs them by path), from a directory that
holds no kit at all; a directory of the same name there is run instead."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.agent_api import StandIn
from tests.support.origin import Internet
from tests.support.sbxproc import run_sbx

from .conftest import user_owned
from .test_agents import (  # the session's agent images and the stand-in API, shared
    CLAUDE,
    CODEX,
    GEMINI,
    RUN_TIMEOUT_S,
    SCRIPT,
    Agent,
    _bind,
    _crossed,
    _env,
    agent_versions,  # noqa: F401 -- a fixture
    api,  # noqa: F401 -- a fixture
)

pytestmark = pytest.mark.docker

SHORT = {"claude-code": "claude", "codex": "codex", "gemini-cli": "gemini"}
ALL = [pytest.param(a, id=SHORT[a.kit]) for a in (CLAUDE, CODEX, GEMINI)]


@pytest.mark.parametrize("agent", ALL)
def test_short_name_one_shot_answers_with_the_real_key(
        agent: Agent, agent_versions: dict[str, str], api: StandIn,  # noqa: F811
        internet: Internet, state_home: Path, tmp_path: Path) -> None:
    _bind(state_home, agent)
    (tmp_path / "project").mkdir()
    workspace = user_owned(tmp_path / "project")
    env = _env(state_home, internet.sbx_config(tmp_path / "config.toml"))
    done = run_sbx(["run", "--rm", SHORT[agent.kit], ".", "--arg", "source=staged",
                    "--timeout", "240",
                    "--", *agent.one_shot, "Say hello."], env=env, timeout=RUN_TIMEOUT_S,
                   cwd=workspace)
    out, err = done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")
    assert done.returncode == 0, err
    assert SCRIPT.reply in out
    [asked] = api.model_requests()[:1]
    assert b"Say hello." in asked.body
    _crossed(agent, api, internet, out, err)


@pytest.mark.parametrize("agent", [pytest.param(CLAUDE, id="claude")])
def test_a_short_name_with_a_workspace_is_kept_and_re_entered(
        agent: Agent, agent_versions: dict[str, str], api: StandIn,  # noqa: F811
        internet: Internet, state_home: Path, tmp_path: Path) -> None:
    """`sbx run claude .` keeps claude-<directory>: the second run re-enters it (no second
    creation) and the agent answers again (HOME and the install hook: tests/integration/
    test_keep.py)."""
    _bind(state_home, agent)
    (tmp_path / "myproject").mkdir()
    workspace = user_owned(tmp_path / "myproject")
    env = _env(state_home, internet.sbx_config(tmp_path / "config.toml"))
    words = ["run", "claude", ".", "--arg", "source=staged", "--",
             *agent.one_shot, "Say hello."]
    try:
        first = run_sbx(words, env=env, timeout=RUN_TIMEOUT_S, cwd=workspace)
        err = first.stderr.decode(errors="replace")
        assert first.returncode == 0, err
        assert "kept as claude-myproject" in err
        assert SCRIPT.reply in first.stdout.decode(errors="replace")
        again = run_sbx(words, env=env, timeout=RUN_TIMEOUT_S, cwd=workspace)
        assert again.returncode == 0, again.stderr.decode(errors="replace")
        assert "kept as" not in again.stderr.decode(errors="replace")
        assert SCRIPT.reply in again.stdout.decode(errors="replace")
        assert len(api.model_requests()) >= 2
    finally:
        run_sbx(["rm", "-f", "claude-myproject"], env=env, timeout=RUN_TIMEOUT_S)


def test_a_directory_named_like_a_short_name_is_run_instead(state_home: Path,
                                                            tmp_path: Path) -> None:
    kit = tmp_path / "claude"
    kit.mkdir()
    (kit / "claude.yaml").write_text(
        "# syntax=docker/sandbox-kit:3\nschemaVersion: \"3\"\nkind: workload\n",
        encoding="utf-8")
    (kit / "claude.dockerfile").write_text(
        "FROM sbx-test/busybox:1\nCMD [\"echo\", \"the local claude directory\"]\n",
        encoding="utf-8")
    env = {**os.environ, "SBX_HOME": str(state_home), "SBX_CONFIG": os.devnull, "NO_COLOR": "1"}
    done = run_sbx(["run", "claude"], env=env, timeout=RUN_TIMEOUT_S, cwd=tmp_path)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert done.stdout.decode() == "the local claude directory\n"
