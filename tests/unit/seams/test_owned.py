"""State sbx trusts must be its own (sbx.seams.owned): the home, every directory on the way to
it and every file read back from it, checked for owner, mode, type and links, against real
files; refused with ``state_unsafe`` (naming the path and the fix), never read as a miss."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.kits import lock as kit_lock
from sbx.domain.kits.descriptor import parse_descriptor_file
from sbx.domain.sandbox import runrecord
from sbx.seams import audit, owned
from sbx.seams.locks import name_lock
from sbx.usecases import runstore
from sbx.usecases.sandboxstore import SandboxStore

OTHER_UID = 4321
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another uid needs root")

def _open_up(path: Path, mode: int) -> None:
    """Give a path the loose mode an attack (or a careless user) would leave it with."""
    os.chmod(path, mode)  # the point of these tests



def _refused(call: Callable[[], object], text: str) -> SbxError:
    with pytest.raises(SbxError) as error:
        call()
    assert error.value.reason is Reason.STATE_UNSAFE, error.value
    assert text in error.value.message, error.value.message
    return error.value


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "state"
    path.mkdir(mode=0o700)
    return path


# --- directories --------------------------------------------------------------------------


def test_a_private_tree_passes(home: Path) -> None:
    (home / "a" / "b").mkdir(parents=True)
    owned.check_tree(home / "a" / "b")
    owned.check_tree(home / "a" / "b" / "not-yet")  # missing parts are whoever creates them's


@pytest.mark.parametrize(("mode", "who"), [(0o770, "its group"), (0o707, "other users"),
                                           (0o777, "other users")])
def test_a_directory_others_may_write_is_refused(home: Path, mode: int, who: str) -> None:
    inner = home / "cache"
    inner.mkdir()
    os.chmod(inner, mode)
    error = _refused(lambda: owned.check_tree(inner / "plans" / "x.json"), who)
    assert str(inner) in error.message
    assert error.hint == f"`chmod go-w {inner}`"


def test_a_sticky_directory_is_like_tmp(home: Path) -> None:
    shared = home / "shared"
    shared.mkdir()
    _open_up(shared, 0o1777)
    (shared / "mine").mkdir()
    owned.check_tree(shared / "mine")


def test_a_symlink_is_judged_where_it_lives_and_where_it_leads(home: Path,
                                                                tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.mkdir()
    (home / "link").symlink_to(target)
    owned.check_tree(home / "link")
    _open_up(target, 0o777)
    _refused(lambda: owned.check_tree(home / "link" / "file"), str(target))
    _open_up(target, 0o755)
    _open_up(home, 0o777)  # the link itself could be replaced
    _refused(lambda: owned.check_tree(home / "link" / "file"), str(home))


def test_a_dot_dot_after_a_symlink_goes_where_the_kernel_goes(home: Path,
                                                              tmp_path: Path) -> None:
    unsafe = tmp_path / "unsafe"
    (unsafe / "deep").mkdir(parents=True)
    _open_up(unsafe, 0o777)
    (home / "link").symlink_to(unsafe / "deep")
    # home/link/.. is `unsafe`, not `home`: a lexical normalisation would miss it.
    _refused(lambda: owned.check_tree(home / "link" / ".." / "file"), str(unsafe))


def test_a_link_loop_is_refused(home: Path) -> None:
    (home / "loop").symlink_to(home / "loop")
    _refused(lambda: owned.check_tree(home / "loop" / "file"), "cannot be looked up")


@as_root
def test_a_directory_of_another_user_is_refused(home: Path) -> None:
    theirs = home / "theirs"
    theirs.mkdir()
    os.chown(theirs, OTHER_UID, OTHER_UID)
    error = _refused(lambda: owned.check_tree(theirs / "x"), f"owned by uid {OTHER_UID}")
    assert error.hint is not None and f"chown {os.geteuid()} {theirs}" in error.hint


@as_root
def test_a_home_of_another_user_is_refused(home: Path) -> None:
    os.chown(home, OTHER_UID, OTHER_UID)
    error = _refused(lambda: owned.check_home(home, "SBX_HOME"), "the state home (SBX_HOME)")
    assert "Point SBX_HOME at a directory you own" in (error.hint or "")


def test_a_home_through_a_link_to_a_private_directory_passes(home: Path,
                                                             tmp_path: Path) -> None:
    (tmp_path / "alias").symlink_to(home)
    owned.check_home(tmp_path / "alias", "SBX_HOME")
    owned.check_home(tmp_path / "missing", "SBX_HOME")


def test_ensure_directory_creates_private_directories(home: Path) -> None:
    made = owned.ensure_directory(home / "a" / "b" / "c")
    for path in (home / "a", home / "a" / "b", made):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700


def test_ensure_directory_refuses_a_file_in_the_way(home: Path) -> None:
    (home / "file").write_text("", encoding="utf-8")
    _refused(lambda: owned.ensure_directory(home / "file"), "not a directory")


@pytest.mark.slow
def test_the_umask_never_lets_sbx_make_group_writable_files() -> None:
    import subprocess
    import sys

    code = ("import os, sys\nos.umask(0o002)\nsys.argv = ['sbx', '--version']\n"
            "from sbx.__main__ import main\ntry:\n    main()\nexcept SystemExit:\n"
            "    pass\nprint(oct(os.umask(0)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.strip().splitlines()[-1] == "0o22"


# --- files ----------------------------------------------------------------------------------


def test_a_missing_file_is_none_and_a_private_one_is_read(home: Path) -> None:
    assert owned.read_bytes(home / "absent", max_bytes=10) is None
    owned.write_file(home / "f", b"data")
    assert owned.read_bytes(home / "f", max_bytes=10) == b"data"
    assert stat.S_IMODE((home / "f").stat().st_mode) == 0o600


@pytest.mark.parametrize(("make", "text"), [
    (lambda p, t: p.symlink_to(t), "symlink"),
    (lambda p, t: os.link(t, p), "hard links"),
    (lambda p, t: os.mkfifo(p, 0o600), "not a regular file"),
    (lambda p, t: p.mkdir(), "not a regular file"),
])
def test_a_file_that_may_not_be_what_sbx_wrote_is_refused(home: Path, tmp_path: Path,
                                                          make: Callable[[Path, Path], None],
                                                          text: str) -> None:
    target = tmp_path / "target"
    target.write_bytes(b"planted")
    os.chmod(target, 0o600)
    path = home / "entry.json"
    make(path, target)
    done = threading.Event()

    def read() -> None:
        try:
            _refused(lambda: owned.read_bytes(path, max_bytes=100), text)
        finally:
            done.set()

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    assert done.wait(10), "reading the entry blocked"
    thread.join()


@pytest.mark.parametrize("mode", [0o620, 0o602, 0o666])
def test_a_file_others_may_write_is_refused(home: Path, mode: int) -> None:
    owned.write_file(home / "f", b"x")
    os.chmod(home / "f", mode)
    error = _refused(lambda: owned.read_bytes(home / "f", max_bytes=10), f"{mode:04o}")
    assert "chmod go-w" in (error.hint or "")


def test_a_file_larger_than_asked_for_is_refused(home: Path) -> None:
    owned.write_file(home / "f", b"x" * 11)
    _refused(lambda: owned.read_bytes(home / "f", max_bytes=10), "larger than 10 bytes")



def test_a_file_replaced_while_being_opened_is_read_again(home: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """An atomic writer renaming a new file over the one just opened leaves it with no name:
    the reader opens the name again and reads what is there now, never refuses it."""
    owned.write_file(home / "f", b"old")
    real_open = os.open
    replaced: list[int] = []

    def open_then_replace(path: object, flags: int, mode: int = 0o777) -> int:
        fd = real_open(path, flags, mode)  # type: ignore[arg-type]
        if not replaced:
            replaced.append(fd)
            owned.write_file(home / "f", b"new")
        return fd

    monkeypatch.setattr(os, "open", open_then_replace)
    assert owned.read_bytes(home / "f", max_bytes=10) == b"new"
    assert replaced


def test_a_file_replaced_on_every_open_is_refused(home: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    owned.write_file(home / "f", b"0")
    real_open = os.open

    def open_then_replace(path: object, flags: int, mode: int = 0o777) -> int:
        fd = real_open(path, flags, mode)  # type: ignore[arg-type]
        if Path(str(path)) == home / "f":
            os.rename(_fresh(home), home / "f")
        return fd

    def _fresh(directory: Path) -> Path:
        fresh = directory / "fresh"
        fd = real_open(fresh, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.close(fd)
        return fresh

    monkeypatch.setattr(os, "open", open_then_replace)
    _refused(lambda: owned.read_bytes(home / "f", max_bytes=10), "replaced")

@as_root
def test_a_file_of_another_user_is_refused(home: Path) -> None:
    owned.write_file(home / "f", b"x")
    os.chown(home / "f", OTHER_UID, OTHER_UID)
    _refused(lambda: owned.read_bytes(home / "f", max_bytes=10), f"owned by uid {OTHER_UID}")


def test_a_damaged_cache_entry_is_a_miss_but_an_unsafe_one_a_refusal(home: Path) -> None:
    entry = home / "cache" / "x.json"
    assert owned.write_cache(entry, {"a": 1})
    assert owned.read_cache(entry) == {"a": 1}
    entry.write_bytes(b"{not json")
    assert owned.read_cache(entry) is None
    _open_up(entry, 0o666)
    _refused(lambda: owned.read_cache(entry), "0666")


def test_a_lock_file_that_is_a_symlink_is_refused(home: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_bytes(b"")
    (home / "x.lock").symlink_to(elsewhere)
    _refused(lambda: owned.open_lock(home / "x.lock"), "symlink")
    fd = owned.open_lock(home / "y.lock")
    os.close(fd)


# --- the readers that use it ----------------------------------------------------------------


def _plant(path: Path, data: bytes) -> None:
    """A file someone else wrote into a directory they could write (the dir is then unsafe,
    so the file is given a private mode and only its owner betrays it)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.write_bytes(data)
    os.chmod(path, 0o600)
    os.chown(path, OTHER_UID, OTHER_UID)


@as_root
def test_a_planted_descriptor_verdict_is_refused(home: Path, tmp_path: Path) -> None:
    kit = tmp_path / "kit.yaml"
    kit.write_text("# syntax=docker/sandbox-kit:3\nkind: workload\nname: k\n", encoding="utf-8")
    cache = home / "cache" / "descriptors"
    with contextlib.suppress(SbxError):  # valid or not: its verdict is what is planted
        parse_descriptor_file(kit, cache_dir=cache)
    for entry in cache.glob("*.json"):
        entry.unlink()
    import hashlib

    from sbx.domain.kits.schema import validation_fingerprint

    key = hashlib.sha256(f"sbx-descriptor-v3\0{validation_fingerprint()}\0"
                         f"{kit.read_text(encoding='utf-8')}".encode()).hexdigest()
    _plant(cache / f"{key}.json", json.dumps({"kind": "workload", "planted": True}).encode())
    _refused(lambda: parse_descriptor_file(kit, cache_dir=cache), f"owned by uid {OTHER_UID}")


@as_root
def test_a_planted_kit_lock_and_run_and_sandbox_records_are_refused(home: Path) -> None:
    _plant(kit_lock.lock_path(home), json.dumps({"version": 1, "kits": []}).encode())
    _refused(lambda: kit_lock.read_lock(kit_lock.lock_path(home)), f"owned by uid {OTHER_UID}")
    store = SandboxStore(home)
    _plant(store.directory("dev") / "sandbox.json", b'{"version": 1}')
    _refused(lambda: store.load("dev"), f"owned by uid {OTHER_UID}")
    run = home / "runs" / ("a" * 32)
    _plant(run / runrecord.RUN_RECORD, json.dumps({"container_id": "c" * 64}).encode())
    assert runstore.read(run) is None  # gc and the keeper never trust it
    assert runstore.container_id(run) is None


@as_root
def test_a_planted_audit_log_is_not_reported(home: Path) -> None:
    _plant(audit.audit_path(home), json.dumps({
        "timestamp": "2026-01-01T00:00:00Z", "event_type": "egress_denied", "run_id": "x",
        "severity": "warning", "details": {}}).encode() + b"\n")
    _refused(lambda: audit.read_log(home), f"owned by uid {OTHER_UID}")


def test_a_lock_in_a_directory_others_may_write_is_refused(home: Path) -> None:
    locks = home / "locks"
    locks.mkdir()
    _open_up(locks, 0o777)
    with pytest.raises(SbxError) as error, name_lock(locks, "sbx-kit/k:1"):
        pass
    assert error.value.reason is Reason.STATE_UNSAFE


def test_the_context_refuses_a_home_others_may_write(tmp_path: Path) -> None:
    from sbx.usecases.context import AppContext

    home = tmp_path / "state"
    home.mkdir()
    _open_up(home, 0o777)
    ctx = AppContext(env={"SBX_HOME": str(home), "HOME": str(tmp_path)}, cwd=tmp_path,
                     renderer=None)  # type: ignore[arg-type]
    error = _refused(lambda: ctx.state_home, "0777")
    assert error.hint == f"`chmod go-w {home}`"
