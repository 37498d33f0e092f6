"""A named sandbox's runtime on the machine's engine, which has runc under two names (`runc`
and `io.containerd.runc.v2`, so the second one shows in the container's HostConfig): created on
it, kept across stop and start, refused as a different creation option, and not started again
once the engine no longer has it (here: the record names one the engine lacks)."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from sbx.base import labels
from sbx.seams.driver import SdkEngine
from tests.support.sbxproc import Finished, run_sbx

from .conftest import BUSYBOX, make_kit, owned

pytestmark = pytest.mark.docker

RUNTIME = "io.containerd.runc.v2"


@pytest.fixture
def env(state_home: Path) -> dict[str, str]:
    return {**os.environ, "SBX_HOME": str(state_home), "SBX_CONFIG": os.devnull}


@pytest.fixture
def name(env: dict[str, str]) -> Iterator[str]:
    made = f"rt-{uuid.uuid4().hex[:10]}"
    yield made
    run_sbx(["rm", "-f", made], env=env, timeout=120)


def _sbx(env: dict[str, str], *args: str) -> Finished:
    return run_sbx(list(args), env=env, timeout=180)


def _runtime_and_state(engine: SdkEngine, state_home: Path, name: str) -> tuple[str, str]:
    (found,) = [o for o in owned(engine, state_home)
                if o.kind == "container" and o.labels.get(labels.NAME) == name]
    attrs = engine.container(found.id).attrs
    return str(attrs["HostConfig"]["Runtime"]), str(attrs["State"]["Status"])


def test_a_named_sandbox_keeps_its_runtime_and_is_not_started_without_it(
        env: dict[str, str], name: str, engine: SdkEngine, state_home: Path,
        tmp_path: Path) -> None:
    if RUNTIME not in engine.info().runtimes:
        pytest.skip(f"the engine has no {RUNTIME}")
    kit = make_kit(tmp_path / "kits", "agent",
                   f'FROM {BUSYBOX}\nUSER agent\nWORKDIR /workspace\nCMD ["sh"]\n')
    created = _sbx(env, "run", "--name", name, "--runtime", RUNTIME, "-d", str(kit), "--",
                   "sleep", "600")
    assert created.returncode == 0, created.stderr
    assert _runtime_and_state(engine, state_home, name) == (RUNTIME, "running")
    other = _sbx(env, "run", "--name", name, "--runtime", "runc", "-d", str(kit))
    assert other.returncode == 2 and b"(invalid_argument)" in other.stderr, other.stderr
    assert b"only apply when a sandbox is created: --runtime" in other.stderr
    assert _sbx(env, "stop", name).returncode == 0
    again = _sbx(env, "run", "--name", name, "-d", str(kit))
    assert again.returncode == 0, again.stderr
    assert _runtime_and_state(engine, state_home, name) == (RUNTIME, "running")
    # The engine without it (the record now names one it lacks): refused, left stopped.
    assert _sbx(env, "stop", name).returncode == 0
    record = state_home / "sandboxes" / name / "sandbox.json"
    data = json.loads(record.read_text(encoding="utf-8"))
    assert data["request"]["runtime"] == RUNTIME
    data["request"]["runtime"] = "nosuch"
    record.write_text(json.dumps(data), encoding="utf-8")
    refused = _sbx(env, "run", "--name", name, "-d", str(kit))
    assert refused.returncode == 125, refused.stderr
    text = refused.stderr.decode()
    assert "(runtime_missing)" in text and f"the named sandbox {name} asks for" in text
    assert f"sbx run --name {name} --recreate --runtime runc" in text
    started = _sbx(env, "start", name)  # the same check on every way to start it
    assert started.returncode == 125 and b"(runtime_missing)" in started.stderr, started.stderr
    assert _runtime_and_state(engine, state_home, name)[1] == "exited"
