"""`sbx pull` of a kit vs `docker pull` of the same image, from a local registry.

Usage::

    .venv/bin/python bench/pull.py [--runs N] [--json]

Setup: Debian's ``docker-registry`` on 127.0.0.1:<free port> with a temporary storage directory;
a kit (``FROM sbx-test/busybox:1`` plus a 4 MiB random layer) is published with
``sbx kit push``. Then N rounds, alternating which goes first, each preceded by removing every
local copy of the image (so both sides fetch the layer):

    sbx_pull     ``sbx pull --accept REF`` (manifest GET, descriptor revalidation, surface,
                 gate, pull by digest, lock write) as a subprocess
    docker_pull  ``docker pull REPO@DIGEST`` as a subprocess

Prints medians and the ratio sbx/docker. Everything sbx writes goes to a temporary SBX_HOME;
only loopback traffic. Exit 0 when results were printed, 1 when setup failed.
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, choices=range(1, 51), metavar="N")
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sbx-bench-pull-"))
    process, host = start_registry(work / "registry")
    try:
        env = {**os.environ, "SBX_HOME": str(work / "state"),
               "SBX_CONFIG": os.devnull}
        kit = work / KIT
        kit.mkdir()
        (kit / f"{KIT}.yaml").write_text(DESCRIPTOR, encoding="utf-8")
        (kit / f"{KIT}.dockerfile").write_text(RECIPE, encoding="utf-8")
        ref = f"{host}/bench/{KIT}:1"
        pushed = json.loads(run([SBX, "kit", "push", "--json", str(kit), ref], env).stdout)
        pinned = pushed["data"]["image"]
        built = {run(["docker", "image", "inspect", "--format", "{{.Id}}", ref]).stdout.strip()}
        sides = {
            "sbx_pull": [SBX, "pull", "--accept", ref],
            "docker_pull": ["docker", "pull", "-q", pinned],
        }
        times: dict[str, list[float]] = {name: [] for name in sides}
        for round_ in range(options.runs):
            order = list(sides) if round_ % 2 == 0 else list(reversed(sides))
            for name in order:
                remove_local(host, built)
                started = time.perf_counter()
                run(sides[name], env)
                times[name].append(time.perf_counter() - started)
        remove_local(host, built)
        medians = {name: statistics.median(values) for name, values in times.items()}
        ratio = medians["sbx_pull"] / medians["docker_pull"]
        if options.json:
            print(json.dumps({"runs": options.runs, "median_s": medians, "ratio": ratio,
                              "samples_s": times}, sort_keys=True))
        else:
            for name, value in medians.items():
                print(f"{name:12s} median {value * 1000:8.1f} ms  (n={options.runs})")
            print(f"ratio sbx_pull/docker_pull: {ratio:.2f}")
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
