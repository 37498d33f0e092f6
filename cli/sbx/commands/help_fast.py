"""`sbx --help` (or `-h`) without the CLI parser: the page typer prints on 80 columns or more,
generated into the package by scripts/gen_help.py (a drift test holds it equal to typer's).

click wraps help to ``min(columns, 80) - 2``, so from 80 columns on there is one page; a
narrower terminal, any other word, or a page that cannot be read goes through typer as before.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Final

PAGE: Final = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "help.txt")
WIDE: Final = 80  # the columns from which click's help formatter wraps to its maximum
_WORDS: Final = (["--help"], ["-h"])


def page(head: Sequence[str]) -> str | None:
    """The root help page for exactly ``--help`` or ``-h``; None when typer is to print it."""
    if list(head) not in _WORDS or columns() < WIDE:
        return None
    try:
        with open(PAGE, encoding="utf-8") as file:
            return file.read()
    except OSError:
        return None


def columns() -> int:
    """The width click reads (``shutil.get_terminal_size``, without importing shutil): a
    positive $COLUMNS, else the width of the interpreter's stdout terminal, else 80."""
    try:
        given = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        given = 0
    if given > 0:
        return given
    stdout = sys.__stdout__
    try:
        return (os.get_terminal_size(stdout.fileno()).columns or WIDE) if stdout else WIDE
    except (AttributeError, ValueError, OSError):  # closed, detached or not a terminal
        return WIDE


__all__ = ["PAGE", "WIDE", "columns", "page"]
