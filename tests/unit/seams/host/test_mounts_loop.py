"""A volume file system loop-mounted by sbx itself (the kernel's loop ioctls), and the check
that lets a named sandbox's next start keep it: the mount at the point must be that very
file's. As root with loop devices only (what staging needs)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from sbx.domain.sandbox.sources import Staging
from sbx.seams.host import mounts

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not os.path.exists("/dev/loop-control")
    or shutil.which("mkfs.ext4") is None, reason="needs root, loop devices and mkfs.ext4")


@pytest.fixture
def image(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "v.img"
    with path.open("wb") as handle:
        handle.truncate(8 * 1024 * 1024)
    mounts.make_ext4(path, uid=1000, gid=1000)
    yield path
    for point in tmp_path.glob("p*"):
        mounts.detach(point)


def test_the_mounted_file_is_named_by_its_device_and_inode(image: Path, tmp_path: Path) -> None:
    point = tmp_path / "p0"
    point.mkdir()
    assert mounts.mounted_image(point) is None  # nothing mounted there
    mounts.loop_mount(image, point)
    info = os.stat(image)
    assert mounts.mounted_image(point) == (info.st_dev, info.st_ino)
    assert os.stat(point).st_uid == 1000  # the file system's own root, owned as made
    copy = tmp_path / "copy.img"
    shutil.copyfile(image, copy)  # the same bytes in another file: not what is mounted
    assert mounts.mounted_image(point) != (os.stat(copy).st_dev, os.stat(copy).st_ino)
    assert mounts.detach(point) == 0
    assert mounts.mounted_image(point) is None


def test_a_bind_mount_is_no_volume_file_system(tmp_path: Path) -> None:
    source, point = tmp_path / "src", tmp_path / "p1"
    source.mkdir()
    point.mkdir()
    fd = os.open(source, os.O_PATH)
    try:
        assert mounts.bind_descriptor(fd, point) == 0
    finally:
        os.close(fd)
    try:
        assert mounts.mounted_image(point) is None
    finally:
        assert mounts.detach(point) == 0  # a mount left in tmp_path breaks pytest's cleanup


def test_a_missing_image_is_a_mount_failure_with_its_path(tmp_path: Path) -> None:
    point = tmp_path / "p2"
    point.mkdir()
    with pytest.raises(mounts.ToolFailed) as failed:
        mounts.loop_mount(tmp_path / "gone.img", point)
    assert str(tmp_path / "gone.img") in failed.value.output


def test_a_start_keeps_the_volume_only_while_it_is_the_recorded_file(
        image: Path, tmp_path: Path) -> None:
    staging = Staging(tmp_path / "staging")
    staging.remount_filesystem(image)
    log = list(staging.log)
    again = Staging(staging.directory, points=list(staging.points))
    assert again.mounted_filesystems(log) == {staging.points[0]}
    replaced = tmp_path / "new.img"
    shutil.copyfile(image, replaced)
    os.replace(replaced, image)  # the path now names another file: mounted again
    assert again.mounted_filesystems(log) == set()
    assert again.release() == []
    assert not staging.directory.exists()
