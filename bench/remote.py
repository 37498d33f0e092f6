"""`sbx run -- true` over ssh:// vs `docker -H ssh://… run` of the same image, side by side.

Usage::

    .venv/bin/python bench/remote.py [--runs N]

Starts a second engine host on this machine (tests/support/enginehost.py: its own network
namespace, dockerd and sshd; needs root), copies ``sbx-test/busybox:1`` onto it, and times, in
rotated order each round:

    sbx_ssh           ``sbx run <kit> -- true`` with DOCKER_HOST=ssh://… (plan cached by a warm-up)
    sbx_ssh_unshared  the same with ``SBX_ENGINE_SSH_SHARE=0``: a login of its own per connection
    sbx_ssh_networked ``sbx run <kit with a network policy> -- true``: its egress proxy is a
                      container beside the sandbox on the far engine
    docker_ssh        ``docker -H ssh://… run --rm --network none sbx-test/busybox:1 true``

After the rounds, one networked run that sleeps is sampled for its proxy container's memory
(``docker stats`` on the far engine): what each networked sandbox costs there today.

Both clients use the same ``ssh`` (a wrapper on PATH adding the host's own config: key and
known_hosts). Traffic goes only to the namespace's address. Prints medians and the ratios;
targets are reported, never asserted. Exit 1 when the set-up or a run failed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.enginehost import EngineHost  # noqa: E402
from tests.support.kits import capabilities, network_policy, write_kit  # noqa: E402

IMAGE = "sbx-test/busybox:1"
SBX = Path(sys.executable).parent / "sbx"
GOAL = 1.3


def _timed(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, timeout=300, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        sys.stderr.write(f"failed: {argv}: {done.stderr.decode()[-800:]}\n")
        raise SystemExit(1)
    return elapsed


def _proxy_memory(host: EngineHost, kit: Path, env: dict[str, str]) -> str:
    """The far proxy container's memory while its sandbox sleeps (docker stats, 3 samples)."""
    proc = subprocess.Popen([str(SBX), "run", str(kit), "--", "sleep", "20"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    samples: list[str] = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(samples) < 3:
            time.sleep(2)
            listed = host.docker("ps", "-q", "--filter", "name=sbx-proxy-").stdout.split()
            if listed:
                shown = host.docker("stats", "--no-stream", "--format", "{{.MemUsage}}",
                                    listed[0].decode())
                samples.append(shown.stdout.decode().strip())
    finally:
        proc.wait(timeout=120)
    return ", ".join(samples) or "not sampled"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    runs = max(1, min(parser.parse_args().runs, 50))
    host = EngineHost()
    host.start()
    try:
        host.load_image(IMAGE)
        work = Path(tempfile.mkdtemp(prefix="bench-", dir=host.root))
        bin_dir = work / "bin"
        bin_dir.mkdir()
        (bin_dir / "ssh").write_text(f'#!/bin/sh\nexec /usr/bin/ssh -F "{host.ssh_config}" "$@"\n')
        (bin_dir / "ssh").chmod(0o755)
        recipe = f'FROM {IMAGE}\nUSER agent\nWORKDIR /workspace\nCMD ["true"]\n'
        kit = write_kit(work / "kits", "bench", "", recipe=recipe)
        networked = write_kit(work / "kits", "benchnet", capabilities(
            network_policy(runtime=["example.com"])), recipe=recipe)
        runtime = work / "run"
        runtime.mkdir(mode=0o700)
        base = {k: v for k, v in os.environ.items() if not k.startswith(("DOCKER_", "SBX_"))}
        env = {**base, "PATH": f"{bin_dir}:{base.get('PATH', '/usr/bin:/bin')}",
               "DOCKER_HOST": host.ssh_host, "SBX_HOME": str(work / "state"),
               "SBX_CONFIG": os.devnull, "XDG_RUNTIME_DIR": str(runtime),
               "DOCKER_CONFIG": str(work / "docker")}
        variants = {
            "sbx_ssh": ([str(SBX), "run", str(kit), "--", "true"], env),
            "sbx_ssh_unshared": ([str(SBX), "run", str(kit), "--", "true"],
                                 {**env, "SBX_ENGINE_SSH_SHARE": "0"}),
            "sbx_ssh_networked": ([str(SBX), "run", str(networked), "--", "true"], env),
            "docker_ssh": (["docker", "run", "--rm", "--network", "none", IMAGE, "true"], env),
        }
        for argv, variant_env in variants.values():  # warm-up: kit image, plan cache
            _timed(argv, variant_env)
        times: dict[str, list[float]] = {name: [] for name in variants}
        names = list(variants)
        for round_index in range(runs):
            order = names[round_index % len(names):] + names[:round_index % len(names)]
            for name in order:
                argv, variant_env = variants[name]
                times[name].append(_timed(argv, variant_env))
        medians = {name: statistics.median(values) for name, values in times.items()}
        for name, value in medians.items():
            print(f"{name:18} median {value:6.3f} s  (n={runs})")
        docker = medians["docker_ssh"]
        for name in ("sbx_ssh", "sbx_ssh_unshared"):
            ratio = medians[name] / docker
            print(f"{name} / docker_ssh = {ratio:.2f}x  (goal <= {GOAL}x: "
                  f"{'met' if ratio <= GOAL else 'missed'})")
        ratio = medians["sbx_ssh_networked"] / medians["sbx_ssh"]
        print(f"sbx_ssh_networked / sbx_ssh = {ratio:.2f}x  (goal <= {GOAL}x: "
              f"{'met' if ratio <= GOAL else 'missed'})")
        memory = _proxy_memory(host, networked, env)
        print(f"proxy container memory: {memory}")
        return 0
    finally:
        host.close()


if __name__ == "__main__":
    raise SystemExit(main())
