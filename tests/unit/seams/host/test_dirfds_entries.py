"""Moving, locking and writing entries below an open directory (sbx.seams.host.dirfds) on
real files: never through a link."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from sbx.seams.host import dirfds


@pytest.fixture
def root(tmp_path: Path) -> Iterator[int]:
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    yield fd
    os.close(fd)


def test_entries_are_made_opened_renamed_and_removed(tmp_path: Path, root: int) -> None:
    dirfds.make_directory_at(root, "a", 0o700)
    with pytest.raises(FileExistsError):
        dirfds.make_directory_at(root, "a", 0o700)
    inner = dirfds.open_directory_in(root, "a")
    try:
        assert stat.S_ISDIR(dirfds.status_of(inner).st_mode)
        (tmp_path / "f").write_text("x", encoding="utf-8")
        dirfds.rename_between(root, "f", inner, "g")
        assert (tmp_path / "a" / "g").read_text(encoding="utf-8") == "x"
        dirfds.set_descriptor_mode(inner, 0o750)
    finally:
        dirfds.close(inner)
    assert (tmp_path / "a").stat().st_mode & 0o777 == 0o750
    dirfds.set_mode_at(root, "a", 0o700)
    dirfds.give_at(root, "a", os.getuid(), os.getgid())
    assert (tmp_path / "a").stat().st_mode & 0o777 == 0o700


def test_a_link_is_itself_and_is_never_opened_as_a_directory(tmp_path: Path, root: int) -> None:
    (tmp_path / "dir").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "dir")
    assert stat.S_ISLNK(dirfds.own_status_at(root, "link").st_mode)
    assert dirfds.link_text_at(root, "link") == str(tmp_path / "dir")
    with pytest.raises(OSError) as refused:
        dirfds.open_directory_in(root, "link")
    assert refused.value.errno in (errno.ELOOP, errno.ENOTDIR)
    dirfds.unlink_at(root, "link")
    assert (tmp_path / "dir").is_dir()
    assert not (tmp_path / "link").exists()


def test_an_owned_file_is_written_whole_and_never_through_a_link(tmp_path: Path,
                                                                  root: int) -> None:
    (tmp_path / "m.json").write_text("longer old content", encoding="utf-8")
    dirfds.write_owned_at(root, "m.json", b"{}\n", mode=0o600, uid=os.getuid(),
                           gid=os.getgid())
    assert (tmp_path / "m.json").read_bytes() == b"{}\n"
    dirfds.write_owned_at(root, "new.json", b"x", mode=0o600, uid=os.getuid(),
                           gid=os.getgid())
    assert (tmp_path / "new.json").stat().st_mode & 0o777 == 0o600 & ~_umask()
    (tmp_path / "elsewhere").write_text("kept", encoding="utf-8")
    (tmp_path / "planted.json").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OSError):
        dirfds.write_owned_at(root, "planted.json", b"x", mode=0o600, uid=os.getuid(),
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
        dirfds.open_top(tmp_path / "alias")
    top = dirfds.open_top(tmp_path / "top")
    try:
        with dirfds.create_file_at(top, "f", 0o600) as out:
            out.write(b"data")
        with pytest.raises(FileExistsError):
            dirfds.create_file_at(top, "f", 0o600)
        dirfds.make_link_at(top, "l", "f")
        with pytest.raises(FileExistsError):
            dirfds.make_link_at(top, "l", "f")
        with pytest.raises(FileExistsError):
            dirfds.create_file_at(top, "l", 0o600)  # a link is not written through
    finally:
        dirfds.close(top)
    assert (tmp_path / "top" / "f").read_bytes() == b"data"
    assert os.readlink(tmp_path / "top" / "l") == "f"


def test_a_regular_file_is_read_whole_within_its_limit(tmp_path: Path, root: int) -> None:
    (tmp_path / "index").write_bytes(b"DIRC")
    (tmp_path / "linked").symlink_to(tmp_path / "index")
    os.mkfifo(tmp_path / "fifo")
    assert dirfds.read_regular_at(root, "index", 4) == b"DIRC"
    assert dirfds.read_regular_at(root, "index", 3) is None  # over the limit: unread
    assert dirfds.read_regular_at(root, "fifo", 4) is None  # and opening it did not block
    with pytest.raises(FileNotFoundError):
        dirfds.read_regular_at(root, "missing", 4)
    with pytest.raises(OSError) as refused:
        dirfds.read_regular_at(root, "linked", 4)
    assert refused.value.errno == errno.ELOOP
