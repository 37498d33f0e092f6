"""bench/scale.py in a tiny mode (2 runs of each kind, the resident helper's side included),
so the script cannot rot unnoticed.

The benchmark asserts nothing about speed; this test checks that it still measures what it
says: every batch ran and succeeded, the networked runs reached the local origin through their
own proxies, the proxies' memory was sampled while they were up, and nothing was left behind.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sbx.seams.driver import SdkEngine

pytestmark = pytest.mark.docker

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "scale.py"


def test_scale_bench_tiny_mode_measures_and_cleans_up(engine: SdkEngine) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--concurrency", "2", "--networked", "2", "--rounds", "1",
         "--hold-s", "1", "--json"],
        capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)

    runs = result["concurrent"]
    assert runs["failures"] == {"sbx_run": 0, "sbx_resident": 0, "docker_run": 0}, \
        runs["failed_samples"]
    for name in ("sbx_run", "sbx_resident", "docker_run"):
        (batch,) = runs["batches"][name]
        assert batch["count"] == 2 and batch["failures"] == 0
        assert 0 < batch["p50_s"] <= batch["p90_s"] <= batch["wall_s"] + 0.01
    # the resident side was served by the helper, every run of it, and its forks' CPU counted
    assert runs["resident_served"] == 2 and runs["resident_fork_cpu_s_per_run"] > 0
    assert {"--read-only", "--init", "none"} <= set(runs["docker_argv"])  # sbx's flags

    net = result["networked"]
    assert net["failures"] == {"networked": 0, "offline": 0}, net["failed_samples"]
    assert net["origin_requests"] == 2  # one fetch per networked run, through its proxy
    memory = net["proxy_memory"]
    assert memory["processes"] == 2 and memory["most_at_once"] >= 1
    assert 1 < memory["rss_mib_median"] < 1024 and memory["pss_mib_median"] > 0
    assert net["sbx_run_memory"]["processes"] == 2
    assert result["leftovers"] == []
