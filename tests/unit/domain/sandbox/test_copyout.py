"""The archive-safety decisions of `sbx cp NAME:SRC DEST`, with crafted tars: what the
sandbox's archive may not do, and that a refusal leaves nothing behind."""

from __future__ import annotations

import io
import os
import stat
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.sandbox.copyout import extract, link_stays_inside, member_parts


def _tar(*entries: tuple[str, str, bytes | str]) -> bytes:
    """(name, kind, data-or-link-target) → tar bytes; kinds: file, dir, sym, hard, fifo,
    chr, suid."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, kind, payload in entries:
            info = tarfile.TarInfo(name)
            info.mode = 0o644
            data = None
            if kind in ("file", "suid"):
                raw = payload if isinstance(payload, bytes) else payload.encode()
                info.size = len(raw)
                data = io.BytesIO(raw)
                if kind == "suid":
                    info.mode = 0o4755
            elif kind == "dir":
                info.type, info.mode = tarfile.DIRTYPE, 0o755
            elif kind in ("sym", "hard"):
                info.type = tarfile.SYMTYPE if kind == "sym" else tarfile.LNKTYPE
                info.linkname = str(payload)
            elif kind == "fifo":
                info.type = tarfile.FIFOTYPE
            elif kind == "chr":
                info.type = tarfile.CHRTYPE
            archive.addfile(info, data)
    return buffer.getvalue()


def _chunks(data: bytes) -> Iterator[bytes]:
    return (data[i:i + 1000] for i in range(0, len(data), 1000))


def _refused(tmp_path: Path, data: bytes, rule: str, **kwargs: int) -> None:
    dest = tmp_path / "dest"
    dest.mkdir(exist_ok=True)
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(SbxError) as raised:
        extract(_chunks(data), dest, source_name="d", **kwargs)
    assert raised.value.reason is Reason.COPY_REFUSED
    assert raised.value.details["rule"] == rule
    assert os.listdir(dest) == [] and sorted(os.listdir(tmp_path)) == before


def test_a_directory_is_copied_with_its_inner_links(tmp_path: Path) -> None:
    data = _tar(("d", "dir", ""), ("d/sub", "dir", ""), ("d/sub/f", "file", "hi"),
                ("d/l", "sym", "sub/f"), ("d/sub/up", "sym", "../l"))
    copied = extract(_chunks(data), tmp_path / "new", source_name="d")
    assert copied.files == 1 and copied.bytes == 2
    assert (tmp_path / "new" / "sub" / "f").read_text() == "hi"
    assert os.readlink(tmp_path / "new" / "l") == "sub/f"
    assert [p for p in os.listdir(tmp_path) if p.startswith(".sbx-cp-")] == []


def test_into_an_existing_directory_under_the_source_name(tmp_path: Path) -> None:
    extract(_chunks(_tar(("f", "file", "x"))), tmp_path, source_name="f")
    assert (tmp_path / "f").read_text() == "x"
    extract(_chunks(_tar(("f", "file", "y"))), tmp_path, source_name="f")  # a file replaced
    assert (tmp_path / "f").read_text() == "y"


@pytest.mark.parametrize(("entries", "rule"), [
    ((("/etc/passwd", "file", "x"),), "absolute_entry"),
    ((("d", "dir", ""), ("d/../../escape", "file", "x")), "parent_entry"),
    ((("..", "dir", ""),), "parent_entry"),
    ((("d", "dir", ""), ("d/esc", "sym", "/etc")), "link_escapes"),
    ((("d", "dir", ""), ("d/esc", "sym", "../../x")), "link_escapes"),
    ((("d", "dir", ""), ("d/esc", "sym", "..")), "link_escapes"),
    # a link through a link: lexically inside, resolved outside
    ((("d", "dir", ""), ("d/self", "sym", "."), ("d/out", "sym", "self/..")), "link_escapes"),
    ((("d", "sym", "anything"),), "link_escapes"),  # the copy itself a link
    ((("d", "dir", ""), ("d/h", "hard", "/etc/shadow")), "hard_link"),
    ((("d", "dir", ""), ("d/p", "fifo", "")), "device_entry"),
    ((("d", "dir", ""), ("d/c", "chr", "")), "device_entry"),
    ((("d", "dir", ""), ("d/s", "suid", "x")), "setuid_entry"),
    # writing through a link the archive planted earlier
    ((("d", "dir", ""), ("d/l", "sym", "sub"), ("d/sub", "dir", ""), ("d/l/f", "file", "x")),
     "entry_through_link"),
    ((("d", "dir", ""), ("e", "file", "x")), "second_root"),
    ((("d", "dir", ""), ("d/f", "file", "x"), ("d/f", "file", "y")), "duplicate_entry"),
])
def test_crafted_archives_are_refused_and_leave_nothing(
        tmp_path: Path, entries: tuple[tuple[str, str, bytes | str], ...], rule: str) -> None:
    _refused(tmp_path, _tar(*entries), rule)


def test_a_huge_file_is_refused_by_its_declared_size(tmp_path: Path) -> None:
    data = _tar(("d", "dir", ""), ("d/big", "file", b"\0" * 300_000))
    _refused(tmp_path, data, "too_large", max_bytes=100_000)


def test_a_stream_past_the_bound_is_cut(tmp_path: Path) -> None:
    endless = (b"\0" * 65536 for _ in range(10_000))  # 655 MB of nothing that never ends a tar
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(SbxError) as raised:
        extract(endless, dest, source_name="d", max_bytes=1000)
    assert raised.value.details["rule"] in ("too_large", "bad_archive", "empty_archive")
    assert os.listdir(dest) == []


def test_not_a_tar_is_refused(tmp_path: Path) -> None:
    _refused(tmp_path, b"this is not a tar archive" * 100, "bad_archive")


def test_a_symlink_in_place_of_the_destination_is_never_written_through(
        tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.write_text("keep", encoding="utf-8")
    (tmp_path / "dest").symlink_to(outside)
    with pytest.raises(SbxError) as raised:
        extract(_chunks(_tar(("f", "file", "evil"))), tmp_path / "dest", source_name="f")
    assert raised.value.details["rule"] == "destination_exists"
    assert outside.read_text() == "keep"


def test_modes_are_kept_without_special_bits(tmp_path: Path) -> None:
    extract(_chunks(_tar(("f", "file", "x"))), tmp_path / "f", source_name="f")
    assert stat.S_IMODE(os.stat(tmp_path / "f").st_mode) == 0o644


@pytest.mark.parametrize(("parts", "target", "inside"), [
    (("d", "l"), "f", True), (("d", "a", "l"), "../f", True), (("d", "l"), "../x", False),
    (("d", "l"), "/abs", False), (("l",), "f", False), (("d", "l"), "", False),
    (("d", "a", "l"), "../../d/f", False),
])
def test_link_stays_inside(parts: tuple[str, ...], target: str, inside: bool) -> None:
    assert link_stays_inside(parts, target) is inside


def test_member_parts_drop_dots() -> None:
    assert member_parts("./d/./f") == ("d", "f")
    for bad in ("", ".", "a\\b", "/x", "a/../b"):
        with pytest.raises(SbxError):
            member_parts(bad)
