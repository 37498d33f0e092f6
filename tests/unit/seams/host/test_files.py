"""Whole files and trees of a directory (sbx.seams.host.files) on real files."""

from __future__ import annotations

import errno
import stat
import tarfile
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


def test_first_line_keeps_its_newline(tmp_path: Path) -> None:
    path = tmp_path / "kit.yaml"
    path.write_text("# syntax=docker/sandbox-kit:3\nkind: workload\n", encoding="utf-8")
    assert files.first_line(path) == "# syntax=docker/sandbox-kit:3\n"


def test_a_tree_is_listed_in_order_without_the_skipped_directories(tmp_path: Path) -> None:
    for name in ("b/2", "b/1", "a", ".git/config", "c/.git/HEAD"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(name, encoding="utf-8")
    found = [p.relative_to(tmp_path).as_posix() for p in files.tree_files(tmp_path, {".git"})]
    assert found == ["a", "b/1", "b/2"]
    assert sorted(p.name for p in files.matching(tmp_path / "b", "*")) == ["1", "2"]


def test_an_entry_holds_a_files_bytes_or_a_links_target(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"abc")
    (tmp_path / "link").symlink_to("file")
    mode, content = files.entry_content(tmp_path / "file")
    assert content == b"abc" and mode == (tmp_path / "file").lstat().st_mode
    assert files.entry_content(tmp_path / "link")[1] == b"file"
    with pytest.raises(FileNotFoundError):
        files.entry_content(tmp_path / "missing")


def test_an_entry_is_added_to_an_archive_by_itself(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "inner").write_bytes(b"x")
    with tarfile.open(tmp_path / "out.tar", mode="w") as archive:
        files.add_to_archive(archive, tmp_path / "dir", "d")
    with tarfile.open(tmp_path / "out.tar") as archive:
        assert archive.getnames() == ["d"]


def test_kept_directories_are_made_listed_and_removed(tmp_path: Path) -> None:
    root = tmp_path / "a" / "b"
    files.make_directory(root, 0o755, parents=True, exist_ok=True)
    files.make_directory(root, 0o755, exist_ok=True)
    with pytest.raises(FileExistsError):
        files.make_directory(root, 0o700)
    files.make_directory(root / "kit", 0o700)
    files.set_mode(root / "kit", 0o750)
    assert (root / "kit").stat().st_mode & 0o777 == 0o750
    (root / "link").symlink_to(root / "kit")
    (root / "file").write_text("x", encoding="utf-8")
    assert files.real_subdirectories(root) == [root / "kit"]
    assert files.holds_a_directory(root)
    files.remove_tree(root / "kit")
    assert not files.holds_a_directory(root)  # the link's target is gone
    with pytest.raises(FileNotFoundError):
        files.real_subdirectories(tmp_path / "missing")


def test_replaced_text_is_whole_and_leaves_no_temporary(tmp_path: Path) -> None:
    index = tmp_path / "kit.json"
    index.write_text("old", encoding="utf-8")
    files.replace_text(index, "caf\u00e9\n")
    assert index.read_bytes() == "caf\u00e9\n".encode()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kit.json"]


def test_tree_entries_are_looked_up_without_following_links(tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "z").write_text("z", encoding="utf-8")
    (tmp_path / "a").write_text("a", encoding="utf-8")
    (tmp_path / "c").symlink_to(tmp_path / "b")
    found = files.tree_entries(tmp_path)
    # a link to a directory is listed among the directories, and not walked into
    assert [path for path, _info in found] == [
        f"{tmp_path}/b", f"{tmp_path}/c", f"{tmp_path}/a", f"{tmp_path}/b/z"]
    assert stat.S_ISLNK(found[1][1].st_mode)


def test_a_file_is_opened_only_when_it_is_no_link(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"data")
    (tmp_path / "l").symlink_to(tmp_path / "f")
    data, opened = files.open_unfollowed(str(tmp_path / "f"))
    with data:
        assert opened.st_size == 4
        assert data.read() == b"data"
    with pytest.raises(OSError) as refused:
        files.open_unfollowed(str(tmp_path / "l"))
    assert refused.value.errno == errno.ELOOP


def test_a_spooled_buffer_reads_back_what_was_written() -> None:
    with files.spooled_buffer(4) as buffer:
        buffer.write(b"more than four")
        buffer.seek(0)
        assert buffer.read() == b"more than four"


def test_a_private_directory_is_renamed_into_place_and_removed(tmp_path: Path) -> None:
    staging = Path(files.private_directory(tmp_path, ".sbx-cp-"))
    assert staging.parent == tmp_path and staging.name.startswith(".sbx-cp-")
    assert staging.stat().st_mode & 0o777 == 0o700
    (staging / "out").write_text("x", encoding="utf-8")
    (tmp_path / "target").write_text("old", encoding="utf-8")
    files.rename_over(staging / "out", tmp_path / "target")
    assert (tmp_path / "target").read_text(encoding="utf-8") == "x"
    files.remove_tree(staging, ignore_errors=True)
    files.remove_tree(staging, ignore_errors=True)  # gone already: nothing raised
    assert not staging.exists()


def test_links_below_are_resolved_through_other_links(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "up").symlink_to("..")
    (tmp_path / "out").symlink_to("d/up/..")
    (tmp_path / "file").write_text("x", encoding="utf-8")
    assert sorted(files.links_below(tmp_path)) == [
        (f"{tmp_path}/d/up", str(tmp_path)), (f"{tmp_path}/out", str(tmp_path.parent))]


def test_a_store_directory_is_made_set_aside_renamed_and_removed(tmp_path: Path) -> None:
    """What the skills store does by path: made, set aside under a private name, filled,
    renamed into place, listed, removed whole without following a link out."""
    import stat

    from sbx.seams.host import files

    store = tmp_path / "a" / "store"
    files.make_directory(store, 0o755, parents=True, exist_ok=True)
    files.make_directory(store, 0o755, parents=True, exist_ok=True)  # already there: nothing
    temp = Path(files.private_directory(store, ".sbx-add-"))
    assert temp.parent == store and temp.name.startswith(".sbx-add-")
    assert stat.S_IMODE(temp.stat().st_mode) == 0o700
    files.make_directory(temp / "sub", 0o700)
    files.make_link("sub", temp / "link")
    files.set_mode(temp, 0o755)
    files.rename_over(temp, store / "skill")
    assert sorted(files.names(store / "skill")) == ["link", "sub"]
    outside = tmp_path / "outside"
    outside.mkdir()
    files.make_link(str(outside), store / "skill" / "away")
    files.remove_tree(store / "skill", ignore_errors=True)
    assert files.names(store) == [] and outside.is_dir()
