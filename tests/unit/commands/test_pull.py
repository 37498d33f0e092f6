"""`sbx pull` of a bundled agent's short name: refused before any registry is asked."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def test_pull_of_a_short_name_goes_to_no_registry(tmp_path: Path, sbx_cli: Any) -> None:
    done = sbx_cli(["pull", "--json", "codex"], cwd=tmp_path)
    assert done.exit_code == 2
    envelope = done.envelope()
    assert envelope["reason"] == "invalid_argument" and "bundled" in envelope["message"]
    assert "sbx run codex" in envelope["hint"]
