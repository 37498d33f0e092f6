"""Scale figures: many `sbx run` at once, networked runs at once, and the proxy's memory per run.

Usage::

    .venv/bin/python bench/scale.py [--concurrency 20] [--networked 10] [--rounds 2]
                                    [--hold-s 2] [--json]

Three measurements, each a batch of processes started together (a barrier releases them at
once) and timed from that release until the last one ends:

(a) **Concurrent runs.** ``--concurrency`` (default 20) ``sbx run <kit> -- true`` side by side
    with as many ``docker run --rm`` of the same image with the same hardening flags (rendered
    from sbx's own ``build_spec``, as ``bench/run_overhead.py`` does). Batches alternate
    ``--rounds`` times, the order flipping each round. Reported per side: wall time of the
    batch, failures (exit status not 0, or no exit within the timeout), p50/p90 of each run's
    own duration, and the CPU time (user + system) of the batch's client processes and all
    they waited for (for sbx: its proxies and helpers; not the engine's own work) per run. A
    third side runs the same ``sbx run`` served by the resident helper (``sbx resident
    start`` in the benchmark's own runtime directory); its forks' CPU per run is reported
    beside the client processes'.
(b) **Concurrent networked runs.** ``--networked`` (default 10) ``sbx run`` of a kit with a
    network policy (``runtime.allow: [example.com]``); each fetches ``http://example.com/scale/N``
    with busybox ``wget`` through its own egress proxy and stays up ``--hold-s`` seconds. The
    "internet" is the tests' local one (``tests/support/origin.py``): an origin on 127.0.0.1
    answering for any host name, reached through sbx's ``[network] upstream_proxy`` setting (a
    forward proxy on 127.0.0.1). A run fails unless it exits 0 and printed the origin's answer
    for its own path. Side by side (alternating): the same number of runs of the offline kit
    holding as long (``sh -c 'sleep HOLD'``), so the difference is what the per-run network
    and proxy cost.
(c) **Proxy memory per run.** While (b)'s runs are up, a sampler (every 100 ms) reads VmRSS and
    Pss (``/proc/<pid>/status``, ``/proc/<pid>/smaps_rollup``) of every egress proxy whose
    config lies under this benchmark's SBX_HOME (``python -m sbx.proxy
    <home>/.../proxy.json``) and of each ``sbx run`` process; the peak per process is kept.

Bounds: counts <= 50, rounds <= 10, hold <= 30 s; every process has a timeout (180 s) and the
sampler stops with its batch. Everything sbx writes goes to a temporary SBX_HOME with its own
config; afterwards no container or network labelled with that home (or the benchmark's own
label) may remain: leftovers are reported and removed. Traffic goes only to 127.0.0.1 and to
the per-run Docker networks sbx creates. The machine is shared: the script prints numbers, it
asserts nothing (exit 0 when results were printed, 1 when it could not run).

As in ``bench/pull.py``, the sbx side runs with bytecode cached (``PYTHONPYCACHEPREFIX`` in the
temporary directory), as an installed sbx does, whatever ``PYTHONDONTWRITEBYTECODE`` says.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "cli"))

import run_overhead as ro  # noqa: E402

MAX_COUNT: Final = 50
MAX_ROUNDS: Final = 10
MAX_HOLD_S: Final = 30.0
RUN_TIMEOUT_S: Final = 180
SAMPLE_EVERY_S: Final = 0.1
NET_KIT: Final = "scale-net"
NET_HOST: Final = "example.com"
NET_DESCRIPTOR: Final = ('# syntax=docker/sandbox-kit:3\nschemaVersion: "3"\nkind: workload\n'
                         "capabilities:\n  - type: com.docker.sandbox/network-policy@1\n"
                         f"    config: {{runtime: {{allow: [{NET_HOST}]}}}}\n")
NET_RECIPE: Final = f'FROM {ro.BASE_IMAGE}\nUSER agent\nCMD ["true"]\n'
PROXY_MODULE: Final = "sbx.proxy"


# -- one batch of processes started together --------------------------------------------------


@dataclass
class Outcome:
    index: int
    pid: int = 0
    started: float = 0.0
    ended: float = 0.0
    returncode: int | None = None
    stdout: str = ""
    stderr: str = ""

    @property
    def seconds(self) -> float:
        return self.ended - self.started


@dataclass
class Batch:
    name: str
    outcomes: list[Outcome]
    wall_s: float
    failures: int
    cpu_s: float  # user + system CPU of the batch's processes and everything they waited for

    def as_dict(self) -> dict[str, Any]:
        durations = sorted(o.seconds for o in self.outcomes)
        return {"name": self.name, "count": len(self.outcomes), "wall_s": round(self.wall_s, 3),
                "failures": self.failures,
                "client_cpu_s_per_run": round(self.cpu_s / max(len(self.outcomes), 1), 3),
                "p50_s": round(_quantile(durations, 0.5), 3),
                "p90_s": round(_quantile(durations, 0.9), 3),
                "max_s": round(durations[-1], 3) if durations else 0.0}


def _quantile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank quantile (p90 of 20 values is the 18th)."""
    if not sorted_values:
        return 0.0
    rank = max(1, min(len(sorted_values), round(q * len(sorted_values) + 0.499999)))
    return sorted_values[rank - 1]


def run_batch(name: str, argvs: Sequence[Sequence[str]], env: Mapping[str, str],
              ok: Callable[[Outcome], bool],
              on_start: Callable[[list[Outcome]], None] | None = None) -> Batch:
    """Start every argv at once (a barrier), wait for all (each bounded by RUN_TIMEOUT_S)."""
    outcomes = [Outcome(i) for i in range(len(argvs))]
    barrier = threading.Barrier(len(argvs) + 1)

    def one(outcome: Outcome, argv: Sequence[str]) -> None:
        barrier.wait(timeout=RUN_TIMEOUT_S)
        outcome.started = time.perf_counter()
        try:
            process = subprocess.Popen(list(argv), env=dict(env), stdin=subprocess.DEVNULL,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       text=True)
        except OSError as exc:
            outcome.ended, outcome.stderr = time.perf_counter(), str(exc)
            return
        outcome.pid = process.pid
        try:
            outcome.stdout, outcome.stderr = process.communicate(timeout=RUN_TIMEOUT_S)
            outcome.returncode = process.returncode
        except subprocess.TimeoutExpired:
            process.kill()
            outcome.stdout, outcome.stderr = process.communicate(timeout=30)
            outcome.returncode = None
        outcome.ended = time.perf_counter()

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    threads = [threading.Thread(target=one, args=(o, a), daemon=True)
               for o, a in zip(outcomes, argvs, strict=True)]
    for thread in threads:
        thread.start()
    barrier.wait(timeout=RUN_TIMEOUT_S)
    released = time.perf_counter()
    if on_start is not None:
        on_start(outcomes)
    for thread in threads:
        thread.join(timeout=RUN_TIMEOUT_S + 60)
    wall = max((o.ended for o in outcomes), default=released) - released
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    failures = sum(1 for o in outcomes if not ok(o))
    return Batch(name, outcomes, wall, failures, cpu)


def exited_zero(outcome: Outcome) -> bool:
    return outcome.returncode == 0


def failed_samples(batches: Mapping[str, Sequence[Batch]], limit: int = 3) -> list[str]:
    """The end of what the first few runs that did not exit 0 said (why a batch failed)."""
    return [f"{b.name}: exit {o.returncode}: {o.stderr.strip()[-300:]}"
            for found in batches.values() for b in found for o in b.outcomes
            if o.returncode != 0][:limit]


# -- memory of live processes ------------------------------------------------------------------


def _status_kib(pid: int, key: str) -> int | None:
    try:
        text = Path(f"/proc/{pid}/status").read_text(encoding="utf-8")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return None


def _pss_kib(pid: int) -> int | None:
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text(encoding="utf-8")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    return None


def proxy_pids(home: Path) -> list[int]:
    """Egress proxies whose config file lies under ``home`` (their argv names it)."""
    found = []
    prefix = str(home) + os.sep
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        words = [a.decode("utf-8", "replace") for a in argv]
        if PROXY_MODULE in words and any(w.startswith(prefix) for w in words):
            found.append(int(entry.name))
    return found


@dataclass
class Sampler:
    """Peak VmRSS / Pss per process, sampled until :meth:`stop` (bounded in count)."""

    home: Path
    sbx_pids: Callable[[], list[int]]
    proxies: dict[int, tuple[int, int]] = field(default_factory=dict)  # pid -> (rss, pss) KiB
    clients: dict[int, tuple[int, int]] = field(default_factory=dict)
    most_proxies_at_once: int = 0
    samples: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        limit = int((RUN_TIMEOUT_S + 60) / SAMPLE_EVERY_S)
        while not self._stop.is_set() and self.samples < limit:
            self.samples += 1
            live = proxy_pids(self.home)
            self.most_proxies_at_once = max(self.most_proxies_at_once, len(live))
            for pids, peaks in ((live, self.proxies), (self.sbx_pids(), self.clients)):
                for pid in pids:
                    rss, pss = _status_kib(pid, "VmRSS"), _pss_kib(pid)
                    if rss is None:
                        continue
                    old = peaks.get(pid, (0, 0))
                    peaks[pid] = (max(old[0], rss), max(old[1], pss or 0))
            self._stop.wait(SAMPLE_EVERY_S)

    @staticmethod
    def summary(peaks: Mapping[int, tuple[int, int]]) -> dict[str, Any]:
        rss = sorted(v[0] for v in peaks.values())
        pss = sorted(v[1] for v in peaks.values())
        if not rss:
            return {"processes": 0}
        return {"processes": len(rss),
                "rss_mib_median": round(statistics.median(rss) / 1024, 1),
                "rss_mib_max": round(rss[-1] / 1024, 1),
                "pss_mib_median": round(statistics.median(pss) / 1024, 1),
                "pss_mib_max": round(pss[-1] / 1024, 1)}


def sampled_batch(name: str, argvs: Sequence[Sequence[str]], env: Mapping[str, str],
                  ok: Callable[[Outcome], bool], home: Path) -> tuple[Batch, Sampler]:
    """:func:`run_batch` with a :class:`Sampler` on its processes and proxies while it runs."""
    live: list[Outcome] = []
    sampler = Sampler(home, lambda: [o.pid for o in live if o.pid and not o.ended])

    def begin(outcomes: list[Outcome]) -> None:
        live.extend(outcomes)
        sampler.start()

    try:
        return run_batch(name, argvs, env, ok, on_start=begin), sampler
    finally:
        sampler.stop()


# -- setup and cleanup -------------------------------------------------------------------------


def python_env(work: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
    return env


def networks_of(setup: ro.Setup) -> list[str]:
    from sbx.base.paths import home_hash

    done = ro.call([setup.docker, "network", "ls", "--filter",
                    f"label={ro.HOME_LABEL}={home_hash(setup.home)}", "--format", "{{.ID}}"],
                   setup.env, "listing leftover networks")
    return [line for line in done.stdout.split() if line]


def use_tags(setup: ro.Setup) -> list[str]:
    """This home's image use tags (``sbx-use/<home hash>:…``, sbx's image cache): ours alone."""
    from sbx.base.paths import home_hash
    from sbx.domain.sandbox.imagecache import HOME_DIGITS, USE_REPOSITORY

    repository = f"{USE_REPOSITORY}{home_hash(setup.home)[:HOME_DIGITS]}"
    done = ro.call([setup.docker, "image", "ls", repository, "--format",
                    "{{.Repository}}:{{.Tag}}"], setup.env, "listing use tags")
    return [line for line in done.stdout.split() if line.startswith(repository + ":")]


def clean_up(setup: ro.Setup, images: Sequence[str]) -> list[str]:
    """Remove what this run left (reported) and untag what it made: its home's use tags and
    the kit images its warm-ups built (a kit image that existed before is left alone)."""
    found = ro.leftovers(setup)
    ro.remove_leftovers(setup, found)
    networks = networks_of(setup)
    if networks:
        ro.call([setup.docker, "network", "rm", *networks], setup.env, "removing networks")
    for tag in [*use_tags(setup), *images]:
        ro.call([setup.docker, "image", "rm", tag], setup.env, "untagging an image")
    return found + [f"network {n}" for n in networks]


def built_image(setup: ro.Setup, kit: Path) -> tuple[str, bool]:
    """Build (or reuse) ``kit``'s image with a warm-up run; (tag, built by this warm-up)."""
    out = ro.must_succeed([setup.sbx, "run", "--json", str(kit), "--", "true"], setup.env,
                          f"warm-up `sbx run {kit.name}`")
    data = json.loads(out.strip().splitlines()[-1])["data"]
    return str(data["image"]), bool(data.get("image_built", False))


# -- the measurements --------------------------------------------------------------------------


def concurrent_runs(setup: ro.Setup, count: int, rounds: int) -> dict[str, Any]:
    data = ro.warm_up_sbx(setup)
    spec = ro.sandbox_spec(setup, str(data["image"]), str(data["user"]),
                           str(data["workspace"]["target"]))
    docker_argv = ro.docker_run_argv(setup.docker, spec)
    ro.must_succeed(docker_argv, setup.env, "one `docker run` of the same container")
    sbx_argv = [setup.sbx, "run", str(setup.kit), "--", *ro.WORKLOAD]
    served = ro.resident_env(setup)
    ro.must_succeed([setup.sbx, "resident", "start", "--idle", "900"], served,
                    "`sbx resident start`")
    batches: dict[str, list[Batch]] = {"sbx_run": [], "sbx_resident": [], "docker_run": []}
    sides = {"sbx_run": (sbx_argv, setup.env), "sbx_resident": (sbx_argv, served),
             "docker_run": (docker_argv, setup.env)}
    fork_cpu_s = 0.0
    try:
        ro.must_succeed(sbx_argv, served, "one `sbx run` through the resident helper")
        before = ro.resident_status(setup)
        for round_ in range(rounds):
            order = list(sides)[round_ % 3:] + list(sides)[:round_ % 3]
            for name in order:
                argv, env = sides[name]
                ro.progress(f"round {round_ + 1}/{rounds}: {count} x {name}")
                batches[name].append(run_batch(name, [argv] * count, env, exited_zero))
        after = ro.resident_status(setup)
    finally:
        ro.call([setup.sbx, "resident", "stop"], served, "stopping the resident helper")
    forks = after["served"] - before["served"]
    if forks:
        fork_cpu_s = (after["child_cpu_s"] - before["child_cpu_s"]) / forks
    out = {name: [b.as_dict() for b in found] for name, found in batches.items()}
    walls = {name: statistics.median(b.wall_s for b in found) for name, found in batches.items()}
    return {"count": count, "rounds": rounds, "batches": out, "docker_argv": docker_argv,
            "median_wall_s": {k: round(v, 3) for k, v in walls.items()},
            "wall_ratio": round(walls["sbx_run"] / walls["docker_run"], 2),
            "resident_wall_ratio": round(walls["sbx_resident"] / walls["docker_run"], 2),
            "resident_served": forks, "resident_fork_cpu_s_per_run": round(fork_cpu_s, 4),
            "failures": {name: sum(b.failures for b in found)
                         for name, found in batches.items()},
            "image": data["image"], "image_built": bool(data.get("image_built")),
            "failed_samples": failed_samples(batches)}


def networked_runs(setup: ro.Setup, work: Path, count: int, rounds: int,
                   hold_s: float) -> dict[str, Any]:
    from support.origin import Internet

    internet = Internet(work / "internet")
    try:
        config = internet.sbx_config(work / "config.toml")
        env = {**setup.env, "SBX_CONFIG": str(config)}
        net_setup = ro.Setup(python=setup.python, sbx=setup.sbx, docker=setup.docker, env=env,
                             home=setup.home, kit=setup.kit, token=setup.token)
        kit = work / NET_KIT
        kit.mkdir()
        (kit / f"{NET_KIT}.yaml").write_text(NET_DESCRIPTOR, encoding="utf-8")
        (kit / f"{NET_KIT}.dockerfile").write_text(NET_RECIPE, encoding="utf-8")
        image, built = built_image(net_setup, kit)
        hold = f"{hold_s:g}"

        def fetch(i: int) -> list[str]:
            return [setup.sbx, "run", str(kit), "--", "sh", "-c",
                    f"wget -q -O - http://{NET_HOST}/scale/{i} && sleep {hold}"]

        def fetched(outcome: Outcome) -> bool:
            return outcome.returncode == 0 and f'"path": "http://{NET_HOST}/scale/' \
                f'{outcome.index}"' in outcome.stdout

        offline = [setup.sbx, "run", str(setup.kit), "--", "sh", "-c", f"sleep {hold}"]
        batches: dict[str, list[Batch]] = {"networked": [], "offline": []}
        samplers: list[Sampler] = []
        for round_ in range(rounds):
            order = ["networked", "offline"] if round_ % 2 == 0 else ["offline", "networked"]
            for name in order:
                ro.progress(f"round {round_ + 1}/{rounds}: {count} x {name} (hold {hold} s)")
                if name == "offline":
                    batches[name].append(run_batch(name, [offline] * count, env, exited_zero))
                    continue
                batch, sampler = sampled_batch(name, [fetch(i) for i in range(count)], env,
                                               fetched, setup.home)
                batches[name].append(batch)
                samplers.append(sampler)
        proxies = {pid: peak for s in samplers for pid, peak in s.proxies.items()}
        clients = {pid: peak for s in samplers for pid, peak in s.clients.items()}
        walls = {name: statistics.median(b.wall_s for b in found)
                 for name, found in batches.items()}
        seen = [r.path for r in internet.origin.requests()]
        return {
            "count": count, "rounds": rounds, "hold_s": hold_s,
            "batches": {name: [b.as_dict() for b in found] for name, found in batches.items()},
            "median_wall_s": {k: round(v, 3) for k, v in walls.items()},
            "failures": {name: sum(b.failures for b in found)
                         for name, found in batches.items()},
            "origin_requests": len(seen),
            "proxy_memory": {**Sampler.summary(proxies),
                             "most_at_once": max((s.most_proxies_at_once for s in samplers),
                                                 default=0)},
            "sbx_run_memory": Sampler.summary(clients),
            "image": image, "image_built": built,
            "failed_samples": failed_samples(batches),
        }
    finally:
        internet.close()


# -- output ------------------------------------------------------------------------------------


def render(result: Mapping[str, Any]) -> str:
    lines = ["machine: shared, 2 cores (numbers are noisy; compare the sides, not absolutes)"]
    runs = result["concurrent"]
    lines.append(f"(a) {runs['count']} concurrent runs, {runs['rounds']} round(s), "
                 "per side: median batch wall, failures, per-run p50/p90 of the last round")
    for name in ("sbx_run", "sbx_resident", "docker_run"):
        last = runs["batches"][name][-1]
        lines.append(f"    {name:12s} wall {runs['median_wall_s'][name]:6.2f} s  failures "
                     f"{runs['failures'][name]:3d}  p50 {last['p50_s']:5.2f} s  "
                     f"p90 {last['p90_s']:5.2f} s  client CPU "
                     f"{last['client_cpu_s_per_run']:5.2f} s/run")
    lines.append(f"    wall ratio sbx/docker: {runs['wall_ratio']:.2f}; with the resident helper: "
                 f"{runs['resident_wall_ratio']:.2f} ({runs['resident_served']} served, its "
                 f"forks' CPU {runs['resident_fork_cpu_s_per_run']:.3f} s/run besides the "
                 "client's)")
    lines.extend(f"    a failure said: {failed}" for failed in runs["failed_samples"])
    net = result["networked"]
    lines.append(f"(b) {net['count']} concurrent networked runs (each holds {net['hold_s']:g} s), "
                 f"{net['rounds']} round(s)")
    for name in ("networked", "offline"):
        last = net["batches"][name][-1]
        lines.append(f"    {name:10s} wall {net['median_wall_s'][name]:6.2f} s  failures "
                     f"{net['failures'][name]:3d}  p50 {last['p50_s']:5.2f} s  "
                     f"p90 {last['p90_s']:5.2f} s  client CPU "
                     f"{last['client_cpu_s_per_run']:5.2f} s/run")
    lines.append(f"    origin saw {net['origin_requests']} request(s)")
    for failed in net["failed_samples"]:
        lines.append(f"    a failure said: {failed}")
    memory = net["proxy_memory"]
    lines.append(f"(c) egress proxy memory per run: {memory.get('processes', 0)} proxies "
                 f"(at most {memory['most_at_once']} at once)")
    if memory.get("processes"):
        lines.append(f"    VmRSS median {memory['rss_mib_median']} MiB (max "
                     f"{memory['rss_mib_max']}), Pss median {memory['pss_mib_median']} MiB "
                     f"(max {memory['pss_mib_max']})")
    client = net["sbx_run_memory"]
    if client.get("processes"):
        lines.append(f"    the `sbx run` process itself: VmRSS median "
                     f"{client['rss_mib_median']} MiB, Pss median {client['pss_mib_median']} "
                     "MiB")
    if result["leftovers"]:
        lines.append(f"leftovers (removed): {result['leftovers']}")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    def count(text: str) -> int:
        value = int(text)
        if not 1 <= value <= MAX_COUNT:
            raise argparse.ArgumentTypeError(f"must be between 1 and {MAX_COUNT}")
        return value

    def rounds(text: str) -> int:
        value = int(text)
        if not 1 <= value <= MAX_ROUNDS:
            raise argparse.ArgumentTypeError(f"must be between 1 and {MAX_ROUNDS}")
        return value

    def hold(text: str) -> float:
        value = float(text)
        if not 0 <= value <= MAX_HOLD_S:
            raise argparse.ArgumentTypeError(f"must be between 0 and {MAX_HOLD_S:g}")
        return value

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=count, default=20)
    parser.add_argument("--networked", type=count, default=10)
    parser.add_argument("--rounds", type=rounds, default=2)
    parser.add_argument("--hold-s", type=hold, default=2.0)
    parser.add_argument("--json", action="store_true")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="sbx-bench-scale-"))
    setup: ro.Setup | None = None
    images: list[str] = []
    result: dict[str, Any] = {}
    try:
        base = ro.make_setup(work)
        setup = ro.Setup(python=base.python, sbx=base.sbx, docker=base.docker,
                         env={**python_env(work), "SBX_HOME": str(base.home),
                              "SBX_CONFIG": os.devnull, "SBX_RESIDENT": "0",
                              "XDG_RUNTIME_DIR": base.env["XDG_RUNTIME_DIR"]},
                         home=base.home, kit=base.kit, token=base.token)
        result["engine"] = ro.check_engine(setup)
        result["concurrent"] = concurrent_runs(setup, options.concurrency, options.rounds)
        if result["concurrent"]["image_built"]:
            images.append(result["concurrent"]["image"])
        result["networked"] = networked_runs(setup, work, options.networked, options.rounds,
                                             options.hold_s)
        if result["networked"]["image_built"]:
            images.append(result["networked"]["image"])
    except ro.BenchError as error:
        print(f"bench: {error}", file=sys.stderr)
        return 1
    finally:
        if setup is not None:
            result["leftovers"] = clean_up(setup, images)
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result, sort_keys=True) if options.json else render(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
