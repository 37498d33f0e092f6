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

from sbx.base.config.defaults import DEFAULT_SOURCE, DEFAULTS, SCHEMA_RESOURCE, GiB, KiB, MiB
from sbx.base.config.load import load_config, load_config_file
from sbx.base.config.model import (
                                   Config,
                                   EngineEntry,
                                   GcSettings,
                                   MountSettings,
                                   NetworkSettings,
                                   SandboxSettings,
                                   Sourced,
)

__all__ = [
    "load_config",
    "load_config_file",
    "Config",
    "EngineEntry",
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
