"""`sbx kit ls`, `sbx kit validate NAME` and `sbx explain kit_not_found` through the CLI."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sbx.domain.kits.bundled import SHORT_NAMES, agents_dir


def test_kit_ls_lists_the_short_names_and_what_they_resolve_to(tmp_path: Path,
                                                               sbx_cli: Any) -> None:
    (tmp_path / "codex").mkdir()
    done = sbx_cli(["kit", "ls", "--json"], cwd=tmp_path)
    assert done.exit_code == 0, done.stderr
    rows = {row["name"]: row for row in done.envelope()["data"]["kits"]}
    assert list(rows) == list(SHORT_NAMES)
    assert rows["claude"]["resolves_to"] == str(agents_dir() / "claude-code")
    assert rows["codex"]["source"] == "path" and rows["codex"]["shadowed"] is True
    human = sbx_cli(["kit", "ls"], cwd=tmp_path)
    assert "gemini-cli" in human.stdout and "not the bundled kit" in human.stdout


def test_validate_takes_a_short_name(tmp_path: Path, sbx_cli: Any) -> None:
    done = sbx_cli(["kit", "validate", "--json", "gemini"], cwd=tmp_path)
    assert done.exit_code == 0, done.stderr
    assert done.envelope()["data"]["descriptor"].endswith("gemini-cli/gemini-cli.yaml")


def test_run_of_a_misspelt_name_is_kit_not_found_and_explained(tmp_path: Path,
                                                               sbx_cli: Any) -> None:
    done = sbx_cli(["run", "--json", "claud", "."], cwd=tmp_path)
    assert done.exit_code == 125
    assert done.envelope()["reason"] == "kit_not_found"
    assert "claude" in (done.envelope()["hint"] or "") and "sbx pull" not in done.envelope()["hint"]
    explained = sbx_cli(["explain", "kit_not_found"], cwd=tmp_path)
    assert explained.exit_code == 0 and "sbx kit ls" in explained.stdout

