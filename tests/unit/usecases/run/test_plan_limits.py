"""--memory/--cpus/--pids through the one planner (sbx.usecases.run.plan.assemble): applied
to the spec on every run from the recipe's bounds, refused over a bound, never truncated."""

from __future__ import annotations

from pathlib import Path

import pytest

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.usecases.run.request import RunRequest
from tests.unit.usecases.run.test_plan import _assemble

GIB = 1 << 30


def test_the_flags_reach_the_spec_and_the_reported_limits(tmp_path: Path) -> None:
    plan = _assemble(tmp_path, RunRequest(workload="./k", memory_bytes=2 * GIB,
                                          cpu_millis=1500, pids=200))
    spec = plan.spec
    assert (spec.memory_bytes, spec.memory_swap_bytes) == (2 * GIB, 2 * GIB)
    assert spec.nano_cpus == 1_500_000_000 and spec.pids_limit == 200
    assert dict(plan.facts.limits) == {"memory_bytes": 2 * GIB, "cpu_millis": 1500,
                                       "pids": 200}
    # the recipe (what the plan cache keeps) never holds a flag's value
    assert plan.recipe is not None and plan.recipe.limits["memory_bytes"] == GIB


def test_without_flags_the_recipe_limits_apply(tmp_path: Path) -> None:
    plan = _assemble(tmp_path, RunRequest(workload="./k"))
    assert plan.spec.memory_bytes == GIB and plan.spec.pids_limit == 128


def test_a_flag_may_go_above_a_kit_lowered_limit_up_to_the_config_bound(tmp_path: Path) -> None:
    """The recipe's limit (1 GiB) is below its bound (4 GiB): the bound is what counts."""
    plan = _assemble(tmp_path, RunRequest(workload="./k", memory_bytes=4 * GIB))
    assert plan.spec.memory_bytes == 4 * GIB


@pytest.mark.parametrize(("request_", "flag"), [
    (RunRequest(workload="./k", memory_bytes=4 * GIB + 1), "--memory"),
    (RunRequest(workload="./k", cpu_millis=2001), "--cpus"),
    (RunRequest(workload="./k", pids=257), "--pids"),
])
def test_over_a_bound_is_refused_naming_the_flag_and_the_key(
        tmp_path: Path, request_: RunRequest, flag: str) -> None:
    with pytest.raises(SbxError) as raised:
        _assemble(tmp_path, request_)
    assert raised.value.reason is Reason.LIMIT_OVER_BOUND
    assert flag in raised.value.message and "[sandbox]" in raised.value.message
    assert raised.value.hint is not None and "sbx config path" in raised.value.hint


def test_every_flag_over_its_bound_is_named_at_once(tmp_path: Path) -> None:
    with pytest.raises(SbxError) as raised:
        _assemble(tmp_path, RunRequest(workload="./k", memory_bytes=8 * GIB, pids=1000))
    assert "--memory 8g" in raised.value.message and "--pids 1000" in raised.value.message
    assert raised.value.hint is not None and "--memory 4g --pids 256" in raised.value.hint


def test_memory_below_the_tmpfs_caps_is_refused(tmp_path: Path) -> None:
    """/tmp (256 MiB), HOME (256 MiB), the private workspace (512 MiB) and a 1 MiB tmpfs
    count against the memory limit."""
    with pytest.raises(SbxError) as raised:
        _assemble(tmp_path, RunRequest(workload="./k", memory_bytes=GIB))
    assert raised.value.reason is Reason.LIMIT_OVER_BOUND
    assert "tmpfs" in raised.value.message and "1025m" in raised.value.message
