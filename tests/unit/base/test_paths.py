"""Config-file and state-home locations: precedence, XDG rules, and the state-home hash."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from sbx.base.errors import ConfigError
from sbx.base.paths import HOME_HASH_LENGTH, config_path, home_hash, state_home
from sbx.base.reasons import Reason

CONFIG_CASES = [
    # (id, env, expected)
    ("sbx-config-wins", {"SBX_CONFIG": "/c/my.toml", "XDG_CONFIG_HOME": "/x", "HOME": "/h"},
     "/c/my.toml"),
    ("sbx-config-relative-kept", {"SBX_CONFIG": "rel/my.toml", "HOME": "/h"}, "rel/my.toml"),
    ("xdg", {"XDG_CONFIG_HOME": "/x", "HOME": "/h"}, "/x/sbx/config.toml"),
    ("home", {"HOME": "/h"}, "/h/.config/sbx/config.toml"),
    ("empty-sbx-config-is-unset", {"SBX_CONFIG": "", "XDG_CONFIG_HOME": "/x"},
     "/x/sbx/config.toml"),
    ("empty-xdg-is-unset", {"XDG_CONFIG_HOME": "", "HOME": "/h"},
     "/h/.config/sbx/config.toml"),
    ("relative-xdg-ignored", {"XDG_CONFIG_HOME": "rel", "HOME": "/h"},
     "/h/.config/sbx/config.toml"),
    ("state-vars-irrelevant", {"SBX_HOME": "/s", "XDG_STATE_HOME": "/xs", "HOME": "/h"},
     "/h/.config/sbx/config.toml"),
]

STATE_CASES = [
    ("sbx-home-wins", {"SBX_HOME": "/s", "XDG_STATE_HOME": "/xs", "HOME": "/h"}, "/s"),
    ("xdg", {"XDG_STATE_HOME": "/xs", "HOME": "/h"}, "/xs/sbx"),
    ("home", {"HOME": "/h"}, "/h/.local/state/sbx"),
    ("empty-sbx-home-is-unset", {"SBX_HOME": "", "HOME": "/h"}, "/h/.local/state/sbx"),
    ("relative-xdg-ignored", {"XDG_STATE_HOME": "x", "HOME": "/h"}, "/h/.local/state/sbx"),
    ("config-vars-irrelevant", {"SBX_CONFIG": "/c", "XDG_CONFIG_HOME": "/x", "HOME": "/h"},
     "/h/.local/state/sbx"),
]


@pytest.mark.parametrize(("env", "expected"), [c[1:] for c in CONFIG_CASES],
                         ids=[c[0] for c in CONFIG_CASES])
def test_config_path_precedence(env: dict[str, str], expected: str) -> None:
    assert config_path(env) == Path(expected)


@pytest.mark.parametrize(("env", "expected"), [c[1:] for c in STATE_CASES],
                         ids=[c[0] for c in STATE_CASES])
def test_state_home_precedence(env: dict[str, str], expected: str) -> None:
    assert state_home(env) == Path(expected)


UNLOCATABLE = [{}, {"HOME": ""}, {"XDG_CONFIG_HOME": "rel", "XDG_STATE_HOME": "rel"}]


@pytest.mark.parametrize("resolver", [config_path, state_home])
@pytest.mark.parametrize("env", UNLOCATABLE)
def test_nothing_set_is_a_config_error(resolver: Callable[[Mapping[str, str]], Path],
                                       env: dict[str, str]) -> None:
    with pytest.raises(ConfigError) as caught:
        resolver(env)
    assert caught.value.reason is Reason.INVALID_CONFIG
    assert "HOME" in caught.value.message
    assert "HOME" in caught.value.details["variables"]


def test_process_environment_is_never_read(monkeypatch: pytest.MonkeyPatch) -> None:
    # Only the injected mapping counts (STYLE item 14).
    monkeypatch.setenv("SBX_CONFIG", "/from/os/environ.toml")
    monkeypatch.setenv("SBX_HOME", "/from/os/environ")
    env = {"HOME": "/h"}
    assert config_path(env) == Path("/h/.config/sbx/config.toml")
    assert state_home(env) == Path("/h/.local/state/sbx")


def test_home_hash_is_32_hex_of_sha256_of_canonical_path(tmp_path: Path) -> None:
    home = tmp_path / "state"
    home.mkdir()
    expected = hashlib.sha256(os.fsencode(home.resolve())).hexdigest()[:32]
    assert home_hash(home) == expected
    assert len(home_hash(home)) == HOME_HASH_LENGTH == 32
    assert all(c in "0123456789abcdef" for c in home_hash(home))


def test_home_hash_same_for_every_spelling(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          ) -> None:
    real = tmp_path / "real" / "state"
    real.mkdir(parents=True)
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "real")
    monkeypatch.chdir(tmp_path)
    spellings = [
        real,
        Path(f"{real}/"),
        tmp_path / "real" / "x" / ".." / "state",
        link / "state",
        Path("real/state"),  # relative: resolved against the working directory
        Path("./real/./state"),
    ]
    assert {home_hash(p) for p in spellings} == {home_hash(real)}


def test_home_hash_of_missing_directory_is_stable(tmp_path: Path) -> None:
    missing = tmp_path / "not" / "yet"
    assert home_hash(missing) == home_hash(tmp_path / "not" / "." / "yet")
    assert home_hash(missing) == hashlib.sha256(os.fsencode(missing)).hexdigest()[:32]


def test_home_hash_differs_between_homes(tmp_path: Path) -> None:
    assert home_hash(tmp_path / "a") != home_hash(tmp_path / "b")
