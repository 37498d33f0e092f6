#!/usr/bin/env python3
"""Fill a wheelhouse with sbx's runtime dependencies, pinned to the versions installed here.

    python scripts/wheelhouse.py DEST        # download what is missing (idempotent)
    python scripts/wheelhouse.py --print     # print the pins and exit

Next to the pinned wheels, ``DEST/above-pins/`` gets the newest release of every dependency
that ``pyproject.toml`` caps with an upper bound (``typer<0.29``), without its dependencies and
never installed: tests/unit/test_packaging.py reads its metadata to check that the reason for
the cap still holds, and fails once it does not (the cap can then be lifted). Refreshed at most
once a day, since "the newest release" moves; offline, the last download is kept.

The packaging test (tests/acceptance/test_wheel_install.py) installs the built wheel with pipx
*offline* from this directory (``--no-index --find-links DEST``), so the test never depends on
the network; ``scripts/setup.sh`` fills it once, next to the other downloads it makes. The pins
are the closure of ``sbx-sandbox``'s requirements (markers evaluated for this interpreter, no
extras) at the versions this environment has, so the pipx install gets exactly what the test
suite runs with. A stamp file records the pins; a second run with the same pins does nothing.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

DISTRIBUTION = "sbx-sandbox"
STAMP = ".pins"
ATTEMPTS = 3
ABOVE_PINS = "above-pins"
ABOVE_PINS_MAX_AGE_S = 24 * 3600


def pins(distribution: str = DISTRIBUTION) -> list[str]:
    """``name==version`` for every distribution ``distribution`` needs at run time."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    seen: dict[str, str] = {}
    todo = [distribution]
    while todo:
        name = todo.pop()
        for text in metadata.requires(name) or ():
            requirement = Requirement(text)
            if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
                continue
            key = str(canonicalize_name(requirement.name))
            if key in seen:
                continue
            seen[key] = metadata.version(requirement.name)
            todo.append(requirement.name)
    return sorted(f"{name}=={version}" for name, version in seen.items())


def capped(distribution: str = DISTRIBUTION) -> list[str]:
    """``name>=BOUND`` for every direct requirement of ``distribution`` with an upper bound."""
    from packaging.requirements import Requirement

    found = []
    for text in metadata.requires(distribution) or ():
        requirement = Requirement(text)
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        for spec in requirement.specifier:
            if spec.operator == "<":
                found.append(f"{requirement.name}>={spec.version}")
    return sorted(found)


def fill_above_pins(dest: Path, wanted: Sequence[str]) -> int:
    """The newest release above each cap, into ``dest``: refreshed at most once a day, and a
    failed download (offline) keeps what is there and only warns, so set-up never fails on
    it (the test that reads it says what is missing)."""
    stamp = dest / STAMP
    text = "\n".join(wanted) + "\n"
    fresh = stamp.is_file() and time.time() - stamp.stat().st_mtime < ABOVE_PINS_MAX_AGE_S
    if not wanted or (fresh and stamp.read_text(encoding="utf-8") == text):
        return 0
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest) as scratch:
        argv = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
                "--timeout", "30", "--only-binary=:all:", "--no-deps", "--dest", scratch,
                *wanted]
        if subprocess.run(argv, check=False, timeout=300).returncode != 0:
            print(f"wheelhouse: could not refresh {dest} (kept what was there)", file=sys.stderr)
            return 0
        for old in dest.glob("*.whl"):
            old.unlink()
        for new in Path(scratch).glob("*.whl"):
            new.rename(dest / new.name)
    stamp.write_text(text, encoding="utf-8")
    print(f"wheelhouse: newest releases above the caps in {dest}")
    return 0


def fill(dest: Path, wanted: Sequence[str]) -> int:
    stamp = dest / STAMP
    text = "\n".join(wanted) + "\n"
    if stamp.is_file() and stamp.read_text(encoding="utf-8") == text:
        return 0
    dest.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
            "--only-binary=:all:", "--no-deps", "--dest", str(dest), *wanted]
    for attempt in range(1, ATTEMPTS + 1):
        done = subprocess.run(argv, check=False, timeout=900)
        if done.returncode == 0:
            stamp.write_text(text, encoding="utf-8")
            print(f"wheelhouse: {len(wanted)} wheels in {dest}")
            return 0
        print(f"wheelhouse: pip download failed (attempt {attempt}/{ATTEMPTS})", file=sys.stderr)
        time.sleep(2 * attempt)
    return 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dest", nargs="?", type=Path, help="the wheelhouse directory")
    parser.add_argument("--print", action="store_true", help="print the pins and exit")
    args = parser.parse_args(argv)
    wanted = pins()
    if args.print or args.dest is None:
        print("\n".join(wanted))
        return 0
    return fill(args.dest, wanted) or fill_above_pins(args.dest / ABOVE_PINS, capped())


if __name__ == "__main__":
    sys.exit(main())
