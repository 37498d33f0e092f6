"""Whole files of a directory the user named (a kit's recipe, the context files it stages),
read as they are, and the files of its tree. Which of them may be read, and what a refusal
says, is the domain's (:mod:`sbx.domain.kits.local`, :mod:`sbx.domain.kits.publish`...)."""

from __future__ import annotations

import os
from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import tarfile


def file_text(path: Path) -> str:
    """The whole text of the file at ``path``, as UTF-8 (newlines as pathlib reads them);
    raises OSError, or UnicodeDecodeError for bytes that are not UTF-8."""
    return path.read_text(encoding="utf-8")


def file_bytes(path: Path) -> bytes:
    """The whole content of the file at ``path``; raises OSError."""
    return path.read_bytes()


def first_line(path: Path) -> str:
    """The first line of the text file at ``path`` (UTF-8, its newline kept); raises OSError,
    or UnicodeDecodeError when what is read with it is not UTF-8."""
    with path.open(encoding="utf-8") as handle:
        return handle.readline()


def matching(directory: Path, pattern: str) -> list[Path]:
    """The entries of ``directory`` whose names match the glob ``pattern`` (pathlib's glob:
    hidden names too), in no particular order."""
    return list(directory.glob(pattern))


def tree_files(directory: Path, skip: Collection[str]) -> list[Path]:
    """Every file under ``directory`` (links not followed into), directories named in ``skip``
    left out at any depth; by directory, each one's names in sorted order."""
    found: list[Path] = []
    for root, dirs, names in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if d not in skip)
        found.extend(Path(root) / name for name in sorted(names))
    return found


def entry_content(path: Path) -> tuple[int, bytes]:
    """The mode of the entry at ``path`` (the link itself, for a link) and what it holds: a
    link's target as written, a file's bytes; raises OSError."""
    mode = path.lstat().st_mode
    return mode, os.readlink(path).encode() if path.is_symlink() else path.read_bytes()


def add_to_archive(archive: tarfile.TarFile, path: Path, name: str) -> None:
    """Add the entry at ``path`` (itself, not what is in it) to ``archive`` as ``name``."""
    archive.add(path, arcname=name, recursive=False)


__all__ = ["add_to_archive", "entry_content", "file_bytes", "file_text", "first_line", "matching",
           "tree_files"]
