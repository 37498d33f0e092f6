"""Every kit of the valid corpus says where it comes from, once; no row names a missing kit."""

from __future__ import annotations

import re
from pathlib import Path

DATA = Path(__file__).resolve().parents[3] / "data" / "kits"


def test_each_valid_kit_has_exactly_one_source_row() -> None:
    rows = re.findall(r"^\| `([^`]+)` \| (.+) \|$", (DATA / "SOURCES.md").read_text(),
                      flags=re.MULTILINE)
    named = [name for name, _source in rows]
    assert sorted(named) == sorted(p.name for p in (DATA / "valid").iterdir() if p.is_dir())
    assert len(named) == len(set(named))
    assert all(source.strip() for _name, source in rows)
