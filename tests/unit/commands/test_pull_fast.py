"""`sbx pull` read by hand: which command lines it takes and which it leaves to typer (the
engine tests hold its output equal to typer's), and the Docker config it can read as naming
no credentials without asking the SDK."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import pytest

from sbx.commands.pull_fast import PullWords, parse
from sbx.seams.driver.registry_credentials import docker_auth_config
from sbx.seams.registry_auth import _names_nothing_for, resolve


@pytest.mark.parametrize(("argv", "expected"), [
    (["pull", "r/x:1"], PullWords(("r/x:1",), False, 0, False)),
    (["pull", "--accept", "a/b:1", "c/d"], PullWords(("a/b:1", "c/d"), True, 0, False)),
    (["pull", "a/b:1", "--json", "--accept"], PullWords(("a/b:1",), True, 0, False)),
    (["-vv", "--verbose", "--traceback", "pull", "x"], PullWords(("x",), False, 3, True)),
    (["pull", "pull"], PullWords(("pull",), False, 0, False)),
])
def test_plain_pulls_are_read_by_hand(argv: list[str], expected: PullWords) -> None:
    assert parse(argv, None) == expected


@pytest.mark.parametrize("argv", [
    ["pull"], ["pull", "--json"], ["pull", "--help", "x"], ["pull", "-h", "x"],
    ["pull", "--acept", "x"], ["pull", "--accept=1", "x"], ["pull", "-", "x"],
    ["--json", "pull", "x"], ["--version", "pull", "x"], ["run", "x"], [],
])
def test_anything_else_goes_to_typer(argv: list[str]) -> None:
    assert parse(argv, None) is None


def test_a_passthrough_tail_goes_to_typer() -> None:
    assert parse(["pull", "x"], ()) is None
    assert parse(["pull", "x"], ("y",)) is None


def test_the_switch_sends_every_pull_to_typer() -> None:
    from sbx.commands.pull_fast import pull_by_hand

    class Words:
        env: ClassVar[dict[str, str]] = {"SBX_FAST_PULL": "0"}
        argv = ("pull", "x")
        passthrough = None

        def context(self, **_: Any) -> Any:
            raise AssertionError("not read by hand")

    assert pull_by_hand(Words()) is None  # type: ignore[arg-type]  # a stand-in Launch


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
