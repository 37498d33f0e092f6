"""The runtime through the one planner: the full plan checks it against the engine before any
image is built, the recipe keeps it (what the plan cache stores), a cached plan checks it again
and the assembled spec carries it."""

from __future__ import annotations

import dataclasses
import io
import json
import os
from pathlib import Path
from typing import Any

import pytest

from sbx.base import labels as label_keys
from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.base.render import Renderer
from sbx.domain.sandbox.admission import Admission, HostMounts
from sbx.domain.sandbox.images import SandboxUser
from sbx.domain.sandbox.runtimes import RuntimeChoice
from sbx.seams.session.mode import SessionMode
from sbx.usecases import pipeline
from sbx.usecases.context import AppContext
from sbx.usecases.plancache import _request_from_json, _request_json
from sbx.usecases.run.fromcache import FromCache
from sbx.usecases.run.plan import Decided, assemble
from sbx.usecases.run.recipe import Recipe
from sbx.usecases.run.request import NO_HOST_STREAMS, RunRequest, workload_request
from tests.support.fakeengine import DEFAULT_INFO, FakeEngine
from tests.support.kits import write_kit
from tests.unit.usecases.test_plancache import _recipe

RUN_ID = "e" * 32


def _ctx(tmp_path: Path, engine: FakeEngine, config: str | None = None) -> AppContext:
    config_file = tmp_path / "config.toml"
    config_file.write_text(config or "", encoding="utf-8")
    env = {**os.environ, "SBX_HOME": str(tmp_path / "state"), "SBX_CONFIG": str(config_file)}
    return AppContext(env=env, cwd=tmp_path, renderer=Renderer(io.StringIO(), io.StringIO(),
                                                               as_json=False),
                      driver_factory=lambda _env: engine)


def test_the_spec_runs_on_the_recipes_runtime(tmp_path: Path) -> None:
    recipe = dataclasses.replace(_recipe(), runtime="crun", runtime_source="--runtime")
    admission = Admission(mounts=HostMounts(), env={}, user=SandboxUser(1000, 1000, "image"),
                          owner=None)
    plan = assemble(_ctx(tmp_path, FakeEngine()), RunRequest(workload="./k"), RUN_ID,
                    Decided(recipe, {}), access="none",
                    session_mode=SessionMode(False, False, False),
                    labels={label_keys.RUN: RUN_ID}, deadline=1, admission=admission)
    assert plan.spec.runtime == "crun"
    default = assemble(_ctx(tmp_path, FakeEngine()), RunRequest(workload="./k"), RUN_ID,
                       Decided(_recipe(), {}), access="none",
                       session_mode=SessionMode(False, False, False),
                       labels={label_keys.RUN: RUN_ID}, deadline=1, admission=admission)
    assert default.spec.runtime is None


def _stored(recipe: Recipe) -> dict[str, Any]:
    """The recipe as the plan cache's file holds it (JSON)."""
    stored: dict[str, Any] = json.loads(json.dumps(recipe.to_json()))
    return stored


def test_the_recipe_keeps_the_runtime_and_where_it_was_asked() -> None:
    recipe = dataclasses.replace(_recipe(), runtime="runsc",
                                 runtime_source="[sandbox] runtime (/c.toml:2)")
    again = Recipe.from_json(_stored(recipe))
    assert again.runtime_choice == RuntimeChoice("runsc", "[sandbox] runtime (/c.toml:2)")
    assert Recipe.from_json(_stored(_recipe())).runtime_choice is None
    older = _stored(_recipe())
    del older["runtime"]  # an entry an sbx without runtimes wrote: a miss, planned in full
    with pytest.raises(KeyError):
        Recipe.from_json(older)


def test_the_cached_request_keeps_the_flag() -> None:
    request = RunRequest(workload="./k", runtime="crun")
    assert _request_from_json(_request_json(request), NO_HOST_STREAMS).runtime == "crun"


def test_a_cached_plan_is_refused_when_the_engine_lost_its_runtime(tmp_path: Path) -> None:
    recipe = dataclasses.replace(_recipe(), runtime="crun", runtime_source="--runtime")
    engine = FakeEngine()  # runc only
    engine.add_image("sbx-kit/k:1", image_id=recipe.image.id)
    with pytest.raises(SbxError) as caught:
        FromCache(recipe).engine(_ctx(tmp_path, engine), RUN_ID, {})
    assert caught.value.reason is Reason.RUNTIME_MISSING
    engine.engine_info = dataclasses.replace(DEFAULT_INFO, runtimes=("crun", "runc"))
    assert FromCache(recipe).engine(_ctx(tmp_path, engine), RUN_ID, {}) is True


@pytest.mark.parametrize(("flag", "config"), [
    ("nosuch", None), (None, '[sandbox]\nruntime = "nosuch"\n')])
def test_the_full_plan_refuses_before_any_image_is_built(tmp_path: Path, flag: str | None,
                                                         config: str | None) -> None:
    kit = write_kit(tmp_path / "kits", "k", recipe="FROM scratch\nCMD [\"true\"]\n")
    engine = FakeEngine()
    ctx = _ctx(tmp_path, engine, config)
    loaded = pipeline.load(ctx, workload_request(RunRequest(workload=str(kit), runtime=flag)))
    assert loaded.runtime is not None and loaded.runtime.name == "nosuch"
    with pytest.raises(SbxError) as caught:
        pipeline.plan(ctx, loaded, run_id=RUN_ID, progress=pipeline.quiet_progress,
                      helper_labels={}, resolve_secrets=False)
    assert caught.value.reason is Reason.RUNTIME_MISSING
    assert engine.names() == ["info"]  # asked what it has, and nothing else
