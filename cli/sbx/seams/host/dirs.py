"""Directories sbx fills by path (the skills store): listed, made, made under a temporary name
inside their parent, given a mode, renamed into place and removed whole. What goes in them, and
what a failure means, is the domain's (:mod:`sbx.domain.sandbox.skillstore`)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path


def names(directory: Path) -> list[str]:
    """The names in ``directory``, as it lists them; raises OSError."""
    return os.listdir(directory)


def make_directories(directory: Path, mode: int) -> None:
    """``directory`` and any missing parent, made with ``mode`` (nothing when it is there);
    raises OSError."""
    directory.mkdir(mode=mode, parents=True, exist_ok=True)


def make_directory(directory: Path, mode: int) -> None:
    """The new directory ``directory`` with ``mode``; raises OSError."""
    os.mkdir(directory, mode)


def temporary_directory(parent: Path, prefix: str) -> Path:
    """A new directory (``0700``) inside ``parent`` whose name starts with ``prefix``; raises
    OSError."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir=parent))


def set_mode(path: Path, mode: int) -> None:
    """Give ``path`` the mode ``mode``; raises OSError."""
    os.chmod(path, mode)


def make_link(text: str, path: Path) -> None:
    """The new symbolic link ``path``, saying ``text``; raises OSError."""
    os.symlink(text, path)


def rename(old: Path, new: Path) -> None:
    """Rename ``old`` to ``new``; raises OSError."""
    os.rename(old, new)


def remove_tree(directory: Path) -> None:
    """Remove ``directory`` and all in it, as far as that goes (links removed, not followed)."""
    shutil.rmtree(directory, ignore_errors=True)


__all__ = ["make_directories", "make_directory", "make_link", "names", "remove_tree", "rename",
           "set_mode", "temporary_directory"]
