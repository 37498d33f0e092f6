"""[engines]: named engine addresses, validated like every section (a config error with the
line and why, never a traceback), kept in file order with their provenance."""

from __future__ import annotations

from pathlib import Path

import pytest

from sbx.base.config import Config, load_config_file
from sbx.base.errors import ConfigError
from sbx.base.reasons import Reason


def _load(tmp_path: Path, text: str) -> Config:
    path = tmp_path / "config.toml"
    path.write_text(text, encoding="utf-8")
    return load_config_file(path)


def test_engines_are_read_in_file_order_with_their_lines(tmp_path: Path) -> None:
    config = _load(tmp_path, '[engines]\nbox = "ssh://me@box:2222"\n'
                             'here = "unix:///var/run/docker.sock"\nci = "tcp://10.0.0.5:2376"\n')
    assert [(e.name, e.host) for e in config.engines] == [
        ("box", "ssh://me@box:2222"), ("here", "unix:///var/run/docker.sock"),
        ("ci", "tcp://10.0.0.5:2376")]
    assert config.engines[0].source.endswith("config.toml:2")
    assert config.engine("ci") is config.engines[2] and config.engine("nope") is None
    rows = {key: (value, source) for key, value, source in config.provenance()}
    assert rows["engines.box"][0] == "ssh://me@box:2222"


def test_no_engines_section_means_none(tmp_path: Path) -> None:
    assert _load(tmp_path, "[gc]\ngrace_seconds = 1\n").engines == ()


@pytest.mark.parametrize(("text", "key", "words"), [
    ('[engines]\nbox = "http://box"\n', "engines.box", "must be an engine address"),
    ('[engines]\nbox = "ssh://-oProxyCommand=x"\n', "engines.box", "must be an engine address"),
    ('[engines]\nbox = "ssh://me@box/path"\n', "engines.box", "must be an engine address"),
    ('[engines]\nbox = "unix://relative"\n', "engines.box", "must be an engine address"),
    ('[engines]\nbox = 5\n', "engines.box", "must be a string"),
    ('[engines]\n"-bad" = "ssh://box"\n', "engines", "an engine's name is"),
    ('engines = "ssh://box"\n', "engines", "must be a table"),
])
def test_a_bad_entry_is_a_config_error_naming_it(tmp_path: Path, text: str, key: str,
                                                 words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, text)
    assert caught.value.reason is Reason.INVALID_CONFIG
    problems = caught.value.details["problems"]
    assert [p["key"] for p in problems] == [key], problems
    assert words in problems[0]["message"], problems
