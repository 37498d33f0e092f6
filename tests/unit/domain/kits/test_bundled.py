"""The bundled short names' table, what counts as a registry reference, and "did you mean"."""

from __future__ import annotations

from pathlib import Path

import pytest

from sbx.domain.kits import bundled
from sbx.domain.kits.bundled import registry_shaped, suggestions


@pytest.mark.parametrize(("word", "shaped"), [
    ("claude", False), ("my-kit", False), ("org/kit", True), ("kit:1", True),
    ("127.0.0.1:5000/kits/a:1", True), ("kit@sha256:" + "a" * 64, True)])
def test_registry_shape(word: str, shaped: bool) -> None:
    assert registry_shaped(word) is shaped


def test_suggestions_rank_the_closest_first_and_ignore_case(tmp_path: Path) -> None:
    (tmp_path / "cloud").mkdir()
    (tmp_path / "claude.txt").write_text("a file, not a directory", encoding="utf-8")
    assert suggestions("CLAUDE", tmp_path) == ["claude", "cloud"]
    assert suggestions("claud", tmp_path)[0] == "claude"
    assert "claude.txt" not in suggestions("claude.tx", tmp_path)


def test_the_directory_scan_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bundled, "MAX_SCANNED", 3)
    for index in range(10):
        (tmp_path / f"kit{index}").mkdir()
    assert len(bundled._local_directories(tmp_path)) <= 3


def test_an_unreadable_directory_offers_only_the_short_names(tmp_path: Path) -> None:
    assert suggestions("codx", tmp_path / "missing") == ["codex"]
