"""Where sbx keeps its config file and its state, derived from an injected environment.

Every function takes the environment as a mapping so that tests pass plain dicts and nothing
below the command-line edge reads ``os.environ`` (STYLE item 14).

Precedence, first match wins (SPEC §4):

Config file (:func:`config_path`)
    1. ``$SBX_CONFIG`` — the file itself;
    2. ``$XDG_CONFIG_HOME/sbx/config.toml``;
    3. ``$HOME/.config/sbx/config.toml``.

State home (:func:`state_home`: audit log, runs, lock, CA, secrets)
    1. ``$SBX_HOME``;
    2. ``$XDG_STATE_HOME/sbx``;
    3. ``$HOME/.local/state/sbx``.

An empty variable counts as unset. A relative ``XDG_*`` value is ignored, as the XDG Base
Directory specification requires; ``SBX_CONFIG`` and ``SBX_HOME`` are taken as given because the
user named them explicitly.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from sbx.base.errors import ConfigError

CONFIG_ENV: Final = "SBX_CONFIG"
HOME_ENV: Final = "SBX_HOME"
HOST_MOUNTS_ENV: Final = "SBX_HOST_MOUNTS"
SKILLS_ENV: Final = "SBX_SKILLS"
CONFIG_FILE_NAME: Final = "config.toml"
APP_DIR_NAME: Final = "sbx"
# 32 hex digits = 128 bits: short enough for a Docker label value, long enough that two state
# homes on one engine never collide by accident.
HOME_HASH_LENGTH: Final = 32


def _get(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name, "")
    return value or None


def _xdg(env: Mapping[str, str], name: str) -> Path | None:
    value = _get(env, name)
    # The XDG spec says relative paths in these variables are invalid and must be ignored.
    if value is None or not os.path.isabs(value):
        return None
    return Path(value)


def _home(env: Mapping[str, str], what: str, variables: tuple[str, str]) -> Path:
    home = _get(env, "HOME")
    if home is None:
        names = [*variables, "HOME"]
        raise ConfigError(
            f"cannot locate the sbx {what}: none of {', '.join(names)} is set",
            hint=f"Set {variables[0]} (or HOME) in the environment.",
            details={"variables": names},
        )
    return Path(home)


def config_path(env: Mapping[str, str]) -> Path:
    """Return the config file path: ``$SBX_CONFIG``, else ``$XDG_CONFIG_HOME/sbx/config.toml``,
    else ``$HOME/.config/sbx/config.toml``.

    The file at a default location need not exist (a missing file means all defaults); one
    named by ``$SBX_CONFIG`` must (:func:`sbx.base.config.load_config`). Raises :class:`ConfigError`
    when none of the variables is set.
    """
    explicit = _get(env, CONFIG_ENV)
    if explicit is not None:
        return Path(explicit)
    xdg = _xdg(env, "XDG_CONFIG_HOME")
    base = xdg if xdg is not None else (
        _home(env, "config file", (CONFIG_ENV, "XDG_CONFIG_HOME")) / ".config"
    )
    return base / APP_DIR_NAME / CONFIG_FILE_NAME


def state_home(env: Mapping[str, str]) -> Path:
    """Return the state home: ``$SBX_HOME``, else ``$XDG_STATE_HOME/sbx``, else
    ``$HOME/.local/state/sbx``.

    The directory need not exist. Raises :class:`ConfigError` when none of the variables is set.
    """
    explicit = _get(env, HOME_ENV)
    if explicit is not None:
        return Path(explicit)
    xdg = _xdg(env, "XDG_STATE_HOME")
    base = xdg if xdg is not None else (
        _home(env, "state home", (HOME_ENV, "XDG_STATE_HOME")) / ".local" / "state"
    )
    return base / APP_DIR_NAME


def host_mounts_home(env: Mapping[str, str]) -> Path:
    """Where the kits' ``host-mount@1`` directories live: ``$SBX_HOST_MOUNTS``, else
    ``$XDG_DATA_HOME/sbx/host-mounts``, else ``$HOME/.local/share/sbx/host-mounts``. Never
    inside the state home: the mount policy keeps that (and its secrets) out of every sandbox.
    """
    explicit = _get(env, HOST_MOUNTS_ENV)
    if explicit is not None:
        return Path(explicit)
    xdg = _xdg(env, "XDG_DATA_HOME")
    base = xdg if xdg is not None else (
        _home(env, "host mounts", (HOST_MOUNTS_ENV, "XDG_DATA_HOME")) / ".local" / "share")
    return base / APP_DIR_NAME / "host-mounts"


def skills_home(env: Mapping[str, str]) -> Path:
    """The host's shared skills store (agent-skills@1): ``$SBX_SKILLS``, else
    ``$XDG_DATA_HOME/sbx/skills``, else ``$HOME/.local/share/sbx/skills``."""
    explicit = _get(env, SKILLS_ENV)
    if explicit is not None:
        return Path(explicit)
    xdg = _xdg(env, "XDG_DATA_HOME")
    base = xdg if xdg is not None else (
        _home(env, "skills store", (SKILLS_ENV, "XDG_DATA_HOME")) / ".local" / "share")
    return base / APP_DIR_NAME / "skills"


def state_home_source(env: Mapping[str, str]) -> str:
    """Which variable chose the state home (``SBX_HOME``, ``XDG_STATE_HOME`` or ``HOME``), for
    messages that tell the user what to change."""
    if _get(env, HOME_ENV) is not None:
        return HOME_ENV
    return "XDG_STATE_HOME" if _xdg(env, "XDG_STATE_HOME") is not None else "HOME"


def config_path_is_explicit(env: Mapping[str, str]) -> bool:
    """Whether ``$SBX_CONFIG`` names the config file (then the file must exist)."""
    return _get(env, CONFIG_ENV) is not None


def home_hash(state_home: Path) -> str:
    """Return the first 32 hex digits of the SHA-256 of the canonical state home path.

    Canonical = absolute with symlinks resolved (as far as the path exists), so two spellings of
    one directory label resources identically and ``sbx gc`` from either finds them.
    """
    import hashlib  # OpenSSL's library: not loaded by `sbx --help`, which imports this module

    canonical = Path(os.path.abspath(state_home)).resolve()
    # fsencode keeps non-UTF-8 path bytes (surrogate-escaped by Python) hashable and stable.
    return hashlib.sha256(os.fsencode(canonical)).hexdigest()[:HOME_HASH_LENGTH]


__all__ = [
    "config_path",
    "state_home",
    "home_hash",
    "state_home_source",
    "host_mounts_home",
    "skills_home",
    "SKILLS_ENV",
    "HOST_MOUNTS_ENV",
    "config_path_is_explicit",
    "CONFIG_ENV",
    "HOME_ENV",
    "CONFIG_FILE_NAME",
    "APP_DIR_NAME",
    "HOME_HASH_LENGTH",
]
