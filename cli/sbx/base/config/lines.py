"""The TOML line scanner: where each key and table of a config file is, for messages that
name a line."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

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


def key_lines(text: str) -> dict[tuple[str, ...], int]:
    """Map every table and key path to the line where it first appears."""
    lines: dict[tuple[str, ...], int] = {}
    for entry in _scan(text):
        # A dotted key also introduces its parent tables (`sandbox.pids = 1` creates [sandbox]).
        for end in range(1, len(entry.path) + 1):
            lines.setdefault(entry.path[:end], entry.line)
    return lines


def repeat_line(text: str) -> int | None:
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


def line_of(lines: Mapping[tuple[str, ...], int], path: Iterable[str | int]) -> int:
    """Line of the key, else of its nearest enclosing table, else 1."""
    keys = tuple(part for part in path if isinstance(part, str))
    for end in range(len(keys), 0, -1):
        if keys[:end] in lines:
            return lines[keys[:end]]
    return 1


# --- validation --------------------------------------------------------------------------------


__all__ = ["key_lines", "line_of", "repeat_line"]
