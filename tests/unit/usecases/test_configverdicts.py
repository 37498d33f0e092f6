"""The config's cached "valid" verdicts: what keys them, and that an entry that is damaged,
foreign or in an untrusted home is a miss (the full check runs), never a pass."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sbx.base.config import check, load_config
from sbx.base.config import load as load_module
from sbx.base.errors import ConfigError
from sbx.base.reasons import Reason
from sbx.usecases import configverdicts
from sbx.usecases.configverdicts import VERDICTS_DIR, ConfigVerdicts, verdict_key

VALID = b"[sandbox]\npids = 128\n"
INVALID = b"[sandbox]\npids = 0\n"


@pytest.fixture(autouse=True)
def _fresh_loads() -> Iterator[None]:
    # The in-process memo would answer before the verdict cache is asked.
    load_module._LOADED.clear()
    yield
    load_module._LOADED.clear()


class Checks:
    """Counts the schema passes the loader runs (the validator a verdict saves)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        def counted(*args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return check.file_problems(*args, **kwargs)

        monkeypatch.setattr("sbx.base.config.load.file_problems", counted)


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> Checks:
    return Checks(monkeypatch)


def _env(tmp_path: Path, raw: bytes) -> dict[str, str]:
    config = tmp_path / "config.toml"
    config.write_bytes(raw)
    home = tmp_path / "home"
    home.mkdir(mode=0o700, exist_ok=True)
    return {"SBX_CONFIG": str(config), "SBX_HOME": str(home)}


def _load(env: dict[str, str]) -> object:
    load_module._LOADED.clear()
    return load_config(env, verdicts=ConfigVerdicts(env))


def _entry(env: dict[str, str], raw: bytes) -> Path:
    return Path(env["SBX_HOME"]).joinpath(*VERDICTS_DIR, f"{verdict_key(raw)}.json")


# --- keys ---------------------------------------------------------------------------------------


def test_the_key_is_the_bytes_the_code_and_the_schema(monkeypatch: pytest.MonkeyPatch) -> None:
    key = verdict_key(VALID)
    assert key == verdict_key(VALID)
    assert key != verdict_key(VALID + b"\n")
    monkeypatch.setattr(configverdicts, "code_fingerprint", lambda: "an edited checkout")
    edited_code = verdict_key(VALID)
    assert edited_code != key
    monkeypatch.setattr(configverdicts, "_schema_bytes", lambda: b'{"edited": true}')
    assert verdict_key(VALID) not in (key, edited_code)


def test_the_key_parts_cannot_run_into_each_other(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(configverdicts, "code_fingerprint", lambda: "ab")
    joined = verdict_key(b"c")
    monkeypatch.setattr(configverdicts, "code_fingerprint", lambda: "a")
    assert verdict_key(b"bc") != joined


def test_the_schema_part_is_the_shipped_schema() -> None:
    from sbx.base.config.check import config_schema
    from sbx.base.config.defaults import SCHEMA_RESOURCE

    assert configverdicts.SCHEMA_FILE == SCHEMA_RESOURCE
    assert json.loads(configverdicts._schema_bytes()) == config_schema()


# --- a pass is kept, a failure never ------------------------------------------------------------


def test_a_valid_file_is_checked_once_then_known(tmp_path: Path, checks: Checks) -> None:
    env = _env(tmp_path, VALID)
    first = _load(env)
    assert checks.count == 1
    entry = _entry(env, VALID)
    assert json.loads(entry.read_text()) == {"config": "valid"}
    assert entry.stat().st_mode & 0o777 == 0o600
    assert _load(env) == first
    assert checks.count == 1


def test_an_edit_is_checked_again(tmp_path: Path, checks: Checks) -> None:
    env = _env(tmp_path, VALID)
    _load(env)
    Path(env["SBX_CONFIG"]).write_bytes(VALID + b"# edited\n")
    _load(env)
    assert checks.count == 2


def test_an_invalid_file_is_refused_every_time_and_never_recorded(tmp_path: Path,
                                                                  checks: Checks) -> None:
    env = _env(tmp_path, INVALID)
    with pytest.raises(ConfigError) as without:
        load_config(env)
    refusals = []
    for _ in range(2):
        with pytest.raises(ConfigError) as caught:
            _load(env)
        refusals.append(caught.value)
    assert checks.count == 3
    for refused in refusals:
        assert refused.reason is Reason.INVALID_CONFIG
        assert str(refused) == str(without.value)
        assert refused.hint == without.value.hint
        assert refused.details == without.value.details
    assert not _entry(env, INVALID).exists()


@pytest.mark.parametrize("raw", [None, b""])
def test_no_file_or_an_empty_one_asks_no_verdict(tmp_path: Path, raw: bytes | None) -> None:
    class Refusing:
        def known_valid(self, raw: bytes) -> bool:
            raise AssertionError("asked")

        def record_valid(self, raw: bytes) -> None:
            raise AssertionError("recorded")

    path = tmp_path / "config.toml"
    if raw is not None:
        path.write_bytes(raw)
    config = load_module.load_config_file(path, verdicts=Refusing())
    assert config.exists is (raw is not None)


# --- entries that are a miss --------------------------------------------------------------------


@pytest.mark.parametrize("stored", [
    b"", b"{", b"not json", b"true", b"null", b'{"config": "invalid"}', b'{"config": "valid", '
    b'"x": 1}', b'["valid"]', b'{"config": "valid"}' + b" " * 2048,
])
def test_a_damaged_entry_is_a_miss_and_is_replaced(tmp_path: Path, checks: Checks,
                                                   stored: bytes) -> None:
    env = _env(tmp_path, VALID)
    entry = _entry(env, VALID)
    entry.parent.mkdir(parents=True, mode=0o700)
    entry.write_bytes(stored)
    entry.chmod(0o600)
    _load(env)
    assert checks.count == 1
    assert json.loads(entry.read_text()) == {"config": "valid"}


def test_an_entry_others_may_write_is_a_miss(tmp_path: Path, checks: Checks) -> None:
    env = _env(tmp_path, VALID)
    entry = _entry(env, VALID)
    entry.parent.mkdir(parents=True, mode=0o700)
    entry.write_text('{"config": "valid"}')
    entry.chmod(0o666)
    _load(env)
    assert checks.count == 1


def test_a_symlinked_entry_is_a_miss(tmp_path: Path, checks: Checks) -> None:
    env = _env(tmp_path, VALID)
    entry = _entry(env, VALID)
    entry.parent.mkdir(parents=True, mode=0o700)
    target = tmp_path / "planted.json"
    target.write_text('{"config": "valid"}')
    entry.symlink_to(target)
    _load(env)
    assert checks.count == 1


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another uid needs root")
def test_an_entry_owned_by_another_user_is_a_miss(tmp_path: Path, checks: Checks) -> None:
    env = _env(tmp_path, VALID)
    entry = _entry(env, VALID)
    entry.parent.mkdir(parents=True, mode=0o700)
    entry.write_text('{"config": "valid"}')
    entry.chmod(0o600)
    os.chown(entry, 4321, 4321)
    _load(env)
    assert checks.count == 1


def test_an_entry_that_seems_foreign_is_a_miss(tmp_path: Path, checks: Checks,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    env = _env(tmp_path, VALID)
    _load(env)
    # As another user sees it: the entry (and the home) are not theirs.
    monkeypatch.setattr(os, "geteuid", lambda: os.stat(_entry(env, VALID)).st_uid + 1)
    _load(env)
    assert checks.count == 2


def test_an_untrusted_state_home_is_a_miss_not_a_refusal(tmp_path: Path, checks: Checks) -> None:
    env = _env(tmp_path, VALID)
    home = Path(env["SBX_HOME"])
    home.chmod(0o777)
    _load(env)
    _load(env)
    assert checks.count == 2


def test_no_state_home_at_all_still_loads(tmp_path: Path, checks: Checks) -> None:
    env = _env(tmp_path, VALID)
    del env["SBX_HOME"]
    _load(env)
    assert checks.count == 1


def test_every_command_s_config_load_keeps_its_verdict(tmp_path: Path, checks: Checks) -> None:
    import io

    from sbx.base.render import Renderer
    from sbx.usecases.context import AppContext

    env = _env(tmp_path, VALID)
    for _ in range(2):
        load_module._LOADED.clear()
        AppContext(env=env, cwd=tmp_path,
                   renderer=Renderer(io.StringIO(), io.StringIO(), as_json=True)).load_config()
    assert checks.count == 1
    assert _entry(env, VALID).is_file()
