"""Whole-file reads (sbx.seams.host.files) on real files."""

from __future__ import annotations

from pathlib import Path

import pytest

from sbx.seams.host import files


def test_whole_files_are_read_as_text_or_bytes(tmp_path: Path) -> None:
    path = tmp_path / "notes.md"
    path.write_bytes("caf\u00e9\r\n".encode())
    assert files.file_text(path) == "caf\u00e9\n"  # newlines as pathlib reads them
    assert files.file_bytes(path) == "caf\u00e9\r\n".encode()
    (tmp_path / "latin").write_bytes(b"\xe9")
    with pytest.raises(UnicodeDecodeError):
        files.file_text(tmp_path / "latin")
    with pytest.raises(FileNotFoundError):
        files.file_bytes(tmp_path / "missing")
