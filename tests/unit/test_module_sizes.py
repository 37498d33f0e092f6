"""The package stays in small modules named for what they own: none over 600 lines, the
average well under 250 (a module that grows past the bound is split along its own seams)."""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "cli" / "sbx"
MAX_LINES = 600
MAX_AVERAGE = 250


def _sizes() -> dict[str, int]:
    return {p.relative_to(PACKAGE).as_posix(): len(p.read_text(encoding="utf-8").splitlines())
            for p in PACKAGE.rglob("*.py")}


def test_no_module_is_over_the_bound() -> None:
    over = {name: lines for name, lines in _sizes().items() if lines > MAX_LINES}
    assert not over, f"split these along their seams: {over}"


def test_the_average_module_is_small() -> None:
    sizes = _sizes()
    assert sum(sizes.values()) / len(sizes) < MAX_AVERAGE
