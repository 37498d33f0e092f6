"""Whole files of a directory the user named (a kit's recipe, the context files it stages),
read as they are, and the files of its tree; the directories sbx keeps for the user (the
kits' host-mount directories), made, listed, indexed and removed. Which of them may be read or
changed, and what a refusal says, is the domain's (:mod:`sbx.domain.kits.local`,
:mod:`sbx.domain.kits.publish`, :mod:`sbx.domain.sandbox.hostmounts`...)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Collection
from pathlib import Path
from typing import IO, TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    import tarfile

EntryStatus: TypeAlias = os.stat_result


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


def tree_entries(directory: str | Path) -> list[tuple[str, EntryStatus]]:
    """Every entry below ``directory`` with its ``lstat`` (links not followed into): by
    directory, each one's subdirectories (a link to one among them) then its other names, each
    in sorted order; raises OSError when an entry cannot be looked up (one that cannot be
    listed is skipped)."""
    found: list[tuple[str, EntryStatus]] = []
    for root, dirs, names in os.walk(directory):
        for entry in sorted(dirs) + sorted(names):
            path = os.path.join(root, entry)
            found.append((path, os.lstat(path)))
        dirs.sort()
    return found


def open_unfollowed(path: str) -> tuple[IO[bytes], EntryStatus]:
    """The file at ``path`` opened to read (refused with ELOOP when it is a link now) and the
    status of what was opened, for the caller to hold against what it looked up before and
    to close; raises OSError."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    data = os.fdopen(fd, "rb")
    try:
        return data, os.fstat(data.fileno())
    except BaseException:
        data.close()
        raise


def spooled_buffer(max_size: int) -> IO[bytes]:
    """A buffer held in memory until it passes ``max_size`` bytes, then in an unnamed temporary
    file; gone when closed."""
    return tempfile.SpooledTemporaryFile(max_size=max_size)


def add_to_archive(archive: tarfile.TarFile, path: Path, name: str) -> None:
    """Add the entry at ``path`` (itself, not what is in it) to ``archive`` as ``name``."""
    archive.add(path, arcname=name, recursive=False)


def make_directory(path: Path, mode: int, *, parents: bool = False,
                   exist_ok: bool = False) -> None:
    """A directory at ``path`` made with ``mode`` (under the umask), as pathlib's ``mkdir``;
    raises FileExistsError when one is there (unless ``exist_ok``), or another OSError."""
    path.mkdir(mode=mode, parents=parents, exist_ok=exist_ok)


def set_mode(path: Path, mode: int) -> None:
    """Give the entry at ``path`` (links followed) ``mode``; raises OSError."""
    os.chmod(path, mode)


def replace_text(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``.NAME.PID`` beside ``path``, then rename it over ``path``:
    a reader sees the old file or the new one, never half of it. Raises OSError."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def real_subdirectories(directory: Path) -> list[Path]:
    """The directories in ``directory`` that are not symbolic links, sorted; raises OSError
    when it cannot be listed."""
    return sorted(p for p in directory.iterdir() if p.is_dir() and not p.is_symlink())


def holds_a_directory(directory: Path) -> bool:
    """Whether any entry of ``directory`` is a directory (links followed); raises OSError."""
    return any(p.is_dir() for p in directory.iterdir())


def remove_tree(path: Path, *, ignore_errors: bool = False) -> None:
    """Remove the directory at ``path`` and everything in it (links removed, not followed
    into); raises OSError, unless ``ignore_errors`` (then what cannot be removed stays)."""
    shutil.rmtree(path, ignore_errors=ignore_errors)


def private_directory(parent: Path, prefix: str) -> str:
    """A new directory in ``parent`` named ``prefix`` and a random tail, mode 0700; raises
    OSError."""
    return tempfile.mkdtemp(prefix=prefix, dir=parent)


def names(directory: Path) -> list[str]:
    """The names in ``directory``, as it lists them; raises OSError."""
    return os.listdir(directory)


def make_link(text: str, path: Path) -> None:
    """The new symbolic link ``path``, saying ``text``; raises OSError."""
    os.symlink(text, path)


def rename_over(source: Path, target: Path) -> None:
    """Rename ``source`` to ``target`` in one step, replacing a file there; raises OSError."""
    os.replace(source, target)


def links_below(top: Path) -> list[tuple[str, str]]:
    """Every symbolic link below ``top`` (links not followed into) and where it resolves,
    through whatever other links it meets: by directory, in the order it lists them."""
    found = []
    for directory, dirs, names in os.walk(top):
        for name in (*dirs, *names):
            path = os.path.join(directory, name)
            if os.path.islink(path):
                found.append((path, os.path.realpath(path)))
    return found


__all__ = ["EntryStatus", "add_to_archive", "entry_content", "file_bytes", "file_text",
           "first_line", "holds_a_directory", "links_below", "make_directory", "make_link",
           "matching", "names",
           "open_unfollowed", "private_directory", "real_subdirectories", "remove_tree",
           "rename_over", "replace_text", "set_mode", "spooled_buffer", "tree_entries",
           "tree_files"]
