"""Where a kit problem is: a path into the descriptor (:class:`Finding`), then a file position
with the source line (:class:`Diagnostic`).

The rules pass, argument expansion and schema validation all report through these types; this
module imports nothing else of sbx, so each of them can use it without importing the others.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from sbx.base.errors import KitError

_SOURCE_WINDOW: Final = 120

Parts = tuple[str | int, ...]


@dataclass(frozen=True)
class Diagnostic:
    path: str  # dotted path, "" for the document itself
    message: str
    file: str
    line: int  # 1-based; 0 when unknown
    col: int  # 1-based; 0 when unknown
    source_line: str = ""

    def render(self) -> str:
        where = f"{self.file}:{self.line}:{self.col}" if self.line else self.file
        subject = f"{self.path}: " if self.path else ""
        text = f"{where}: {subject}{self.message}"
        if self.source_line:
            shown, caret = _window(self.source_line, self.col)
            text += f"\n    {shown}\n    {' ' * caret}^"
        return text

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "message": self.message, "file": self.file,
                "line": self.line, "col": self.col}


@dataclass(frozen=True)
class Finding:
    """A problem found at a path, before it is given a position in a source file.

    ``on_key`` points the position at a mapping key instead of its value (unknown or colliding
    keys). The rules pass and argument expansion produce findings; :func:`position` turns them
    into :class:`Diagnostic` values against whatever source document is at hand.
    """

    parts: Parts
    message: str
    on_key: bool = False


def format_path(parts: Iterable[str | int]) -> str:
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text


def _window(line: str, col: int) -> tuple[str, int]:
    """At most :data:`_SOURCE_WINDOW` characters of ``line`` around ``col`` and the caret's
    offset in them: a one-line flow document must not be repeated whole under every problem."""
    offset = max(col - 1, 0)
    if len(line) <= _SOURCE_WINDOW:
        return line, offset
    start = min(max(offset - _SOURCE_WINDOW // 2, 0), len(line) - _SOURCE_WINDOW)
    end = start + _SOURCE_WINDOW
    head = "..." if start else ""
    tail = "..." if end < len(line) else ""
    return f"{head}{line[start:end]}{tail}", offset - start + len(head)


def position(findings: Iterable[Finding], document: Any, file: str,
             lines: Sequence[str]) -> list[Diagnostic]:
    """Give each finding the position of its path in ``document`` (0:0 when unknown)."""
    out = []
    for finding in findings:
        line, col = locate(document, finding.parts, key=finding.on_key)
        out.append(Diagnostic(format_path(finding.parts), finding.message, file, line, col,
                              line_at(lines, line)))
    return out


def locate(document: Any, parts: Sequence[str | int], *, key: bool = False) -> tuple[int, int]:
    """1-based (line, col) of the value at ``parts``, or of its key with ``key=True``.

    A path that does not exist (a missing field) points at its deepest existing ancestor.
    """
    if key and parts and isinstance(parts[-1], str):
        return key_position(document, parts[:-1], parts[-1])
    return value_position(document, parts)


def _walk(document: Any, parts: Sequence[str | int]) -> tuple[Any, Any]:
    """The deepest existing (parent, key) pair along ``parts``."""
    parent: Any = None
    key: Any = None
    node: Any = document
    for part in parts:
        try:
            in_mapping = isinstance(node, Mapping) and part in node
        except TypeError:  # an unhashable path part cannot be a key
            in_mapping = False
        in_list = isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)
        if not (in_mapping or in_list):
            break
        parent, key, node = node, part, node[part]
    return parent, key


def value_position(document: Any, parts: Sequence[str | int]) -> tuple[int, int]:
    parent, key = _walk(document, parts)
    try:
        if parent is None:
            # The document itself: line 1 of a parsed file; unknown for plain data.
            return (1, 1) if hasattr(document, "lc") else (0, 0)
        # ruamel's round-trip nodes carry positions in `.lc` (0-based line and column).
        positions: Any = parent.lc
        if isinstance(parent, Mapping):
            # A null value has no text of its own; ruamel places it after the key, often on the
            # next line, so point at the key instead.
            line, col = positions.key(key) if parent[key] is None else positions.value(key)
        else:
            line, col = positions.item(key)
        return line + 1, col + 1
    except (AttributeError, KeyError, TypeError, IndexError):
        return 0, 0


def key_position(document: Any, parts: Sequence[str | int], key: str) -> tuple[int, int]:
    parent, last = _walk(document, parts)
    node: Any = document if parent is None else parent[last]
    try:
        line, col = node.lc.key(key)
        return line + 1, col + 1
    except (AttributeError, KeyError, TypeError, IndexError):
        return value_position(document, parts)


def line_at(lines: Sequence[str], line: int) -> str:
    return lines[line - 1] if 0 < line <= len(lines) else ""


def to_plain(value: Any) -> Any:
    """ruamel's round-trip types → plain dict/list/str/int/float/bool/None."""
    if isinstance(value, Mapping):
        return {_plain_key(k): to_plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [to_plain(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    scalar = getattr(value, "value", None)  # ruamel TaggedScalar (`!!str 5`, custom tags)
    if isinstance(scalar, str):
        return str(scalar)
    if hasattr(value, "isoformat"):  # YAML timestamps: keep the spelling a string field wants
        return str(value.isoformat())
    return str(value)


def _plain_key(key: Any) -> str:
    if isinstance(key, bool):
        return "true" if key else "false"
    if key is None:
        return "null"
    return str(to_plain(key))


# How much of the document is shown: every problem is counted and kept in `details`, but the
# human message lists the first ones, each with at most a window of its source line.
MAX_SHOWN_DIAGNOSTICS: Final = 50
MAX_KEPT_DIAGNOSTICS: Final = 1000


def sort_diagnostics(diagnostics: Iterable[Diagnostic]) -> list[Diagnostic]:
    unique: dict[tuple[str, str], Diagnostic] = {}
    for diagnostic in diagnostics:
        unique.setdefault((diagnostic.path, diagnostic.message), diagnostic)
    return sorted(unique.values(), key=lambda d: (d.line, d.col, d.path, d.message))


def fail(diagnostics: Sequence[Diagnostic]) -> Any:
    count = len(diagnostics)
    file = diagnostics[0].file if diagnostics else "descriptor"
    head = f"{file} is not a valid kit descriptor ({count} problem{'s' if count != 1 else ''})"
    shown = diagnostics[:MAX_SHOWN_DIAGNOSTICS]
    body = "\n\n".join(d.render() for d in shown)
    if count > len(shown):
        body += f"\n\n... and {count - len(shown)} more problems (--json lists up to " \
                f"{MAX_KEPT_DIAGNOSTICS})"
    details: dict[str, Any] = {
        "diagnostics": [d.as_dict() for d in diagnostics[:MAX_KEPT_DIAGNOSTICS]]}
    if count > MAX_KEPT_DIAGNOSTICS:
        details["diagnostics_total"] = count
    raise KitError(head, body=body,
                   hint="Fix each field at the path and position shown.", details=details)


__all__ = ["MAX_KEPT_DIAGNOSTICS", "MAX_SHOWN_DIAGNOSTICS", "Diagnostic", "Finding", "Parts",
           "fail", "format_path", "key_position", "line_at", "locate", "position",
           "sort_diagnostics", "to_plain", "value_position"]
