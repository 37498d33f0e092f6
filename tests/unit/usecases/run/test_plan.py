"""The one planner's assembly (sbx.usecases.run.plan.assemble) from a cached recipe: the spec is
the recipe's, with this run's own id, labels, user and variables, and never more than a
hardened, unprivileged, unnamed, offline container, whatever the request asks for."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from sbx.base import labels as label_keys
from sbx.base.render import Renderer
from sbx.domain.sandbox.admission import Admission, HostMounts
from sbx.domain.sandbox.images import SandboxUser
from sbx.seams.session.mode import SessionMode
from sbx.usecases.context import AppContext
from sbx.usecases.run.plan import Decided, RunPlan, assemble
from sbx.usecases.run.request import RunRequest
from tests.unit.usecases.test_plancache import _recipe

RUN_ID = "f" * 32


def _ctx(tmp_path: Path) -> AppContext:
    env = {**os.environ, "SBX_HOME": str(tmp_path / "state"), "SBX_CONFIG": os.devnull}
    return AppContext(env=env, cwd=tmp_path, renderer=Renderer(io.StringIO(), io.StringIO(),
                                                               as_json=False))


def _assemble(tmp_path: Path, request: RunRequest) -> RunPlan:
    recipe = _recipe()
    admission = Admission(mounts=HostMounts(), env={"FROM_E": "x"},
                          user=SandboxUser(1000, 1000, "image USER agent"), owner=None)
    labels = {label_keys.RUN: RUN_ID}
    return assemble(_ctx(tmp_path), request, RUN_ID, Decided(recipe, {"dev.sbx.kit": "k"}),
                    access="none", session_mode=SessionMode(False, False, False),
                    labels=labels, deadline=1, admission=admission)


def test_a_cached_plan_is_the_recipe_with_this_runs_own_parts(tmp_path: Path) -> None:
    plan = _assemble(tmp_path, RunRequest(workload="./k"))
    recipe = _recipe()
    spec = plan.spec
    assert spec.image == recipe.image.id
    assert spec.user == "1000:1000"
    assert spec.command == recipe.command
    assert dict(spec.env) == {**recipe.env, "FROM_E": "x", "SBX_RUN_ID": RUN_ID,
                              "HOME": recipe.home, "SBX_WORKSPACE": recipe.workspace_target}
    assert spec.labels[label_keys.RUN] == RUN_ID
    assert plan.recipe == recipe and plan.facts == recipe.facts


@pytest.mark.parametrize("request_", [
    RunRequest(workload="./k", allow_privileged=True),
    RunRequest(workload="./k", name="dev", allow_privileged=True),
])
def test_a_cached_plan_never_carries_privilege_a_name_or_a_network(
        tmp_path: Path, request_: RunRequest) -> None:
    """A stored request saying --allow-privileged or --name changes nothing: privilege, consent
    and a name come only from a full plan."""
    plan = _assemble(tmp_path, request_)
    spec = plan.spec
    assert not spec.privileged and spec.network_mode == "none" and spec.name is None
    assert spec.cap_drop == ("ALL",) and spec.read_only
    assert plan.name is None and plan.volume_names == ()
    assert label_keys.NAME not in plan.labels
