"""The config's "valid" verdicts, kept in the state home's cache (``cache/config/``) so a
process that reads a config file it has seen pass before builds no schema validator.

The key is a digest of the file's bytes, sbx's own code (:func:`code_fingerprint`) and the
shipped config schema's bytes: validation is a pure function of the three, so an edit to any
of them is a miss. Only a pass is recorded; an invalid file is checked, and refused with the
same problems, every time.

An entry is trusted only as this user's own file in a safe state home (:mod:`sbx.seams.owned`).
Anything else (missing, damaged, another user's, a home that cannot be trusted or written) is
a miss, not a refusal: a miss only runs the full check again, and the config is loaded by
commands that must work whatever the state home's condition (``sbx config show``,
``sbx doctor``, which report it themselves).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Final

import sbx
from sbx.base import config as config_loader
from sbx.base import paths
from sbx.base.errors import SbxError
from sbx.seams import owned
from sbx.usecases.codeprint import code_fingerprint

VERDICTS_DIR: Final = ("cache", "config")
# sbx.base.config.defaults.SCHEMA_RESOURCE (a test keeps them equal), not imported: that package
# is the loader itself, which `sbx --help` and a cached run never load, while this module is
# imported with the context.
SCHEMA_FILE: Final = "schema/config.schema.json"
_KEY_VERSION: Final = b"sbx-config-valid-v1"
_MAX_ENTRY_BYTES: Final = 1024
_VALID: Final = {"config": "valid"}


@cache
def _schema_bytes() -> bytes:
    """The shipped schema as installed (a read, not a parse: no importlib.resources)."""
    try:
        return (Path(sbx.__file__).parent / SCHEMA_FILE).read_bytes()
    except OSError:  # pragma: no cover - a zipped install: the code fingerprint still keys it
        return b""


def verdict_key(raw: bytes) -> str:
    """The cache key of a config file's bytes under this code and schema."""
    digest = hashlib.sha256(_KEY_VERSION)
    for part in (code_fingerprint().encode(), hashlib.sha256(_schema_bytes()).digest(), raw):
        digest.update(b"\0" + str(len(part)).encode() + b"\0" + part)
    return digest.hexdigest()


class ConfigVerdicts:
    """:class:`sbx.base.config.load.ValidVerdicts` over the state home named by ``env``."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self._env = env

    def _entry(self, raw: bytes) -> Path | None:
        try:
            home = paths.state_home(self._env)
        except SbxError:  # no state home at all: nothing to keep verdicts in
            return None
        return home.joinpath(*VERDICTS_DIR, f"{verdict_key(raw)}.json")

    def known_valid(self, raw: bytes) -> bool:
        entry = self._entry(raw)
        if entry is None:
            return False
        try:
            stored = owned.read_cache(entry, max_bytes=_MAX_ENTRY_BYTES)
        except (SbxError, OSError):  # not this user's own, or unreadable: never trusted
            return False
        known: bool = stored == _VALID
        return known

    def record_valid(self, raw: bytes) -> None:
        entry = self._entry(raw)
        if entry is None:
            return
        try:
            owned.write_cache(entry, _VALID)  # best effort: a miss only costs the check
        except (SbxError, OSError):  # an unsafe state home: its own commands report it
            return


def load_config(env: Mapping[str, str]) -> config_loader.Config:
    """The config file, validated by the schema once per content: a later process reads the
    verdict this store remembered (the one way a command loads its config)."""
    return config_loader.load_config(env, verdicts=ConfigVerdicts(env))


__all__ = ["SCHEMA_FILE", "VERDICTS_DIR", "ConfigVerdicts", "load_config", "verdict_key"]
