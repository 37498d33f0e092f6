"""Strict decoding of kit descriptors (KIT-SPEC-V3 §1) with positioned diagnostics (§11).

YAML is parsed as YAML 1.2 by ruamel (``yes``/``on`` stay strings, as in Go's yaml.v3) with
duplicate keys rejected. The document is checked in two passes whose findings are reported
together: sbx's own JSON Schema (``schema/kit.schema.json`` plus one config schema per well-known
capability type under ``schema/capabilities/``), then the cross-entry rules a schema cannot state
(:mod:`sbx.domain.kits.rules`: arity, dedup keys, versions and names, group rules,
inject-within-allow,
...). Every violation becomes a :class:`Diagnostic` carrying the dotted path
(``capabilities[2].config.runtime.allow[0]``) and ``file:line:col`` with the source line and a
caret. All independent problems are collected and reported together, in a deterministic order.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from sbx.domain.kits.diagnostics import (
    Diagnostic,
    fail,
    position,
    sort_diagnostics,
    to_plain,
)
from sbx.domain.kits.document import MAX_DESCRIPTOR_BYTES, load_document, too_large
from sbx.domain.kits.schema import validate_document, validation_fingerprint
from sbx.seams import owned
from sbx.seams.host import lookup

SYNTAX_LINE: Final = "# syntax=docker/sandbox-kit:3"


@dataclass(frozen=True)
class Descriptor:
    """A decoded, grammar-valid descriptor as plain Python data."""

    data: Mapping[str, Any]
    file: str

    @property
    def kind(self) -> str:
        # `sandbox` is the pre-rename spelling of `workload` (KIT-SPEC-V3 §1.3).
        kind = str(self.data["kind"])
        return "workload" if kind == "sandbox" else kind

    @property
    def capabilities(self) -> list[Mapping[str, Any]]:
        return list(self.data.get("capabilities") or [])


def parse_descriptor_text(text: str, file: str, *, authored: bool = True) -> Descriptor:
    """Decode and validate one descriptor; raise :class:`KitError` listing every problem.

    ``authored`` applies the rules that only bind what an author writes (``deb/``/``apk/``
    provides are publisher-derived); pass False for a descriptor read from a published kit.
    """
    lines = text.splitlines()
    document = load_document(text, file)
    diagnostics = check_document(document, file, lines, authored=authored)
    if diagnostics:
        fail(diagnostics)
    return Descriptor(data=to_plain(document), file=file)


def check_document(document: Any, file: str, lines: Sequence[str], *, authored: bool = True,
                   effective: bool = False, positions: Any = None) -> list[Diagnostic]:
    """Schema and rules together: every independent problem, deduplicated and sorted.

    ``effective`` is the strict pass over an expanded descriptor: no ``${{ kit.args.* }}`` or
    ``${{ kit.env.* }}`` reference may remain. ``positions`` is the ruamel document to take
    line and column from when ``document`` itself is plain data (an expanded copy).
    """
    # Deferred: the rules load every capability handler, which reading a lock or a stored kit
    # (sbx pull, the plan cache) never needs; only a descriptor being validated does.
    from sbx.domain.kits.rules import findings

    where = document if positions is None else positions
    plain = to_plain(document)
    found = validate_document(plain, file, lines, positions=where)
    found.extend(position(findings(plain, authored=authored, effective=effective),
                          where, file, lines))
    return sort_diagnostics(found)


def parse_descriptor_file(path: Path, *, cache_dir: Path | None = None) -> Descriptor:
    """Parse and validate a descriptor file.

    With ``cache_dir``, a descriptor whose exact text already passed validation under this
    exact schema and rule set is read back from the cache instead of being parsed again:
    validation is a pure function of (schema, rules, text), and skipping the YAML parser and
    jsonschema saves tens of milliseconds on every run. Anything that fails is never cached.
    """
    text = read_descriptor_text(path)
    if cache_dir is None:
        return parse_descriptor_text(text, str(path))
    key = hashlib.sha256(
        f"sbx-descriptor-v3\0{validation_fingerprint()}\0{text}".encode("utf-8", "surrogatepass")
    ).hexdigest()
    entry = cache_dir / f"{key}.json"
    # Only this user's own entry is read (sbx.seams.owned); a damaged one is a miss.
    data = owned.read_cache(entry, max_bytes=MAX_DESCRIPTOR_BYTES * 4)
    if isinstance(data, dict):
        return Descriptor(data=data, file=str(path))
    descriptor = parse_descriptor_text(text, str(path))
    owned.write_cache(entry, descriptor.data)  # best effort: a miss only costs speed
    return descriptor


def read_descriptor_text(path: Path) -> str:
    """The text of a descriptor file, read no further than the size limit: a huge file, a
    FIFO or a device is refused (``invalid_kit``) without being read whole or blocking."""
    file = str(path)
    try:
        found = lookup.read_if_regular(path, MAX_DESCRIPTOR_BYTES)
    except (OSError, ValueError) as exc:
        fail([Diagnostic("", f"cannot read descriptor: {_os_reason(exc)}", file, 0, 0)])
    if not found.regular:
        fail([Diagnostic("", "the descriptor is not a regular file", file, 0, 0)])
    if found.head is None:
        fail([too_large(file, found.size)])
    raw = found.head or b""  # never None here: fail raised
    if len(raw) > MAX_DESCRIPTOR_BYTES:
        fail([too_large(file, None)])
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        fail([Diagnostic("", f"the descriptor is not UTF-8 text (byte offset {exc.start})",
                          file, 0, 0)])
    raise AssertionError("unreachable")  # pragma: no cover - fail always raises


def _os_reason(exc: Exception) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return " ".join(str(exc).split())[:200]


def raise_diagnostics(diagnostics: Sequence[Diagnostic]) -> None:
    if diagnostics:
        fail(sort_diagnostics(diagnostics))


__all__ = ["SYNTAX_LINE", "Descriptor", "check_document", "parse_descriptor_file",
           "parse_descriptor_text", "raise_diagnostics", "read_descriptor_text"]
