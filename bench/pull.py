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
           runs: int, *, as_json: bool) -> None:
    medians = {scenario: {side: statistics.median(values) for side, values in by.items()}
               for scenario, by in times.items()}
    ratios = {scenario: m["sbx"] / m["docker"] for scenario, m in medians.items()}
    cpu_medians = {scenario: {side: statistics.median(values) for side, values in by.items()}
                   for scenario, by in cpu.items()}
    load = os.getloadavg()[0]
    if as_json:
        print(json.dumps({"runs": runs, "median_s": medians, "ratio": ratios,
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
        print(f"load average {load:.2f} (1 min, at the end)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, choices=range(1, 51), metavar="N")
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sbx-bench-pull-"))
    process, host = start_registry(work / "registry")
    try:
        env = {**python_env(work), "SBX_HOME": str(work / "state"), "SBX_CONFIG": os.devnull}
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
        times: dict[str, dict[str, list[float]]] = {
            scenario: {"sbx": [], "docker": []} for scenario in SCENARIOS}
        cpu: dict[str, dict[str, list[float]]] = {
            scenario: {"sbx": [], "docker": []} for scenario in SCENARIOS}
        for round_ in range(options.runs):
            sides = ("sbx", "docker") if round_ % 2 == 0 else ("docker", "sbx")
            for scenario in SCENARIOS:
                for side in sides:
                    side_env = env
                    argv = sbx_argv if side == "sbx" else docker_argv
                    if scenario == "start":
                        argv = [SBX, "version"] if side == "sbx" else ["docker", "--version"]
                    elif scenario == "present":
                        run(docker_argv)  # untimed: make sure it is local
                    else:
                        remove_local(host, built)
                    if scenario == "first" and side == "sbx":
                        side_env = {**env, "SBX_HOME": str(work / f"first-{round_}")}
                    wall, used = timed(argv, side_env)
                    times[scenario][side].append(wall)
                    cpu[scenario][side].append(used)
        remove_local(host, built)
        report(times, cpu, options.runs, as_json=options.json)
        return 0
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
