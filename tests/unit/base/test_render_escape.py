"""The renderer escapes rich markup without importing rich, exactly as rich.markup.escape does."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console
from rich.markup import escape as rich_escape

from sbx.base.render import escape

# Strings made mostly of what markup is built from, so tags, near-tags and backslashes abound.
MARKUPISH = st.lists(st.sampled_from([*"[]\\/#@abz Z0=:.\n", "é", "[/]", "[b]", "\\["]),
                     max_size=30).map("".join)


@pytest.mark.slow
@given(MARKUPISH)
@settings(max_examples=600, deadline=None)
def test_escape_is_rich_escape(text: str) -> None:
    assert escape(text) == rich_escape(text)


@pytest.mark.parametrize("text", ["ends with a backslash \\", "two at the end \\\\", "\\"])
def test_trailing_backslashes_as_rich_does(text: str) -> None:
    assert escape(text) == rich_escape(text)


@pytest.mark.parametrize("text", [
    "[bold]not bold[/]", "\\[red]escaped already", "list[0] and [x=1]",
    "127.0.0.1:5000/kits/a:1: workload sha256:ab", "[@click]x[/]", "[#ff0000]y", "",
])
def test_escaped_text_prints_as_written(text: str) -> None:
    assert escape(text) == rich_escape(text)
    console = Console(file=io.StringIO(), width=200, force_terminal=True, color_system=None,
                      record=True)
    console.print(escape(text), end="")
    assert console.export_text() == text


def test_escaping_plain_output_does_not_import_rich() -> None:
    probe = ("import sys\nfrom sbx.base.render import escape\n"
             "assert escape('[bold]x') == '\\\\[bold]x'\n"
             "print(sorted(m for m in sys.modules if m == 'rich' or m.startswith('rich.')))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.strip() == "[]"
