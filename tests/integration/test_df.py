"""`sbx df` on a real engine: a named sandbox with its HOME, a crashed run's container, and
what gc could reclaim — the same objects `sbx gc --dry-run` names (gc's own decision), priced;
after `sbx gc` they are gone from both."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sbx.seams.driver import SdkEngine
from tests.support.sbxproc import run_sbx

from .test_gc import create_container, labelled, remove_everything, wait_for

pytestmark = pytest.mark.docker

MB = 1_000_000


@pytest.fixture
def env(state_home: Path) -> dict[str, str]:
    return {**os.environ, "SBX_HOME": str(state_home), "SBX_CONFIG": os.devnull}


@pytest.fixture
def named(env: dict[str, str], busybox_kit: Path, engine: SdkEngine,
          state_home: Path) -> Iterator[str]:
    name = f"df-{uuid.uuid4().hex[:8]}"
    created = run_sbx(["run", "--name", name, "-d", str(busybox_kit), "--", "sleep", "600"],
                      env=env)
    assert created.returncode == 0, created.stderr
    yield name
    run_sbx(["rm", "-f", name], env=env, timeout=120)
    remove_everything(engine, state_home)


def _json(env: dict[str, str], *args: str) -> Any:
    done = run_sbx(list(args), env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.decode().strip().splitlines()[-1])["data"]


def test_df_shows_sandboxes_homes_and_what_gc_would_reclaim(
        env: dict[str, str], named: str, engine: SdkEngine, state_home: Path) -> None:
    home_done = run_sbx(["exec", named, "--", "sh", "-c",
                         "dd if=/dev/urandom of=$HOME/blob bs=1M count=3 2>/dev/null"], env=env)
    assert home_done.returncode == 0, home_done.stderr
    # a crashed run's container: exited, with 2 MB in its writable layer
    crashed = create_container(engine, labelled(state_home, deadline="1"), start=True,
                               command=("sh", "-c", "dd if=/dev/zero of=/junk bs=1M count=2"))
    wait_for("the crashed run to exit", lambda: engine.container_state(crashed) == "exited")
    data = _json(env, "df", "--json")
    sandboxes = {u["name"]: u for u in data["sandboxes"]}
    assert sandboxes[named]["detail"] == "running"
    homes = {u["name"]: u for u in data["homes"]}
    assert homes[named]["bytes"] >= 3 * MB
    reclaim = {u["id"]: u for u in data["reclaimable"]}
    assert reclaim[crashed]["bytes"] >= 2 * MB and reclaim[crashed]["kind"] == "container"
    assert data["totals"]["reclaimable"] >= 2 * MB
    assert named not in {u["name"] for u in data["reclaimable"]}  # gc never takes it
    # the same objects gc itself would remove: one decision, not two
    planned = _json(env, "gc", "--dry-run", "--json")
    assert {i["id"] for i in planned["removed"]} == set(reclaim)
    assert {u["name"] for u in data["state"]} >= {"runs", "sandboxes"}
    human = run_sbx(["df"], env=env)
    assert human.returncode == 0 and b"RECLAIMABLE BY GC" in human.stdout
    assert named.encode() in human.stdout
    assert run_sbx(["gc", "--grace", "0"], env=env).returncode == 0
    after = _json(env, "df", "--json")
    assert crashed not in {u["id"] for u in after["reclaimable"]}
    assert named in {u["name"] for u in after["sandboxes"]}
