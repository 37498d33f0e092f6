"""`sbx config path` and `sbx config show`: the config file sbx reads and every value in effect.

``show`` loads the config exactly as every command does (:func:`sbx.base.config.load_config`, so an
invalid file is refused with ``invalid_config`` here too) and lists each setting with its value
and source, in the form ``sbx explain WORKLOAD`` uses (:func:`sbx.usecases.explain.config_item`).
``path`` does not read the file: it says which file would be read, why that one, and whether it
exists.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sbx.base import paths
from sbx.base.config import Config
from sbx.base.errors import SbxError
from sbx.usecases.explainsandbox import config_item


@dataclass(frozen=True)
class ConfigLocation:
    path: Path
    exists: bool
    chosen_by: str  # SBX_CONFIG | XDG_CONFIG_HOME | HOME
    state_home: Path | None

    def as_dict(self) -> dict[str, Any]:
        return {"path": str(self.path), "exists": self.exists, "chosen_by": self.chosen_by,
                "state_home": str(self.state_home) if self.state_home else None}


@dataclass(frozen=True)
class ConfigView:
    path: Path
    exists: bool
    settings: tuple[Any, ...]  # sbx.usecases.explain.Item: name, value, source, change

    def as_dict(self) -> dict[str, Any]:
        return {"path": str(self.path), "exists": self.exists,
                "settings": [item.as_dict() for item in self.settings]}


def config_location(env: Mapping[str, str]) -> ConfigLocation:
    """Which config file sbx reads (precedence in :mod:`sbx.base.paths`), without reading it."""
    path = paths.config_path(env)
    if paths.config_path_is_explicit(env):
        chosen_by = paths.CONFIG_ENV
    elif env.get("XDG_CONFIG_HOME", "").startswith("/"):
        chosen_by = "XDG_CONFIG_HOME"
    else:
        chosen_by = "HOME"
    try:
        state_home: Path | None = paths.state_home(env)
    except SbxError:  # no HOME nor XDG variable: shown as unknown, `config path` still answers
        state_home = None
    return ConfigLocation(path, os.path.lexists(path), chosen_by, state_home)


def config_view(config: Config) -> ConfigView:
    """Every setting of the loaded ``config`` with its value and source."""
    return ConfigView(config.path, config.exists,
                      tuple(config_item(key, value, source, config)
                            for key, value, source in config.provenance()))


__all__ = ["ConfigLocation", "ConfigView", "config_location", "config_view"]
