"""Each hardening property of SPEC §5, proven from inside a real sandbox on a real engine."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import CliResult

from .conftest import user_owned

pytestmark = pytest.mark.docker

MEMORY = 512 * 1024 * 1024
TMP = 32 * 1024 * 1024
WORKSPACE = 48 * 1024 * 1024
HOME_BYTES = 40 * 1024 * 1024
PIDS = 48
CPU_MILLIS = 500

CONFIG = f"""
[sandbox]
memory_bytes = {MEMORY}
tmp_bytes = {TMP}
workspace_bytes = {WORKSPACE}
home_bytes = {HOME_BYTES}
pids = {PIDS}
cpu_millis = {CPU_MILLIS}
timeout_ms = 60000
"""

# Reads the limits the container's own cgroups apply, on cgroup v1 or v2.
CGROUP_PROBE = r"""
r() { cat "$1" 2>/dev/null || echo missing; }
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
  echo "memory=$(r /sys/fs/cgroup/memory.max)"
  echo "swap=$(r /sys/fs/cgroup/memory.swap.max)"
  echo "pids=$(r /sys/fs/cgroup/pids.max)"
  echo "cpu=$(r /sys/fs/cgroup/cpu.max)"
else
  echo "memory=$(r /sys/fs/cgroup/memory/memory.limit_in_bytes)"
  echo "memsw=$(r /sys/fs/cgroup/memory/memory.memsw.limit_in_bytes)"
  echo "pids=$(r /sys/fs/cgroup/pids/pids.max)"
  echo "cpu=$(r /sys/fs/cgroup/cpu/cpu.cfs_quota_us) $(r /sys/fs/cgroup/cpu/cpu.cfs_period_us)"
fi
"""

Runner = Callable[..., CliResult]


@pytest.fixture
def run_in(tmp_path: Path, state_home: Path, busybox_kit: Path, sbx_cli: Runner,
           ) -> Runner:
    config = tmp_path / "config.toml"
    config.write_text(CONFIG, encoding="utf-8")
    env = {**os.environ, "SBX_HOME": str(state_home), "SBX_CONFIG": str(config)}

    def run(script: str, *extra: str, kit: Path | None = None) -> CliResult:
        args = ["run", str(kit or busybox_kit), *extra, "--", "sh", "-c", script]
        return sbx_cli(args, env=env)

    return run


def _values(stdout: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in stdout.splitlines() if "=" in line)


def test_root_filesystem_is_read_only(run_in: Runner) -> None:
    result = run_in("touch /probe 2>&1; echo rc=$?; touch /etc/probe 2>&1; echo rc2=$?")
    assert result.exit_code == 0, result.stderr
    values = _values(result.stdout)
    assert values["rc"] != "0" and values["rc2"] != "0"
    assert "Read-only file system" in result.stdout


def test_runs_as_non_root_user_and_group(run_in: Runner) -> None:
    result = run_in("echo uid=$(id -u); echo gid=$(id -g); echo groups=$(id -G)")
    values = _values(result.stdout)
    assert values["uid"] == "1000" and values["gid"] == "1000"
    assert "0" not in values["groups"].split()


def test_capabilities_are_empty_and_no_new_privileges(run_in: Runner) -> None:
    result = run_in("grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs):' /proc/self/status"
                    " | tr -d '\\t ' | tr ':' '='")
    values = _values(result.stdout)
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(values[cap], 16) == 0, f"{cap}={values[cap]}"
    assert values["NoNewPrivs"] == "1"


def test_cgroup_limits_equal_the_configured_values(run_in: Runner) -> None:
    result = run_in(CGROUP_PROBE)
    values = _values(result.stdout)
    assert int(values["memory"]) == MEMORY
    assert int(values["pids"]) == PIDS
    if "swap" in values:  # cgroup v2: swap beyond memory is zero
        assert values["swap"] in ("0", "missing")
    elif values.get("memsw", "missing") != "missing":  # v1 with swap accounting
        assert int(values["memsw"]) == MEMORY
    quota, period = values["cpu"].split()
    assert int(quota) * 1000 // int(period) == CPU_MILLIS


def test_tmp_tmpfs_size_cap_is_enforced(run_in: Runner) -> None:
    over = TMP // (1024 * 1024) + 4
    result = run_in(f"dd if=/dev/zero of=/tmp/fill bs=1M count={over} 2>&1; echo rc=$?; "
                    "du -m /tmp/fill | cut -f1 | sed 's/^/size=/'; "
                    "grep ' /tmp ' /proc/mounts | sed 's/^/mount=/'")
    values = _values(result.stdout)
    assert values["rc"] != "0"
    assert "No space left on device" in result.stdout
    assert int(values["size"]) <= TMP // (1024 * 1024)
    assert "tmpfs" in values["mount"] and "nosuid" in values["mount"] \
        and "nodev" in values["mount"]


def test_workspace_tmpfs_size_cap_is_enforced_and_private(run_in: Runner) -> None:
    over = WORKSPACE // (1024 * 1024) + 4
    result = run_in(f"cd \"$SBX_WORKSPACE\" && dd if=/dev/zero of=fill bs=1M count={over} 2>&1;"
                    " echo rc=$?; echo ws=$SBX_WORKSPACE; echo pwd=$(pwd);"
                    " stat -c 'owner=%u:%g mode=%a' . | tr ' ' '\\n'")
    values = _values(result.stdout)
    assert values["rc"] != "0"
    assert values["ws"] == values["pwd"] == "/workspace"
    # Owned by the sandbox user. The mode is 0700 unless the image already has the directory:
    # the engine then copies the image's directory (and its mode) up into the tmpfs.
    assert values["owner"] == "1000:1000"
    assert int(values["mode"], 8) & 0o022 == 0, "workspace must not be group/other-writable"


def test_fork_bomb_is_contained_by_the_pids_limit(run_in: Runner) -> None:
    # An inner shell starts processes until fork fails (bounded at 200 > PIDS, and by the run
    # timeout); the outer shell then reports with builtins only, since it cannot fork either.
    script = (
        "sh -c 'n=0; while [ $n -lt 200 ]; do sleep 30 & n=$((n+1)); echo $n > /tmp/started;"
        " done' 2>/dev/null; read started < /tmp/started; echo started=$started;"
        " set -- /proc/[0-9]*; echo running=$#"
    )
    result = run_in(script, "--timeout", "40")
    assert result.exit_code == 0, result.stderr
    values = _values(result.stdout)
    assert int(values["started"]) < PIDS
    assert int(values["running"]) <= PIDS


def test_host_outside_the_workspace_is_not_visible(tmp_path: Path, run_in: Runner) -> None:
    project = tmp_path / "host" / "project"
    project.mkdir(parents=True)
    user_owned(project)
    (project / "inside.txt").write_text("workspace-file", encoding="utf-8")
    secret = tmp_path / "host" / "sibling-secret.txt"
    marker = "sbx-marker-host-only-4f1d"
    secret.write_text(marker, encoding="utf-8")
    script = (
        "echo inside=$(cat \"$SBX_WORKSPACE/inside.txt\"); "
        "echo parent=$(ls -A \"$SBX_WORKSPACE/..\" | tr '\\n' ' '); "
        f"echo found=$(grep -rl {marker} / --exclude-dir=proc --exclude-dir=sys 2>/dev/null "
        "| head -1); "
        "echo sock=$(ls /var/run/docker.sock /run/docker.sock 2>&1 | grep -vc 'No such')"
    )
    result = run_in(script, str(project))
    values = _values(result.stdout)
    assert values["inside"] == "workspace-file"
    assert "sibling-secret.txt" not in values["parent"]
    assert values["found"] == ""
    assert values["sock"] == "0"


def test_no_network_interfaces_besides_loopback(run_in: Runner) -> None:
    result = run_in("echo ifaces=$(ls /sys/class/net | tr '\\n' ' ')")
    assert _values(result.stdout)["ifaces"].split() == ["lo"]
