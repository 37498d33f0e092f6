"""`sbx --help` without typer: exactly typer's page where there is one page (80 columns or
more), and typer itself for anything else (a narrower terminal, other words)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sbx.commands import help_fast

ROOT = Path(__file__).resolve().parents[3]


def _sbx(*argv: str, columns: str) -> tuple[str, bool]:
    """What `sbx ARGV` prints with $COLUMNS set (not a terminal), and whether typer loaded."""
    code = ("import sys, sbx.__main__ as m\n"
            f"status = m.cli({list(argv)!r})\n"
            "print('typer' in sys.modules, status)")
    env = {**os.environ, "COLUMNS": columns, "SBX_CONFIG": os.devnull}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=60, env=env)
    page, _, last = done.stdout.rstrip("\n").rpartition("\n")
    loaded, status = last.split()
    assert status == "0", done.stdout + done.stderr
    return page + "\n", loaded == "True"


@pytest.mark.parametrize("columns", ["80", "200"])
@pytest.mark.parametrize("word", ["--help", "-h"])
def test_the_page_is_typers_and_loads_no_typer(word: str, columns: str) -> None:
    page, typer_loaded = _sbx(word, columns=columns)
    assert not typer_loaded
    assert page == Path(help_fast.PAGE).read_text(encoding="utf-8")
    assert page.startswith("Usage: sbx [OPTIONS] COMMAND [ARGS]...\n")


def test_a_narrower_terminal_gets_typers_own_wrapping() -> None:
    page, typer_loaded = _sbx("--help", columns="60")
    assert typer_loaded
    assert page != Path(help_fast.PAGE).read_text(encoding="utf-8")
    assert max(len(line) for line in page.splitlines()) <= 58


@pytest.mark.parametrize("head", [["--help", "run"], ["run", "--help"], ["--version"], [],
                                  ["-v", "--help"], ["--help", "--help"]])
def test_any_other_words_go_through_typer(head: list[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "120")
    assert help_fast.page(head) is None


@pytest.mark.parametrize(("given", "expected"), [("120", 120), ("80", 80), ("79", 79),
                                                 ("0", None), ("wide", None), ("", None)])
def test_the_width_is_clicks(given: str, expected: int | None,
                             monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    monkeypatch.setenv("COLUMNS", given)
    assert help_fast.columns() == (expected or shutil.get_terminal_size().columns)
    assert (help_fast.page(["--help"]) is None) == (help_fast.columns() < help_fast.WIDE)


def test_a_missing_page_goes_through_typer(monkeypatch: pytest.MonkeyPatch,
                                           tmp_path: Path) -> None:
    monkeypatch.setenv("COLUMNS", "120")
    monkeypatch.setattr(help_fast, "PAGE", str(tmp_path / "gone.txt"))
    assert help_fast.page(["--help"]) is None
