"""`sbx pull` of a kit vs `docker pull` of the same image, from a local registry.

Usage::

    .venv/bin/python bench/pull.py [--runs N] [--json]

Setup: Debian's ``docker-registry`` on 127.0.0.1:<free port> with a temporary storage directory;
a kit (``FROM sbx-test/busybox:1`` plus a 4 MiB random layer) is published with
``sbx kit push``, then pulled once with ``sbx pull --accept`` (the lock and the verdict cache are
warm). Then N rounds; each round times three scenarios, sbx and docker side by side, the order
of the sides alternating from round to round:

    absent   every local copy of the image removed first (both sides fetch the layer); sbx's
             lock already pins the kit (a re-pull)
    present  the image is already local (``docker pull`` answers "up to date")
    first    as ``absent``, and sbx runs on a fresh SBX_HOME: a first pull, with the descriptor
             validated from scratch and the permissions approved with ``--accept``
    start    no pull at all: ``sbx version`` vs ``docker --version``, what starting each CLI
             costs (the floor under every sbx command: interpreter, imports, typer)

    sbx      ``sbx pull --accept REF`` (manifest GET, descriptor revalidation, surface, gate,
             pull by digest, lock write) as a subprocess
    resident the same ``sbx pull`` served by the resident helper (``sbx resident start`` in the
             benchmark's own runtime directory); its CPU adds the forks' own per command
    docker   ``docker pull -q REPO@DIGEST`` as a subprocess

Bytecode: an installed sbx runs from compiled bytecode (pip writes it at install time). When the
environment says ``PYTHONDONTWRITEBYTECODE=1`` (as on the dev machines), an editable checkout
would compile sbx's own modules from source on every run, a cost no user pays; so the sbx side
runs with ``PYTHONPYCACHEPREFIX`` pointing into the temporary directory and writes bytecode
there during the warm-up.

Prints medians of wall time and of the client's CPU (user + system of the child, from
``os.wait4``: far less sensitive to a loaded machine than the wall time) and the ratio
sbx/docker per scenario. Everything sbx writes goes to a temporary
SBX_HOME; only loopback traffic. Exit 0 when results were printed, 1 when setup failed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Final

BASE_IMAGE: Final = "sbx-test/busybox:1"
KIT: Final = "bench-pull"
DESCRIPTOR: Final = ('# syntax=docker/sandbox-kit:3\nschemaVersion: "3"\nkind: workload\n'
                     "capabilities:\n  - type: com.docker.sandbox/network-policy@1\n"
                     "    config: {runtime: {allow: [api.example.com]}}\n")
RECIPE: Final = (f"FROM {BASE_IMAGE}\nRUN dd if=/dev/urandom of=/blob bs=1048576 count=4\n"
                 'USER agent\nCMD ["true"]\n')
TIMEOUT_S: Final = 120
SBX: Final = str(Path(sys.executable).with_name("sbx"))


def run(argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=TIMEOUT_S,
                          stdin=subprocess.DEVNULL, check=False)
    if done.returncode != 0:
        raise SystemExit(f"bench: {' '.join(argv)} failed ({done.returncode}): "
                         f"{done.stderr.strip()[-500:]}")
    return done


def timed(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """(wall, CPU) seconds of one run: the CPU is the child's own user + system time (os.wait4),
    which a loaded machine inflates far less than the wall time."""
    started = time.perf_counter()
    child = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
    assert child.stderr is not None
    err = child.stderr.read()  # small: a failure's message (its end is shown)
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - started
    child.stderr.close()
    if child.returncode != 0:
        raise SystemExit(f"bench: {' '.join(argv)} failed ({child.returncode}): "
                         f"{err.decode(errors='replace').strip()[-500:]}")
    return wall, usage.ru_utime + usage.ru_stime


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_registry(root: Path) -> tuple[subprocess.Popen[bytes], str]:
    binary = shutil.which("docker-registry") or "/usr/bin/docker-registry"
    if not os.path.exists(binary):
        raise SystemExit("bench: docker-registry is not installed (scripts/setup.sh)")
    host = f"127.0.0.1:{free_port()}"
    (root / "storage").mkdir(parents=True)
    config = root / "config.yml"
    config.write_text(f"version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n"
                      f"    rootdirectory: {root / 'storage'}\nhttp:\n  addr: {host}\n",
                      encoding="utf-8")
    process = subprocess.Popen([binary, "serve", str(config)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    for _ in range(200):
        try:
            with urllib.request.urlopen(f"http://{host}/v2/", timeout=2) as response:
                if response.status == 200:
                    return process, host
        except (urllib.error.URLError, OSError):
            time.sleep(0.1)
    process.terminate()
    raise SystemExit(f"bench: docker-registry did not answer on {host}")


def image_ids(host: str) -> set[str]:
    listing = run(["docker", "image", "ls", "--digests", "--no-trunc", "--format",
                   "{{.ID}} {{.Repository}}"]).stdout
    return {line.split()[0] for line in listing.splitlines()
            if len(line.split()) == 2 and line.split()[1].startswith(host + "/")}


def remove_local(host: str, extra: set[str]) -> None:
    for ident in image_ids(host) | extra:
        subprocess.run(["docker", "rmi", "-f", ident], capture_output=True, timeout=TIMEOUT_S,
                       check=False)


SCENARIOS: Final = ("absent", "present", "first", "start")


def python_env(work: Path) -> dict[str, str]:
    """The environment of an installed sbx: bytecode cached (in the temporary directory)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
    return env


def report(times: dict[str, dict[str, list[float]]], cpu: dict[str, dict[str, list[float]]],
           runs: int, *, as_json: bool, fork_cpu_s: float) -> None:
    medians = {scenario: {side: statistics.median(values) for side, values in by.items()}
               for scenario, by in times.items()}
    ratios = {scenario: m["sbx"] / m["docker"] for scenario, m in medians.items()}
    resident = {scenario: m["resident"] / m["docker"] for scenario, m in medians.items()}
    cpu_medians = {scenario: {side: statistics.median(values) for side, values in by.items()}
                   for scenario, by in cpu.items()}
    load = os.getloadavg()[0]
    if as_json:
        print(json.dumps({"runs": runs, "median_s": medians, "ratio": ratios,
                          "resident_ratio": resident, "resident_fork_cpu_s": fork_cpu_s,
                          "samples_s": times, "cpu_median_s": cpu_medians,
                          "cpu_samples_s": cpu, "load_average": load}, sort_keys=True))
    else:
        for scenario in SCENARIOS:
            m = medians[scenario]
            print(f"{scenario:8s} sbx pull {m['sbx'] * 1000:7.1f} ms   docker pull "
                  f"{m['docker'] * 1000:7.1f} ms   ratio {ratios[scenario]:5.2f}   "
                  f"cpu sbx {cpu_medians[scenario]['sbx'] * 1000:6.1f} ms docker "
                  f"{cpu_medians[scenario]['docker'] * 1000:6.1f} ms   "
                  f"(median, n={runs})")
            print(f"{'':8s} resident {m['resident'] * 1000:7.1f} ms   ratio "
                  f"{resident[scenario]:5.2f}   cpu "
                  f"{cpu_medians[scenario]['resident'] * 1000:6.1f} ms + the fork's")
        print(f"the resident helper's forks: {fork_cpu_s * 1000:.1f} ms CPU per command "
              "(mean)")
        print(f"load average {load:.2f} (1 min, at the end)")


def measure(runs: int, envs: tuple[dict[str, str], dict[str, str]],
            argvs: tuple[list[str], list[str]], host: str, built: set[str],
            work: Path) -> tuple[dict[str, dict[str, list[float]]],
                                 dict[str, dict[str, list[float]]]]:
    """Wall and CPU times per scenario and side, the sides' order rotating each round."""
    env, served = envs
    sbx_argv, docker_argv = argvs
    times: dict[str, dict[str, list[float]]] = {
        scenario: {"sbx": [], "resident": [], "docker": []} for scenario in SCENARIOS}
    cpu: dict[str, dict[str, list[float]]] = {
        scenario: {"sbx": [], "resident": [], "docker": []} for scenario in SCENARIOS}
    all_sides = ("sbx", "resident", "docker")
    for round_ in range(runs):
        sides = all_sides[round_ % 3:] + all_sides[:round_ % 3]
        for scenario in SCENARIOS:
            for side in sides:
                side_env = served if side == "resident" else env
                argv = docker_argv if side == "docker" else sbx_argv
                if scenario == "start":
                    argv = ["docker", "--version"] if side == "docker" else [SBX, "version"]
                elif scenario == "present":
                    run(docker_argv)  # untimed: make sure it is local
                else:
                    remove_local(host, built)
                if scenario == "first" and side != "docker":
                    side_env = {**side_env, "SBX_HOME": str(work / f"first-{round_}-{side}")}
                wall, used = timed(argv, side_env)
                times[scenario][side].append(wall)
                cpu[scenario][side].append(used)
    return times, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, choices=range(1, 51), metavar="N")
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sbx-bench-pull-"))
    process, host = start_registry(work / "registry")
    try:
        runtime = work / "runtime"
        runtime.mkdir(mode=0o700)
        env = {**python_env(work), "SBX_HOME": str(work / "state"), "SBX_CONFIG": os.devnull,
               "XDG_RUNTIME_DIR": str(runtime), "SBX_RESIDENT": "0"}
        served = {**env, "SBX_RESIDENT": "1"}
        kit = work / KIT
        kit.mkdir()
        (kit / f"{KIT}.yaml").write_text(DESCRIPTOR, encoding="utf-8")
        (kit / f"{KIT}.dockerfile").write_text(RECIPE, encoding="utf-8")
        ref = f"{host}/bench/{KIT}:1"
        pushed = json.loads(run([SBX, "kit", "push", "--json", str(kit), ref], env).stdout)
        pinned = pushed["data"]["image"]
        built = {run(["docker", "image", "inspect", "--format", "{{.Id}}", ref]).stdout.strip()}
        sbx_argv = [SBX, "pull", "--accept", ref]
        docker_argv = ["docker", "pull", "-q", pinned]
        run(sbx_argv, env)  # warm-up: the lock, the verdict cache and the bytecode
        run([SBX, "resident", "start", "--idle", "900"], served)
        before = json.loads(run([SBX, "resident", "status", "--json"], served).stdout)["data"]
        times, cpu = measure(options.runs, (env, served), (sbx_argv, docker_argv), host,
                             built, work)
        after = json.loads(run([SBX, "resident", "status", "--json"], served).stdout)["data"]
        forks = after["served"] - before["served"]
        if forks != options.runs * len(SCENARIOS):
            raise SystemExit(f"bench: the resident helper served {forks} commands "
                             f"(last declined: {after.get('last_declined')!r})")
        remove_local(host, built)
        report(times, cpu, options.runs, as_json=options.json,
               fork_cpu_s=(after["child_cpu_s"] - before["child_cpu_s"]) / forks)
        return 0
    finally:
        subprocess.run([SBX, "resident", "stop"], env=served, capture_output=True, timeout=60,
                       check=False)
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
