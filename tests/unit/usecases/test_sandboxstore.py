"""The named sandboxes' records on disk (sbx.usecases.sandboxstore): saved, loaded, listed,
forgotten, damaged, locked."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.sandbox.records import SandboxRecord
from sbx.usecases.sandboxstore import SandboxStore


def record(name: str = "box") -> SandboxRecord:
    return SandboxRecord(name=name, run_id="a" * 32, created=1.0, workload="./k", kits=[],
                         workspace=None, access="none", request={"options": {}},
                         container_id="c" * 64)


def test_records_round_trip_and_list(tmp_path: Path) -> None:
    store = SandboxStore(tmp_path)
    store.save(record("one"))
    store.save(record("two"))
    assert store.names() == ["one", "two"]
    loaded = store.load("one")
    assert loaded is not None and loaded.container_id == "c" * 64
    assert (tmp_path / "sandboxes" / "one" / "sandbox.json").stat().st_mode & 0o777 == 0o600
    store.forget("one")
    assert store.names() == ["two"] and store.load("one") is None


@pytest.mark.parametrize("text", ["{", "[]", '{"version": 2}', '{"version": 1, "x": 1}',
                                  "[" * 100_000])
def test_a_damaged_record_is_state_corrupt(tmp_path: Path, text: str) -> None:
    store = SandboxStore(tmp_path)
    (tmp_path / "sandboxes" / "box").mkdir(parents=True)
    (tmp_path / "sandboxes" / "box" / "sandbox.json").write_text(text, encoding="utf-8")
    with pytest.raises(SbxError) as caught:
        store.load("box")
    assert caught.value.reason is Reason.STATE_CORRUPT


def test_a_name_is_locked_by_one_holder_at_a_time(tmp_path: Path) -> None:
    store = SandboxStore(tmp_path)
    with store.locked("box"):
        other = os.open(tmp_path / "sandboxes" / ".box.lock", os.O_RDONLY)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(other)
    with pytest.raises(SbxError) as caught:
        store.acquire("a/b")
    assert caught.value.reason is Reason.INVALID_ARGUMENT
