"""Re-entering a kept sandbox: `sbx run --keep KIT WS` the second time vs `docker start -a`
of the same container, each to the workload's first byte of output.

Usage::

    .venv/bin/python bench/reenter.py [--runs N] [--json]

A temporary SBX_HOME and workspace; a busybox kit whose CMD prints one line and exits, kept by
a first `sbx run --keep` (which builds it). Then N rounds, in rotated order: sbx's re-entry (the
record read, the admission, the kits followed, the start, the attach) and the engine's own
`docker start -a` of the container sbx created. Both end when the workload exits; the time is
taken at the first stdout byte. `sbx rm -f` removes the sandbox at the end. No network: the
kit has none; nothing is pulled. A third series is the same re-entry served by the resident
helper (`sbx resident start`, its own runtime directory), with its forks' CPU per re-entry.
Exit status 0 when results were printed (the ratio's goal, 1.3, is reported, not asserted).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final

BASE_IMAGE: Final = "sbx-test/busybox:1"
RATIO_GOAL: Final = 1.3
MAX_RUNS: Final = 50
CALL_TIMEOUT_S: Final = 120
NAME: Final = "bench-workspace"


def first_byte_s(argv: Sequence[str], env: dict[str, str], cwd: Path) -> float:
    """Seconds from the process start to its first stdout byte; it must then exit 0."""
    started = time.perf_counter()
    with subprocess.Popen(list(argv), env=env, cwd=cwd, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, stdin=subprocess.DEVNULL) as proc:
        assert proc.stdout is not None
        first = proc.stdout.read(1)
        elapsed = time.perf_counter() - started
        _rest, err = proc.communicate(timeout=CALL_TIMEOUT_S)
    if not first or proc.returncode != 0:
        raise SystemExit(f"bench: {' '.join(argv)} exited {proc.returncode}: "
                         f"{err.decode(errors='replace')[-400:]}")
    return elapsed


def rounds(variants: list[tuple[str, list[str], dict[str, str]]], runs: int,
           cwd: Path) -> dict[str, list[float]]:
    """Each variant's first-byte times, ``runs`` rounds in rotated order."""
    samples: dict[str, list[float]] = {key: [] for key, _words, _env in variants}
    for index in range(runs):
        turn = index % len(variants)
        for key, words, environment in variants[turn:] + variants[:turn]:
            samples[key].append(first_byte_s(words, environment, cwd))
        print(f"bench: round {index + 1}/{runs}", file=sys.stderr, flush=True)
    return samples


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    runs = max(1, min(args.runs, MAX_RUNS))
    sbx = str(Path(sys.executable).parent / "sbx")
    docker = shutil.which("docker") or "docker"
    with tempfile.TemporaryDirectory(prefix="sbx-bench-reenter-") as tmp:
        root = Path(tmp)
        kit = root / "kits" / "bench"
        kit.mkdir(parents=True)
        (kit / "bench.yaml").write_text(
            '# syntax=docker/sandbox-kit:3\nschemaVersion: "3"\nkind: workload\n',
            encoding="utf-8")
        (kit / "bench.dockerfile").write_text(
            f'FROM {BASE_IMAGE}\nUSER agent\nCMD ["echo", "ready"]\n', encoding="utf-8")
        workspace = root / NAME
        workspace.mkdir()
        if os.geteuid() == 0:
            os.chown(workspace, 1000, 1000)
        env = {**os.environ, "SBX_HOME": str(root / "home"), "SBX_CONFIG": os.devnull,
               "XDG_RUNTIME_DIR": str(root / "runtime"), "SBX_RESIDENT": "0"}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        (root / "runtime").mkdir(mode=0o700)
        served_env = {**env, "SBX_RESIDENT": "1"}
        name = f"bench-{NAME}"
        run = [sbx, "run", "--keep", str(kit), "."]
        try:
            first_byte_s(run, env, workspace)  # creates it (and builds the image)
            subprocess.run([sbx, "resident", "start", "--idle", "600"], env=served_env,
                           capture_output=True, timeout=CALL_TIMEOUT_S, check=True)
            listed = subprocess.run(
                [docker, "ps", "-aq", "--filter", f"label=dev.sbx.name={name}",
                 "--filter", "label=dev.sbx.managed"], capture_output=True, text=True,
                timeout=CALL_TIMEOUT_S, check=True).stdout.split()
            if len(listed) != 1:
                raise SystemExit(f"bench: expected one container of {name}, found {listed}")
            # -a: stdin is not forwarded on either side (no terminal here); with -i and no
            # input the CLI prints nothing at all
            start = [docker, "start", "-a", listed[0]]
            samples = rounds([("sbx_reenter", run, env), ("sbx_reenter_resident", run, served_env),
                              ("docker_start_a", start, env)], runs, workspace)
            helper = json.loads(subprocess.run(
                [sbx, "resident", "status", "--json"], env=served_env, capture_output=True,
                timeout=CALL_TIMEOUT_S, check=True).stdout)["data"]
        finally:
            subprocess.run([sbx, "resident", "stop"], env=served_env, capture_output=True,
                           timeout=CALL_TIMEOUT_S, check=False)
            subprocess.run([sbx, "rm", "-f", name], env=env, capture_output=True,
                           timeout=CALL_TIMEOUT_S, check=False)
    if helper.get("served", 0) < runs:
        raise SystemExit(f"bench: the resident helper served {helper.get('served')} of {runs}")
    medians = {k: statistics.median(v) * 1000 for k, v in samples.items()}
    ratio = medians["sbx_reenter"] / medians["docker_start_a"]
    resident_ratio = medians["sbx_reenter_resident"] / medians["docker_start_a"]
    result = {"runs": runs, "median_ms": {k: round(v, 1) for k, v in medians.items()},
              "ratio": round(ratio, 2), "resident_ratio": round(resident_ratio, 2),
              "resident_child_cpu_ms": round(helper["child_cpu_s"] / helper["served"] * 1000, 1),
              "goal": RATIO_GOAL, "met": ratio <= RATIO_GOAL,
              "met_with_resident": resident_ratio <= RATIO_GOAL}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for key, value in medians.items():
            print(f"{key:16} median {value:8.1f} ms  (n={runs})")
        print(f"ratio sbx/docker {ratio:.2f} (goal <= {RATIO_GOAL}: "
              f"{'met' if ratio <= RATIO_GOAL else 'not met'})")
        print(f"ratio sbx with the resident helper/docker {resident_ratio:.2f} (goal <= "
              f"{RATIO_GOAL}: {'met' if resident_ratio <= RATIO_GOAL else 'not met'}); its "
              f"forks' CPU {result['resident_child_cpu_ms']} ms per re-entry")
    return 0


if __name__ == "__main__":
    sys.exit(main())
