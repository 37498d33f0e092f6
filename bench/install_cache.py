"""The install cache: the first one-shot run of a kit with an install hook (which runs the hook
and commits the post-install image) vs the second (which reuses it).

Usage::

    .venv/bin/python bench/install_cache.py [--runs N] [--hook-seconds S] [--json]

Each of N rounds makes a fresh kit (busybox, a unique label, so a fresh base image and key)
whose install hook sleeps S seconds and writes a file, builds its image with a throwaway run of
another arg (so neither timed run pays the kit build), then times ``sbx run <kit> -- true``
twice: the first runs the hook, the second reuses the cached image. Goal: second <= 0.5x first.
A temporary SBX_HOME; the images it made are removed at the end. No network: the sandboxes
have none, nothing is pulled.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from tests.support.kits import write_kit  # noqa: E402

SBX = Path(sys.executable).parent / "sbx"
BUSYBOX = "sbx-test/busybox:1"  # built locally by scripts/setup.sh: nothing is pulled


def _descriptor(seconds: float) -> str:
    return f"""
        args:
          flavour: {{default: "plain", pattern: '^[a-z]+$'}}
        capabilities:
          - type: com.docker.sandbox/lifecycle@1
            config:
              files:
                - {{path: /etc/flavour, content: "${{{{ kit.args.flavour }}}}"}}
              install:
                - command: "sleep {seconds:g}; date > /etc/installed"
        """


def _timed(argv: list[str], env: dict[str, str], *, reused: bool | None = None) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, timeout=300, check=False)
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {done.stderr.decode()[-2000:]}")
    if reused is not None and (b"reusing sbx-installed/" in done.stderr) != reused:
        raise SystemExit(f"expected reused={reused}: {done.stderr.decode()[-2000:]}")
    return took


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--hook-seconds", type=float, default=1.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    present = subprocess.run(["docker", "image", "inspect", BUSYBOX], capture_output=True,
                             timeout=60, check=False)
    if present.returncode != 0:
        raise SystemExit(f"{BUSYBOX} is not on the engine: run scripts/setup.sh first")
    firsts: list[float] = []
    seconds: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "config.toml"
        config.write_text("", encoding="utf-8")
        env = {**os.environ, "SBX_HOME": str(Path(tmp) / "state"), "SBX_CONFIG": str(config),
               "NO_COLOR": "1"}
        nonces = []
        try:
            for _ in range(max(1, min(args.runs, 20))):
                nonce = uuid.uuid4().hex
                nonces.append(nonce)
                kit = write_kit(Path(tmp) / nonce, "bench", _descriptor(args.hook_seconds),
                                recipe=f"FROM {BUSYBOX}\nLABEL bench.nonce={nonce}\n")
                _timed([str(SBX), "run", str(kit), "--arg", "flavour=warm", "--", "true"], env)
                firsts.append(_timed([str(SBX), "run", str(kit), "--", "true"], env,
                                     reused=False))
                seconds.append(_timed([str(SBX), "run", str(kit), "--", "true"], env,
                                      reused=True))
        finally:
            for nonce in nonces:
                ids = subprocess.run(
                    ["docker", "images", "-q", "--filter", f"label=bench.nonce={nonce}"],
                    capture_output=True, text=True, timeout=60, check=False).stdout.split()
                if ids:
                    subprocess.run(["docker", "rmi", "-f", *set(ids)], capture_output=True,
                                   timeout=120, check=False)
    first, second = statistics.median(firsts), statistics.median(seconds)
    result = {"runs": len(firsts), "hook_seconds": args.hook_seconds, "first_s": first,
              "second_s": second, "ratio": second / first, "goal_ratio": 0.5}
    if args.json:
        print(json.dumps(result))
    else:
        print(f"first run (install hook runs): {first:.2f}s median of {len(firsts)}")
        print(f"second run (cached install):   {second:.2f}s")
        print(f"ratio {second / first:.2f} (goal <= 0.50)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
