"""Reading a config file: its text, the TOML parse, validation, and the resolved :class:`Config`."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, TypeVar, cast

from sbx.base import paths
from sbx.base.config.check import file_problems, invalid_file
from sbx.base.config.defaults import DEFAULT_SOURCE, DEFAULTS
from sbx.base.config.lines import key_lines, line_of, repeat_line
from sbx.base.config.model import (
    Config,
    EngineEntry,
    GcSettings,
    MountSettings,
    NetworkSettings,
    SandboxSettings,
    Sourced,
)
from sbx.base.errors import ConfigError

T = TypeVar("T")


class ValidVerdicts(Protocol):
    """Where "these exact bytes are a valid config" is remembered between processes
    (:class:`sbx.usecases.configverdicts.ConfigVerdicts`): a file that passed once is parsed
    for its values, never validated again under the same code. Only a pass is ever recorded."""

    def known_valid(self, raw: bytes) -> bool: ...
    def record_valid(self, raw: bytes) -> None: ...


def load_config(env: Mapping[str, str], *, verdicts: ValidVerdicts | None = None) -> Config:
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
    return load_config_file(path, verdicts=verdicts)


def load_config_file(path: Path, *, verdicts: ValidVerdicts | None = None) -> Config:
    """Load and strictly validate ``path``; a missing file yields all defaults.

    Raises :class:`ConfigError` when the file exists but cannot be read, is not UTF-8 TOML, or
    has any invalid section (all problems are listed, sorted by line). With ``verdicts``, bytes
    already known valid skip the schema (the TOML parse still gives the values and lines).
    """
    text = _read(path)
    key = (str(path), text)
    known = _LOADED.get(key)
    if known is not None:
        return known
    config = _parse(path, text, verdicts)
    if len(_LOADED) >= 8:  # a long-lived process that sees many edits keeps only a few
        _LOADED.clear()
    _LOADED[key] = config
    return config


# The file is read on every call; only the parse and validation of the same bytes are kept, so
# one command that asks several times pays once and an edit is seen by the next call.
_LOADED: dict[tuple[str, str | None], Config] = {}


def _parse(path: Path, text: str | None, verdicts: ValidVerdicts | None) -> Config:
    if text is None:
        return _resolve(path, exists=False, data={}, lines={})
    if not text:
        # No bytes parse to no keys, which the schema accepts (a test keeps the two equal): an
        # empty file (SBX_CONFIG=/dev/null) pays for neither the TOML parser nor the validator.
        return _resolve(path, exists=True, data={}, lines={})
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
        line = repeat_line(text)
        where = f" (line {line})" if line is not None else ""
        raise ConfigError(
            f"{path} is not valid TOML: {exc}{where}",
            hint=f"Fix the TOML syntax at {path}:{line}." if line is not None
            else f"Fix the TOML syntax in {path}.",
            details={"file": str(path), "line": line, "error": str(exc)},
        ) from exc
    lines = key_lines(text)
    raw = text.encode("utf-8")  # the file's own bytes: they decoded as UTF-8
    if verdicts is None or not verdicts.known_valid(raw):
        problems = file_problems(data, lines)
        if problems:
            raise invalid_file(path, problems)
        if verdicts is not None:
            verdicts.record_valid(raw)
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


# --- resolution --------------------------------------------------------------------------------


def _resolve(path: Path, *, exists: bool, data: Mapping[str, Any],
             lines: Mapping[tuple[str, ...], int]) -> Config:
    def get(section: str, key: str) -> Sourced[Any]:
        table = data.get(section, {})
        if key in table:
            value = table[key]
            # Arrays become tuples so the frozen Config is immutable all the way down.
            value = tuple(value) if isinstance(value, list) else value
            return Sourced(value, f"{path}:{line_of(lines, (section, key))}")
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
        engines=tuple(EngineEntry(name, str(host), f"{path}:{line_of(lines, ('engines', name))}")
                      for name, host in data.get("engines", {}).items()),
    )


__all__ = ["ValidVerdicts", "load_config", "load_config_file"]
