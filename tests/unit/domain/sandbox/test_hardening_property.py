"""Property: every `sbx run` path yields the same hardened create parameters (SPEC §5).

The whole preparation pipeline runs (config file, kit loading, mount policy, user resolution,
spec building, translation into the SDK's create arguments) with a fake engine that serves
images; only the engine is faked, because this is a test of a pure decision.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sbx.base import labels
from sbx.base.render import Renderer
from sbx.domain.sandbox.hardening import hardening_violations
from sbx.seams.engine import create_kwargs
from sbx.usecases.context import AppContext
from sbx.usecases.run.fromkits import prepare
from sbx.usecases.run.request import RunRequest
from tests.support.fakeengine import FakeEngine, image_info, tar_of
from tests.support.kits import write_kit

PASSWD = b"root:x:0:0::/root:/bin/sh\nagent:x:1000:1000::/home/agent:/bin/sh\n"


def engine_serving(user: str, workdir: str, cmd: tuple[str, ...]) -> FakeEngine:
    """An engine whose every image has this USER/WORKDIR/CMD, so nothing is ever built."""
    engine = FakeEngine()
    image_id = "sha256:" + "ab" * 32
    engine.fallback_image = image_info(image_id, user=user, workdir=workdir, cmd=cmd)
    engine.filesystems[image_id] = tar_of({"etc/passwd": PASSWD,
                                           "etc/group": b"root:x:0:\nagent:x:1000:\n"})
    return engine


@contextmanager
def _no_progress(_title: str) -> Iterator[Callable[[str], None]]:
    yield lambda _line: None


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("world")
    kit = write_kit(root, "kit", recipe="FROM base:1\n")
    dirs = {"kit": kit, "root": root}
    for name in ("ws", "m0", "m1", "m2"):
        (root / name).mkdir()
        dirs[name] = root / name
    if os.geteuid() == 0:
        # The sandbox takes the workspace owner's uid; a root-owned one is refused for rw.
        os.chown(root / "ws", 1000, 1000)
    return dirs


sandbox_values = st.fixed_dictionaries({
    "memory_bytes": st.integers(1 << 30, 64 << 30),
    "pids": st.integers(1, 65536),
    "cpu_millis": st.integers(1, 256000),
    "tmp_bytes": st.integers(1, 256 << 20),
    "workspace_bytes": st.integers(1, 512 << 20),
    "home_bytes": st.integers(1, 256 << 20),
    "user": st.integers(1, 60000),
})


@pytest.mark.slow
@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    values=sandbox_values,
    use_workspace=st.booleans(),
    access=st.sampled_from([None, "none", "ro", "rw"]),
    mounts=st.lists(st.tuples(st.sampled_from(["m0", "m1", "m2"]), st.sampled_from(["", ":ro",
                                                                                  ":rw"])),
                    max_size=3, unique_by=lambda m: m[0]),
    timeout=st.one_of(st.none(), st.floats(0.01, 1e5)),
    command=st.one_of(st.none(), st.lists(st.text(min_size=1, max_size=8), min_size=1,
                                          max_size=4)),
    image_user=st.sampled_from(["", "root", "agent", "1000:1000", "2000"]),
    workdir=st.sampled_from(["", "/home/agent/work", "/srv"]),
)
def test_every_run_path_is_hardened_identically(
        world: dict[str, Path], tmp_path: Path, values: dict[str, int], use_workspace: bool,
        access: str | None, mounts: list[tuple[str, str]], timeout: float | None,
        command: list[str] | None, image_user: str, workdir: str) -> None:
    if not use_workspace and access in ("ro", "rw"):
        access = None  # refused combination, covered by its own test
    config = tmp_path / "config.toml"
    config.write_text("[sandbox]\n" + "".join(f"{k} = {v}\n" for k, v in values.items()),
                      encoding="utf-8")
    env = {"SBX_CONFIG": str(config), "SBX_HOME": str(tmp_path / "state"),
           "HOME": str(world["root"] / "home")}
    console = io.StringIO()
    engine = engine_serving(image_user, workdir, ("true",))
    renderer = Renderer(console, console, as_json=True, env=env)
    ctx = AppContext(env=env, cwd=world["root"], renderer=renderer,
                     driver_factory=lambda _e: engine)
    request = RunRequest(
        workload=str(world["kit"]),
        workspace=str(world["ws"]) if use_workspace else None,
        access=access,
        mounts=tuple(f"{world[name]}:/mnt/{name}{mode}" for name, mode in mounts),
        timeout_s=timeout,
        command=tuple(command) if command else None,
    )
    plan = prepare(ctx, request, "run0", _no_progress)
    plan.host_mounts.close()  # the plan is never executed here
    assert "build" not in engine.names()
    spec = plan.spec
    limits_memory = values["memory_bytes"]

    assert hardening_violations(spec, _limits(values)) == []
    kwargs = create_kwargs(spec)
    host = kwargs["host_config"]
    # The same hardened shape on every path, whatever the inputs:
    assert host["read_only"] is True
    assert host["cap_drop"] == ["ALL"]
    assert host["security_opt"] == ["no-new-privileges:true"]
    assert host["privileged"] is False
    assert host["network_mode"] == "none" and kwargs["network_disabled"] is True
    assert host["mem_limit"] == host["memswap_limit"] == limits_memory
    assert host["pids_limit"] == values["pids"]
    assert host["nano_cpus"] == values["cpu_millis"] * 1_000_000
    assert f"size={values['tmp_bytes']}" in host["tmpfs"]["/tmp"]
    home = kwargs["environment"]["HOME"]
    assert f"size={values['home_bytes']}" in host["tmpfs"][home]
    assert f"uid={kwargs['user'].split(':')[0]}" in host["tmpfs"][home]
    uid, gid = (int(x) for x in kwargs["user"].split(":"))
    assert uid != 0 and gid != 0
    binds = [m for m in host["mounts"] if m["Type"] == "bind"]
    assert "binds" not in host  # typed binds only: the engine never creates a missing source
    assert not any("docker.sock" in m["Source"] for m in binds)
    assert all(m["BindOptions"] == {"Propagation": "rprivate"} for m in binds)
    assert kwargs["environment"]["SBX_WORKSPACE"] == kwargs["working_dir"]
    assert kwargs["working_dir"] == (workdir or "/workspace")
    for key in (labels.MANAGED, labels.HOME, labels.RUN, labels.DEADLINE, labels.VERSION):
        assert kwargs["labels"][key]
    # Workspace: a bind exactly when a host path is given with ro/rw access, else a tmpfs.
    workspace_bind = use_workspace and access != "none"
    assert (kwargs["working_dir"] in host["tmpfs"]) is (not workspace_bind)
    if workspace_bind:
        assert (binds[0]["Source"], binds[0]["Target"], binds[0]["ReadOnly"]) == (
            str(world["ws"]), kwargs["working_dir"], access == "ro")
    assert len(binds) == len(mounts) + (1 if workspace_bind else 0)


def _limits(values: dict[str, int]) -> Any:
    from sbx.domain.sandbox.hardening import Limits

    return Limits(values["memory_bytes"], values["pids"], values["cpu_millis"],
                  values["tmp_bytes"], values["workspace_bytes"], values["home_bytes"])
