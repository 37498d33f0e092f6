"""`sbx cp` arguments, where a copy into a sandbox may land, and the archive made of a host
path (never following a link, no special files, no setuid bits, the sandbox's owner, bounded)."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path
from typing import IO

import pytest

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.sandbox.copyin import archive_of, check_writable, mount_for, parse_copy_args
from sbx.seams.engine import SandboxMount

MOUNTS = (SandboxMount("/workspace", True, "bind"), SandboxMount("/workspace/.git/hooks",
                                                                 False, "bind"),
          SandboxMount("/home/agent", True, "volume"), SandboxMount("/tmp", True, "tmpfs"))


def test_which_side_is_the_sandbox() -> None:
    out = parse_copy_args("dev:/workspace/a", "./b")
    assert (out.name, out.sandbox_path, out.host_path, out.into_sandbox) == \
        ("dev", "/workspace/a", "./b", False)
    into = parse_copy_args("./a:b", "dev:rel/../x")
    assert (into.name, into.sandbox_path, into.into_sandbox) == ("dev", "/x", True)


@pytest.mark.parametrize(("src", "dst"), [("a", "b"), ("x:/a", "y:/b"), ("dev:", "."),
                                          ("/abs:x", "/y")])
def test_bad_copy_arguments(src: str, dst: str) -> None:
    with pytest.raises(SbxError) as raised:
        parse_copy_args(src, dst)
    assert raised.value.reason is Reason.INVALID_ARGUMENT


@pytest.mark.parametrize(("path", "rule"), [
    ("/etc/x", "read_only_root"), ("/tmp/x", "tmpfs_target"),
    ("/workspace/.git/hooks/pre-commit", "read_only_mount"), ("/workspacex", "read_only_root"),
])
def test_where_a_copy_may_not_land(path: str, rule: str) -> None:
    with pytest.raises(SbxError) as raised:
        check_writable(path, MOUNTS, "dev")
    assert raised.value.reason is Reason.COPY_REFUSED
    assert raised.value.details["rule"] == rule
    assert "/home/agent, /workspace" in raised.value.message


@pytest.mark.parametrize("path", ["/workspace", "/workspace/a/b", "/home/agent/.cache/x"])
def test_where_it_may(path: str) -> None:
    mount = check_writable(path, MOUNTS, "dev")
    assert mount.writable and mount is mount_for(path, MOUNTS)


def _members(spool: IO[bytes]) -> list[tarfile.TarInfo]:
    with spool, tarfile.open(fileobj=spool, mode="r") as archive:
        return list(archive.getmembers())


def test_the_archive_of_a_tree(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "f").write_text("data", encoding="utf-8")
    os.chmod(src / "sub" / "f", 0o6755)  # noqa: S103 - the bits the archive drops
    (src / "out").symlink_to("/etc/passwd")
    spool, files = archive_of(src, "copy", uid=1234, gid=5678, max_bytes=100)
    members = {m.name: m for m in _members(spool)}
    assert files == 1 and set(members) == {"copy", "copy/sub", "copy/sub/f", "copy/out"}
    assert members["copy/sub/f"].mode == 0o755  # no setuid/setgid on the way in either
    assert members["copy/out"].issym() and members["copy/out"].linkname == "/etc/passwd"
    assert {(m.uid, m.gid) for m in members.values()} == {(1234, 5678)}


def test_a_link_as_the_source_is_copied_as_a_link(tmp_path: Path) -> None:
    (tmp_path / "target").write_text("secret", encoding="utf-8")
    (tmp_path / "l").symlink_to(tmp_path / "target")
    spool, files = archive_of(tmp_path / "l", "l", uid=1, gid=1, max_bytes=100)
    (member,) = _members(spool)
    assert member.issym() and files == 0


def test_the_size_bound_and_special_files(tmp_path: Path) -> None:
    (tmp_path / "big").write_bytes(b"x" * 101)
    with pytest.raises(SbxError) as raised:
        archive_of(tmp_path / "big", "big", uid=1, gid=1, max_bytes=100)
    assert raised.value.details["rule"] == "too_large"
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(SbxError) as raised:
        archive_of(tmp_path / "fifo", "fifo", uid=1, gid=1, max_bytes=100)
    assert raised.value.details["rule"] == "device_entry"
