"""The copied workspace's archive (sbx cp's archiver) and its refusals: over the config's
bound or holding a socket, refused as workspace_copy_refused with a fix that names the key;
never cut short."""

from __future__ import annotations

import socket
import tarfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from sbx.base.config.model import Sourced
from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.usecases.run.workspacecopy import FILL_TARGET, workspace_archive


def _plan(source: Path | None, bound: int, *, volume: str | None = "v-ws") -> Any:
    config = SimpleNamespace(sandbox=SimpleNamespace(
        workspace_copy_bytes=Sourced(bound, "/etc/sbx.toml:2")))
    return SimpleNamespace(workspace_copy=str(source) if source else None,
                           workspace_volume=volume,
                           full=lambda: (None, config, None, None),
                           user=SimpleNamespace(uid=4321, gid=4322))


def test_no_volume_no_archive() -> None:
    assert workspace_archive(_plan(None, 10, volume=None)) is None


def test_a_clone_volume_is_made_empty_its_root_the_users() -> None:
    """--clone's volume: no copy, only the root (the checkout is cloned into it later)."""
    archive = workspace_archive(_plan(None, 0))
    assert archive is not None
    with archive, tarfile.open(fileobj=archive) as tar:
        members = tar.getmembers()
    assert [(m.name, m.isdir(), m.uid, m.gid, m.mode & 0o7777) for m in members] == [
        (FILL_TARGET.lstrip("/"), True, 4321, 4322, 0o755)]


def test_the_archive_keeps_links_as_links_and_gives_everything_to_the_user(
        tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "f").write_bytes(b"12345")
    (ws / "out").symlink_to("/etc/shadow")
    archive = workspace_archive(_plan(ws, 5))
    assert archive is not None
    with archive, tarfile.open(fileobj=archive) as tar:
        members = {m.name: m for m in tar.getmembers()}
    top = FILL_TARGET.lstrip("/")
    assert set(members) == {top, f"{top}/f", f"{top}/out"}
    assert members[f"{top}/out"].issym() and members[f"{top}/out"].linkname == "/etc/shadow"
    assert {(m.uid, m.gid) for m in members.values()} == {(4321, 4322)}


def test_over_the_bound_is_refused_with_the_key_to_raise(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "f").write_bytes(b"123456")
    with pytest.raises(SbxError) as raised:
        workspace_archive(_plan(ws, 5))
    error = raised.value
    assert error.reason is Reason.WORKSPACE_COPY_REFUSED
    assert error.details["rule"] == "too_large" and error.details["bound"] == 5
    assert "workspace_copy_bytes = 10" in (error.hint or "")
    assert "/etc/sbx.toml:2" in (error.hint or "")


def test_a_socket_is_refused_by_name(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    listener = socket.socket(socket.AF_UNIX)
    try:
        listener.bind(str(ws / "s.sock"))
        with pytest.raises(SbxError) as raised:
            workspace_archive(_plan(ws, 1000))
    finally:
        listener.close()
    assert raised.value.reason is Reason.WORKSPACE_COPY_REFUSED
    assert raised.value.details["rule"] == "device_entry"
    assert "s.sock" in raised.value.message
