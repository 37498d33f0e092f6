"""`sbx run`'s per-run options decided before anything starts: the sandbox user and HOME, the
user's environment variables, durations, and the mount points whose mode must be fixed."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.sandbox.durations import parse_duration
from sbx.domain.sandbox.envflags import parse_env
from sbx.domain.sandbox.identity import (
    FALLBACK_HOME,
    WorkspaceOwner,
    can_write,
    choose_user,
    home_path,
    parse_user_flag,
)
from sbx.domain.sandbox.images import SandboxUser
from sbx.domain.sandbox.mountpoints import directory_tar, prepare_mountpoints, wanted_modes
from sbx.seams.engine import ImageInfo
from tests.support.fakeengine import FakeEngine

IMAGE_USER = SandboxUser(1000, 1000, "image USER agent")


def image_user() -> SandboxUser:
    return IMAGE_USER


def owner(uid: int, gid: int, mode: int = 0o755) -> WorkspaceOwner:
    return WorkspaceOwner("/home/me/project", uid, gid, mode)


# -- the sandbox user -------------------------------------------------------------------------


def test_workspace_owner_becomes_the_sandbox_user() -> None:
    user, warnings = choose_user(flag=None, owner=owner(4321, 4321), access="rw",
                                 root_workspace="refuse", image_user=image_user)
    assert (user.uid, user.gid) == (4321, 4321) and warnings == ()
    assert "owner of the workspace" in user.source


def test_user_flag_wins_and_defaults_gid_to_uid() -> None:
    user, _ = choose_user(flag="2000", owner=owner(2000, 3000, 0o775), access="rw",
                          root_workspace="refuse", image_user=image_user)
    assert (user.uid, user.gid, user.source) == (2000, 2000, "flag --user")
    assert parse_user_flag("5:6") == (5, 6)


@pytest.mark.parametrize("flag", ["0", "0:5", "5:0", "root"])
def test_user_flag_refuses_root_and_names(flag: str) -> None:
    with pytest.raises(SbxError) as caught:
        parse_user_flag(flag)
    assert caught.value.reason in (Reason.ROOT_USER, Reason.INVALID_ARGUMENT)


def test_without_a_workspace_the_image_user_is_used() -> None:
    user, _ = choose_user(flag=None, owner=None, access="none", root_workspace="refuse",
                          image_user=image_user)
    assert user is IMAGE_USER


def test_root_owned_rw_workspace_is_refused_with_the_ways_out() -> None:
    with pytest.raises(SbxError) as caught:
        choose_user(flag=None, owner=owner(0, 0), access="rw", root_workspace="refuse",
                    image_user=image_user)
    error = caught.value
    assert error.reason is Reason.WORKSPACE_UNWRITABLE
    assert "--access ro" in (error.hint or "") and "root_workspace" in (error.hint or "")


def test_root_owned_rw_workspace_runs_as_the_image_user_when_the_config_says_so() -> None:
    user, warnings = choose_user(flag=None, owner=owner(0, 0), access="rw",
                                 root_workspace="sandbox-user", image_user=image_user)
    assert user is IMAGE_USER
    assert len(warnings) == 1 and "root_workspace" in warnings[0]


def test_root_owned_world_writable_workspace_is_fine() -> None:
    user, warnings = choose_user(flag=None, owner=owner(0, 0, 0o1777), access="rw",
                                 root_workspace="refuse", image_user=image_user)
    assert user is IMAGE_USER and warnings == ()


def test_root_owned_read_only_workspace_is_fine() -> None:
    user, _ = choose_user(flag=None, owner=owner(0, 0), access="ro", root_workspace="refuse",
                          image_user=image_user)
    assert user is IMAGE_USER


def test_user_flag_that_cannot_write_is_refused_even_with_the_config_choice() -> None:
    with pytest.raises(SbxError) as caught:
        choose_user(flag="2000", owner=owner(4321, 4321, 0o755), access="rw",
                    root_workspace="sandbox-user", image_user=image_user)
    assert caught.value.reason is Reason.WORKSPACE_UNWRITABLE
    assert "drop --user" in (caught.value.hint or "")


def test_workspace_in_group_zero_is_refused() -> None:
    with pytest.raises(SbxError) as caught:
        choose_user(flag=None, owner=owner(4321, 0), access="rw", root_workspace="refuse",
                    image_user=image_user)
    assert caught.value.reason is Reason.ROOT_USER


@pytest.mark.parametrize(("mode", "uid", "gid", "expected"), [
    (0o700, 7, 7, True), (0o500, 7, 7, False), (0o070, 8, 7, True), (0o750, 8, 7, False),
    (0o777, 9, 9, True), (0o775, 9, 9, False), (0o1777, 9, 9, True), (0o300, 7, 8, True),
])
def test_can_write_by_mode_bits(mode: int, uid: int, gid: int, expected: bool) -> None:
    assert can_write(owner(7, 7, mode), uid, gid) is expected


def test_home_is_its_own_path_and_never_on_another_mount() -> None:
    assert home_path(taken=["/workspace", "/tmp"]) == FALLBACK_HOME
    assert home_path(taken=["/home/agent/workspace"]) == FALLBACK_HOME
    assert home_path(taken=["/home/sbx"]) == "/sbx-home"
    assert home_path(taken=["/home", "/sbx-home"]) == "/sbx-home1"
    # A mount inside HOME is fine: the engine mounts the parent first.
    assert home_path(taken=["/home/sbx/work"]) == FALLBACK_HOME


# -- environment flags ------------------------------------------------------------------------


def test_env_flags_and_files_in_order(tmp_path: Path) -> None:
    first = tmp_path / "a.env"
    first.write_text("# comment\nA=1\n\n  B=two words = kept\nFROM_HOST\nMISSING\r\n",
                     encoding="utf-8")
    second = tmp_path / "b.env"
    second.write_text("A=2\nEMPTY=\n", encoding="utf-8")
    env = parse_env(["A=3", "C", "D=x=y"], ["a.env", str(second)],
                    host_env={"FROM_HOST": "h", "C": "c"}, cwd=tmp_path)
    assert env == {"A": "3", "B": "two words = kept", "FROM_HOST": "h", "EMPTY": "",
                   "C": "c", "D": "x=y"}


@pytest.mark.parametrize("entry", ["HTTPS_PROXY=x", "http_proxy=x", "No_Proxy=", "SBX_RUN_ID=1",
                                   "sbx_workspace=/", "SSL_CERT_FILE=/x", "NODE_EXTRA_CA_CERTS",
                                   "GITHUB_TOKEN=ghp_s3cr3t", "HOME=/workspace"])
def test_boundary_names_are_refused_without_echoing_the_value(entry: str) -> None:
    with pytest.raises(SbxError) as caught:
        parse_env([entry], [], host_env={"NODE_EXTRA_CA_CERTS": "v"}, cwd=Path("/"),
                  credential_names={"GITHUB_TOKEN"})
    error = caught.value
    assert error.reason is Reason.INVALID_ARGUMENT
    value = entry.partition("=")[2]
    if len(value) > 1:
        assert value not in str(error)


@pytest.mark.parametrize("entry", ["=x", "1A=b", "A B=c", "", "A\0=b"])
def test_bad_names_are_refused(entry: str) -> None:
    with pytest.raises(SbxError, match="is not a variable name"):
        parse_env([entry], [], host_env={}, cwd=Path("/"))


def test_env_file_problems_name_the_file_and_line_never_the_value(tmp_path: Path) -> None:
    bad = tmp_path / "bad.env"
    bad.write_text("OK=1\nHTTPS_PROXY=hunter2\n", encoding="utf-8")
    with pytest.raises(SbxError) as caught:
        parse_env([], [str(bad)], host_env={}, cwd=tmp_path)
    assert f"{bad}:2" in str(caught.value) and "hunter2" not in str(caught.value)
    (tmp_path / "bin.env").write_bytes(b"A=\xff\n")
    with pytest.raises(SbxError, match="not UTF-8"):
        parse_env([], ["bin.env"], host_env={}, cwd=tmp_path)
    with pytest.raises(SbxError, match="cannot be read"):
        parse_env([], ["nope.env"], host_env={}, cwd=tmp_path)
    with pytest.raises(SbxError, match="NUL"):
        parse_env(["A=x\0y"], [], host_env={}, cwd=tmp_path)


# -- durations --------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "seconds"), [
    ("90", 90), ("90s", 90), ("30m", 1800), ("2h", 7200), ("1.5", 1.5), (" 2H ", 7200),
    ("0.5m", 30),
])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.slow
@pytest.mark.parametrize("text", ["", "0", "0s", "-5", "5d", "1h30m", "abc", "nan", "inf",
                                  "1e3", "5 m s"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(SbxError) as caught:
        parse_duration(text)
    assert caught.value.reason is Reason.INVALID_ARGUMENT and "--timeout" in str(caught.value)


# -- mount points whose mode the engine copies -------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(("observed", "expected"), [
    ({"/tmp": 0o1777, "/home/sbx": None}, {}),
    ({"/tmp": None, "/home/sbx": None}, {}),
    ({"/tmp": 0o755, "/home/sbx": None}, {"/tmp": 0o1777}),
    ({"/tmp": 0o777, "/home/sbx": 0o500}, {"/tmp": 0o1777, "/home/sbx": 0o700}),
    ({"/tmp": 0o1777, "/home/sbx": 0o755}, {}),
])
def test_wanted_modes(observed: dict[str, int | None], expected: dict[str, int]) -> None:
    assert wanted_modes(observed, home="/home/sbx") == expected


def modes_engine(modes: dict[str, int | None]) -> FakeEngine:
    engine = FakeEngine()
    engine.path_modes = modes
    return engine


BASE = ImageInfo(id="sha256:" + "b" * 64, tags=("k:1",), user="agent", workdir="/w",
                 entrypoint=None, cmd=("sh",), env=(), labels={})


def test_a_wrong_tmp_is_fixed_once_and_the_probe_is_cached(tmp_path: Path) -> None:
    engine = modes_engine({"/tmp": 0o755})
    first = prepare_mountpoints(engine, BASE, home="/home/sbx",
                                cache_dir=tmp_path, helper_labels={})
    second = prepare_mountpoints(engine, BASE, home="/home/sbx",
                                 cache_dir=tmp_path, helper_labels={})
    assert first.id == second.id != BASE.id
    assert [list(args[2]) for args in engine.called("probe_image")] == [
        ["/tmp", "/home/sbx"]]  # cached by image id afterwards
    assert len(engine.called("derive_image")) == 1  # the derived image is reused by tag
    with tarfile.open(fileobj=io.BytesIO(engine.called("derive_image")[0][1])) as archive:
        [member] = archive.getmembers()
    assert (member.name, member.isdir(), member.mode) == ("tmp", True, 0o1777)
    assert json.loads((tmp_path / f"{BASE.id.replace(':', '-')}.json").read_text())[
        "modes"] == {"/tmp": 0o755, "/home/sbx": None}


def test_a_fine_image_is_used_as_it_is(tmp_path: Path) -> None:
    engine = modes_engine({"/tmp": 0o1777})
    assert prepare_mountpoints(engine, BASE, home="/home/sbx",
                               cache_dir=tmp_path, helper_labels={}) is BASE
    assert engine.called("derive_image") == []


def test_directory_tar_is_sorted_and_holds_only_directories() -> None:
    with tarfile.open(fileobj=io.BytesIO(directory_tar({"/tmp": 0o1777, "/a/b": 0o700}))) as t:
        assert [(m.name, m.isdir(), m.mode) for m in t.getmembers()] == [
            ("a/b", True, 0o700), ("tmp", True, 0o1777)]
