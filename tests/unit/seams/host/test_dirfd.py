"""Entries below an open directory (sbx.seams.host.dirfd) on real files: never through a link."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from sbx.seams.host import dirfd


@pytest.fixture
def root(tmp_path: Path) -> Iterator[int]:
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    yield fd
    os.close(fd)


def test_entries_are_made_opened_renamed_and_removed(tmp_path: Path, root: int) -> None:
    dirfd.make_directory("a", 0o700, root)
    with pytest.raises(FileExistsError):
        dirfd.make_directory("a", 0o700, root)
    inner = dirfd.open_directory("a", root)
    try:
        assert stat.S_ISDIR(dirfd.descriptor_status(inner).st_mode)
        (tmp_path / "f").write_text("x", encoding="utf-8")
        dirfd.rename_entry("f", root, "g", inner)
        assert (tmp_path / "a" / "g").read_text(encoding="utf-8") == "x"
        dirfd.set_descriptor_mode(inner, 0o750)
    finally:
        dirfd.close(inner)
    assert (tmp_path / "a").stat().st_mode & 0o777 == 0o750
    dirfd.set_entry_mode("a", 0o700, root)
    dirfd.give_entry("a", os.getuid(), os.getgid(), root)
    assert (tmp_path / "a").stat().st_mode & 0o777 == 0o700


def test_a_link_is_itself_and_is_never_opened_as_a_directory(tmp_path: Path, root: int) -> None:
    (tmp_path / "dir").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "dir")
    assert stat.S_ISLNK(dirfd.entry_status("link", root).st_mode)
    assert dirfd.link_target("link", root) == str(tmp_path / "dir")
    with pytest.raises(OSError) as refused:
        dirfd.open_directory("link", root)
    assert refused.value.errno in (errno.ELOOP, errno.ENOTDIR)
    dirfd.remove_entry("link", root)
    assert (tmp_path / "dir").is_dir()
    assert not (tmp_path / "link").exists()


def test_an_owned_file_is_written_whole_and_never_through_a_link(tmp_path: Path,
                                                                  root: int) -> None:
    (tmp_path / "m.json").write_text("longer old content", encoding="utf-8")
    dirfd.write_owned_file("m.json", root, b"{}\n", mode=0o600, uid=os.getuid(),
                           gid=os.getgid())
    assert (tmp_path / "m.json").read_bytes() == b"{}\n"
    dirfd.write_owned_file("new.json", root, b"x", mode=0o600, uid=os.getuid(),
                           gid=os.getgid())
    assert (tmp_path / "new.json").stat().st_mode & 0o777 == 0o600 & ~_umask()
    (tmp_path / "elsewhere").write_text("kept", encoding="utf-8")
    (tmp_path / "planted.json").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OSError):
        dirfd.write_owned_file("planted.json", root, b"x", mode=0o600, uid=os.getuid(),
                               gid=os.getgid())
    assert (tmp_path / "elsewhere").read_text(encoding="utf-8") == "kept"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_new_files_and_links_are_made_only_where_nothing_is(tmp_path: Path) -> None:
    (tmp_path / "top").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "top")
    with pytest.raises(OSError):
        dirfd.open_top(tmp_path / "alias")
    top = dirfd.open_top(tmp_path / "top")
    try:
        with dirfd.create_file("f", top, 0o600) as out:
            out.write(b"data")
        with pytest.raises(FileExistsError):
            dirfd.create_file("f", top, 0o600)
        dirfd.make_link("f", "l", top)
        with pytest.raises(FileExistsError):
            dirfd.make_link("f", "l", top)
        with pytest.raises(FileExistsError):
            dirfd.create_file("l", top, 0o600)  # a link is not written through
    finally:
        dirfd.close(top)
    assert (tmp_path / "top" / "f").read_bytes() == b"data"
    assert os.readlink(tmp_path / "top" / "l") == "f"


def test_a_regular_file_is_read_whole_within_its_limit(tmp_path: Path, root: int) -> None:
    (tmp_path / "index").write_bytes(b"DIRC")
    (tmp_path / "linked").symlink_to(tmp_path / "index")
    os.mkfifo(tmp_path / "fifo")
    assert dirfd.read_regular("index", root, 4) == b"DIRC"
    assert dirfd.read_regular("index", root, 3) is None  # over the limit: unread
    assert dirfd.read_regular("fifo", root, 4) is None  # and opening it did not block
    with pytest.raises(FileNotFoundError):
        dirfd.read_regular("missing", root, 4)
    with pytest.raises(OSError) as refused:
        dirfd.read_regular("linked", root, 4)
    assert refused.value.errno == errno.ELOOP
