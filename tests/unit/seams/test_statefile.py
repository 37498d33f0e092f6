"""JSON state files (sbx.seams.statefile): written atomically, read back strictly."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.seams.statefile import MAX_STATE_BYTES, read_state, write_atomic


def _shape(data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ValueError("the state is a JSON object")
    return data


def _read(path: Path) -> dict[str, Any]:
    return read_state(path, _shape, {}, what="the test state", fix="Move it aside.")


def test_a_written_state_is_read_back_and_an_absent_one_is_the_default(tmp_path: Path) -> None:
    path = tmp_path / "home" / "state.json"
    assert _read(path) == {}
    write_atomic(path, json.dumps({"a": 1}).encode("utf-8"))
    assert _read(path) == {"a": 1}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["state.json"]  # no temp file left


@pytest.mark.parametrize(("payload", "problem"), [
    (b"\xff", "not UTF-8"), (b"[1]", "the state is a JSON object"), (b"{", "Expecting"),
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply")])
def test_a_damaged_state_is_refused_never_read_as_empty(tmp_path: Path, payload: bytes,
                                                       problem: str) -> None:
    path = tmp_path / "state.json"
    write_atomic(path, payload)
    with pytest.raises(SbxError) as raised:
        _read(path)
    assert raised.value.reason is Reason.STATE_CORRUPT
    assert problem in raised.value.message and "the test state" in raised.value.message


def test_an_oversized_state_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    write_atomic(path, b" " * (MAX_STATE_BYTES + 1))
    with pytest.raises(SbxError, match="larger than"):
        _read(path)
