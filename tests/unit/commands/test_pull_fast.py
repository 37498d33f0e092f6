"""`sbx pull` from typer's remembered parse: which words reuse it and which go to typer (the
engine tests hold its output equal to typer's), and the Docker config it can read as naming
no credentials without asking the SDK."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from sbx.base.render import Renderer
from sbx.commands import pull_fast
from sbx.seams.driver.registry_credentials import docker_auth_config
from sbx.seams.registry_auth import _names_nothing_for, resolve
from sbx.usecases import codeprint, parsedwords
from sbx.usecases.context import AppContext


class Words:
    """A stand-in Launch: the words and environment of one invocation."""

    def __init__(self, env: dict[str, str], argv: tuple[str, ...],
                 passthrough: tuple[str, ...] | None = None) -> None:
        self.env, self.argv, self.passthrough = env, argv, passthrough
        self.asked: list[dict[str, Any]] = []

    def context(self, **flags: Any) -> Any:
        self.asked.append(flags)
        raise _Reached


class _Reached(Exception):
    """The remembered parse was used: the pull itself would start here."""


def _typer_parsed(tmp_path: Path, argv: tuple[str, ...], references: list[str], *,
                  accept: bool = False, verbose: int = 0,
                  passthrough: tuple[str, ...] | None = None) -> dict[str, str]:
    env = {"SBX_HOME": str(tmp_path / "state")}
    renderer = Renderer(io.StringIO(), io.StringIO(), as_json=False)
    app = AppContext(env=env, cwd=tmp_path, renderer=renderer, argv=argv, verbose=verbose,
                     passthrough=passthrough)
    pull_fast.remember(app, references, accept=accept)
    return env


def _recalled(env: dict[str, str], argv: tuple[str, ...],
              passthrough: tuple[str, ...] | None = None) -> list[dict[str, Any]] | None:
    words = Words(env, argv, passthrough)
    try:
        assert pull_fast.pull_by_hand(words) is None  # type: ignore[arg-type]  # a stand-in
    except _Reached:
        return words.asked
    return None


def test_the_same_words_reuse_typers_parse(tmp_path: Path) -> None:
    argv = ("-vv", "pull", "--accept", "a/b:1", "c/d")
    env = _typer_parsed(tmp_path, argv, ["a/b:1", "c/d"], accept=True, verbose=2)
    assert _recalled(env, argv) == [{"verbose": 2, "traceback": False}]
    parsed = parsedwords.recall(env, "pull", argv, None)
    assert parsed is not None and parsed.values == {"references": ["a/b:1", "c/d"],
                                                    "accept": True}


@pytest.mark.parametrize("other", [
    ("pull", "--accept", "c/d", "a/b:1"), ("pull", "a/b:1", "c/d"),
    ("pull", "--accept", "a/b:1", "c/d", "--help"), ("run", "--accept", "a/b:1", "c/d"), (),
])
def test_other_words_go_to_typer(tmp_path: Path, other: tuple[str, ...]) -> None:
    env = _typer_parsed(tmp_path, ("pull", "--accept", "a/b:1", "c/d"), ["a/b:1", "c/d"],
                        accept=True)
    assert _recalled(env, other) is None


def test_a_passthrough_tail_is_part_of_the_words(tmp_path: Path) -> None:
    env = _typer_parsed(tmp_path, ("pull", "x"), ["x"])
    assert _recalled(env, ("pull", "x"), ()) is None
    assert _recalled(env, ("pull", "x"), ("y",)) is None
    assert _recalled(env, ("pull", "x")) is not None


def test_the_switch_sends_every_pull_to_typer(tmp_path: Path) -> None:
    env = _typer_parsed(tmp_path, ("pull", "x"), ["x"])
    assert _recalled({**env, "SBX_FAST_PULL": "0"}, ("pull", "x")) is None


def test_an_edited_sbx_parses_afresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = _typer_parsed(tmp_path, ("pull", "x"), ["x"])
    monkeypatch.setattr(codeprint, "_CODE", ["another parser"])
    assert _recalled(env, ("pull", "x")) is None


@pytest.mark.parametrize("damage", [b"", b"{", b"[]", b'{"format": 1}', b"\xff" * 8])
def test_a_damaged_entry_is_a_miss(tmp_path: Path, damage: bytes) -> None:
    env = _typer_parsed(tmp_path, ("pull", "x"), ["x"])
    (entry,) = parsedwords.cache_dir(tmp_path / "state").iterdir()
    entry.write_bytes(damage)
    assert _recalled(env, ("pull", "x")) is None


@pytest.mark.parametrize("values", [{}, {"references": "x", "accept": False},
                                    {"references": [1], "accept": False},
                                    {"references": ["x"], "accept": "yes"},
                                    {"references": [], "accept": False}])
def test_an_entry_that_is_not_a_pulls_parse_is_a_miss(tmp_path: Path,
                                                      values: dict[str, Any]) -> None:
    env = _typer_parsed(tmp_path, ("pull", "x"), ["x"])
    (entry,) = parsedwords.cache_dir(tmp_path / "state").iterdir()
    stored = json.loads(entry.read_bytes())
    entry.write_text(json.dumps({**stored, "values": values}), encoding="utf-8")
    assert _recalled(env, ("pull", "x")) is None


def test_only_the_newest_parses_are_kept(tmp_path: Path) -> None:
    for index in range(parsedwords.MAX_ENTRIES + 3):
        env = _typer_parsed(tmp_path, ("pull", f"r/{index}"), [f"r/{index}"])
    assert len(list(parsedwords.cache_dir(tmp_path / "state").iterdir())) == \
        parsedwords.MAX_ENTRIES
    assert _recalled(env, ("pull", f"r/{parsedwords.MAX_ENTRIES + 2}")) is not None


HOST = "registry.example.test:5000"
AUTH = {"auth": "dTpw"}  # u:p


@pytest.mark.parametrize("config", [
    {}, {"auths": {}}, {"auths": {"other.test": AUTH}}, {"currentContext": "x"},
    {"auths": {"https://other.test/v1/": AUTH}, "plugins": {}},
    {"auths": {f"https://{HOST}/v2/": AUTH}}, {"auths": {HOST: AUTH}},
    {"auths": {"http://" + HOST: AUTH}}, {HOST: AUTH}, {"auths": {}, HOST: AUTH},
    {"credsStore": "x"}, {"credHelpers": {HOST: "x"}}, {"auths": []}, [],
    {"auths": {"https://index.docker.io/v1/": AUTH}},
])
@pytest.mark.parametrize("host", [HOST, "docker.io"])
def test_a_quick_none_is_the_sdks_none(tmp_path: Path, config: Any, host: str) -> None:
    """Whenever the quick read says "nothing for this host", the SDK's resolution of the same
    file says so too (the converse is not needed: a doubt is the SDK's to settle)."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    if _names_nothing_for(host, path):
        assert docker_auth_config(host, path, {}) is None
        assert resolve(host, {"DOCKER_CONFIG": str(tmp_path)}) is None


def test_the_quick_read_leaves_doubts_to_the_sdk(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    for config in ({"auths": {HOST: AUTH}}, {HOST: AUTH}, {"credsStore": "x"},
                   {"credHelpers": {"o": "x"}}, {"auths": {"index.docker.io": AUTH}}):
        path.write_text(json.dumps(config), encoding="utf-8")
        host = "docker.io" if "index.docker.io" in json.dumps(config) else HOST
        assert not _names_nothing_for(host, path), config
    path.write_text("{not json", encoding="utf-8")
    assert not _names_nothing_for(HOST, path)
    path.write_text(json.dumps({"auths": {"other.test": AUTH}}), encoding="utf-8")
    assert _names_nothing_for(HOST, path)
