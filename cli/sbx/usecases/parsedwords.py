"""What the command-line parser made of words whose meaning is the words alone (``sbx pull``),
kept so that the same words next time need no parser: one parser, its answer remembered.

The key is the words (global flags included), the ``--`` tail and sbx's code fingerprint, so an
edited or upgraded sbx parses afresh. A missing, damaged or foreign-format entry is a miss; an
entry that is not this user's own is refused (``state_unsafe``), as every cache of the state
home is.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from sbx import __version__
from sbx.base import paths
from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.base.strictjson import as_bool, as_int
from sbx.seams import owned
from sbx.usecases.codeprint import code_fingerprint

if TYPE_CHECKING:
    from sbx.usecases.context import AppContext

FORMAT: Final = 1
MAX_ENTRIES: Final = 32  # parses kept per state home (the oldest go first)
MAX_ENTRY_BYTES: Final = 256 * 1024


@dataclass(frozen=True)
class Parsed:
    values: Mapping[str, Any]  # the command's parameters, as the parser gave them
    verbose: int
    traceback: bool


def cache_dir(state_home: Path) -> Path:
    return state_home / "cache" / "words"


def _key(verb: str, argv: Sequence[str], passthrough: Sequence[str] | None) -> str:
    material = {"format": FORMAT, "sbx": __version__, "code": code_fingerprint(), "verb": verb,
                "argv": list(argv),
                "passthrough": None if passthrough is None else list(passthrough)}
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode(
        "utf-8", "surrogatepass")).hexdigest()


def remember(ctx: AppContext, verb: str, values: Mapping[str, Any]) -> None:
    """Keep the parse of this invocation's words (a failure to write only costs time)."""
    if ctx.argv is None:
        return
    key = _key(verb, ctx.argv, ctx.passthrough)
    entry = {"format": FORMAT, "key": key, "verb": verb, "values": dict(values),
             "verbose": ctx.verbose, "traceback": ctx.traceback}
    directory = cache_dir(ctx.state_home)
    if owned.write_cache(directory / f"{key}.json", entry):
        _evict(directory)


def recall(env: Mapping[str, str], verb: str, argv: Sequence[str],
           passthrough: Sequence[str] | None) -> Parsed | None:
    """The parse of exactly these words, or None (never seen, or not readable as one)."""
    try:
        key = _key(verb, argv, passthrough)
        home = paths.state_home(env)
        owned.check_home(home, paths.state_home_source(env))
        entry = owned.read_cache(cache_dir(home) / f"{key}.json", max_bytes=MAX_ENTRY_BYTES)
        if not isinstance(entry, dict) or entry.get("format") != FORMAT \
                or entry.get("key") != key or entry.get("verb") != verb:
            return None
        values = entry["values"]
        if not isinstance(values, dict):
            return None
        return Parsed(values, as_int(entry["verbose"]), as_bool(entry["traceback"]))
    except SbxError as error:
        if error.reason is Reason.STATE_UNSAFE:
            raise  # someone else's entry or home: refused, never a quiet miss
        return None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _evict(directory: Path) -> None:
    with contextlib.suppress(OSError):
        entries = [e for e in os.scandir(directory) if e.name.endswith(".json")]
        if len(entries) <= MAX_ENTRIES:
            return
        entries.sort(key=lambda e: e.stat().st_mtime_ns)
        for entry in entries[:len(entries) - MAX_ENTRIES]:
            with contextlib.suppress(OSError):
                os.unlink(entry.path)


__all__ = ["FORMAT", "MAX_ENTRIES", "Parsed", "cache_dir", "recall", "remember"]
