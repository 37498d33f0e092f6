"""``runs/<id>/``: written by one module (sbx.usecases.runstore), read by gc and the keeper."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.sandbox import runrecord
from sbx.usecases import runstore
from sbx.usecases.gc.listing import _read_record, owner_alive


def test_create_update_and_read_back(tmp_path: Path) -> None:
    home = tmp_path / "state"
    record = runrecord.RunRecord(run_id="a" * 32, deadline=123, workload="./w", pid=os.getpid(),
                                 kits=("./w",),
                                 volumes=("v0",), name="box")
    path, lock = runstore.create(home, record, owner_lock=True)
    assert lock is not None
    try:
        assert path == home / "runs" / ("a" * 32)
        assert (path.stat().st_mode & 0o777) == 0o700
        assert runstore.container_id(path) is None
        runstore.update(path, container_id="c1", proxy_pid=None)
        runstore.update(path, proxy_pid=42)
        data = json.loads((path / runrecord.RUN_RECORD).read_text(encoding="utf-8"))
        assert data == {**record.as_dict(), "container_id": "c1", "proxy_pid": 42}
        assert data["pid"] == os.getpid() and data["kits"] == ["./w"]
        assert runstore.container_id(path) == "c1"
        read = _read_record(path / runrecord.RUN_RECORD)  # what gc sees
        assert read is not None
        assert (read.pid, read.deadline, read.proxy_pid, read.named) == (os.getpid(), 123, 42,
                                                                        True)
        assert owner_alive(path) is True
    finally:
        os.close(lock)
    assert owner_alive(path) is False


def test_an_unwritable_home_refuses_with_a_reason(tmp_path: Path) -> None:
    home = tmp_path / "file"
    home.write_text("not a directory", encoding="utf-8")
    with pytest.raises(SbxError) as refused:
        runstore.create(home, runrecord.RunRecord(run_id="b" * 32, deadline=1, workload="w",
                                                              pid=os.getpid()))
    assert refused.value.reason is Reason.STATE_UNWRITABLE
