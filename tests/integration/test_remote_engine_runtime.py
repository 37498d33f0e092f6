"""`--runtime` and `[sandbox] runtime` on a real engine: a second engine host of its own
(tests/support/enginehost.py, reached over ssh://) with Debian's crun registered (`dockerd
--add-runtime crun=/usr/bin/crun`); the machine's own engine is never reconfigured.

A run on crun must be created with ``HostConfig.Runtime == "crun"`` and be held by crun itself
(crun's own state directory on that engine lists the container), the same from the plan cache;
a runtime the engine lacks is refused with ``runtime_missing`` before anything is created there
or here; ``sbx doctor`` lists the engine's runtimes and fails on a configured one it lacks.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sbx.base import labels
from sbx.base.paths import home_hash
from sbx.seams.driver import SdkEngine
from tests.support.enginehost import CRUN
from tests.support.sbxproc import SBX, read_some, run_sbx

from .conftest import BUSYBOX, FarHost, owned, started_far_host

pytestmark = pytest.mark.docker

KIT = f'FROM {BUSYBOX}\nUSER agent\nWORKDIR /workspace\nCMD ["sh"]\n'


@pytest.fixture(scope="module")
def crun_host(engine: SdkEngine) -> Iterator[FarHost]:
    """A second engine host with crun registered (CI installs crun: scripts/setup.sh) and the
    busybox test image; removed with everything it made at the end of the module."""
    with started_far_host(crun=True) as far:
        listed = far.host.docker("info", "--format", "{{json .Runtimes}}")
        assert "crun" in json.loads(listed.stdout or b"{}"), listed.stderr
        yield far


@pytest.fixture
def kit(kit_factory: Callable[..., Path]) -> Path:
    return kit_factory("runtime", KIT)


def _images(far: FarHost) -> list[str]:
    return sorted(far.host.docker("images", "-aq", "--no-trunc").stdout.decode().split())


def _crun_lists(far: FarHost, container_id: str) -> bool:
    """Whether crun itself holds the running container: the engine's runc shim keeps the state
    of each container under <exec-root>/runtime-runc/moby, which `crun --root DIR state ID`
    reads only when crun wrote it (runc's own state there is another format)."""
    state = far.host.root / "exec" / "runtime-runc" / "moby"
    done = subprocess.run([CRUN, "--root", str(state), "state", container_id],
                          capture_output=True, timeout=30, check=False)
    if done.returncode != 0:
        return False
    return bool(json.loads(done.stdout).get("status") == "running")


def _run_held(far: FarHost, env: dict[str, str], argv: list[str]) -> tuple[dict[str, Any], bool]:
    """Run ``sbx ARGV`` whose workload prints ``ready`` and waits for a line on stdin; the far
    engine's inspect of the sandbox and whether crun holds it, while it waits."""
    proc = subprocess.Popen([str(SBX), *argv, "--", "sh", "-c", "echo ready; read line; "
                             "echo got $line"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    try:
        first = read_some(proc.stdout, len(b"ready\n"), timeout=120)
        assert first == b"ready\n", read_some(proc.stderr, 4096, timeout=5)
        found = far.containers(Path(env["SBX_HOME"]))
        assert len(found) == 1
        inspected = json.loads(far.host.docker("inspect", found[0]).stdout)[0]
        held = _crun_lists(far, inspected["Id"])
        proc.stdin.write(b"bye\n")
        proc.stdin.close()
        rest = proc.stdout.read()
        assert proc.wait(timeout=120) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=60)
        proc.stdout.close()
        proc.stderr.close()
    assert rest == b"got bye\n"
    return inspected, held


def test_a_run_with_runtime_crun_runs_on_crun_there(crun_host: FarHost, kit: Path,
                                                    state_home: Path, engine: SdkEngine) -> None:
    env = crun_host.env(state_home)
    argv = ["run", "-i", "--runtime", "crun", str(kit)]
    inspected, held = _run_held(crun_host, env, argv)
    host_config = inspected["HostConfig"]
    assert host_config["Runtime"] == "crun"
    assert held, "crun's own state does not list the sandbox"
    # The hardened shape is the same on crun.
    assert host_config["ReadonlyRootfs"] is True and host_config["CapDrop"] == ["ALL"]
    assert "no-new-privileges" in " ".join(host_config["SecurityOpt"] or [])
    assert host_config["NetworkMode"] == "none" and host_config["PidsLimit"] > 0
    assert crun_host.containers(state_home) == [] and owned(engine, state_home) == []
    # The same request again runs from the plan cache (its entry is not rewritten), on crun.
    entries = list((state_home / "cache" / "plans").glob("*.json"))
    assert len(entries) == 1
    recipe = json.loads(entries[0].read_bytes())["recipe"]
    assert (recipe["runtime"], recipe["runtime_source"]) == ("crun", "--runtime")
    written = entries[0].stat().st_mtime_ns
    again, held_again = _run_held(crun_host, env, argv)
    assert entries[0].stat().st_mtime_ns == written
    assert again["HostConfig"]["Runtime"] == "crun" and held_again
    # Without the flag: the engine's default, and crun holds nothing of it.
    default, on_crun = _run_held(crun_host, env, ["run", "-i", str(kit)])
    assert default["HostConfig"]["Runtime"] == "runc" and not on_crun


def _running_as_root(far: FarHost, state_home: Path) -> dict[str, Any] | None:
    """The engine's inspect of the run's running container whose user is root (the create
    step: the sandbox never is), if there is one now."""
    listed = far.host.docker("ps", "-q", "--filter",
                             f"label={labels.HOME}={home_hash(state_home)}")
    for ident in listed.stdout.decode().split():
        found = json.loads(far.host.docker("inspect", ident).stdout or b"[]")
        if found and found[0]["Config"]["User"] == "0:0":
            inspected: dict[str, Any] = found[0]
            return inspected
    return None


def test_the_create_step_runs_on_the_runtime_too(crun_host: FarHost,
                                                 kit_factory: Callable[..., Path],
                                                 state_home: Path) -> None:
    """The install hooks run the kits' code as root: on crun as well (caught while the hook
    sleeps; the sandbox after it comes from the image the step committed)."""
    kit = kit_factory("hooked", KIT, """
        capabilities:
          - type: com.docker.sandbox/lifecycle@1
            config:
              install:
                - command: sleep 4; mkdir -p /opt; echo installed > /opt/marker
        """)
    proc = subprocess.Popen([str(SBX), "run", "--runtime", "crun", str(kit), "--", "cat",
                             "/opt/marker"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=crun_host.env(state_home))
    try:
        step: dict[str, Any] | None = None
        deadline = time.monotonic() + 120
        while step is None and time.monotonic() < deadline and proc.poll() is None:
            step = _running_as_root(crun_host, state_home)
            time.sleep(0.2)
        assert step is not None, proc.stderr.read() if proc.stderr else ""
        held = _crun_lists(crun_host, step["Id"])
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out == b"installed\n"
    assert step["Config"]["User"] == "0:0" and step["HostConfig"]["ReadonlyRootfs"] is False
    assert step["HostConfig"]["Runtime"] == "crun" and held
    assert crun_host.containers(state_home) == []


def test_the_configured_runtime_is_used(crun_host: FarHost, kit: Path, state_home: Path,
                                        tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[sandbox]\nruntime = "crun"\n', encoding="utf-8")
    inspected, held = _run_held(crun_host, crun_host.env(state_home, SBX_CONFIG=str(config)),
                                ["run", "-i", str(kit)])
    assert inspected["HostConfig"]["Runtime"] == "crun" and held


def test_a_runtime_the_engine_lacks_is_refused_before_anything_is_created(
        crun_host: FarHost, kit: Path, state_home: Path, engine: SdkEngine,
        tmp_path: Path) -> None:
    images = _images(crun_host)
    env = crun_host.env(state_home)
    done = run_sbx(["run", "--runtime", "nosuch", str(kit), "--", "true"], env=env, timeout=180)
    assert done.returncode == 125, done.stderr
    text = done.stderr.decode()
    assert "(runtime_missing)" in text and "'nosuch'" in text
    assert "crun" in text and "runc" in text  # what the engine has
    assert "dockerd --add-runtime nosuch=" in text  # the fix, to paste
    assert crun_host.containers(state_home) == [] and owned(engine, state_home) == []
    assert _images(crun_host) == images  # not even the kit image was built
    assert not (state_home / "cache" / "plans").exists() or \
        not list((state_home / "cache" / "plans").glob("*.json"))
    # From the config file: the same refusal, naming the file and line.
    config = tmp_path / "config.toml"
    config.write_text('[sandbox]\nruntime = "nosuch"\n', encoding="utf-8")
    refused = run_sbx(["run", str(kit), "--", "true"],
                      env={**env, "SBX_CONFIG": str(config)}, timeout=180)
    assert refused.returncode == 125, refused.stderr
    assert f"[sandbox] runtime ({config}:2)" in refused.stderr.decode()
    assert "(runtime_missing)" in refused.stderr.decode()
    assert crun_host.containers(state_home) == [] and _images(crun_host) == images
    explained = run_sbx(["explain", "runtime_missing"], env=env)
    assert explained.returncode == 0 and b"Runtime not on the engine" in explained.stdout


def _doctor_runtimes(far: FarHost, state_home: Path, config: Path) -> dict[str, Any]:
    done = run_sbx(["doctor", "--json"], env=far.env(state_home, SBX_CONFIG=str(config)),
                   timeout=300)
    checks = json.loads(done.stdout)["data"]["checks"]
    found: dict[str, Any] = next(c for c in checks if c["id"] == "runtimes")
    return found


def test_doctor_lists_the_engines_runtimes_and_flags_a_missing_one(
        crun_host: FarHost, state_home: Path, tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[sandbox]\nruntime = "crun"\n', encoding="utf-8")
    check = _doctor_runtimes(crun_host, state_home, config)
    assert check["status"] == "ok", check
    assert {"crun", "runc"} <= set(check["data"]["runtimes"])
    assert check["data"]["configured"] == "crun" and "crun" in check["detail"]
    config.write_text('[sandbox]\nruntime = "nosuch"\n', encoding="utf-8")
    check = _doctor_runtimes(crun_host, state_home, config)
    assert (check["status"], check["reason"]) == ("fail", "runtime_missing"), check
    assert "crun" in check["detail"] and "--add-runtime nosuch=" in check["fix"]
