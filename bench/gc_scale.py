"""How `sbx gc` scales with the number of stale objects it removes.

Usage::

    .venv/bin/python bench/gc_scale.py [--sizes 10,100,500] [--json] [--workers N]

For each size N (at most 1000 each, at most 5 sizes):

1. N stale containers are created from ``sbx-test/busybox:1`` (never started, ``--network
   none``), labelled exactly like a crashed run's sandbox for a fresh temporary state home, with
   a deadline an hour in the past; each has its run directory (``runs/<run id>/run.json``
   recording a pid that is gone), as a killed ``sbx run`` leaves them.
2. ``sbx gc --grace 0 --json`` runs as a subprocess (what cron pays) and must report N
   containers and N run directories removed and no failure.
3. The same N containers are created again and removed straight through the docker SDK in this
   process (``remove_container(force=True)`` one by one on a warm client): the engine's own
   floor, side by side.

A no-op ``sbx gc`` (the home has a ``runs/`` directory, so the engine is contacted, but nothing
is stale) gives the fixed cost; the per-container cost is ``(t(N) - t(0)) / N``.

Nothing is pulled and nothing is started, so no traffic leaves the machine. Every container the
benchmark creates carries ``dev.sbx.bench=<token>`` and is removed at the end even on failure;
the temporary state homes are deleted. Exit 0 when results were printed, 1 when the benchmark
could not run (no engine, no image, gc failed).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Final

import docker

from sbx.base import labels as label_keys
from sbx.base.paths import home_hash

IMAGE: Final = "sbx-test/busybox:1"
MAX_SIZE: Final = 1000
MAX_SIZES: Final = 5
SUBPROCESS_TIMEOUT_S: Final = 900
BENCH_LABEL: Final = "dev.sbx.bench"
SBX: Final = str(Path(sys.executable).with_name("sbx"))


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait(timeout=30)
    return child.pid


class Bench:
    def __init__(self, workers: int) -> None:
        self.client = docker.DockerClient.from_env(timeout=120)
        self.api: Any = self.client.api
        self.token = uuid.uuid4().hex[:12]
        self.workers = workers
        self.homes: list[Path] = []
        self.dead_pid = _dead_pid()

    def home(self) -> Path:
        root = Path(tempfile.mkdtemp(prefix="sbx-gc-bench-"))
        self.homes.append(root)
        state = root / "state"
        (state / "runs").mkdir(parents=True)
        return state

    def stale(self, state: Path, count: int) -> list[str]:
        """``count`` never-started containers and run dirs of a run killed an hour ago."""
        deadline = int(time.time()) - 3600

        def one(_index: int) -> str:
            run_id = uuid.uuid4().hex
            labels = label_keys.object_labels(
                home_hash=home_hash(state), run_id=run_id, deadline=deadline,
                kits=["bench"], role=label_keys.ROLE_SANDBOX)
            labels[BENCH_LABEL] = self.token
            created = self.api.create_container(IMAGE, command=["true"], labels=labels,
                                                network_disabled=True)
            run_dir = state / "runs" / run_id
            run_dir.mkdir()
            (run_dir / "run.json").write_text(json.dumps(
                {"run_id": run_id, "pid": self.dead_pid, "deadline": deadline,
                 "container_id": created["Id"]}), encoding="utf-8")
            return str(created["Id"])

        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            return list(pool.map(one, range(count)))

    def gc(self, state: Path) -> tuple[float, dict[str, Any]]:
        env = {**os.environ, "SBX_HOME": str(state), "SBX_CONFIG": os.devnull}
        started = time.perf_counter()
        done = subprocess.run([SBX, "gc", "--grace", "0", "--json"], env=env,
                              capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S,
                              check=False)
        elapsed = time.perf_counter() - started
        if done.returncode != 0:
            raise RuntimeError(f"sbx gc exited {done.returncode}: {done.stdout}{done.stderr}")
        envelope: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
        return elapsed, envelope["data"]

    def sdk_remove(self, ids: Sequence[str]) -> float:
        started = time.perf_counter()
        for ident in ids:
            self.api.remove_container(ident, force=True, v=True)
        return time.perf_counter() - started

    def cleanup(self) -> int:
        left = self.api.containers(all=True, filters={"label": f"{BENCH_LABEL}={self.token}"})
        for container in left:
            self.api.remove_container(container["Id"], force=True, v=True)
        for root in self.homes:
            shutil.rmtree(root, ignore_errors=True)
        self.client.close()
        return len(left)


def run(sizes: Sequence[int], workers: int) -> dict[str, Any]:
    bench = Bench(workers)
    rows: list[dict[str, Any]] = []
    try:
        noop, _ = bench.gc(bench.home())
        for size in sizes:
            state = bench.home()
            bench.stale(state, size)
            elapsed, data = bench.gc(state)
            counts = data["counts"]
            if data["failed"] or counts["container"] != size or counts["run_dir"] != size:
                raise RuntimeError(f"gc of {size} removed {counts}, failed {data['failed']}")
            sdk_ids = bench.stale(bench.home(), size)
            sdk = bench.sdk_remove(sdk_ids)
            rows.append({"size": size, "gc_s": elapsed, "sdk_remove_s": sdk,
                         "gc_per_container_ms": (elapsed - noop) / size * 1000,
                         "sdk_per_container_ms": sdk / size * 1000,
                         "gc_vs_sdk": elapsed / sdk if sdk else None})
    finally:
        leftovers = bench.cleanup()
    return {"noop_gc_s": noop, "rows": rows, "leftovers_removed": leftovers}


def _print(result: dict[str, Any]) -> None:
    print(f"no-op sbx gc (engine contacted, nothing stale): {result['noop_gc_s'] * 1000:.0f} ms")
    print(f"{'N':>5} {'sbx gc':>9} {'per obj':>9} {'SDK rm':>9} {'per obj':>9} {'gc/SDK':>7}"
          f" {'growth':>7}")
    previous: dict[str, Any] | None = None
    for row in result["rows"]:
        growth = ""
        if previous is not None:
            ratio = row["gc_s"] / previous["gc_s"]
            growth = f"{ratio:.1f}x/{row['size'] / previous['size']:.0f}x"
        print(f"{row['size']:>5} {row['gc_s']:>8.2f}s {row['gc_per_container_ms']:>7.1f}ms"
              f" {row['sdk_remove_s']:>8.2f}s {row['sdk_per_container_ms']:>7.1f}ms"
              f" {row['gc_vs_sdk']:>6.2f}x {growth:>7}")
        previous = row
    print("per obj = (time - no-op) / N for gc (each object is a container plus its run "
          "directory); growth = time ratio / size ratio to the previous row")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,100,500",
                        help=f"comma-separated container counts (each <= {MAX_SIZE})")
    parser.add_argument("--workers", type=int, default=8,
                        help="parallel creations during setup (1-16)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    sizes = [int(part) for part in args.sizes.split(",") if part.strip()]
    if not sizes or len(sizes) > MAX_SIZES or not all(1 <= s <= MAX_SIZE for s in sizes):
        parser.error(f"--sizes takes 1-{MAX_SIZES} counts between 1 and {MAX_SIZE}")
    if not 1 <= args.workers <= 16:
        parser.error("--workers must be between 1 and 16")
    try:
        client = docker.DockerClient.from_env(timeout=30)
        client.images.get(IMAGE)
        client.close()
    except docker.errors.DockerException as exc:
        print(f"cannot run: {exc} (start the engine; build {IMAGE} with "
              "scripts/build-images.sh)", file=sys.stderr)
        return 1
    try:
        result = run(sizes, args.workers)
    except (RuntimeError, docker.errors.DockerException, subprocess.SubprocessError) as exc:
        print(f"benchmark failed: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        _print(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
