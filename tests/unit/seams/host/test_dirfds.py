from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from sbx.seams.host import dirfds


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[int]:
    (tmp_path / "dir").mkdir()
    (tmp_path / "file").write_text("x", encoding="utf-8")
    (tmp_path / "link").symlink_to("dir")
    (tmp_path / "dangling").symlink_to("nowhere")
    fd = os.open(tmp_path, os.O_PATH | os.O_DIRECTORY)
    yield fd
    os.close(fd)


def test_a_directory_opens_and_a_link_to_one_does_not(tree: int) -> None:
    opened = dirfds.open_directory_at(tree, "dir")
    assert opened is not None
    dirfds.close(opened)
    assert dirfds.open_directory_at(tree, "link") is None
    assert dirfds.open_directory_at(tree, "file") is None


def test_a_directory_swapped_since_the_listing_is_not_opened(tree: int, tmp_path: Path) -> None:
    inode = os.stat(tmp_path / "dir").st_ino
    opened = dirfds.open_directory_if(tree, "dir", inode)
    assert opened is not None
    dirfds.close(opened)
    os.rename(tmp_path / "dir", tmp_path / "old")
    (tmp_path / "dir").mkdir()
    assert dirfds.open_directory_if(tree, "dir", inode) is None


def test_a_listing_gives_each_entry_its_own_type_and_status(tree: int) -> None:
    opened = dirfds.open_directory_at(tree, ".")
    assert opened is not None
    try:  # a status is looked up through the listed directory: while it is open
        entries = {e.name: e for e in dirfds.listing(opened)}
        assert dirfds.is_link(entries["link"]) and not dirfds.is_directory(entries["link"])
        assert dirfds.is_directory(entries["dir"]) and not dirfds.is_link(entries["dir"])
        assert stat.S_ISLNK(dirfds.own_status(entries["dangling"]).st_mode)
    finally:
        dirfds.close(opened)


def test_a_dangling_link_exists_and_its_status_is_its_own(tree: int) -> None:
    assert dirfds.exists_at(tree, "dangling")
    assert not dirfds.exists_at(tree, "missing")
    assert stat.S_ISLNK(dirfds.own_status_at(tree, "dangling").st_mode)
    assert sorted(dirfds.sorted_names(tree)) == ["dangling", "dir", "file", "link"]


def test_nothing_is_made_where_something_already_is(tree: int, tmp_path: Path) -> None:
    uid, gid = os.getuid(), os.getgid()
    assert dirfds.make_owned_directory(tree, "made", 0o755, uid, gid)
    assert stat.S_IMODE(os.stat(tmp_path / "made").st_mode) == 0o755 & ~_umask()
    assert not dirfds.make_owned_directory(tree, "link", 0o755, uid, gid)
    assert dirfds.create_owned_empty(tree, "empty", 0o644, uid, gid)
    assert (tmp_path / "empty").read_bytes() == b""
    assert not dirfds.create_owned_empty(tree, "dangling", 0o644, uid, gid)  # never through it
    assert not (tmp_path / "nowhere").exists()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_new_file_is_written_only_where_nothing_is(tmp_path: Path) -> None:
    (tmp_path / "taken").write_bytes(b"old")
    (tmp_path / "link").symlink_to("elsewhere")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert dirfds.write_new_at(fd, "new", b"data", 0o644)
        assert not dirfds.write_new_at(fd, "taken", b"data", 0o644)
        assert not dirfds.write_new_at(fd, "link", b"data", 0o644)
        dirfds.rename_at(fd, "new", "renamed")
        dirfds.unlink_at(fd, "taken")
    finally:
        os.close(fd)
    assert (tmp_path / "renamed").read_bytes() == b"data"
    assert stat.S_IMODE((tmp_path / "renamed").stat().st_mode) == 0o644 & ~_umask()
    assert not (tmp_path / "taken").exists() and not (tmp_path / "elsewhere").exists()


def test_a_copy_stops_as_soon_as_it_is_over_its_limit(tmp_path: Path) -> None:
    (tmp_path / "source").write_bytes(b"x" * 10)
    (tmp_path / "link").symlink_to("source")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(OSError):
            dirfds.open_file_at(fd, "link")
        source = dirfds.open_file_at(fd, "source")
        try:
            assert dirfds.copy_to_new_file(source, tmp_path / "copy", 0o755, 10) == 10
        finally:
            dirfds.close(source)
        source = dirfds.open_file_at(fd, "source")
        try:
            assert dirfds.copy_to_new_file(source, tmp_path / "short", 0o755, 9) is None
            with pytest.raises(FileExistsError):
                dirfds.copy_to_new_file(source, tmp_path / "link", 0o644, 10)
        finally:
            dirfds.close(source)
        assert dirfds.link_text_at(fd, "link") == "source"
        assert sorted(dirfds.names_at(fd)) == ["copy", "link", "short", "source"]
    finally:
        os.close(fd)
    assert (tmp_path / "copy").read_bytes() == b"x" * 10
    assert stat.S_IMODE((tmp_path / "copy").stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "short").stat().st_mode) == 0o600
    with pytest.raises(OSError):
        dirfds.open_directory(tmp_path / "link")
