"""Bad state and bad input become reasons, never crashes (issues #11 and #13), unit tier.

- The audit log, the kit lock and run records are read back defensively: invalid UTF-8, wrong
  types, deep nesting and junk bytes are skipped and counted (the append-only audit log) or
  refused as ``state_corrupt`` (the lock: read as empty it would forget approved permissions).
- Writes to a state home that is full, read-only or not a directory are ``state_unwritable``
  with a fix naming the cause; the error edge translates any such OSError left unwrapped.
- Fuzzed command-line arguments (NUL, lone surrogates, 5000-character paths, broken URLs) and
  output streams that cannot encode ✓ end in a reason or in readable output, never exit 70.
- ``SBX_CONFIG`` naming a missing file is ``invalid_config``; the default location may be absent.
"""

from __future__ import annotations

import errno
import io
import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sbx.base import paths
from sbx.base.config import load_config
from sbx.base.errors import ConfigError, SbxError
from sbx.base.reasons import ExitStatus, Reason
from sbx.base.render import Renderer
from sbx.domain.kits.lock import (
    Lock,
    LockEntry,
    descriptor_path,
    load_locked_kit,
    lock_path,
    read_lock,
    write_lock,
)
from sbx.domain.kits.surface import Surface
from sbx.seams import audit, state
from sbx.usecases.explainrun import explain_run
from sbx.usecases.gc import listing as gc_listing
from tests.conftest import run_cli

FUZZ = settings(max_examples=80, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])
RUN = "0123456789abcdef0123456789abcdef"
DEEP = b"[" * 200_000 + b"]" * 200_000
JUNK_LINES = [
    b"\xff\xfe\x00garbage", DEEP, b'"just a string"', b"[1, 2]", b"{}",
    b'{"timestamp": 5, "event_type": "sandbox_started", "run_id": null, "severity": "info", '
    b'"details": {}}',
    b'{"timestamp": "t", "event_type": "sandbox_started", "run_id": 7, "severity": "info", '
    b'"details": {}}',
    b'{"timestamp": "t", "event_type": "sandbox_started", "run_id": "r", "severity": "info", '
    b'"details": []}',
    b'{"timestamp": "t", "event_type": ["x"], "run_id": "r", "severity": "info", '
    b'"details": {}}',
    b"{" * 5000, b'{"a": ' * 3000 + b"1" + b"}" * 3000,
]


def event(kind: str, run_id: str = RUN, **details: Any) -> bytes:
    return json.dumps({"timestamp": "2026-12-01T00:00:00.000+00:00", "event_type": kind,
                       "run_id": run_id, "severity": "warning", "details": details}).encode()


def write_log(home: Path, lines: list[bytes]) -> None:
    home.mkdir(parents=True, exist_ok=True)
    audit.audit_path(home).write_bytes(b"\n".join(lines) + b"\n")


# -- the audit log ----------------------------------------------------------------------------


def test_damaged_audit_lines_are_skipped_and_counted(tmp_path: Path) -> None:
    good = [event(audit.SANDBOX_STARTED, workload="./k", kits=["./k"]),
            event(audit.SANDBOX_UNAVAILABLE, reason="mount_blocked", workload="./k")]
    write_log(tmp_path, [good[0], *JUNK_LINES, good[1]])
    log = audit.read_log(tmp_path)
    assert [e["event_type"] for e in log.events] == [audit.SANDBOX_STARTED,
                                                     audit.SANDBOX_UNAVAILABLE]
    assert log.skipped == len(JUNK_LINES)
    result = explain_run(tmp_path, None)
    assert result.run_id == RUN and result.skipped_lines == len(JUNK_LINES)
    assert [r.code for r in result.refusals] == ["mount_blocked"]


def test_wrongly_typed_details_never_break_explain(tmp_path: Path) -> None:
    write_log(tmp_path, [
        event(audit.SANDBOX_STARTED, workload=["x"], kits=5),
        event(audit.EGRESS_DENIED, host={"a": [1]}, port=[443], method=7, path={"p": 1},
              phase=None, rule=[], code=None, scheme=3),
        event(audit.SANDBOX_UNAVAILABLE, reason=["not", "a", "code"], workload=None)])
    result = explain_run(tmp_path, RUN)
    assert len(result.refusals) == 2


def test_an_over_long_audit_line_is_skipped_without_reading_it_whole(tmp_path: Path) -> None:
    write_log(tmp_path, [b"x" * (3 * audit.MAX_LINE_BYTES), event(audit.SANDBOX_STARTED)])
    log = audit.read_log(tmp_path)
    assert log.skipped == 1 and len(log.events) == 1


@pytest.mark.slow
@FUZZ
@given(st.lists(st.one_of(st.binary(max_size=200), st.sampled_from(JUNK_LINES),
                          st.builds(lambda v: json.dumps(v).encode(),
                                    st.recursive(st.none() | st.integers() | st.text(max_size=8),
                                                 lambda i: st.lists(i, max_size=3)
                                                 | st.dictionaries(st.text(max_size=8), i,
                                                                   max_size=3)))),
                max_size=12))
def test_any_audit_content_reads_and_explains(tmp_path: Path, lines: list[bytes]) -> None:
    home = tmp_path / "fuzz-state"
    write_log(home, [line.replace(b"\n", b" ") for line in lines])
    log = audit.read_log(home)
    for item in log.events:
        assert isinstance(item["details"], dict) and isinstance(item["event_type"], str)
    explain_run(home, None)


def test_an_append_that_fails_names_the_audit_file(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    def full(_fd: int, _data: bytes) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(OSError) as caught:
        audit.record(tmp_path, audit.SANDBOX_STARTED, run_id=RUN, severity="info", details={})
    assert caught.value.filename == str(audit.audit_path(tmp_path))
    translated = state.from_os_error(caught.value, tmp_path)
    assert translated is not None and translated.reason is Reason.STATE_UNWRITABLE


# -- the kit lock and stored descriptors ---------------------------------------------------------


@pytest.mark.parametrize("content", [
    b"\x00\xff\xfe binary junk \x80\x81", DEEP, b"\xef\xbb\xbf{}", b'{"version": 1, "kits": 5}',
    b'{"version": 1, "kits": [[[]]]}', b"",
], ids=["binary", "deep", "bom", "kits-int", "kits-nested", "empty"])
def test_a_damaged_lock_is_state_corrupt_never_empty(tmp_path: Path, content: bytes) -> None:
    path = lock_path(tmp_path)
    path.write_bytes(content)
    with pytest.raises(SbxError) as caught:
        read_lock(path)
    assert caught.value.reason is Reason.STATE_CORRUPT
    assert str(path) in caught.value.message and caught.value.hint


def test_a_huge_lock_is_refused_without_reading_it_whole(tmp_path: Path) -> None:
    path = lock_path(tmp_path)
    with path.open("wb") as handle:
        handle.truncate(4 * 1024**3)
    with pytest.raises(SbxError) as caught:
        read_lock(path)
    assert caught.value.reason is Reason.STATE_CORRUPT


@pytest.mark.slow
@FUZZ
@given(st.binary(max_size=300))
def test_any_lock_bytes_read_or_refuse(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "fuzz.lock.json"
    path.write_bytes(content)
    try:
        assert isinstance(read_lock(path), Lock)
    except SbxError as error:
        assert error.reason is Reason.STATE_CORRUPT


def test_a_damaged_stored_descriptor_is_state_corrupt(tmp_path: Path) -> None:
    digest = "sha256:" + "a" * 64
    write_lock(lock_path(tmp_path), Lock((LockEntry("127.0.0.1:5000/k:1", digest,
                                                    f"127.0.0.1:5000/k@{digest}", "workload",
                                                    Surface()),)))
    stored = descriptor_path(tmp_path, digest)
    stored.parent.mkdir(parents=True, exist_ok=True)
    stored.write_bytes(b"\xff\xfe\xfd")
    with pytest.raises(SbxError) as caught:
        load_locked_kit("127.0.0.1:5000/k:1", tmp_path)
    assert caught.value.reason is Reason.STATE_CORRUPT


def test_a_lock_write_on_a_full_disk_is_state_unwritable(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    def full(_fd: int, _data: Any) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(SbxError) as caught:
        write_lock(lock_path(tmp_path), Lock())
    assert caught.value.reason is Reason.STATE_UNWRITABLE
    assert "No space left on device" in caught.value.message
    assert "full" in (caught.value.hint or "")
    assert not list(tmp_path.iterdir())  # no temporary file left behind


# -- run records (gc reads them; a damaged one is unreadable, never a crash) ----------------------


@pytest.mark.parametrize("content", [DEEP[:60_000], b"\xff\xfe", b"[]", b'{"pid": "x"}'])
def test_a_damaged_run_record_reads_as_unreadable(tmp_path: Path, content: bytes) -> None:
    record = tmp_path / "run.json"
    record.write_bytes(content)
    found = gc_listing._read_record(record)
    assert found is None or (found.pid is None and found.deadline is None)


# -- the state home itself ------------------------------------------------------------------------


def test_a_state_home_that_is_a_file_is_refused(tmp_path: Path) -> None:
    home = tmp_path / "home-file"
    home.write_text("not a directory", encoding="utf-8")
    with pytest.raises(SbxError) as caught:
        state.check_home(home, "SBX_HOME")
    assert caught.value.reason is Reason.STATE_UNWRITABLE
    assert "SBX_HOME" in caught.value.message and "not a directory" in caught.value.message
    with pytest.raises(SbxError) as below:
        state.check_home(home / "sub", "SBX_HOME")
    assert below.value.reason is Reason.STATE_UNWRITABLE


def test_a_missing_state_home_is_fine_and_a_nul_is_refused(tmp_path: Path) -> None:
    state.check_home(tmp_path / "not-yet", "SBX_HOME")
    with pytest.raises(SbxError) as caught:
        state.check_home(Path("/tmp/a\x00b"), "SBX_HOME")
    assert caught.value.reason is Reason.STATE_UNWRITABLE


@pytest.mark.parametrize(("code", "words"), [
    (errno.ENOSPC, "full"), (errno.EROFS, "read-only"), (errno.EACCES, "may not write"),
    (errno.ENOTDIR, "is a file"), (errno.EIO, "writable directory"),
])
def test_each_cause_gets_its_own_fix(tmp_path: Path, code: int, words: str) -> None:
    error = state.unwritable(tmp_path / "x", OSError(code, os.strerror(code), "x"),
                             action="write", home=tmp_path)
    assert error.reason is Reason.STATE_UNWRITABLE
    assert os.strerror(code) in error.message and words in (error.hint or "")


def test_the_edge_translates_only_errors_about_the_state_home(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "state"
    inside = OSError(errno.EROFS, "Read-only file system", str(home / "runs" / "x"))
    outside = OSError(errno.EROFS, "Read-only file system", "/elsewhere/file")
    assert state.from_os_error(inside, home) is not None
    assert state.from_os_error(outside, home) is None
    nameless = OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(state, "_disk_full", lambda _home: False)
    assert state.from_os_error(nameless, home) is None  # some other disk: a bug report
    monkeypatch.setattr(state, "_disk_full", lambda _home: True)
    translated = state.from_os_error(nameless, home)
    assert translated is not None and translated.reason is Reason.STATE_UNWRITABLE


def test_the_state_home_names_the_variable_that_chose_it() -> None:
    assert paths.state_home_source({"SBX_HOME": "/s", "HOME": "/h"}) == "SBX_HOME"
    assert paths.state_home_source({"XDG_STATE_HOME": "/x", "HOME": "/h"}) == "XDG_STATE_HOME"
    assert paths.state_home_source({"HOME": "/h"}) == "HOME"


# -- SBX_CONFIG -----------------------------------------------------------------------------------


def test_an_explicit_config_that_does_not_exist_is_invalid_config(tmp_path: Path) -> None:
    missing = tmp_path / "typo.toml"
    with pytest.raises(ConfigError) as caught:
        load_config({"SBX_CONFIG": str(missing), "HOME": str(tmp_path)})
    assert caught.value.reason is Reason.INVALID_CONFIG
    assert "SBX_CONFIG" in caught.value.message and str(missing) in caught.value.message
    assert "Create" in (caught.value.hint or "")


def test_the_default_config_location_may_be_absent(tmp_path: Path) -> None:
    config = load_config({"XDG_CONFIG_HOME": str(tmp_path), "HOME": str(tmp_path)})
    assert config.exists is False
    assert config.mounts.allowed_roots.value == ()


def test_an_explicit_config_keeps_its_allowed_roots(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(f'[mounts]\nallowed_roots = ["{tmp_path}"]\n', encoding="utf-8")
    assert load_config({"SBX_CONFIG": str(path)}).mounts.allowed_roots.value == (str(tmp_path),)


@pytest.mark.parametrize("value", ["/tmp/a\x00b", "x" * 5000, "/"], ids=["nul", "long", "dir"])
def test_an_unusable_config_path_is_invalid_config(value: str) -> None:
    with pytest.raises(ConfigError):
        load_config({"SBX_CONFIG": value})


# -- output that cannot be encoded ----------------------------------------------------------------


def test_an_ascii_stream_gets_readable_fallbacks_not_a_crash_or_silence() -> None:
    raw_out, raw_err = io.BytesIO(), io.BytesIO()
    out = io.TextIOWrapper(raw_out, encoding="ascii", errors="strict", write_through=True)
    err = io.TextIOWrapper(raw_err, encoding="ascii", errors="strict", write_through=True)
    renderer = Renderer(out, err, as_json=False, env={"NO_COLOR": "1"})
    renderer.message("\u2713  config \u2014 valid \u2026 caf\u00e9 \udcff")
    renderer.error(SbxError(Reason.INVALID_KIT, "k\u00e9t \u2717"), "run")
    renderer.reason_list(list(Reason))
    text = raw_out.getvalue().decode("ascii")
    assert text.startswith("+  config - valid ... caf\\xe9 \\udcff\n")
    assert "state_corrupt" in text
    assert "k\\xe9t x (invalid_kit)" in raw_err.getvalue().decode("ascii")


# -- fuzzed command lines, in process -------------------------------------------------------------


ODD = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["a" * 5000, "x/" * 3000, "\x00", "a\x00b", "\udcff\udcfe", "http://[::1",
                     "http://[", "https://a:0/", "ht\udcfftp://x", "..", "/", "-", "--", "\n",
                     "0" * 32, "f" * 32]),
    st.builds(lambda c, n: c * n, st.sampled_from(["a", "/", ".", "\udcff", "é", "%"]),
              st.integers(200, 6000)))


@pytest.mark.slow
@FUZZ
@given(st.sampled_from(["run", "explain", "explain-kit", "explain-request"]), ODD, ODD)
def test_fuzzed_arguments_end_in_a_reason_never_a_crash(tmp_path: Path, form: str, first: str,
                                                        second: str) -> None:
    kit = tmp_path / "kit"
    if not kit.exists():
        kit.mkdir()
        (kit / "kit.yaml").write_text('# syntax=docker/sandbox-kit:3\nschemaVersion: "3"\n'
                                      "kind: workload\n", encoding="utf-8")
    argv = {"run": ["run", first, "--kit", second],
            "explain": ["explain", first],
            "explain-kit": ["explain", str(kit), "--kit", first],
            "explain-request": ["explain", str(kit), "GET", first]}[form]
    env = {**os.environ, "SBX_HOME": str(tmp_path / "state"), "NO_COLOR": "1",
           "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"}
    result = run_cli(argv, env=env, cwd=tmp_path)
    assert result.exit_code != ExitStatus.INTERNAL, result.stderr
    assert "Traceback" not in result.stderr and "internal_error" not in result.stderr


def test_explain_last_on_a_damaged_log_in_process(tmp_path: Path) -> None:
    home = tmp_path / "state"
    write_log(home, [*JUNK_LINES, event(audit.SANDBOX_UNAVAILABLE, reason="invalid_kit")])
    result = run_cli(["explain", "--last"], env={**os.environ, "SBX_HOME": str(home)})
    assert result.exit_code == 0, result.stderr
    assert f"skipped {len(JUNK_LINES)} line(s)" in result.stderr
    assert "invalid_kit" in result.stdout
