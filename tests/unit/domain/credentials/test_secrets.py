"""The secret store: round trip, private files, refusals, masking, and no value in the audit log."""

from __future__ import annotations

import getpass
import io
import os
import stat
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.credentials.secrets import SecretStore
from sbx.domain.credentials.secretvalues import (
    MAX_VALUE_BYTES,
    mask,
    normalize_value,
    read_value,
    validate_service,
)
from sbx.seams import audit

TOKEN = "gho_GCaw4oSECRETVALUEabcdef43qy"  # noqa: S105 -- a made-up test value


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def store(home: Path) -> SecretStore:
    return SecretStore(home)


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def _refused(error: pytest.ExceptionInfo[SbxError], fragment: str) -> None:
    assert error.value.reason is Reason.SECRET_STORE_UNSAFE
    assert fragment in error.value.message


# --- round trip -------------------------------------------------------------------------------


@pytest.mark.slow
def test_round_trip_list_and_remove(store: SecretStore) -> None:
    assert store.get("github") is None
    assert store.services() == []
    info = store.set("github", TOKEN)
    assert (info.service, info.length, info.masked) == ("github", len(TOKEN), mask(TOKEN))
    assert store.get("github") == TOKEN
    store.set("openai-api", "sk-1234567")
    assert [i.service for i in store.services()] == ["github", "openai-api"]
    store.set("github", "replaced-value")
    assert store.get("github") == "replaced-value"
    assert store.remove("github") is True
    assert store.remove("github") is False
    assert store.get("github") is None
    assert [i.service for i in store.services()] == ["openai-api"]


@pytest.mark.slow
def test_info_as_dict_never_holds_the_value(store: SecretStore) -> None:
    data = store.set("github", TOKEN).as_dict()
    assert set(data) == {"service", "source", "reference", "masked", "length", "updated"}
    assert (data["source"], data["reference"]) == ("file", None)
    assert TOKEN not in repr(data)
    assert data["updated"].endswith("+00:00")


@pytest.mark.slow
@pytest.mark.parametrize(("raw", "stored"), [
    ("tok\n", "tok"), ("tok\r\n", "tok"), ("tok", "tok"), ("a b\tc", "a b\tc"),
    (" padded ", " padded "), ("ünïcode", "ünïcode"),
])
def test_one_trailing_newline_is_stripped(store: SecretStore, raw: str, stored: str) -> None:
    store.set("svc", raw)
    assert store.get("svc") == stored


@pytest.mark.slow
@pytest.mark.parametrize("bad", ["", "\n", "\r\n", "a\x00b", "two\nlines", "s3cr3t\n\n", "cr\rlf",
                                 "bell\x07", "del\x7f", "x" * (MAX_VALUE_BYTES + 1)])
def test_unusable_values_are_refused_without_echoing_them(store: SecretStore, bad: str) -> None:
    with pytest.raises(SbxError) as error:
        store.set("svc", bad)
    assert error.value.reason is Reason.INVALID_ARGUMENT
    if bad.strip():
        assert bad.strip() not in str(error.value) + (error.value.hint or "")
    assert store.get("svc") is None


@pytest.mark.slow
def test_the_size_limit_is_in_bytes(store: SecretStore) -> None:
    store.set("svc", "x" * MAX_VALUE_BYTES + "\n")
    assert store.get("svc") == "x" * MAX_VALUE_BYTES
    with pytest.raises(SbxError):
        store.set("svc", "é" * (MAX_VALUE_BYTES // 2 + 1))


@pytest.mark.slow
def test_read_value_from_a_byte_stream() -> None:
    assert read_value(io.BytesIO(b"token\n")) == "token"
    for bad in (b"", b"\xff\xfe", b"x" * (MAX_VALUE_BYTES + 3)):
        with pytest.raises(SbxError) as error:
            read_value(io.BytesIO(bad))
        assert error.value.reason is Reason.INVALID_ARGUMENT
    assert read_value(io.BytesIO(b"x" * MAX_VALUE_BYTES + b"\r\n")) == "x" * MAX_VALUE_BYTES


def test_normalize_is_idempotent() -> None:
    assert normalize_value(normalize_value("tok\n")) == "tok"


# --- service names ----------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("good", ["a", "0", "github", "openai-api", "a" * 64, "x-1-y"])
def test_valid_service_names(good: str) -> None:
    assert validate_service(good) == good


@pytest.mark.slow
@pytest.mark.parametrize("bad", ["", "GitHub", "-a", "a-", "a_b", "a.b", "a" * 65, "../x",
                                 "a/b", ".tmp-x", " a", "é"])
def test_invalid_service_names(store: SecretStore, bad: str) -> None:
    for call in (lambda: store.set(bad, "v"), lambda: store.get(bad),
                 lambda: store.remove(bad)):
        with pytest.raises(SbxError) as error:
            call()
        assert error.value.reason is Reason.INVALID_ARGUMENT
        assert error.value.exit_status == 2


# --- files on disk ----------------------------------------------------------------------------


@pytest.mark.slow
def test_files_are_private(store: SecretStore, home: Path) -> None:
    old_umask = os.umask(0o022)
    try:
        store.set("github", TOKEN)
    finally:
        os.umask(old_umask)
    assert _mode(home / "secrets") == 0o700
    assert _mode(home / "secrets" / "github") == 0o600
    assert (home / "secrets" / "github").read_text(encoding="utf-8") == TOKEN


@pytest.mark.slow
def test_a_loose_directory_is_tightened(store: SecretStore, home: Path) -> None:
    (home / "secrets").mkdir(parents=True, mode=0o755)
    os.chmod(home / "secrets", 0o755)  # noqa: S103 -- the loose mode under test
    store.set("github", TOKEN)
    assert _mode(home / "secrets") == 0o700


@pytest.mark.slow
def test_writes_leave_no_temporary_files(store: SecretStore, home: Path) -> None:
    for index in range(5):
        store.set("github", f"{TOKEN}{index}")
    assert os.listdir(home / "secrets") == ["github"]


@pytest.mark.slow
def test_a_failed_write_leaves_no_temporary_file(store: SecretStore, home: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    store.set("github", TOKEN)

    def broken_fsync(_fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(SbxError) as error:
        store.set("github", "new-value-never-written")
    _refused(error, "cannot write")
    monkeypatch.undo()
    assert os.listdir(home / "secrets") == ["github"]
    assert store.get("github") == TOKEN


@pytest.mark.slow
def test_concurrent_writers_never_tear_a_value(store: SecretStore) -> None:
    values = [f"value-{n}-" + "x" * 4000 for n in range(8)]
    threads = [threading.Thread(target=store.set, args=("svc", value)) for value in values]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert store.get("svc") in values
    assert os.listdir(store.directory) == ["svc"]


@pytest.mark.slow
def test_temporary_and_foreign_files_are_not_listed(store: SecretStore) -> None:
    store.set("github", TOKEN)
    (store.directory / ".tmp-github-0123").write_bytes(b"half")
    (store.directory / "NOT_A_SERVICE").write_bytes(b"x")
    assert [i.service for i in store.services()] == ["github"]


@pytest.mark.slow
def test_a_symlink_is_refused(store: SecretStore, tmp_path: Path) -> None:
    store.set("github", TOKEN)
    target = tmp_path / "elsewhere"
    target.write_text("planted", encoding="utf-8")
    os.chmod(target, 0o600)
    link = store.directory / "planted"
    link.symlink_to(target)
    with pytest.raises(SbxError) as error:
        store.get("planted")
    _refused(error, "symlink")
    with pytest.raises(SbxError):
        store.services()
    assert error.value.hint and "rm" in error.value.hint


@pytest.mark.slow
def test_a_symlinked_directory_is_refused(home: Path, tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    home.mkdir()
    (home / "secrets").symlink_to(real)
    with pytest.raises(SbxError) as error:
        SecretStore(home).set("github", TOKEN)
    _refused(error, "symlink")
    assert list(real.iterdir()) == []


@pytest.mark.slow
@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660, 0o602])
def test_a_file_with_group_or_other_bits_is_refused(store: SecretStore, mode: int) -> None:
    store.set("github", TOKEN)
    os.chmod(store.directory / "github", mode)
    with pytest.raises(SbxError) as error:
        store.get("github")
    _refused(error, f"{mode:04o}")
    assert error.value.hint and "chmod 600" in error.value.hint
    assert TOKEN not in str(error.value)
    with pytest.raises(SbxError):
        store.services()


def test_a_non_regular_file_is_refused(store: SecretStore) -> None:
    store.set("github", TOKEN)
    os.mkfifo(store.directory / "fifo", 0o600)
    with pytest.raises(SbxError) as error:
        store.get("fifo")  # must not block on the FIFO
    _refused(error, "not a regular file")


@pytest.mark.slow
def test_a_file_not_owned_by_this_user_is_refused(store: SecretStore,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    store.set("github", TOKEN)
    monkeypatch.setattr(os, "geteuid", lambda: os.stat(store.directory).st_uid + 1)
    with pytest.raises(SbxError) as error:
        store.get("github")
    _refused(error, "owned by uid")


# --- audit ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_set_and_remove_are_audited_by_name_only(store: SecretStore, home: Path) -> None:
    store.set("github", TOKEN)
    store.set("github", TOKEN + "2")
    store.remove("github")
    store.remove("github")  # nothing removed, nothing audited
    events = list(audit.read_events(home))
    assert [(e["event_type"], e["details"]) for e in events] == [
        (audit.SECRET_SET, {"service": "github", "replaced": False, "source": "file"}),
        (audit.SECRET_SET, {"service": "github", "replaced": True, "source": "file"}),
        (audit.SECRET_REMOVED, {"service": "github"}),
    ]
    text = audit.audit_path(home).read_text(encoding="utf-8")
    assert TOKEN not in text and TOKEN[:10] not in text and mask(TOKEN) not in text


# --- masking ----------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(("value", "masked"), [
    ("a", "****"),
    ("abcdef", "****"),
    ("sk-short", "****"),  # 8: nothing of a short secret, not even its first characters
    ("abcdefghijklmnopqrs", "****"),  # 19
    ("abcdefghijklmnopqrst", "ab****"),  # 20: an eighth of it
    (TOKEN, "gho****"),  # 31
    ("sk-ant-api03-" + "x" * 95, "sk-ant****"),  # long: never more than 6
])
def test_masking_table(value: str, masked: str) -> None:
    assert mask(value) == masked


@pytest.mark.slow
@pytest.mark.parametrize("length", range(1, 200))
def test_a_mask_shows_at_most_an_eighth_and_six_characters(length: int) -> None:
    value = "".join(chr(ord("a") + i % 26) for i in range(length))
    shown = mask(value).removesuffix("****")
    assert value.startswith(shown)
    assert len(shown) <= min(6, length // 8)
    assert (shown == "") == (length < 20)


# --- the command on a terminal ----------------------------------------------------------------


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.slow
def test_set_prompts_without_echo_on_a_terminal(sbx_cli: Any, home: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    prompts: list[str] = []

    def fake_getpass(prompt: str, stream: Any = None) -> str:
        prompts.append(prompt)
        return TOKEN

    monkeypatch.setattr(sys, "stdin", _Terminal())
    monkeypatch.setattr(getpass, "getpass", fake_getpass)
    result = sbx_cli(["secret", "set", "github"])
    assert result.exit_code == 0, result.stderr
    assert prompts == ["Secret for github: "]
    assert SecretStore(home).get("github") == TOKEN
    assert TOKEN not in result.stdout + result.stderr


@pytest.mark.slow
def test_end_of_input_at_the_prompt_is_an_empty_value(sbx_cli: Any, home: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    def fake_getpass(prompt: str, stream: Any = None) -> str:
        raise EOFError

    monkeypatch.setattr(sys, "stdin", _Terminal())
    monkeypatch.setattr(getpass, "getpass", fake_getpass)
    result = sbx_cli(["secret", "set", "github"])
    assert result.exit_code == 2 and "empty" in result.stderr
    assert SecretStore(home).get("github") is None
