"""File locks: one holder at a time, across descriptors, and never through a link."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sbx.seams import locks


def test_a_held_lock_is_not_free_to_a_second_descriptor_until_released(tmp_path: Path) -> None:
    path = tmp_path / "x.lock"
    with locks.holding(locks.open_lock_file(path)):
        other = locks.open_lock_file(path)
        assert not locks.try_lock(other)
    assert locks.try_lock(other)
    locks.release(other)
    assert path.stat().st_mode & 0o777 == 0o600


def test_a_lock_file_that_is_a_link_is_refused(tmp_path: Path) -> None:
    (tmp_path / "target").write_text("")
    os.symlink(tmp_path / "target", tmp_path / "x.lock")
    with pytest.raises(OSError):
        locks.open_lock_file(tmp_path / "x.lock")
