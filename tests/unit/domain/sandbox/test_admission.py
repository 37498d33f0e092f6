"""Every start is checked like the first (sbx.domain.sandbox.admission): one decision for what a
one-shot run, a named sandbox's later start, attach and exec may mount and pass, against real
directories and sockets under tmp_path."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from sbx.base.errors import MountBlocked, SbxError
from sbx.base.reasons import Reason
from sbx.domain.sandbox.admission import (
    HostPath,
    StartRequest,
    admit,
    recorded_paths,
    recorded_user,
    sentinel_names,
)
from sbx.domain.sandbox.images import SandboxUser
from sbx.domain.sandbox.mountpolicy import MountPolicy

USER = SandboxUser(1000, 1000, "test")


@pytest.fixture
def policy(tmp_path: Path) -> MountPolicy:
    (tmp_path / "home").mkdir()
    return MountPolicy.for_host({"HOME": str(tmp_path / "home")}, state_home=tmp_path / "state")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    (path / "src").mkdir(parents=True)
    return path


@pytest.fixture
def listening(workspace: Path) -> Iterator[Path]:
    """A host socket in the workspace, as an ssh ControlMaster leaves one."""
    path = workspace / "src" / "cm-host.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)
    try:
        yield path
    finally:
        server.close()


def _admit(start: StartRequest, policy: MountPolicy, tmp_path: Path,
           user: SandboxUser = USER, env: dict[str, str] | None = None) -> None:
    admission = admit(start, policy, host_env=env or {}, cwd=tmp_path,
                      user=lambda _owner: (user, ()))
    assert admission is not None
    admission.close()


def _first_start(workspace: Path, **changes: object) -> StartRequest:
    values: dict[str, object] = {
        "paths": (HostPath(str(workspace), "/workspace", False),), "workspace": True,
        "protect": True}
    values.update(changes)
    return StartRequest(**values)  # type: ignore[arg-type]


def _later_start(workspace: Path, **changes: object) -> StartRequest:
    """A named sandbox's record replayed: the workspace and a pin below it."""
    pins = [{"path": str(workspace), "target": "/workspace", "read_only": False},
            {"path": str(workspace / "src"), "target": "/workspace/src", "read_only": True}]
    values: dict[str, object] = {"paths": recorded_paths(pins, str(workspace)),
                                 "workspace": True}
    values.update(changes)
    return StartRequest(**values)  # type: ignore[arg-type]


@pytest.mark.slow
@pytest.mark.parametrize("start", [_first_start, _later_start])
def test_a_socket_in_the_workspace_is_refused_at_every_start(
        start: object, workspace: Path, policy: MountPolicy, tmp_path: Path,
        listening: Path) -> None:
    with pytest.raises(MountBlocked) as error:
        _admit(start(workspace), policy, tmp_path)  # type: ignore[operator]
    assert error.value.details["rule"] == "socket"
    assert str(listening) in error.value.message


@pytest.mark.slow
@pytest.mark.parametrize("start", [_first_start, _later_start])
def test_the_same_workspace_without_the_socket_is_admitted(
        start: object, workspace: Path, policy: MountPolicy, tmp_path: Path) -> None:
    _admit(start(workspace), policy, tmp_path)  # type: ignore[operator]


@pytest.mark.slow
def test_a_later_start_judges_the_workspace_by_the_policy_again(
        tmp_path: Path, policy: MountPolicy) -> None:
    ssh = tmp_path / "home" / ".ssh"
    ssh.mkdir()
    with pytest.raises(MountBlocked):
        _admit(_later_start(ssh), policy, tmp_path)


def test_recorded_paths_judge_what_is_not_below_the_workspace(workspace: Path) -> None:
    pins = [{"path": str(workspace), "target": "/w", "read_only": False},
            {"path": "/srv/data", "target": "/data", "read_only": True},
            {"path": f"{workspace}/.git/config", "target": "/w/.git/config", "read_only": True}]
    assert [p.judged for p in recorded_paths(pins, str(workspace))] == [True, True, False]
    assert [p.judged for p in recorded_paths(pins[1:2], None)] == [True]


SENTINEL = "sbx-proxy-managed-github"


@pytest.mark.slow
@pytest.mark.parametrize("entry", ["GH_TOKEN=ghp_typed", "GH_TOKEN", "HTTPS_PROXY=x",
                                   "https_proxy=x", "SBX_RUN_ID=x", "HOME=/x",
                                   "SSL_CERT_FILE=/x"])
def test_variables_run_refuses_are_refused_for_exec_too(
        entry: str, workspace: Path, policy: MountPolicy, tmp_path: Path) -> None:
    names = sentinel_names({"GH_TOKEN": SENTINEL, "A": "1"}, (), (SENTINEL[:-6],))
    assert names == {"GH_TOKEN"}
    for start in (_first_start(workspace, env=(entry,), credential_names=names),
                  _later_start(workspace, env=(entry,), credential_names=names)):
        with pytest.raises(SbxError) as error:
            _admit(start, policy, tmp_path, env={"GH_TOKEN": "from-the-host"})
        assert error.value.reason is Reason.INVALID_ARGUMENT
        assert "ghp_typed" not in error.value.message
        assert "from-the-host" not in error.value.message


def test_a_plain_variable_passes_every_start(workspace: Path, policy: MountPolicy,
                                             tmp_path: Path) -> None:
    admission = admit(_later_start(workspace, env=("GREETING=hi",)), policy, host_env={},
                      cwd=tmp_path, user=lambda _owner: (USER, ()))
    assert admission is not None
    assert admission.env == {"GREETING": "hi"} and admission.user == USER
    admission.close()


@pytest.mark.parametrize("user", [SandboxUser(0, 1000, "x"), SandboxUser(1000, 0, "x")])
def test_root_is_refused_at_every_start(user: SandboxUser, workspace: Path,
                                        policy: MountPolicy, tmp_path: Path) -> None:
    with pytest.raises(SbxError) as error:
        _admit(_later_start(workspace), policy, tmp_path, user=user)
    assert error.value.reason is Reason.ROOT_USER


@pytest.mark.parametrize("text", ["", "1000", "a:b", "1000:"])
def test_a_record_without_a_user_is_corrupt(text: str) -> None:
    with pytest.raises(SbxError) as error:
        recorded_user(text, "box's record")
    assert error.value.reason is Reason.STATE_CORRUPT


def test_a_user_choice_that_asks_to_plan_again_leaves_nothing_open(
        workspace: Path, policy: MountPolicy, tmp_path: Path) -> None:
    import os

    before = len(os.listdir("/proc/self/fd"))
    assert admit(_first_start(workspace), policy, host_env={}, cwd=tmp_path,
                 user=lambda _owner: None) is None
    assert len(os.listdir("/proc/self/fd")) == before
