"""--memory, --cpus, --pids on a real engine: the container's HostConfig and the cgroup limits
the sandbox sees inside match the flags; a plan from the plan cache never carries an earlier
run's limits; over a bound and bad syntax are refused with their reason, no traceback."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest

from sbx.seams.driver import SdkEngine
from tests.support.sbxproc import Finished, run_sbx

from .test_hardening import CGROUP_PROBE

pytestmark = pytest.mark.docker

MIB = 1 << 20
CONFIG = f"""
[sandbox]
memory_bytes = {512 * MIB}
tmp_bytes = {32 * MIB}
workspace_bytes = {48 * MIB}
home_bytes = {40 * MIB}
pids = 128
cpu_millis = 1000
timeout_ms = 60000
"""


@pytest.fixture
def env(tmp_path: Path, state_home: Path) -> dict[str, str]:
    config = tmp_path / "config.toml"
    config.write_text(CONFIG, encoding="utf-8")
    return {**os.environ, "SBX_HOME": str(state_home), "SBX_CONFIG": str(config)}


@pytest.fixture
def names(cleanup: list[str]) -> list[str]:
    return cleanup  # the conftest's: removed after the test


def _values(done: Finished) -> dict[str, str]:
    text = done.stdout.decode()
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def _expect(values: dict[str, str], memory: int, pids: int, cpu_millis: int) -> None:
    assert int(values["memory"]) == memory  # whole pages: these sizes are page multiples
    assert values.get("swap", values.get("memsw")) in (str(memory), "0", "missing")
    assert values["pids"] == str(pids)
    quota, period = values["cpu"].split()
    assert int(quota) * 1000 // int(period) == cpu_millis


def _probe(env: dict[str, str], kit: Path, *flags: str) -> Finished:
    return run_sbx(["run", str(kit), *flags, "--", "sh", "-c", CGROUP_PROBE], env=env)


def test_one_shot_limits_inside_and_the_plan_cache_never_keeps_them(
        env: dict[str, str], busybox_kit: Path, state_home: Path) -> None:
    flags = ("--memory", "256m", "--cpus", "0.5", "--pids", "64")
    first = _probe(env, busybox_kit, *flags)
    assert first.returncode == 0, first.stderr
    _expect(_values(first), 256 * MIB, 64, 500)
    plans = list((state_home / "cache" / "plans").glob("*.json"))
    assert plans, "the run was expected to be cached"
    recipe = json.loads(plans[0].read_text())["recipe"]
    assert recipe["limits"]["memory_bytes"] == 512 * MIB  # the config's, never the flag's
    again = _probe(env, busybox_kit, *flags)  # from the plan cache
    assert again.returncode == 0, again.stderr
    _expect(_values(again), 256 * MIB, 64, 500)
    other = _probe(env, busybox_kit, "--memory", "320m", "--pids", "100")
    assert other.returncode == 0, other.stderr
    _expect(_values(other), 320 * MIB, 100, 1000)
    plain = _probe(env, busybox_kit)
    assert plain.returncode == 0, plain.stderr
    _expect(_values(plain), 512 * MIB, 128, 1000)


def test_named_sandbox_host_config_and_cgroups_match(
        env: dict[str, str], busybox_kit: Path, names: list[str], engine: SdkEngine) -> None:
    name = f"lim-{uuid.uuid4().hex[:8]}"
    names.append(name)
    created = run_sbx(["run", "--name", name, "-d", str(busybox_kit), "--memory", "200m",
                       "--cpus", "0.25", "--pids", "50", "--", "sleep", "600"], env=env)
    assert created.returncode == 0, created.stderr
    listed = [o for o in engine.list_owned({"dev.sbx.name": name}) if o.kind == "container"]
    assert len(listed) == 1
    host = engine.container(listed[0].id).attrs["HostConfig"]
    assert (host["Memory"], host["MemorySwap"]) == (200 * MIB, 200 * MIB)
    assert host["NanoCpus"] == 250_000_000 and host["PidsLimit"] == 50
    inside = run_sbx(["exec", name, "--", "sh", "-c", CGROUP_PROBE], env=env)
    assert inside.returncode == 0, inside.stderr
    _expect(_values(inside), 200 * MIB, 50, 250)
    # A creation option: another value for an existing sandbox is refused by name.
    changed = run_sbx(["run", "--name", name, "-d", str(busybox_kit), "--memory", "300m",
                       "--cpus", "0.25", "--pids", "50", "--", "sleep", "600"], env=env)
    assert changed.returncode == 2 and b"--memory" in changed.stderr, changed.stderr


@pytest.mark.parametrize(("flags", "code", "reason"), [
    (("--memory", "1g"), 125, b"limit_over_bound"),
    (("--cpus", "1.5"), 125, b"limit_over_bound"),
    (("--pids", "129"), 125, b"limit_over_bound"),
    (("--memory", "64m"), 125, b"limit_over_bound"),  # below /tmp + workspace + HOME
    (("--memory", "12x"), 2, b"invalid_argument"),
    (("--cpus", "0.0001"), 2, b"invalid_argument"),
    (("--pids", "-1"), 2, b"invalid_argument"),
])
def test_refusals_carry_their_reason(env: dict[str, str], busybox_kit: Path,
                                     flags: tuple[str, ...], code: int, reason: bytes) -> None:
    done = run_sbx(["run", str(busybox_kit), *flags, "--", "true"], env=env)
    assert done.returncode == code, done.stderr
    assert reason in done.stderr and b"Traceback" not in done.stderr
    explained = run_sbx(["explain", reason.decode()], env=env)
    assert explained.returncode == 0 and reason in explained.stdout
    assert b"fix:" in explained.stdout
