"""The interactive path side by side: output throughput and keystroke latency, sbx vs docker.

Usage::

    .venv/bin/python bench/io.py [--runs N] [--mib M] [--keys K] [--json]

Part 1, **throughput**: the workload writes M MiB (default 200) to stdout
(``head -c … /dev/zero``); the benchmark reads every byte from a pipe and counts it. Two
variants, interleaved N times (default 5), rotating the order:

    sbx_run      ``sbx run <kit> -- head -c BYTES /dev/zero``
    docker_run   ``docker run --rm`` of the same image with the same hardening flags (rendered
                 from sbx's own ``build_spec``, as in run_overhead.py)

and the same two with ``head -c 0`` (an empty stream), so the streaming cost can be told apart
from the start-up cost. Reported: wall time of each, the whole-run throughput ratio
(docker time / sbx time, target >= 0.9), and the streaming-only ratio
((docker M - docker 0) / (sbx M - sbx 0)).

Part 2, **keystroke round trip** in a TTY session: sbx (``sbx run -t``) and ``docker run -it``
each run ``sleep`` in the same image with a pseudo-terminal on the host as their stdin/stdout;
the benchmark types one key at a time on the host side and waits for the sandbox terminal's
echo to come back, K times (default 200) after a warm-up. Reported: median and p95 per key,
and the difference (target: sbx adds <= 2 ms at the median).

Nothing leaves the machine: every container runs with ``--network none``, nothing is pulled,
and everything sbx writes goes to a temporary SBX_HOME. Every loop is bounded in count and
time. Exit status: 0 when results were printed (targets reported, not asserted), 1 when the
benchmark could not run.
"""

from __future__ import annotations

import argparse
import dataclasses
import fcntl
import json
import os
import select
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time
import tty
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_overhead import (
    BenchError,
    Series,
    Setup,
    check_engine,
    clean_up,
    docker_run_argv,
    interleave,
    make_setup,
    progress,
    sandbox_spec,
    warm_up_sbx,
)

MIB: Final = 1024 * 1024
MAX_RUNS: Final = 50
MAX_KEYS: Final = 2000
CALL_TIMEOUT_S: Final = 300
KEY_TIMEOUT_S: Final = 5.0  # one key's echo must come back within this
SESSION_START_S: Final = 60.0
THROUGHPUT_TARGET: Final = 0.9
LATENCY_TARGET_MS: Final = 2.0
READY: Final = b"sbx-bench-ready"


# -- throughput ----------------------------------------------------------------------------


def count_output(argv: Sequence[str], env: dict[str, str], expected: int, what: str) -> None:
    """Run ``argv``, read its whole stdout from a pipe, and insist on exactly ``expected``."""
    with subprocess.Popen(list(argv), env=env, stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE) as process:
        assert process.stdout is not None
        total = 0
        deadline = time.monotonic() + CALL_TIMEOUT_S
        while chunk := process.stdout.read1(1024 * 1024):
            total += len(chunk)
            if time.monotonic() > deadline:
                process.kill()
                raise BenchError(f"{what}: no end within {CALL_TIMEOUT_S}s")
        try:
            _, err = process.communicate(timeout=CALL_TIMEOUT_S)
        except subprocess.TimeoutExpired as exc:
            process.kill()
            raise BenchError(f"{what}: did not exit") from exc
    if process.returncode != 0 or total != expected:
        raise BenchError(f"{what}: exit {process.returncode}, {total} of {expected} bytes; "
                         f"{err.decode(errors='replace')[-300:]}")


def bench_throughput(setup: Setup, data: dict[str, Any], runs: int,
                     size: int) -> dict[str, Any]:
    spec = sandbox_spec(setup, data["image"], data["user"], data["workspace"]["target"])

    def variant(name: str, label: str, count: int) -> tuple[Series, Any]:
        command = ("head", "-c", str(count), "/dev/zero")
        if name.startswith("sbx"):
            argv = [setup.sbx, "run", str(setup.kit), "--", *command]
        else:
            argv = docker_run_argv(setup.docker, dataclasses.replace(spec, command=command))
        return Series(name, label, []), lambda: count_output(argv, setup.env, count, name)

    variants = [variant("sbx_full", f"sbx run, {size // MIB} MiB", size),
                variant("docker_full", f"docker run, {size // MIB} MiB", size),
                variant("sbx_empty", "sbx run, 0 bytes", 0),
                variant("docker_empty", "docker run, 0 bytes", 0)]
    interleave(variants, runs, "throughput")
    series = {s.name: s for s, _ in variants}
    sbx_full, docker_full = series["sbx_full"].median_ms, series["docker_full"].median_ms
    sbx_stream = sbx_full - series["sbx_empty"].median_ms
    docker_stream = docker_full - series["docker_empty"].median_ms
    whole = docker_full / sbx_full
    streaming = docker_stream / sbx_stream if sbx_stream > 0 else float("inf")
    return {
        "bytes": size,
        "variants": {name: s.as_dict() for name, s in series.items()},
        "sbx_mib_per_s": round(size / MIB / (sbx_full / 1000), 1),
        "docker_mib_per_s": round(size / MIB / (docker_full / 1000), 1),
        "ratio_whole_run": round(whole, 3),
        "ratio_streaming_only": round(streaming, 3),
        "target": THROUGHPUT_TARGET,
        "met": whole >= THROUGHPUT_TARGET,
    }


# -- keystroke latency ---------------------------------------------------------------------


class TerminalSession:
    """A program running on a fresh host pseudo-terminal that this process drives."""

    def __init__(self, argv: Sequence[str], env: dict[str, str]) -> None:
        self.master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
        # Raw from the start: the only echo is the sandbox terminal's, never the host's.
        tty.setraw(slave)
        self.process = subprocess.Popen(list(argv), env={**env, "TERM": "xterm"}, stdin=slave,
                                        stdout=slave, stderr=slave, start_new_session=True)
        os.close(slave)
        self.seen = bytearray()

    def read_until(self, needle: bytes, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while needle not in self.seen:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            ready, _, _ = select.select([self.master], [], [], remaining)
            if ready:
                try:
                    chunk = os.read(self.master, 65536)
                except OSError:
                    return False
                if not chunk:
                    return False
                self.seen += chunk
        return True

    def round_trip(self, key: bytes) -> float:
        """Seconds from writing ``key`` to seeing its echo."""
        self.seen.clear()
        started = time.perf_counter()
        os.write(self.master, key)
        if not self.read_until(key, KEY_TIMEOUT_S):
            raise BenchError(f"no echo of {key!r} within {KEY_TIMEOUT_S}s")
        return time.perf_counter() - started

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)
        os.close(self.master)


def measure_keys(argv: Sequence[str], env: dict[str, str], keys: int, name: str,
                 label: str) -> Series:
    session = TerminalSession(argv, env)
    try:
        # The workload prints a marker once it runs; from then on the sandbox's terminal
        # echoes what it receives. Keys cycle through letters; a carriage return every 64 keys
        # keeps the line buffer short (its echo "\r\n" is matched by its first byte).
        if not session.read_until(READY, SESSION_START_S):
            raise BenchError(f"{name}: the session did not start: {bytes(session.seen)[-300:]!r}")
        for index in range(20):  # warm-up
            session.round_trip(bytes([97 + index % 26]))
        samples = []
        for index in range(keys):
            key = b"\r" if index % 64 == 63 else bytes([97 + index % 26])
            samples.append(session.round_trip(key))
        return Series(name, label, samples)
    finally:
        session.close()


def bench_latency(setup: Setup, data: dict[str, Any], keys: int) -> dict[str, Any]:
    spec = sandbox_spec(setup, data["image"], data["user"], data["workspace"]["target"])
    command = ("sh", "-c", f"echo {READY.decode()}; exec sleep 600")
    docker = docker_run_argv(setup.docker, dataclasses.replace(spec, command=command))
    docker[2:2] = ["-it"]
    sbx = [setup.sbx, "run", "-t", str(setup.kit), "--", *command]
    results = []
    for name, label, argv in (("sbx_tty", "sbx run -t", sbx),
                              ("docker_tty", "docker run -it", docker),
                              ("sbx_tty_2", "sbx run -t (again)", sbx)):
        progress(f"latency: {label}")
        results.append(measure_keys(argv, setup.env, keys, name, label))
    sbx_median = statistics.median([*results[0].ms(), *results[2].ms()])
    docker_median = results[1].median_ms

    def p95(series: Series) -> float:
        return statistics.quantiles(series.ms(), n=20, method="inclusive")[18]

    added = sbx_median - docker_median
    return {
        "keys": keys,
        "variants": {s.name: {**s.as_dict(), "p95_ms": round(p95(s), 3), "samples_ms": None}
                     for s in results},
        "sbx_median_ms": round(sbx_median, 3),
        "docker_median_ms": round(docker_median, 3),
        "added_ms": round(added, 3),
        "target_ms": LATENCY_TARGET_MS,
        "met": added <= LATENCY_TARGET_MS,
    }


# -- report --------------------------------------------------------------------------------


def render(result: dict[str, Any]) -> str:
    throughput, latency = result["throughput"], result["latency"]
    rows = [f"engine {result['engine']}, {throughput['bytes'] // MIB} MiB, "
            f"{result['runs']} interleaved rounds; {latency['keys']} keys", ""]
    for name, variant in throughput["variants"].items():
        rows.append(f"  {variant['label']:<24} median {variant['median_ms']:9.1f} ms  "
                    f"min {variant['min_ms']:9.1f} ms  ({name})")
    rows += [
        f"  throughput: sbx {throughput['sbx_mib_per_s']} MiB/s, docker "
        f"{throughput['docker_mib_per_s']} MiB/s; ratio whole run "
        f"{throughput['ratio_whole_run']} (target >= {THROUGHPUT_TARGET}: "
        f"{'met' if throughput['met'] else 'NOT met'}), streaming only "
        f"{throughput['ratio_streaming_only']}",
        "",
    ]
    for variant in latency["variants"].values():
        rows.append(f"  {variant['label']:<24} median {variant['median_ms']:7.3f} ms  "
                    f"p95 {variant['p95_ms']:7.3f} ms")
    rows.append(f"  keystroke round trip: sbx adds {latency['added_ms']} ms at the median "
                f"(target <= {LATENCY_TARGET_MS} ms: {'met' if latency['met'] else 'NOT met'})")
    return "\n".join(rows)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--mib", type=int, default=200)
    parser.add_argument("--keys", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if not 1 <= args.runs <= MAX_RUNS or not 1 <= args.mib <= 4096 \
            or not 10 <= args.keys <= MAX_KEYS:
        parser.error(f"--runs 1..{MAX_RUNS}, --mib 1..4096, --keys 10..{MAX_KEYS}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    setup: Setup | None = None
    with tempfile.TemporaryDirectory(prefix="sbx-bench-io-") as root:
        try:
            setup = make_setup(Path(root))
            engine = check_engine(setup)
            data = warm_up_sbx(setup)
            result = {"engine": engine, "runs": args.runs,
                      "throughput": bench_throughput(setup, data, args.runs, args.mib * MIB),
                      "latency": bench_latency(setup, data, args.keys)}
        except BenchError as error:
            print(f"bench: {error}", file=sys.stderr)
            return 1
        finally:
            left = clean_up(setup, {}, keep_image=True)
            if left:
                print(f"bench: removed leftovers: {left}", file=sys.stderr)
    print(json.dumps(result, indent=2) if args.json else render(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
