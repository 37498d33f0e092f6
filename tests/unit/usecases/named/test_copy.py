"""`sbx cp` through the fake engine: a crafted archive from "the engine" (`../` names, a link
out) refused before the host is touched; into the sandbox only onto a writable mount, with
the archive given to the sandbox's user."""

from __future__ import annotations

import io
import os
import stat
import tarfile
from pathlib import Path

import pytest

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.base.render import Renderer
from sbx.domain.sandbox.records import SandboxRecord
from sbx.seams.engine import PathStat, SandboxFiles, SandboxMount
from sbx.usecases.context import AppContext
from sbx.usecases.named.copy import copy
from sbx.usecases.sandboxstore import SandboxStore
from tests.support.fakeengine import FakeEngine

CID = "c" * 64
FILES = SandboxFiles("1000:1001", True, (SandboxMount("/workspace", True, "bind"),
                                         SandboxMount("/tmp", True, "tmpfs")))


def _ctx(tmp_path: Path, engine: FakeEngine) -> AppContext:
    home = tmp_path / "state"
    SandboxStore(home).save(SandboxRecord(
        name="box", run_id="a" * 32, created=1.0, workload="./k", kits=[], workspace=None,
        access="none", request={"options": {}}, container_id=CID))
    env = {"SBX_HOME": str(home), "SBX_CONFIG": os.devnull, "HOME": str(tmp_path / "h"),
           "PATH": "/bin"}
    return AppContext(env=env, cwd=tmp_path, renderer=Renderer(io.StringIO(), io.StringIO(),
                                                               as_json=False),
                      driver_factory=lambda _env: engine)


def _tar(name: str, data: bytes = b"x") -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _engine() -> FakeEngine:
    engine = FakeEngine()
    engine.sandbox_mounts[CID] = FILES
    engine.stats[(CID, "/workspace")] = PathStat("workspace", 0, stat.S_IFDIR | 0o755, "")
    engine.stats[(CID, "/workspace/f")] = PathStat("f", 1, stat.S_IFREG | 0o644, "")
    return engine


@pytest.mark.parametrize(("entry", "rule"), [("../../escape", "parent_entry"),
                                             ("/abs", "absolute_entry")])
def test_a_crafted_archive_from_the_engine_is_refused(tmp_path: Path, entry: str,
                                                      rule: str) -> None:
    engine = _engine()
    engine.archives[(CID, "/workspace/f")] = _tar(entry)
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(SbxError) as raised:
        copy(_ctx(tmp_path, engine), "box:/workspace/f", str(dest), max_bytes=1 << 20)
    assert raised.value.reason is Reason.COPY_REFUSED and raised.value.details["rule"] == rule
    assert os.listdir(dest) == [] and not (tmp_path / "escape").exists()


def test_out_of_a_tmpfs_is_refused_before_the_engine_is_asked(tmp_path: Path) -> None:
    engine = _engine()
    with pytest.raises(SbxError) as raised:
        copy(_ctx(tmp_path, engine), "box:/tmp/x", str(tmp_path), max_bytes=1 << 20)
    assert raised.value.details["rule"] == "tmpfs_target"
    assert engine.called("archive_read") == []


def test_into_the_workspace_as_the_sandbox_user(tmp_path: Path) -> None:
    engine = _engine()
    (tmp_path / "in.txt").write_text("hello", encoding="utf-8")
    result = copy(_ctx(tmp_path, engine), "in.txt", "box:/workspace/", max_bytes=1 << 20)
    assert result.destination == "box:/workspace/in.txt" and result.files == 1
    ((cid, into, data),) = engine.written
    assert (cid, into) == (CID, "/workspace")
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        (member,) = archive.getmembers()
    assert (member.name, member.uid, member.gid) == ("in.txt", 1000, 1001)


def test_into_the_read_only_root_is_refused_and_nothing_is_sent(tmp_path: Path) -> None:
    engine = _engine()
    engine.stats[(CID, "/etc")] = PathStat("etc", 0, stat.S_IFDIR | 0o755, "")
    (tmp_path / "in.txt").write_text("hello", encoding="utf-8")
    with pytest.raises(SbxError) as raised:
        copy(_ctx(tmp_path, engine), "in.txt", "box:/etc", max_bytes=1 << 20)
    assert raised.value.details["rule"] == "read_only_root" and engine.written == []


def test_a_link_the_sandbox_planted_is_checked_where_it_leads(tmp_path: Path) -> None:
    engine = _engine()
    engine.stats[(CID, "/workspace/out")] = PathStat("out", 0, stat.S_IFLNK | 0o777, "/etc/x")
    (tmp_path / "in.txt").write_text("hello", encoding="utf-8")
    with pytest.raises(SbxError) as raised:
        copy(_ctx(tmp_path, engine), "in.txt", "box:/workspace/out", max_bytes=1 << 20)
    assert raised.value.details["rule"] == "read_only_root" and engine.written == []


def test_an_unknown_sandbox_is_invalid_argument(tmp_path: Path) -> None:
    with pytest.raises(SbxError) as raised:
        copy(_ctx(tmp_path, _engine()), "nosuch:/x", str(tmp_path), max_bytes=1)
    assert raised.value.reason is Reason.INVALID_ARGUMENT
