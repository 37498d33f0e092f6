"""long-running@1 on a real engine: a named sandbox provides it (it keeps running with no CLI
attached until sbx stop), a one-shot run refuses it by its reason or skips it when optional."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.sbxproc import run_sbx

pytestmark = pytest.mark.docker

DOCKERFILE = "FROM sbx-base/bookworm:1\nUSER agent\nWORKDIR /workspace\n"
Runner = Callable[..., Any]
KitMaker = Callable[..., Path]
LONG = "com.docker.sandbox/long-running@1"


def _kit(kit_factory: KitMaker, optional: bool = False) -> Path:
    flag = "\n    optional: true" if optional else ""
    return kit_factory("longkit", DOCKERFILE, f"capabilities:\n  - type: {LONG}{flag}\n")


@pytest.fixture
def env(state_home: Path) -> dict[str, str]:
    return {**os.environ, "SBX_HOME": str(state_home), "SBX_CONFIG": os.devnull}


def test_a_one_shot_run_refuses_it_and_explain_says_the_same(
        kit_factory: KitMaker, sbx_cli: Runner, env: dict[str, str]) -> None:
    result = sbx_cli(["run", str(_kit(kit_factory)), "--", "echo", "ran"], env=env)
    assert result.exit_code == 125, result.stderr
    assert "(long_running_unnamed)" in result.stderr and "--name" in result.stderr
    assert "ran" not in result.stdout
    explained = sbx_cli(["explain", "long_running_unnamed"], env=env)
    assert explained.exit_code == 0 and "sbx run --name NAME" in explained.stdout


def test_an_optional_one_is_skipped_and_recorded_in_a_one_shot_run(
        kit_factory: KitMaker, sbx_cli: Runner, env: dict[str, str]) -> None:
    result = sbx_cli(["run", "--json", str(_kit(kit_factory, optional=True)), "--", "echo",
                      "ran"], env=env)
    envelope = result.envelope()
    assert envelope["status"] == "ok" and envelope["data"]["stdout"] == "ran\n", result.stderr
    skipped = [s for s in envelope["data"]["selection"]["skipped"] if s["type"] == LONG]
    assert skipped and "one-shot" in skipped[0]["reason"]


def test_a_named_sandbox_keeps_running_without_a_client_until_stopped(
        kit_factory: KitMaker, env: dict[str, str]) -> None:
    name = f"lr-{uuid.uuid4().hex[:10]}"
    kit = _kit(kit_factory)
    try:
        started = run_sbx(["run", "--name", name, "-d", str(kit), "--", "sleep", "600"],
                          env=env, timeout=180)
        assert started.returncode == 0, started.stderr.decode()
        # No CLI process is attached to it now; it still runs and answers.
        alive = run_sbx(["exec", name, "--", "echo", "alive"], env=env, timeout=120)
        assert alive.stdout.decode() == "alive\n", alive.stderr.decode()
        assert run_sbx(["stop", name], env=env, timeout=120).returncode == 0
        listed = run_sbx(["ls", "--json"], env=env, timeout=60).stdout.decode()
        assert name in listed and "running" not in listed.split(name, 1)[1][:200]
    finally:
        run_sbx(["rm", "-f", name], env=env, timeout=120)
