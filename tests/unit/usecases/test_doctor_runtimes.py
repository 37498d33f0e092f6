"""`sbx doctor`'s runtimes check: the engine's OCI runtimes listed, a configured one the engine
lacks failed with the reason and fix `sbx run` gives."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import pytest

from sbx.base.config import load_config_file
from sbx.base.reasons import Reason
from sbx.base.render import Renderer
from sbx.usecases.context import AppContext
from sbx.usecases.doctor.diagnose import diagnose
from sbx.usecases.doctor.model import DoctorRequest, DoctorState, HostFacts, Status
from sbx.usecases.doctor.runtimes import check_runtimes
from tests.support.fakeengine import DEFAULT_INFO
from tests.unit.usecases.test_doctor import FAST, USER, V2_OK
from tests.unit.usecases.test_gc import Harness

ENGINE = dataclasses.replace(DEFAULT_INFO, runtimes=("crun", "runc"), default_runtime="runc")


def _state(tmp_path: Path, config: str | None) -> DoctorState:
    ctx = AppContext(env={}, cwd=tmp_path,
                     renderer=Renderer(io.StringIO(), io.StringIO(), as_json=False))
    state = DoctorState(ctx, HostFacts("posix", "Linux", 1000, 1000), DoctorRequest(),
                        engine=ENGINE)
    if config is not None:
        path = tmp_path / "config.toml"
        path.write_text(config, encoding="utf-8")
        state.config = load_config_file(path)
    return state


def test_the_engines_runtimes_are_listed(tmp_path: Path) -> None:
    verdict = check_runtimes(_state(tmp_path, ""))
    assert verdict.status is Status.OK
    assert verdict.detail == "crun, runc (default runc); sandboxes run on the default"
    assert verdict.data == {"runtimes": ["crun", "runc"], "default": "runc", "configured": None}


def test_a_configured_runtime_the_engine_has_is_named(tmp_path: Path) -> None:
    verdict = check_runtimes(_state(tmp_path, '[sandbox]\nruntime = "crun"\n'))
    assert verdict.status is Status.OK and verdict.data["configured"] == "crun"
    assert "sandboxes run on crun ([sandbox] runtime (" in verdict.detail


def test_a_configured_runtime_the_engine_lacks_fails(tmp_path: Path) -> None:
    verdict = check_runtimes(_state(tmp_path, '[sandbox]\nruntime = "runsc"\n'))
    assert (verdict.status, verdict.reason) == (Status.FAIL, Reason.RUNTIME_MISSING)
    assert verdict.fix is not None and "--add-runtime runsc=" in verdict.fix
    assert "crun, runc (default runc)" in verdict.detail


def test_an_invalid_config_leaves_the_configured_runtime_unknown(tmp_path: Path) -> None:
    verdict = check_runtimes(_state(tmp_path, None))
    assert (verdict.status, verdict.reason) == (Status.WARN, Reason.INVALID_CONFIG)
    assert verdict.data["runtimes"] == ["crun", "runc"]


@pytest.mark.parametrize(("runtimes", "probed_on"), [(("crun", "runc"), "crun"),
                                                      (("runc",), None)])
def test_the_limits_are_probed_on_the_configured_runtime_when_the_engine_has_it(
        tmp_path: Path, runtimes: tuple[str, ...], probed_on: str | None) -> None:
    h = Harness(tmp_path)
    h.engine.stdout = V2_OK
    h.engine.engine_info = dataclasses.replace(DEFAULT_INFO, runtimes=runtimes)
    h.config.write_text('[sandbox]\nruntime = "crun"\n', encoding="utf-8")
    rep = diagnose(h.ctx(), FAST, host=USER)
    checks = {check.id: check for check in rep.checks}
    (spec,) = [args[0] for args in h.engine.called("create")]
    assert spec.runtime == probed_on
    assert checks["limits"].status is Status.OK
    assert checks["runtimes"].status is (Status.OK if probed_on else Status.FAIL)
