"""Write the README's layout map from the package tree: one entry per package folder, described
by the first paragraph of its ``__init__`` docstring (so a new or moved folder, or a changed
description, shows in the map). ``--check`` only compares.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "cli" / "sbx"
README = ROOT / "README.md"
COLUMN = 30  # where the descriptions start
WIDTH = 100
# Entries that are not package folders: the entry point and the data the wheel carries.
FIXED_FIRST = (("cli/sbx/__main__.py, app.py", PACKAGE / "__main__.py"),)
FIXED_LAST = (("cli/sbx/schema/, data/", "The kit and config JSON Schemas; the generated man page "
                                         "and completions"),)
BLOCK = re.compile(r"(^## Layout\n.*?^```\n)(.*?)(^```\n)", re.S | re.M)


def summary(path: Path) -> str:
    """The first paragraph of a module's docstring, on one line."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    first = doc.split("\n\n", 1)[0]
    return " ".join(first.split())


def _entry(name: str, text: str) -> list[str]:
    lines = textwrap.wrap(text, WIDTH - COLUMN) or [""]
    head = name.ljust(COLUMN - 1) + " " if len(name) < COLUMN else name + " "
    return [head + lines[0], *(" " * COLUMN + line for line in lines[1:])]


def _order(folder: Path) -> tuple[int, str]:
    # The programs first, then the layers top down, each followed by its sub-packages.
    layers = ["proxy", "keeper", "commands", "views", "usecases", "domain", "seams", "base"]
    top = folder.relative_to(PACKAGE).parts[0]
    return (layers.index(top) if top in layers else len(layers),
            folder.relative_to(PACKAGE).as_posix())


def layout() -> str:
    """The map's code block, as the README should hold it."""
    out: list[str] = []
    for name, path in FIXED_FIRST:
        out += _entry(name, summary(path))
    folders = sorted((p.parent for p in PACKAGE.rglob("__init__.py") if p.parent != PACKAGE),
                     key=_order)
    for folder in folders:
        text = summary(folder / "__init__.py")
        if not text:
            raise SystemExit(f"{folder.relative_to(ROOT)}/__init__.py has no docstring: say in "
                             "one paragraph what the folder holds")
        out += _entry(folder.relative_to(ROOT).as_posix() + "/", text)
    for name, text in FIXED_LAST:
        out += _entry(name, text)
    return "\n".join(out) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 on drift")
    args = parser.parse_args()
    text = README.read_text(encoding="utf-8")
    match = BLOCK.search(text)
    if match is None:
        print("README.md has no '## Layout' section with a code block", file=sys.stderr)
        return 1
    wanted = layout()
    if match.group(2) == wanted:
        return 0
    if args.check:
        print("README.md's layout map is stale: run scripts/regen.sh", file=sys.stderr)
        return 1
    README.write_text(text[:match.start(2)] + wanted + text[match.end(2):], encoding="utf-8")
    print("wrote README.md (layout map)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
