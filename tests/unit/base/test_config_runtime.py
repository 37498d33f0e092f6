"""``[sandbox] runtime``: an engine runtime's name or nothing (the engine's default); any other
value makes the section invalid, as every other key does."""

from __future__ import annotations

from pathlib import Path

import pytest

from sbx.base.config import load_config_file
from sbx.base.errors import ConfigError


def _problems(tmp_path: Path, text: str) -> list[dict[str, object]]:
    path = tmp_path / "config.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config_file(path)
    problems: list[dict[str, object]] = caught.value.details["problems"]
    return problems


def test_unset_is_the_engines_default(tmp_path: Path) -> None:
    config = load_config_file(tmp_path / "absent.toml")
    assert config.sandbox.runtime.value is None
    assert config.sandbox.runtime.source == "default"


@pytest.mark.parametrize(("value", "message"), [
    ('"run sc"', "must be an engine runtime name"),
    ('"-x"', "must be an engine runtime name"),
    ('""', "must be an engine runtime name"),
    ('"a/b"', "must be an engine runtime name"),
    (f'"{"x" * 129}"', "must be at most 128 characters"),
    ("1", "must be a string, not an integer"),
    ("true", "must be a string, not a boolean"),
])
def test_a_bad_runtime_is_refused_with_its_line(tmp_path: Path, value: str,
                                                message: str) -> None:
    problems = _problems(tmp_path, f"[sandbox]\npids = 64\nruntime = {value}\n")
    assert len(problems) == 1, problems
    assert problems[0]["key"] == "sandbox.runtime" and problems[0]["line"] == 3
    assert str(problems[0]["message"]).startswith(message)
