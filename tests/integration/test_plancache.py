"""The plan cache against a real engine: a repeated `sbx run` runs from the cached plan, creates
the same container as the full plan did, re-plans when what it was keyed on changed, and (in a
fresh process) never imports the planner, validator, YAML parser, CLI parser or docker SDK."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sbx.base import labels
from sbx.seams.driver import SdkEngine
from sbx.seams.enginesocket import SocketEngine
from sbx.usecases.run import fromkits
from sbx.usecases.run import start as run_module
from sbx.usecases.run.fromcache import prepare_cached
from sbx.usecases.run.fromkits import prepare

from .conftest import BUSYBOX, user_owned

pytestmark = pytest.mark.docker

# What makes a sandbox a sandbox (README "hardening"), as the engine reports it.
HOST_FIELDS = ("ReadonlyRootfs", "CapDrop", "CapAdd", "SecurityOpt", "Memory", "MemorySwap",
               "PidsLimit", "NanoCpus", "Tmpfs", "NetworkMode", "Privileged", "Init", "Mounts",
               "LogConfig", "Binds")
CONFIG_FIELDS = ("User", "WorkingDir", "Entrypoint", "Cmd", "Image", "OpenStdin", "StdinOnce",
                 "AttachStdin", "Tty", "NetworkDisabled")
PER_RUN_LABELS = (labels.RUN, labels.DEADLINE)


@pytest.fixture
def env(state_home: Path) -> dict[str, str]:
    return {**os.environ, "SBX_HOME": str(state_home), "SBX_CONFIG": os.devnull}


@pytest.fixture
def kit(kit_factory: Callable[..., Path]) -> Path:
    # A nonce makes the kit image this test's own (it may be removed below).
    return kit_factory("cachekit", f'FROM {BUSYBOX}\nLABEL test.nonce="{uuid.uuid4().hex}"\n'
                       'USER agent\nWORKDIR /workspace\nCMD ["true"]\n')


@pytest.fixture
def observed(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, list[Any]]]:
    """Which planner each run used, and the engine's inspect of every sandbox it started."""
    seen: dict[str, list[Any]] = {"full": [], "cached": [], "inspect": []}

    def full(*args: Any, **kwargs: Any) -> Any:
        seen["full"].append(1)
        return prepare(*args, **kwargs)

    def cached(*args: Any, **kwargs: Any) -> Any:
        plan = prepare_cached(*args, **kwargs)
        seen["cached"].append(plan is not None)
        return plan

    def inspected(start: Callable[[Any, str], None]) -> Callable[[SdkEngine, str], None]:
        def started(self: SdkEngine, container_id: str) -> None:
            start(self, container_id)
            done = subprocess.run(["docker", "inspect", container_id], capture_output=True,
                                  text=True, check=True, timeout=60)
            seen["inspect"].append(json.loads(done.stdout)[0])
        return started

    monkeypatch.setattr(fromkits, "prepare", full)
    monkeypatch.setattr(run_module, "prepare_cached", cached)
    for transport in (SdkEngine, SocketEngine):  # whichever the run opens
        monkeypatch.setattr(transport, "start", inspected(transport.start))
    yield seen


def _shape(inspect: dict[str, Any], run_id: str = "") -> dict[str, Any]:
    """The hardening-relevant fields; a run's own id (in staged mount sources) made neutral."""
    if run_id:
        inspect = json.loads(json.dumps(inspect).replace(run_id, "RUN").replace(
            run_id[:16], "RUN"))
    host = inspect["HostConfig"]
    config = inspect["Config"]
    return {
        "host": {name: host.get(name) for name in HOST_FIELDS},
        "config": {name: config.get(name) for name in CONFIG_FIELDS},
        "env": sorted(e for e in config.get("Env") or () if not e.startswith("SBX_RUN_ID=")),
        "labels": {k: v for k, v in (config.get("Labels") or {}).items()
                   if k not in PER_RUN_LABELS},
        "health": {k: v for k, v in (config.get("Healthcheck") or {}).items() if k != "Test"},
    }


def test_second_run_uses_the_cache_and_creates_the_same_sandbox(
        kit: Path, sbx_cli: Any, env: dict[str, str], tmp_path: Path,
        observed: dict[str, list[Any]]) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    user_owned(workspace)
    (workspace / "in.txt").write_text("from the host\n", encoding="utf-8")
    argv = ["run", str(kit), str(workspace), "-e", "GREETING", "--", "sh", "-c",
            "cat in.txt; echo $GREETING; id -u; echo out > out.txt"]
    first = sbx_cli(argv, env={**env, "GREETING": "hello"})
    second = sbx_cli(argv, env={**env, "GREETING": "hello"})
    # The same request through the docker SDK alone (another environment: a full plan).
    third = sbx_cli(argv, env={**env, "GREETING": "hello", "SBX_ENGINE_SOCKET": "0"})
    assert first.exit_code == second.exit_code == third.exit_code == 0, (first, second, third)
    assert observed["full"] == [1, 1] and observed["cached"] == [True]
    assert first.stdout == second.stdout == third.stdout == "from the host\nhello\n1000\n"
    assert (workspace / "out.txt").read_text(encoding="utf-8") == "out\n"
    # The per-run parts are this run's own; everything else is the same.
    runs = [i["Config"]["Labels"][labels.RUN] for i in observed["inspect"]]
    assert len(set(runs)) == 3
    full, cached, sdk = (_shape(i, run) for i, run in zip(observed["inspect"], runs,
                                                            strict=True))
    for other in (cached, sdk):
        differing = {f"{part}.{name}": (full[part][name], other[part].get(name))
                     for part in ("host", "config", "labels", "health") for name in full[part]
                     if full[part][name] != other[part].get(name)}
        assert differing == {}
        assert full == other


def test_the_json_envelope_is_the_same_from_the_cache(kit: Path, sbx_cli: Any,
                                                      env: dict[str, str],
                                                      observed: dict[str, list[Any]]) -> None:
    argv = ["run", "--json", str(kit), "--", "echo", "x"]
    first = sbx_cli(argv, env=env).envelope()
    second = sbx_cli(argv, env=env).envelope()
    third = sbx_cli(argv, env=env).envelope()
    assert observed["full"] == [1] and observed["cached"] == [True, True]
    volatile = ("run_id", "duration_s", "image_built")
    assert first["data"]["image_built"] is True
    assert second["data"]["image_built"] is False
    assert ({k: v for k, v in first["data"].items() if k not in volatile}
            == {k: v for k, v in second["data"].items() if k not in volatile}
            == {k: v for k, v in third["data"].items() if k not in volatile})


def test_a_changed_kit_or_a_removed_image_plans_again(kit: Path, sbx_cli: Any,
                                                      env: dict[str, str], engine: SdkEngine,
                                                      observed: dict[str, list[Any]]) -> None:
    argv = ["run", "--json", str(kit), "--", "true"]
    first = sbx_cli(argv, env=env).envelope()
    sbx_cli(argv, env=env)
    assert observed["full"] == [1] and observed["cached"] == [True]
    # The image is gone (gc, docker rmi): the cached path notices and the full plan builds it.
    image = engine.image(str(first["data"]["image"]))
    assert image is not None
    subprocess.run(["docker", "image", "rm", "-f", image.id], capture_output=True, check=True,
                   timeout=60)
    again = sbx_cli(argv, env=env).envelope()
    assert observed["cached"] == [True, False] and observed["full"] == [1, 1]
    assert again["data"]["image_built"] is True
    # An edited kit is a miss before any engine call.
    (kit / "notes.txt").write_text("changed", encoding="utf-8")
    changed = sbx_cli(argv, env=env).envelope()
    assert observed["cached"] == [True, False] and observed["full"] == [1, 1, 1]
    assert changed["exit_code"] == 0


def test_a_workspace_that_changed_owner_plans_again(kit: Path, sbx_cli: Any,
                                                    env: dict[str, str], tmp_path: Path,
                                                    observed: dict[str, list[Any]]) -> None:
    if os.geteuid() != 0:
        pytest.skip("changing a directory's owner needs root")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    user_owned(workspace)
    argv = ["run", "--json", str(kit), str(workspace), "--", "id", "-u"]
    first = sbx_cli(argv, env=env).envelope()
    os.chown(workspace, 2000, 2000)
    second = sbx_cli(argv, env=env).envelope()
    assert observed["cached"] == [False] and observed["full"] == [1, 1]
    assert first["data"]["stdout"] == "1000\n"
    assert second["data"]["stdout"] == "2000\n"


def test_a_mount_the_policy_now_refuses_is_refused_from_the_cache(
        kit: Path, sbx_cli: Any, env: dict[str, str], tmp_path: Path,
        observed: dict[str, list[Any]]) -> None:
    """The mount checks run on every run: a socket that appeared in the workspace refuses the
    cached run as it would the full one."""
    import socket

    workspace = tmp_path / "ws"
    workspace.mkdir()
    user_owned(workspace)
    argv = ["run", str(kit), str(workspace), "--", "true"]
    assert sbx_cli(argv, env=env).exit_code == 0
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(str(workspace / "agent.sock"))
        refused = sbx_cli(argv, env=env)
    finally:
        listener.close()
    assert observed["full"] == [1]  # refused by the cached path's own check
    assert refused.exit_code != 0
    assert "mount_blocked" in refused.stderr and "agent.sock" in refused.stderr


def test_a_cached_run_in_a_fresh_process_imports_no_planner(kit: Path, env: dict[str, str],
                                                            tmp_path: Path) -> None:
    report = tmp_path / "modules.json"
    code = textwrap.dedent(f"""
        import json, sys
        from sbx.__main__ import cli
        status = cli(["run", {str(kit)!r}, "--", "true"])
        with open({str(report)!r}, "w") as out:
            json.dump({{"status": status, "modules": sorted(sys.modules)}}, out)
        """)

    def run() -> dict[str, Any]:
        subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120,
                       capture_output=True, stdin=subprocess.DEVNULL)
        loaded: dict[str, Any] = json.loads(report.read_text(encoding="utf-8"))
        return loaded

    full = run()
    cached = run()
    assert full["status"] == cached["status"] == 0
    assert "sbx.domain.kits.compose" in full["modules"]  # the check can fail: the full path has it
    forbidden = sorted(m for m in cached["modules"]
                       if m.split(".")[0] in ("jsonschema", "ruamel", "yaml", "docker",
                                              "requests", "typer", "tomlkit")
                       or m in ("sbx.domain.kits.compose", "sbx.domain.kits.resolve",
                                "sbx.domain.kits.rules", "sbx.domain.kits.descriptor",
                                "sbx.base.config", "sbx.app"))
    assert forbidden == []
    assert "sbx.usecases.plancache" in cached["modules"]


def test_a_kit_named_by_a_bare_word_and_global_flags_after_run_use_the_cache(
        kit: Path, sbx_cli: Any, env: dict[str, str],
        observed: dict[str, list[Any]]) -> None:
    """`sbx run cachekit` from the kit's parent directory (the word loads the directory it
    names) and `sbx run -v ...` (a global flag after the subcommand) are cached too."""
    argv = ["run", "-v", kit.name, "--", "true"]
    assert sbx_cli(argv, env=env, cwd=kit.parent).exit_code == 0
    assert sbx_cli(argv, env=env, cwd=kit.parent).exit_code == 0
    assert observed["full"] == [1] and observed["cached"] == [True]
    # The directory gone: a miss, and the word is then a registry reference the lock lacks.
    moved = kit.parent / "elsewhere"
    kit.rename(moved)
    refused = sbx_cli(argv, env=env, cwd=kit.parent)
    assert refused.exit_code != 0
    assert observed["full"] == [1, 1] and observed["cached"] == [True]
