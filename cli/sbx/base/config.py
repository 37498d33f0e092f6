"""The one config loader: read ``config.toml``, validate it strictly, resolve every setting with
its provenance.

Precedence, highest first (SPEC §4; ``sbx explain`` shows which one won):

1. a command-line flag (applied by the caller through :meth:`Config.with_sandbox_override`,
   source ``"flag --NAME"``);
2. the config file (source ``"<path>:<line>"``), located by :func:`sbx.base.paths.config_path`;
3. the built-in default from :data:`DEFAULTS` (source ``"default"``).

Validation is strict (SPEC §4, STYLE items 11-12): the shipped JSON Schema
(``sbx/schema/config.schema.json``) checks types and bounds, then an explicit pass checks the
cross-field rule ``tmp_bytes + workspace_bytes + home_bytes <= memory_bytes`` on the effective
values. An unknown key or a bad value makes its whole section invalid, and any invalid section
makes sbx refuse with one :class:`~sbx.base.errors.ConfigError` listing every problem: a section is
never partially applied and never silently replaced by defaults. A missing file at the
default location means all defaults; a file named by ``$SBX_CONFIG`` must exist.

The schema holds bounds only; :data:`DEFAULTS` is the one place defaults live.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar, cast

from sbx.base import paths
from sbx.base.errors import ConfigError, SbxError
from sbx.base.reasons import Reason

if TYPE_CHECKING:
    # tomlkit and jsonschema are imported where a config file is actually read: with no file,
    # `sbx run` never pays for them (about 50 ms of its start-up).
    from jsonschema import ValidationError
    from jsonschema.protocols import Validator

T = TypeVar("T")

KiB: Final = 1024
MiB: Final = 1024 * KiB
GiB: Final = 1024 * MiB

DEFAULT_SOURCE: Final = "default"
SCHEMA_RESOURCE: Final = "schema/config.schema.json"

# The one defaults table (sections and keys in display order). Read-only views so no caller can
# change a default for everyone else in the process.
DEFAULTS: Final[Mapping[str, Mapping[str, object]]] = MappingProxyType({
    "sandbox": MappingProxyType({
        "memory_bytes": 4 * GiB,
        "pids": 128,
        "cpu_millis": 1000,
        "tmp_bytes": 256 * MiB,
        "workspace_bytes": 512 * MiB,
        "home_bytes": 256 * MiB,
        "timeout_ms": 3_600_000,
        "user": 1000,
        "root_workspace": "refuse",
        "detach_keys": "ctrl-p,ctrl-q",
        "terminal_passthrough": False,
    }),
    "network": MappingProxyType({
        "upstream_proxy": None,
        "upstream_ca_file": None,
        "proxy_bind_host": "",
    }),
    "mounts": MappingProxyType({
        "allowed_roots": (),
        "blocked": (),
    }),
    "gc": MappingProxyType({
        "grace_seconds": 600,
        "batch_size": 256,
        "named_ttl": None,
        "image_idle_seconds": 86400,
    }),
})

# Messages for `pattern` failures, by key: the regex itself means nothing to a user, and the
# value is never echoed because an upstream proxy URL may carry a password.
_PATTERN_MESSAGES: Final[Mapping[str, str]] = MappingProxyType({
    "network.upstream_proxy": "must be an http:// or https:// URL with a host",
    "network.proxy_bind_host": "must be a host name or address without spaces",
    "mounts.allowed_roots": "must be an absolute path",
    "mounts.blocked": "must be an absolute path",
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


# The tmpfs mounts (/tmp, the workspace, HOME) are backed by memory and count against the
# container's memory limit, so caps that add up to more than the limit would let a full /tmp
# get the workload OOM-killed.
_CROSS_KEYS: Final = ("memory_bytes", "tmp_bytes", "workspace_bytes", "home_bytes")


@dataclass(frozen=True)
class Sourced(Generic[T]):
    """A resolved setting and where it came from."""

    value: T
    source: str  # "default", "<path>:<line>", or "flag --timeout"


@dataclass(frozen=True)
class SandboxSettings:
    memory_bytes: Sourced[int]
    pids: Sourced[int]
    cpu_millis: Sourced[int]
    tmp_bytes: Sourced[int]
    workspace_bytes: Sourced[int]
    home_bytes: Sourced[int]
    timeout_ms: Sourced[int]
    user: Sourced[int]  # fallback uid when the image's USER is root/unset; gid = same number
    root_workspace: Sourced[str]  # "refuse" | "sandbox-user": a root-owned rw workspace
    detach_keys: Sourced[str]  # the keys that end a TTY session from the host
    # pass the sandbox's clipboard, title, hyperlink... sequences to the user's terminal
    terminal_passthrough: Sourced[bool]


@dataclass(frozen=True)
class NetworkSettings:
    upstream_proxy: Sourced[str | None]
    upstream_ca_file: Sourced[str | None]
    proxy_bind_host: Sourced[str]  # "" = chosen automatically


@dataclass(frozen=True)
class MountSettings:
    allowed_roots: Sourced[tuple[str, ...]]  # empty = no allowed-roots restriction
    blocked: Sourced[tuple[str, ...]]


@dataclass(frozen=True)
class GcSettings:
    grace_seconds: Sourced[int]
    batch_size: Sourced[int]
    named_ttl: Sourced[int | None]  # None: gc never removes a named sandbox by itself
    image_idle_seconds: Sourced[int]  # cached images nobody used for this long are removed


@dataclass(frozen=True)
class _Problem:
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


@dataclass(frozen=True)
class Config:
    """The resolved configuration; every value carries its :class:`Sourced` provenance."""

    path: Path
    exists: bool
    sandbox: SandboxSettings
    network: NetworkSettings
    mounts: MountSettings
    gc: GcSettings

    def with_sandbox_override(self, key: str, value: int, source: str) -> Config:
        """Return a copy with ``sandbox.<key>`` set from a flag (flags beat the config file).

        The value gets the same bounds as in the file and the cross-field rule is checked again
        on the effective values; a violation raises :class:`SbxError` with
        ``Reason.INVALID_ARGUMENT`` naming ``source`` (e.g. ``"flag --timeout"``).
        """
        names = [f.name for f in dataclasses.fields(SandboxSettings)
                 if f.name not in ("root_workspace", "detach_keys", "terminal_passthrough")]
        if key not in names:
            raise ValueError(f"unknown sandbox setting {key!r}; expected one of {names}")
        override = Sourced(value, source)
        sandbox = dataclasses.replace(self.sandbox, **{key: cast(Any, override)})
        dotted = f"sandbox.{key}"
        subschema = _schema()["properties"]["sandbox"]["properties"][key]
        # A wrong type first: bounds on a value of the wrong type only repeat the point.
        errors = sorted(_strict_validator(subschema).iter_errors(value),
                        key=lambda e: (e.validator != "type", str(e.validator)))
        if errors:
            message: str | None = _message(errors[0], dotted, value)
        else:
            cross: dict[str, Sourced[int]] = {k: getattr(sandbox, k) for k in _CROSS_KEYS}
            message = _cross_field_message(
                {k: s.value for k, s in cross.items()},
                {k: _source_label(s.source, override=k == key) for k, s in cross.items()},
            )
        if message is None:
            return dataclasses.replace(self, sandbox=sandbox)
        raise SbxError(
            Reason.INVALID_ARGUMENT,
            f"{source}: {dotted} = {value!r} is refused: {message}",
            hint=f"Pass a value that fits, or adjust the other [sandbox] settings in "
                 f"{self.path}.",
            details={"flag": source, "key": dotted, "value": value, "problem": message},
        )

    def provenance(self) -> list[tuple[str, object, str]]:
        """Return ``(dotted key, value, source)`` for every setting, in :data:`DEFAULTS` order."""
        rows: list[tuple[str, object, str]] = []
        for section in DEFAULTS:
            settings = getattr(self, section)
            for field in dataclasses.fields(settings):
                sourced: Sourced[object] = getattr(settings, field.name)
                rows.append((f"{section}.{field.name}", sourced.value, sourced.source))
        return rows


def load_config(env: Mapping[str, str]) -> Config:
    """Load the config file that :func:`sbx.base.paths.config_path` picks from ``env``.

    A file named by ``$SBX_CONFIG`` must exist: the user asked for that file, so a typo or a
    missing mount must not quietly mean defaults (and, with them, no ``[mounts]
    allowed_roots``). Only the default location (``$XDG_CONFIG_HOME/sbx/config.toml``) may be
    absent, which means all defaults.
    """
    path = paths.config_path(env)
    if paths.config_path_is_explicit(env) and not os.path.lexists(path):
        raise ConfigError(
            f"{paths.CONFIG_ENV} names the config file {path}, which does not exist",
            hint=f"Create {path} (an empty file means all defaults), correct "
                 f"{paths.CONFIG_ENV}, or unset it to use the default location "
                 "($XDG_CONFIG_HOME/sbx/config.toml, which may be absent).",
            details={"file": str(path), "variable": paths.CONFIG_ENV,
                     "error": "missing"},
        )
    return load_config_file(path)


def load_config_file(path: Path) -> Config:
    """Load and strictly validate ``path``; a missing file yields all defaults.

    Raises :class:`ConfigError` when the file exists but cannot be read, is not UTF-8 TOML, or
    has any invalid section (all problems are listed, sorted by line).
    """
    text = _read(path)
    if text is None:
        return _resolve(path, exists=False, data={}, lines={})
    import tomlkit
    import tomlkit.exceptions

    try:
        data: dict[str, Any] = tomlkit.parse(text).unwrap()
    except tomlkit.exceptions.ParseError as exc:
        reason = str(exc).rsplit(" at line ", 1)[0]
        column = exc.col + 1  # tomlkit counts columns from 0, editors from 1
        raise ConfigError(
            f"{path} is not valid TOML: {reason} (line {exc.line}, column {column})",
            hint=f"Fix the TOML syntax at {path}:{exc.line}:{column}.",
            details={"file": str(path), "line": exc.line, "column": column, "error": reason},
        ) from exc
    except tomlkit.exceptions.TOMLKitError as exc:
        # e.g. KeyAlreadyPresent, which tomlkit raises without a position.
        line = _repeat_line(text)
        where = f" (line {line})" if line is not None else ""
        raise ConfigError(
            f"{path} is not valid TOML: {exc}{where}",
            hint=f"Fix the TOML syntax at {path}:{line}." if line is not None
            else f"Fix the TOML syntax in {path}.",
            details={"file": str(path), "line": line, "error": str(exc)},
        ) from exc
    lines = _key_lines(text)
    problems = _problems(data, lines)
    if problems:
        raise _invalid(path, problems)
    return _resolve(path, exists=True, data=data, lines=lines)


# --- reading -----------------------------------------------------------------------------------


def _read(path: Path) -> str | None:
    """Return the file's text, or None when there is no file at all."""
    try:
        raw = path.read_bytes()
    except ValueError as exc:  # e.g. a NUL in the path: no file can have that name
        raise ConfigError(
            f"{path!r} is not a usable config file path: {exc}",
            hint=f"Point {paths.CONFIG_ENV} at a config file.",
            details={"file": str(path), "error": str(exc)},
        ) from exc
    except FileNotFoundError as exc:
        if not path.is_symlink():
            return None
        # A dangling symlink is a config the user meant to have: refusing beats defaults.
        raise ConfigError(
            f"{path} is a symbolic link to a file that does not exist",
            hint=f"Point {path} at the real config file, or remove the link to use defaults.",
            details={"file": str(path), "error": "dangling symlink"},
        ) from exc
    except OSError as exc:
        error = exc.strerror or type(exc).__name__
        raise ConfigError(
            f"{path} cannot be read: {error}",
            hint=f"Make {path} a readable file, or point SBX_CONFIG elsewhere.",
            details={"file": str(path), "error": error},
        ) from exc
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{path} is not valid TOML: it is not UTF-8 text (byte offset {exc.start})",
            hint=f"Save {path} as UTF-8.",
            details={"file": str(path), "error": "not UTF-8", "offset": exc.start},
        ) from exc


# --- line numbers ------------------------------------------------------------------------------
#
# tomlkit keeps the document's layout but not line numbers, so the key positions come from one
# scan of the text: table headers, then `key =` lines (dotted or quoted, at top level or inside a
# table), skipping the inside of multi-line strings and arrays. Key names are decoded by tomlkit
# itself so quoting rules match the parser exactly.


@dataclass(frozen=True)
class _Entry:
    path: tuple[str, ...]
    line: int
    header: str  # "" for a `key =` line, "[" for a table header, "[[" for an array of tables


def _scan(text: str) -> Iterator[_Entry]:
    """Yield every table header and key assignment with its (1-based) line."""
    table: tuple[str, ...] = ()
    depth = 0  # brackets/braces still open from a multi-line value
    open_string: str | None = None  # delimiter of a multi-line string still open
    # TOML lines end in \n (or \r\n); str.splitlines() would also split on \u2028 and friends,
    # which may sit inside strings, and shift every line number after them.
    for number, raw_line in enumerate(text.split("\n"), start=1):
        line = raw_line.rstrip("\r")
        if open_string is not None or depth > 0:
            depth, open_string = _scan_value(line, 0, depth, open_string)
            continue
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.startswith("["):
            table = _header_path(stripped)
            yield _Entry(table, number, "[[" if stripped.startswith("[[") else "[")
            continue
        equals = _find_unquoted(stripped, "=", 0)
        if equals < 0:
            continue
        yield _Entry(table + _key_path(stripped[:equals]), number, "")
        depth, open_string = _scan_value(stripped, equals + 1, 0, None)


def _key_lines(text: str) -> dict[tuple[str, ...], int]:
    """Map every table and key path to the line where it first appears."""
    lines: dict[tuple[str, ...], int] = {}
    for entry in _scan(text):
        # A dotted key also introduces its parent tables (`sandbox.pids = 1` creates [sandbox]).
        for end in range(1, len(entry.path) + 1):
            lines.setdefault(entry.path[:end], entry.line)
    return lines


def _repeat_line(text: str) -> int | None:
    """Line of the first key or table defined twice (tomlkit reports some without a line)."""
    seen: set[tuple[str, ...]] = set()
    for entry in _scan(text):
        if entry.header == "[[":
            # Each [[array]] element starts afresh: its keys may repeat the previous element's.
            seen = {p for p in seen if p[:len(entry.path)] != entry.path}
        elif entry.path in seen:
            return entry.line
        seen.add(entry.path)
    return None


def _find_unquoted(text: str, targets: str, start: int) -> int:
    """Index of the first character of ``targets`` outside quotes, or -1."""
    quote: str | None = None
    index = start
    while index < len(text):
        char = text[index]
        if quote is not None:
            if char == "\\" and quote == '"':
                index += 1
            elif char == quote:
                quote = None
        elif char in "\"'":
            quote = char
        elif char in targets:
            return index
        index += 1
    return -1


def _scan_value(text: str, index: int, depth: int, open_string: str | None,
                ) -> tuple[int, str | None]:
    """Follow a value through ``text`` and return the (depth, open multi-line string) after it."""
    while index < len(text):
        if open_string is not None:
            index = _end_of_multiline(text, index, open_string)
            if index < 0:
                return depth, open_string
            open_string = None
            continue
        char = text[index]
        if char == "#":
            break
        if text.startswith(('"""', "'''"), index):
            open_string = text[index:index + 3]
            index += 3
            continue
        if char in "\"'":
            end = _close_quote(text, index)
            index = len(text) if end < 0 else end + 1
            continue
        if char in "[{":
            depth += 1
        elif char in "]}":
            depth = max(0, depth - 1)
        index += 1
    return depth, open_string


def _close_quote(text: str, start: int) -> int:
    """Index of the quote closing the one-line string opened at ``start``, or -1."""
    quote = text[start]
    index = start + 1
    while index < len(text):
        if text[index] == "\\" and quote == '"':
            index += 2
            continue
        if text[index] == quote:
            return index
        index += 1
    return -1


def _end_of_multiline(text: str, index: int, delimiter: str) -> int:
    """Index just past the delimiter closing a multi-line string, or -1 if it stays open."""
    while index < len(text):
        if text[index] == "\\" and delimiter == '"""':
            index += 2
            continue
        if text.startswith(delimiter, index):
            end = index + 3
            # Up to two more quotes right before the closing delimiter belong to the content.
            extra = 0
            while end < len(text) and text[end] == delimiter[0] and extra < 2:
                end += 1
                extra += 1
            return end
        index += 1
    return -1


def _header_path(stripped: str) -> tuple[str, ...]:
    array = stripped.startswith("[[")
    start = 2 if array else 1
    end = _find_unquoted(stripped, "]", start)
    inner = stripped[start:end if end >= 0 else len(stripped)]
    return _parse_path(f"[{inner}]", inner)


def _key_path(key_text: str) -> tuple[str, ...]:
    return _parse_path(f"{key_text} = 0", key_text)


def _parse_path(snippet: str, fallback: str) -> tuple[str, ...]:
    import tomlkit
    import tomlkit.exceptions

    try:
        node: object = tomlkit.parse(snippet).unwrap()
    except tomlkit.exceptions.TOMLKitError:
        # Not reachable for a file tomlkit accepted; a rough split still gives a useful line.
        return tuple(part.strip().strip("\"'") for part in fallback.split("."))
    path: list[str] = []
    while isinstance(node, dict) and len(node) == 1:
        name, node = next(iter(node.items()))
        path.append(name)
    return tuple(path)


def _line_of(lines: Mapping[tuple[str, ...], int], path: Iterable[str | int]) -> int:
    """Line of the key, else of its nearest enclosing table, else 1."""
    keys = tuple(part for part in path if isinstance(part, str))
    for end in range(len(keys), 0, -1):
        if keys[:end] in lines:
            return lines[keys[:end]]
    return 1


# --- validation --------------------------------------------------------------------------------


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
def _schema() -> dict[str, Any]:
    text = files("sbx").joinpath(SCHEMA_RESOURCE).read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


@cache
def _file_validator() -> Validator:
    return _strict_validator(_schema())


def _strict_validator(schema: Mapping[str, Any]) -> Validator:
    return _strict_validator_class()(schema)


def _problems(data: Mapping[str, Any], lines: Mapping[tuple[str, ...], int]) -> list[_Problem]:
    errors = list(_file_validator().iter_errors(data))
    # A value of the wrong type gets one message; bounds on it would only repeat the point.
    mistyped = {tuple(e.absolute_path) for e in errors if e.validator == "type"}
    problems: list[_Problem] = []
    for error in errors:
        path = tuple(error.absolute_path)
        if error.validator != "type" and path in mistyped:
            continue
        if error.validator == "additionalProperties":
            problems.extend(_unknown_keys(path, error, lines))
            continue
        dotted = _dotted(path)
        leaf = _dotted(tuple(p for p in path if isinstance(p, str)))
        problems.append(_Problem(section=str(path[0]), key=dotted, line=_line_of(lines, path),
                                 message=_message(error, leaf, error.instance)))
    if not any(p.section == "sandbox" for p in problems):
        problems.extend(_cross_field_problems(data.get("sandbox", {}), lines))
    return sorted(problems, key=_Problem.sort_key)


def _unknown_keys(path: tuple[str | int, ...], error: ValidationError,
                  lines: Mapping[tuple[str, ...], int]) -> list[_Problem]:
    known = sorted(DEFAULTS[str(path[0])] if path else DEFAULTS)
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
        problems.append(_Problem(section=str(key_path[0]), key=_dotted(key_path),
                                 line=_line_of(lines, key_path), message=message))
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
    match = difflib.get_close_matches(name.lower(), list(DEFAULTS), n=1)
    if match:
        return f"unknown section; did you mean {match[0]!r}?"
    return f"unknown top-level key; settings belong in one of [{'], ['.join(sorted(DEFAULTS))}]"


def _message(error: ValidationError, key: str, value: object) -> str:
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
        return _PATTERN_MESSAGES.get(key, "has an invalid format")
    if validator == "minLength":
        return "must not be empty"
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
                          lines: Mapping[tuple[str, ...], int]) -> list[_Problem]:
    values = {key: sandbox.get(key, DEFAULTS["sandbox"][key]) for key in _CROSS_KEYS}
    labels = {key: "" if key in sandbox else " (default)" for key in _CROSS_KEYS}
    message = _cross_field_message(values, labels)
    if message is None:
        return []
    # Blame a key the file sets (the rule cannot fail on defaults alone), memory first.
    blamed = next(key for key in _CROSS_KEYS if key in sandbox)
    return [_Problem(section="sandbox", key=f"sandbox.{blamed}",
                     line=_line_of(lines, ("sandbox", blamed)), message=message)]


def _cross_field_message(values: Mapping[str, Any], labels: Mapping[str, str]) -> str | None:
    memory, tmp, workspace, home = (int(values[key]) for key in _CROSS_KEYS)
    if tmp + workspace + home <= memory:
        return None
    return (
        "tmp_bytes + workspace_bytes + home_bytes must not exceed memory_bytes: "
        f"{_size(tmp)}{labels['tmp_bytes']} + {_size(workspace)}{labels['workspace_bytes']} "
        f"+ {_size(home)}{labels['home_bytes']} "
        f"= {_size(tmp + workspace + home)} > {_size(memory)}{labels['memory_bytes']}"
    )


def _source_label(source: str, *, override: bool) -> str:
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


def _invalid(path: Path, problems: list[_Problem]) -> ConfigError:
    listing = "\n".join(f"  {path}:{p.line}: {p.key}: {p.message}" for p in problems)
    sections = sorted({p.section for p in problems})
    return ConfigError(
        f"{path} is invalid because:\n{listing}",
        hint=(f"Fix or remove the keys listed above in {path} (a removed key takes its "
              "default). sbx never replaces an invalid section with defaults."),
        details={"file": str(path), "problems": [p.as_dict() for p in problems],
                 "invalid_sections": sections},
    )


# --- resolution --------------------------------------------------------------------------------


def _resolve(path: Path, *, exists: bool, data: Mapping[str, Any],
             lines: Mapping[tuple[str, ...], int]) -> Config:
    def get(section: str, key: str) -> Sourced[Any]:
        table = data.get(section, {})
        if key in table:
            value = table[key]
            # Arrays become tuples so the frozen Config is immutable all the way down.
            value = tuple(value) if isinstance(value, list) else value
            return Sourced(value, f"{path}:{_line_of(lines, (section, key))}")
        return Sourced(DEFAULTS[section][key], DEFAULT_SOURCE)

    def build(section: str, cls: type[T]) -> T:
        fields = [f.name for f in dataclasses.fields(cast(Any, cls))]
        return cls(**{name: get(section, name) for name in fields})

    return Config(
        path=path,
        exists=exists,
        sandbox=build("sandbox", SandboxSettings),
        network=build("network", NetworkSettings),
        mounts=build("mounts", MountSettings),
        gc=build("gc", GcSettings),
    )


__all__ = [
    "load_config",
    "load_config_file",
    "Config",
    "Sourced",
    "SandboxSettings",
    "NetworkSettings",
    "MountSettings",
    "GcSettings",
    "DEFAULTS",
    "DEFAULT_SOURCE",
    "SCHEMA_RESOURCE",
    "KiB",
    "MiB",
    "GiB",
]
