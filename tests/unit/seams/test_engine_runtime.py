"""The OCI runtime on the engine's side: the create request carries it as HostConfig.Runtime
(the same for both transports: tests/unit/seams/test_enginesocket.py), and /info's Runtimes are
read the same by both."""

from __future__ import annotations

from sbx.domain.sandbox.hardening import Limits, build_create_step_spec, build_spec
from sbx.seams.engine import create_body, engine_info

LIMITS = Limits(memory_bytes=1 << 30, pids=64, cpu_millis=500, tmp_bytes=1 << 26,
                workspace_bytes=1 << 27, home_bytes=1 << 26)


def _sandbox(runtime: str | None) -> dict[str, object]:
    spec = build_spec(image="sha256:" + "b" * 64, uid=1000, gid=1000, limits=LIMITS,
                      workspace_target="/workspace", workspace_bind=None, extra_binds=(),
                      command=("true",), entrypoint=None, env={}, labels={}, image_labels={},
                      home="/home/sbx", runtime=runtime)
    host: dict[str, object] = create_body(spec)["HostConfig"]
    return host


def test_a_runtime_reaches_the_create_request() -> None:
    assert _sandbox("runsc")["Runtime"] == "runsc"


def test_no_runtime_leaves_the_engine_its_default() -> None:
    assert "Runtime" not in _sandbox(None)


def test_the_create_step_runs_on_the_same_runtime() -> None:
    spec = build_create_step_spec(image="sha256:" + "c" * 64, limits=LIMITS, workdir="/w",
                                  labels={}, image_labels={}, keepalive=("sleep", "1"),
                                  cap_drop=("NET_RAW",), runtime="crun")
    assert create_body(spec)["HostConfig"]["Runtime"] == "crun"


def test_info_lists_the_engines_runtimes_and_its_default() -> None:
    info = engine_info({"ServerVersion": "20.10.24", "OSType": "linux",
                        "Runtimes": {"runc": {"path": "runc"}, "crun": {"path": "/usr/bin/crun"},
                                     "io.containerd.runc.v2": {"path": "runc"}},
                        "DefaultRuntime": "runc", "SecurityOptions": ["name=rootless"]},
                       "1.41")
    assert info.runtimes == ("crun", "io.containerd.runc.v2", "runc")
    assert info.default_runtime == "runc"
    assert info.rootless and info.api_version == "1.41"


def test_info_without_runtimes_lists_none() -> None:
    info = engine_info({"Runtimes": ["not", "a", "table"]}, "1.41")
    assert (info.runtimes, info.default_runtime) == ((), "")
