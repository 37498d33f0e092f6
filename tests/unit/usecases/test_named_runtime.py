"""A named sandbox's runtime: a creation option (given again only with the same value, kept by
--recreate), and checked against the engine before each start of the stopped sandbox."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import pytest

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.base.render import Renderer
from sbx.domain.sandbox.records import SandboxRecord
from sbx.usecases.context import AppContext
from sbx.usecases.named import start as named_start
from sbx.usecases.namedrecord import creation_options
from sbx.usecases.recreate import creation_request
from sbx.usecases.run.request import RunRequest
from tests.support.fakeengine import DEFAULT_INFO, FakeEngine

CONTAINER = "c" * 64


def _record(runtime: str | None, options: dict[str, object] | None = None) -> SandboxRecord:
    return SandboxRecord(name="box", run_id="a" * 32, created=1.0, workload="./k", kits=[],
                         workspace=None, access="none",
                         request={"options": options or {}, "runtime": runtime},
                         container_id=CONTAINER)


def test_the_flag_is_a_creation_option() -> None:
    assert creation_options(RunRequest(workload="./k", runtime="crun")) == {"runtime": "crun"}
    made = _record("crun", {"runtime": "crun"})
    named_start._refuse_creation_options(RunRequest(workload="./k", runtime="crun"), made)
    with pytest.raises(SbxError) as caught:
        named_start._refuse_creation_options(RunRequest(workload="./k", runtime="runc"), made)
    assert caught.value.reason is Reason.INVALID_ARGUMENT and "--runtime" in caught.value.message


def test_a_recreation_keeps_the_runtime_unless_given_another(tmp_path: Path) -> None:
    (tmp_path / "k").mkdir()
    made = dataclasses.replace(_record("crun", {"runtime": "crun"}), workload=str(tmp_path / "k"))
    assert creation_request(RunRequest(workload="./k", recreate=True), made).runtime == "crun"
    other = RunRequest(workload="./k", recreate=True, runtime="runc")
    assert creation_request(other, made).runtime == "runc"


def _ctx(tmp_path: Path, engine: FakeEngine) -> AppContext:
    return AppContext(env={"SBX_HOME": str(tmp_path / "state")}, cwd=tmp_path,
                      renderer=Renderer(io.StringIO(), io.StringIO(), as_json=False),
                      driver_factory=lambda _env: engine)


def test_a_stopped_sandbox_whose_runtime_is_gone_is_not_started(tmp_path: Path) -> None:
    engine = FakeEngine()  # runc only
    engine.containers.append({"Id": CONTAINER, "State": "exited", "Labels": {}})
    with pytest.raises(SbxError) as caught:
        named_start._start(_ctx(tmp_path, engine), _record("crun"), lambda _text: None)
    error = caught.value
    assert error.reason is Reason.RUNTIME_MISSING
    assert "the named sandbox box asks for the OCI runtime 'crun'" in error.message
    assert "sbx run --name box --recreate --runtime runc" in (error.hint or "")
    assert "start" not in engine.names()


def test_a_running_sandbox_is_left_as_it_is(tmp_path: Path) -> None:
    engine = FakeEngine()
    engine.containers.append({"Id": CONTAINER, "State": "running", "Labels": {}})
    named_start._start(_ctx(tmp_path, engine), _record("crun"), lambda _text: None)
    assert engine.names() == ["container_state"]
    assert DEFAULT_INFO.runtimes == ("runc",)


def test_template_is_a_creation_option_that_a_recreation_does_not_replay() -> None:
    assert creation_options(RunRequest(workload="./k", template="t:1")) == {"template": "t:1"}
    made = _record(None, {"template": "t:1"})
    named_start._refuse_creation_options(RunRequest(workload="./k", template="t:1"), made)
    with pytest.raises(SbxError) as caught:
        named_start._refuse_creation_options(RunRequest(workload="./k", template="u:1"), made)
    assert "--template" in caught.value.message
    # made again from its kits as they are now: HOME is kept, not seeded from the template
    assert creation_request(RunRequest(workload="./k", recreate=True), made).template is None
