"""Whole files of a directory the user named (a kit's recipe, the context files it stages),
read as they are, and the files of its tree. Which of them may be read, and what a refusal
says, is the domain's (:mod:`sbx.domain.kits.local`, :mod:`sbx.domain.kits.publish`...)."""

from __future__ import annotations

from pathlib import Path


def file_text(path: Path) -> str:
    """The whole text of the file at ``path``, as UTF-8 (newlines as pathlib reads them);
    raises OSError, or UnicodeDecodeError for bytes that are not UTF-8."""
    return path.read_text(encoding="utf-8")


def file_bytes(path: Path) -> bytes:
    """The whole content of the file at ``path``; raises OSError."""
    return path.read_bytes()


__all__ = ["file_bytes", "file_text"]
