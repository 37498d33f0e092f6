"""The walk of one `sbx run` through the package: which modules it visits and how often it
crosses between them, traced in-process (``sys.setprofile``) for the cached run and the full plan.

Usage::

    .venv/bin/python bench/walk.py [--json]

A *stay* is a stretch of calls inside one module; a *climb* is a call from a module into one of a
higher layer (a callback: commands/views → usecases → domain → seams → base is the downward
order); a *return* is a return that lands in another module. Fewer stays and climbs mean a
request reads as a straight line down the layers. Nothing is timed; the workload is ``true`` in
a busybox image, under a temporary SBX_HOME, with no network.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run_overhead

LAYERS = ("commands", "views", "usecases", "domain", "seams", "base")


def _layer(module: str) -> int:
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else ""
    return LAYERS.index(top) if top in LAYERS else 0  # __main__, app: the top


def trace(setup: run_overhead.Setup, env: dict[str, str]) -> dict[str, Any]:
    """One in-process `sbx run` traced; its walk."""
    from sbx.__main__ import cli

    events: list[tuple[str, str]] = []

    def profile(frame: FrameType, event: str, _arg: object) -> None:
        if event in ("call", "return"):
            name = frame.f_globals.get("__name__", "")
            if isinstance(name, str) and name.startswith("sbx"):
                events.append((event, name))

    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    with open(os.devnull, encoding="utf-8") as stdin:
        sys.setprofile(profile)
        try:
            status = cli(["run", str(setup.kit), "--", *run_overhead.WORKLOAD], env=env,
                         cwd=setup.home, stdout=out, stderr=out, stdin=stdin)
        finally:
            sys.setprofile(None)
    if status != 0:
        raise run_overhead.BenchError(f"in-process `sbx run` exited {status}")
    stays = climbs = returns = 0
    current = ""
    for event, module in events:
        if module == current:
            continue
        stays += 1
        if event == "return":
            returns += 1
        elif current and _layer(module) < _layer(current):
            climbs += 1
        current = module
    return {"modules": len({m for _, m in events}), "stays": stays, "climbs": climbs,
            "returns": returns}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="sbx-walk-") as tmp:
        setup = None
        run: dict[str, Any] = {}
        try:
            setup = run_overhead.make_setup(Path(tmp))
            run_overhead.check_engine(setup)
            run = run_overhead.warm_up_sbx(setup)
            # The first in-process run writes this process's own cached plan.
            trace(setup, setup.env)
            result = {"cached": trace(setup, setup.env),
                      "full": trace(setup, {**setup.env, "SBX_PLAN_CACHE": "0"})}
        except run_overhead.BenchError as error:
            print(f"walk: {error}", file=sys.stderr)
            return 1
        finally:
            run_overhead.clean_up(setup, run, keep_image=False)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for name, walk in result.items():
            print(f"{name:7s} modules {walk['modules']:3d}  stays {walk['stays']:4d}  "
                  f"climbs {walk['climbs']:4d}  returns {walk['returns']:4d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
