"""Where a --clone sandbox's git runs, through the fake engine: a running sandbox itself; a
stopped one's clone volume, read-only, in a helper of sbx's hardened shape (no network, no
capability, read-only root, the sandbox's image, user and runtime) that is removed after,
the sandbox never started; a clone from before the volume refused with its fix."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.base.render import Renderer
from sbx.domain.sandbox import runrecord
from sbx.domain.sandbox.records import SandboxRecord
from sbx.seams.containerspec import BindMount
from sbx.seams.engine import ImageInfo, SandboxFiles
from sbx.usecases.context import AppContext
from sbx.usecases.named.clonehelper import git_container
from sbx.usecases.sandboxstore import SandboxStore
from tests.support.fakeengine import FakeEngine

CID = "c" * 64
IMAGE = "sha256:" + "d" * 64


def _ctx(tmp_path: Path, engine: FakeEngine, state: str, *, volume: str | None = "v-ws"
         ) -> tuple[AppContext, SandboxRecord]:
    home = tmp_path / "state"
    request = {"options": {}, "user": "1000:1001", "runtime": "runsc",
               "clone": {"repository": "/r", "base": "0" * 40, "branch": "sbx/box",
                         "path": "/workspace"}}
    if volume is not None:
        request["workspace_volume"] = volume
    record = SandboxRecord(name="box", run_id="a" * 32, created=1.0, workload="./k", kits=[],
                           workspace=None, access="none", request=request, container_id=CID,
                           home_volume="/home/agent")
    SandboxStore(home).save(record)
    engine.containers.append({"Id": CID, "State": state, "Image": IMAGE, "Labels": {}})
    engine.sandbox_mounts[CID] = SandboxFiles("1000:1001", True, (), image=IMAGE)
    engine.images[IMAGE] = ImageInfo(IMAGE, (), "agent", "/", None, None, (),
                                     {"dev.sbx.name": "box"})
    env = {"SBX_HOME": str(home), "SBX_CONFIG": os.devnull, "HOME": str(tmp_path / "h"),
           "PATH": "/bin"}
    return AppContext(env=env, cwd=tmp_path, renderer=Renderer(io.StringIO(), io.StringIO(),
                                                               as_json=False),
                      driver_factory=lambda _env: engine), record


def test_a_running_sandbox_runs_its_own_git(tmp_path: Path) -> None:
    engine = FakeEngine()
    ctx, record = _ctx(tmp_path, engine, "running")
    with git_container(ctx, record) as container:
        assert container == CID
    assert "create" not in engine.names()


def test_a_stopped_sandbox_gets_a_hardened_read_only_helper_removed_after(
        tmp_path: Path) -> None:
    engine = FakeEngine()
    ctx, record = _ctx(tmp_path, engine, "exited")
    with git_container(ctx, record) as container:
        assert container != CID
        spec = engine.specs[container]
        runs = list((ctx.state_home / "runs").iterdir())
        assert len(runs) == 1 and (runs[0] / "run.json").is_file()  # gc can find it
    assert spec.image == IMAGE and spec.user == "1000:1001" and spec.runtime == "runsc"
    assert spec.read_only and tuple(spec.cap_drop) == ("ALL",)
    assert spec.network_mode == "none" and not spec.privileged
    assert "no-new-privileges" in " ".join(spec.security_opt)
    assert spec.binds == (BindMount("v-ws", "/workspace", read_only=True, volume=True),)
    assert spec.memory_bytes > 0 and spec.pids_limit > 0
    assert spec.labels["dev.sbx.role"] == "helper"
    assert not spec.labels.get("dev.sbx.name")  # the image's name label never passes for it
    assert engine.called("start") == [(container,)]  # never the sandbox
    assert engine.called("remove_container") == [(container,)]
    assert engine.container_state(CID) == "exited"
    assert not runrecord.run_dir(ctx.state_home, runs[0].name).exists()


def test_a_stopped_clone_from_before_the_volume_is_refused_with_its_fix(
        tmp_path: Path) -> None:
    engine = FakeEngine()
    ctx, record = _ctx(tmp_path, engine, "exited", volume=None)
    with pytest.raises(SbxError) as raised, git_container(ctx, record):
        pass
    assert raised.value.reason is Reason.NOT_A_CLONE
    assert "sbx rm -f box" in (raised.value.hint or "")
    assert "create" not in engine.names()
