"""Validation of a config file against the shipped schema, and the messages its problems get."""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, cast

from sbx.base.config.defaults import (
    CROSS_KEYS,
    DEFAULT_SOURCE,
    DEFAULTS,
    NAMED_SECTIONS,
    SCHEMA_RESOURCE,
    GiB,
    KiB,
    MiB,
)
from sbx.base.config.lines import line_of
from sbx.base.errors import ConfigError

if TYPE_CHECKING:
    # tomlkit and jsonschema are imported where a config file is actually read: with no file,
    # `sbx run` never pays for them (about 50 ms of its start-up).
    from jsonschema import ValidationError
    from jsonschema.protocols import Validator

# Messages for `pattern` failures, by key: the regex itself means nothing to a user, and the
# value is never echoed because an upstream proxy URL may carry a password.
_PATTERN_MESSAGES: Final[Mapping[str, str]] = MappingProxyType({
    "network.upstream_proxy": "must be an http:// or https:// URL with a host",
    "network.proxy_bind_host": "must be a host name or address without spaces",
    "mounts.allowed_roots": "must be an absolute path",
    "mounts.blocked": "must be an absolute path",
    "sandbox.runtime": "must be an engine runtime name like runsc or crun (letters, digits, "
                       "and . _ + - after the first)",
    "engines": "an engine's name is 1-63 letters, digits, '.', '_' or '-', starting with a "
               "letter or digit",
    "engines.*": "must be an engine address: \"ssh://[user@]host[:port]\", "
                 "\"unix:///path\" or \"tcp://host[:port]\"",
    "sandbox.detach_keys": "must be keys like ctrl-p,ctrl-q (a character or ctrl-<letter>, "
                           "comma-separated, no spaces)",
})

_TOML_TYPE_NAMES: Final[Mapping[str, str]] = MappingProxyType({
    "boolean": "a boolean (true or false)",
    "integer": "an integer",
    "string": "a string",
    "object": "a table",
    "array": "an array",
})

_VALUE_TYPE_NAMES: Final[tuple[tuple[type, str], ...]] = (
    (bool, "a boolean"),
    (int, "an integer"),
    (float, "a float"),
    (str, "a string"),
    (list, "an array"),
    (dict, "a table"),
)

_SIZE_TEXT: Final = re.compile(r"^\s*(\d+)\s*([kmgt])(?:i?b)?\s*$", re.IGNORECASE)
_SIZE_SUFFIX: Final[Mapping[str, int]] = MappingProxyType(
    {"k": KiB, "m": MiB, "g": GiB, "t": 1024 * GiB}
)
_BARE_KEY: Final = re.compile(r"^[A-Za-z0-9_-]+$")



@dataclass(frozen=True)
class Problem:
    section: str
    key: str
    line: int
    message: str

    def sort_key(self) -> tuple[int, tuple[str | int, ...], str]:
        # Natural order for array indices, so blocked[2] comes before blocked[10].
        parts = re.split(r"\[(\d+)\]", self.key)
        natural = tuple(int(p) if i % 2 else p for i, p in enumerate(parts))
        return (self.line, natural, self.message)

    def as_dict(self) -> dict[str, object]:
        return {"section": self.section, "key": self.key, "line": self.line,
                "message": self.message}


def _is_strict_integer(_checker: object, instance: object) -> bool:
    # jsonschema counts 1.0 as an integer (JSON has one number type); TOML distinguishes them and
    # a float where a count of bytes or pids belongs is a mistake worth reporting.
    return isinstance(instance, int) and not isinstance(instance, bool)


@cache
def _strict_validator_class() -> type[Validator]:
    from jsonschema import Draft202012Validator
    from jsonschema.validators import extend

    # The one type: ignore: types-jsonschema leaves extend() unannotated.
    validator: type[Validator] = extend(  # type: ignore[no-untyped-call]
        Draft202012Validator,
        type_checker=Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_strict_integer),
    )
    return validator


@cache
def config_schema() -> dict[str, Any]:
    # stdlib, imported here: only a config file being checked reads the schema, and
    # importlib.resources brings tempfile and shutil (a named sandbox's start reads no schema)
    from importlib.resources import files

    text = files("sbx").joinpath(SCHEMA_RESOURCE).read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


@cache
def _file_validator() -> Validator:
    return strict_validator(config_schema())


def strict_validator(schema: Mapping[str, Any]) -> Validator:
    return _strict_validator_class()(schema)


def file_problems(data: Mapping[str, Any], lines: Mapping[tuple[str, ...], int]) -> list[Problem]:
    errors = list(_file_validator().iter_errors(data))
    # A value of the wrong type gets one message; bounds on it would only repeat the point.
    mistyped = {tuple(e.absolute_path) for e in errors if e.validator == "type"}
    problems: list[Problem] = []
    for error in errors:
        path = tuple(error.absolute_path)
        if error.validator != "type" and path in mistyped:
            continue
        if error.validator == "additionalProperties":
            problems.extend(_unknown_keys(path, error, lines))
            continue
        dotted = _dotted(path)
        leaf = _dotted(tuple(p for p in path if isinstance(p, str)))
        problems.append(Problem(section=str(path[0]), key=dotted, line=line_of(lines, path),
                                 message=value_message(error, leaf, error.instance)))
    if not any(p.section == "sandbox" for p in problems):
        problems.extend(_cross_field_problems(data.get("sandbox", {}), lines))
    return sorted(problems, key=Problem.sort_key)


def _unknown_keys(path: tuple[str | int, ...], error: ValidationError,
                  lines: Mapping[tuple[str, ...], int]) -> list[Problem]:
    known = sorted(DEFAULTS[str(path[0])] if path else [*DEFAULTS, *NAMED_SECTIONS])
    # additionalProperties only ever fails on a table.
    instance = cast(Mapping[str, Any], error.instance)
    problems = []
    for name in sorted(set(instance) - set(known)):
        key_path = (*path, name)
        if path:
            message = "unknown key; " + _suggest(name, known, "keys")
        elif isinstance(instance[name], dict):
            message = "unknown section; " + _suggest(name, known, "sections")
        else:
            message = _top_level_message(name)
        problems.append(Problem(section=str(key_path[0]), key=_dotted(key_path),
                                 line=line_of(lines, key_path), message=message))
    return problems


def _suggest(name: str, known: list[str], noun: str) -> str:
    match = difflib.get_close_matches(name.lower(), known, n=1)
    if match:
        return f"did you mean {match[0]!r}?"
    return f"known {noun}: {', '.join(known)}"


def _top_level_message(name: str) -> str:
    # Settings written above the first [table] header land at the top level by mistake.
    sections = [section for section, keys in DEFAULTS.items() if name.lower() in keys]
    if sections:
        return (f"settings belong in a section; did you mean "
                f"'{sections[0]}.{name.lower()}' (under [{sections[0]}])?")
    sections = sorted([*DEFAULTS, *NAMED_SECTIONS])
    match = difflib.get_close_matches(name.lower(), sections, n=1)
    if match:
        return f"unknown section; did you mean {match[0]!r}?"
    return f"unknown top-level key; settings belong in one of [{'], ['.join(sections)}]"


def value_message(error: ValidationError, key: str, value: object) -> str:
    validator = error.validator
    bound: Any = error.validator_value
    if validator == "type":
        expected = _TOML_TYPE_NAMES.get(str(bound), f"of type {bound}")
        return f"must be {expected}, not {_describe(value)}{_type_hint(key, value)}"
    if validator == "minimum":
        return f"must be at least {bound}"
    if validator == "maximum":
        return f"must be at most {bound}{_human_suffix(key, int(bound))}"
    if validator == "pattern":
        named = key.split(".", 1)[0] + ".*" if key.split(".", 1)[0] in NAMED_SECTIONS \
            and "." in key else key
        return _PATTERN_MESSAGES.get(named, "has an invalid format")
    if validator == "minLength":
        return "must not be empty"
    if validator == "maxLength":
        return f"must be at most {bound} characters"
    if validator == "enum":
        # The allowed values are sbx's own words, safe to show; the value given is not echoed.
        return "must be one of " + ", ".join(json.dumps(choice) for choice in bound)
    # Not reached with the shipped schema; the value is not echoed since it may be a secret.
    return f"is invalid ({validator})"


def _describe(value: object) -> str:
    # bool before int: in Python a bool is an int, in TOML it is not.
    for kind, name in _VALUE_TYPE_NAMES:
        if isinstance(value, kind):
            return name
    return "a date/time"  # the only TOML value type left


def _type_hint(key: str, value: object) -> str:
    if key.endswith("_bytes") and isinstance(value, str):
        match = _SIZE_TEXT.match(value)
        if match:
            number = int(match[1]) * _SIZE_SUFFIX[match[2].lower()]
            return f" (sizes are byte counts: write {number} for {value.strip()})"
        return " (sizes are byte counts, e.g. 536870912 for 512 MiB)"
    if key.endswith("_ms") and isinstance(value, str):
        return " (durations are milliseconds, e.g. 3600000 for 1 hour)"
    return ""


def _human_suffix(key: str, number: int) -> str:
    if key.endswith("_bytes"):
        size = _size(number)
        return f" ({size})" if size != f"{number} bytes" else ""
    if key.endswith("_ms"):
        for unit, name in ((86_400_000, "day"), (3_600_000, "hour"), (60_000, "minute"),
                           (1000, "second")):
            if number % unit == 0:
                count = number // unit
                return f" ({count} {name}{'s' if count != 1 else ''})"
    if key.endswith("cpu_millis") and number % 1000 == 0:
        return f" ({number // 1000} CPUs)"
    return ""


def _size(number: int) -> str:
    for unit, name in ((GiB, "GiB"), (MiB, "MiB"), (KiB, "KiB")):
        if number % unit == 0:
            return f"{number // unit} {name}"
    return f"{number} bytes"


def _cross_field_problems(sandbox: Mapping[str, Any],
                          lines: Mapping[tuple[str, ...], int]) -> list[Problem]:
    values = {key: sandbox.get(key, DEFAULTS["sandbox"][key]) for key in CROSS_KEYS}
    labels = {key: "" if key in sandbox else " (default)" for key in CROSS_KEYS}
    message = cross_field_message(values, labels)
    if message is None:
        return []
    # Blame a key the file sets (the rule cannot fail on defaults alone), memory first.
    blamed = next(key for key in CROSS_KEYS if key in sandbox)
    return [Problem(section="sandbox", key=f"sandbox.{blamed}",
                     line=line_of(lines, ("sandbox", blamed)), message=message)]


def cross_field_message(values: Mapping[str, Any], labels: Mapping[str, str]) -> str | None:
    memory, tmp, workspace, home = (int(values[key]) for key in CROSS_KEYS)
    if tmp + workspace + home <= memory:
        return None
    return (
        "tmp_bytes + workspace_bytes + home_bytes must not exceed memory_bytes: "
        f"{_size(tmp)}{labels['tmp_bytes']} + {_size(workspace)}{labels['workspace_bytes']} "
        f"+ {_size(home)}{labels['home_bytes']} "
        f"= {_size(tmp + workspace + home)} > {_size(memory)}{labels['memory_bytes']}"
    )


def source_label(source: str, *, override: bool) -> str:
    if override:
        return f" ({source})"
    return " (default)" if source == DEFAULT_SOURCE else f" (from {source})"


def _dotted(path: Iterable[str | int]) -> str:
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
            continue
        name = part if _BARE_KEY.match(part) else json.dumps(part, ensure_ascii=False)
        text += f".{name}" if text else name
    return text


def invalid_file(path: Path, problems: list[Problem]) -> ConfigError:
    listing = "\n".join(f"  {path}:{p.line}: {p.key}: {p.message}" for p in problems)
    sections = sorted({p.section for p in problems})
    return ConfigError(
        f"{path} is invalid because:\n{listing}",
        hint=(f"Fix or remove the keys listed above in {path} (a removed key takes its "
              "default). sbx never replaces an invalid section with defaults."),
        details={"file": str(path), "problems": [p.as_dict() for p in problems],
                 "invalid_sections": sections},
    )


__all__ = ["Problem", "config_schema", "cross_field_message", "file_problems", "invalid_file",
           "source_label", "strict_validator", "value_message"]
