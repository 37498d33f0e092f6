#!/usr/bin/env python3
"""Write sbx's root help page, ``cli/sbx/data/help.txt``: what ``sbx --help`` prints on 80 columns
or more, so that it is printed without importing typer (sbx.commands.help_fast).

    python scripts/gen_help.py           # (re)write cli/sbx/data/help.txt
    python scripts/gen_help.py --check   # exit 1 with a diff when it is stale

The page is typer's own (click's formatter at its widest, 78 columns of text), byte for byte.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "cli" / "sbx" / "data" / "help.txt"
GENERATOR = "scripts/gen_help.py"
WIDTH = 78  # click's HelpFormatter: min(columns, max_width=80) - 2


def render_help(app: Any) -> str:
    """The root command's help as typer prints it for `sbx --help` (with click's newline)."""
    import typer
    import typer.main

    command = typer.main.get_command(app)
    context = typer.Context(command, info_name="sbx", terminal_width=WIDTH,
                            **command.context_settings)
    return str(command.get_help(context)) + "\n"


def _writer() -> ModuleType:
    """gen_completions.py's write_or_check, loaded by path (scripts/ is not a package)."""
    name = "gen_completions"
    path = Path(__file__).resolve().parent / f"{name}.py"
    loaded = sys.modules.get(name)
    if loaded is not None and Path(getattr(loaded, "__file__", "")) == path:
        return loaded
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {name}.py next to {__file__}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 with a diff if help.txt is stale")
    args = parser.parse_args(argv)
    from sbx.app import app

    result: int = _writer().write_or_check({OUTPUT: render_help(app)}, check=args.check,
                                           generator=GENERATOR)
    return result


if __name__ == "__main__":
    sys.exit(main())
