"""Path lookups (sbx.seams.host.lookup) on real files, links and directories."""

from __future__ import annotations

import errno
import os
import stat
from importlib import resources
from pathlib import Path

import pytest

from sbx.seams.host import lookup


def test_each_kind_of_entry_is_told_apart(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    (tmp_path / "file").write_text("x", encoding="utf-8")
    (tmp_path / "link").symlink_to(tmp_path / "dir")
    (tmp_path / "dangling").symlink_to(tmp_path / "missing")
    assert lookup.is_directory(tmp_path / "dir") and lookup.is_directory(str(tmp_path / "link"))
    assert not lookup.is_directory(tmp_path / "file")
    assert lookup.is_regular_file(str(tmp_path / "file"))
    assert not lookup.is_regular_file(str(tmp_path / "dir"))
    assert lookup.is_link(str(tmp_path / "link")) and not lookup.is_link(str(tmp_path / "dir"))
    assert lookup.lexists(str(tmp_path / "dangling"))
    assert not lookup.lexists(str(tmp_path / "missing"))
    assert lookup.real_path(str(tmp_path / "link")) == os.path.realpath(tmp_path / "dir")


def test_status_and_absolute_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "file").write_text("x", encoding="utf-8")
    assert lookup.status(str(tmp_path / "file")).st_size == 1
    with pytest.raises(FileNotFoundError):
        lookup.status(str(tmp_path / "missing"))
    monkeypatch.chdir(tmp_path)
    assert lookup.absolute_from_cwd("a/../file") == str(Path.cwd() / "file")
    assert lookup.joined_to_cwd(Path("a/../file")) == Path.cwd() / "a" / ".." / "file"
    assert lookup.joined_to_cwd(Path("/x/../y")) == Path("/x/../y")


def test_a_bounded_read_stops_at_its_limit(tmp_path: Path) -> None:
    path = tmp_path / "big"
    path.write_bytes(b"0123456789")
    assert lookup.read_head(path, 4) == b"0123"
    assert lookup.read_head(path, 100) == b"0123456789"
    with pytest.raises(OSError):
        lookup.read_head(tmp_path / "missing", 4)


def test_resolved_follows_links_as_pathlib_does(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "dir")
    expected = (tmp_path / "dir" / "missing").resolve()
    assert lookup.resolved(tmp_path / "link" / "missing") == expected
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    with pytest.raises(RuntimeError):
        lookup.resolved(tmp_path / "loop")


def test_subdirectory_names_are_bounded_and_unlistable_is_empty(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "file").write_text("x", encoding="utf-8")
    (tmp_path / "to-a").symlink_to(tmp_path / "a")
    assert sorted(lookup.subdirectory_names(tmp_path, 10)) == ["a", "to-a"]
    assert len(lookup.subdirectory_names(tmp_path, 1)) <= 1
    assert lookup.subdirectory_names(tmp_path / "missing", 10) == []


def test_a_read_if_regular_reads_only_a_regular_file_within_its_limit(tmp_path: Path) -> None:
    small, big, fifo = tmp_path / "small", tmp_path / "big", tmp_path / "fifo"
    small.write_bytes(b"0123")
    big.write_bytes(b"0123456789")
    os.mkfifo(fifo)
    assert lookup.read_if_regular(small, 4) == lookup.BoundedRead(True, 4, b"0123")
    assert lookup.read_if_regular(big, 4) == lookup.BoundedRead(True, 10, None)
    assert lookup.read_if_regular(fifo, 4).regular is False  # opened without waiting
    assert lookup.read_if_regular(fifo, 4).head is None
    with pytest.raises(FileNotFoundError):
        lookup.read_if_regular(tmp_path / "missing", 4)


def test_is_file_checked_tells_as_pathlib(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x", encoding="utf-8")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    assert lookup.is_file_checked(tmp_path / "file")
    assert not lookup.is_file_checked(tmp_path)
    assert not lookup.is_file_checked(tmp_path / "missing")
    assert not lookup.is_file_checked(tmp_path / "loop")


def test_files_shipped_in_the_package_are_read_where_the_caller_found_them() -> None:
    schema = resources.files("sbx").joinpath("schema")
    text = lookup.resource_text(schema.joinpath("kit.schema.json"))
    assert text.startswith("{")
    assert lookup.resource_bytes(schema.joinpath("kit.schema.json")) == text.encode("utf-8")
    names = {entry.name for entry in lookup.resource_entries(schema)}
    assert {"kit.schema.json", "capabilities"} <= names


def test_is_directory_checked_tells_as_pathlib(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    (tmp_path / "file").write_text("x", encoding="utf-8")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    assert lookup.is_directory_checked(tmp_path / "dir")
    assert not lookup.is_directory_checked(tmp_path / "file")
    assert not lookup.is_directory_checked(tmp_path / "missing")
    assert not lookup.is_directory_checked(tmp_path / "loop")


def test_a_link_is_looked_up_as_itself(tmp_path: Path) -> None:
    (tmp_path / "link").symlink_to("nowhere")
    assert stat.S_ISLNK(lookup.link_status(tmp_path / "link").st_mode)
    assert lookup.link_target(str(tmp_path / "link")) == "nowhere"


def test_links_and_existence_are_told_as_pathlib(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x", encoding="utf-8")
    (tmp_path / "dangling").symlink_to(tmp_path / "missing")
    assert lookup.is_link_checked(tmp_path / "dangling")
    assert not lookup.is_link_checked(tmp_path / "file")
    assert not lookup.is_link_checked(tmp_path / "missing")
    assert lookup.exists_checked(tmp_path / "file")
    assert not lookup.exists_checked(tmp_path / "dangling")
    assert not lookup.exists_checked(tmp_path / "missing")


def test_the_start_of_a_regular_file_is_read_in_one_bounded_read(tmp_path: Path) -> None:
    (tmp_path / "config").write_bytes(b"[core]\n")
    (tmp_path / "linked").symlink_to(tmp_path / "config")
    os.mkfifo(tmp_path / "fifo")
    assert lookup.read_start_if_regular(str(tmp_path / "config"), 3) == b"[co"
    assert lookup.read_start_if_regular(str(tmp_path / "linked"), 64) == b"[core]\n"
    assert lookup.read_start_if_regular(str(tmp_path / "fifo"), 64) is None  # did not block
    with pytest.raises(FileNotFoundError):
        lookup.read_start_if_regular(str(tmp_path / "missing"), 64)
    parent = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert lookup.read_start_if_regular("config", 64, parent=parent, follow=False) \
            == b"[core]\n"
        with pytest.raises(OSError) as refused:
            lookup.read_start_if_regular("linked", 64, parent=parent, follow=False)
        assert refused.value.errno == errno.ELOOP
    finally:
        os.close(parent)
