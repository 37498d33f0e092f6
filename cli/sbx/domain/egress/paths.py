"""Egress request paths: the one normalisation and the path globs rules bound requests by.

Paths are matched after :func:`normalize_path` (query and fragment dropped, unreserved escapes
decoded, ``//`` collapsed, ``.``/``..`` resolved; an encoded ``/`` or ``\\``, a ``..`` above
the root, a control character or a malformed escape make the target invalid and refused, never
matched leniently). **Path parameters** (``;`` in a segment, raw or as ``%3B``) are read the
way servers that strip them (Tomcat, Spring, Jetty) read them *and* the way servers that keep
them read them: a segment whose part before the first ``;`` is ``.`` or ``..`` (``..;x``,
``%2e%2e;``, ``.%3bx``) *is* ``.``/``..`` and is resolved (so the forwarded path no longer
holds it), and every other segment is matched both with and without its parameters — a deny
applies when either reading matches, an allow only when both do. Path patterns: ``*`` is
exactly one segment (inside a segment it matches any run of characters within that segment),
``**`` any number of segments including none, anchored at both ends; a trailing ``/`` is
ignored for matching. **Paths are case-sensitive** (``/REPOS/x`` is not ``/repos/x``), as HTTP
origins treat them.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Final

_UNRESERVED: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
# RFC 3986 pchar minus the escapes: kept as they are; anything else is percent-encoded.
_PATH_SAFE: Final = _UNRESERVED | frozenset("!$&'()*+,;=:@/")
_HEX: Final = frozenset("0123456789abcdefABCDEF")


def normalize_path(raw: str) -> str | None:
    """The canonical form of a request path, or ``None`` when it cannot be judged safely.

    Drops the query and fragment; decodes escapes of unreserved characters (``%2e`` is ``.``,
    ``%41`` is ``A``) and upper-cases the others; percent-encodes characters a path may not hold
    raw (spaces, non-ASCII as UTF-8); collapses ``//``; resolves ``.`` and ``..`` (a trailing
    ``/`` is kept). ``None`` for a path that does not start with ``/``, an encoded ``/`` or
    ``\\`` (it would split or join segments differently at the origin), a raw ``\\``, a ``..``
    above the root, a control character raw or encoded, or a malformed escape.
    """
    return normalize_path_or_problem(raw)[0]


def normalize_path_or_problem(raw: str, *, pattern: bool = False) -> tuple[str | None, str]:
    """``(path, "")`` or ``(None, what is wrong)``; a pattern keeps ``?``/``#`` as characters."""
    if not pattern:
        for mark in "?#":
            raw = raw.split(mark, 1)[0]
    if not raw.startswith("/"):
        return None, "it does not start with `/`"
    out: list[str] = []
    i = 0
    while i < len(raw):
        char = raw[i]
        if char == "%":
            digits = raw[i + 1:i + 3]
            if len(digits) != 2 or not set(digits) <= _HEX:
                return None, "it holds a malformed percent escape"
            byte = int(digits, 16)
            if byte < 0x20 or byte == 0x7F:
                return None, "it holds an encoded control character"
            if byte in (0x2F, 0x5C):
                return None, "it holds an encoded `/` or `\\`, which origins split differently"
            decoded = chr(byte)
            out.append(decoded if decoded in _UNRESERVED else "%" + digits.upper())
            i += 3
            continue
        code = ord(char)
        if code < 0x20 or code == 0x7F:
            return None, "it holds a control character"
        if char == "\\":
            return None, "it holds a `\\`, which some origins read as `/`"
        if char in _PATH_SAFE:
            out.append(char)
        else:
            try:
                encoded = char.encode("utf-8")
            except UnicodeEncodeError:
                return None, "it holds a character that is not valid unicode"
            out.append("".join(f"%{b:02X}" for b in encoded))
        i += 1
    text = "".join(out)
    stack: list[str] = []
    parts = [_dot_segment(segment) for segment in text.split("/")[1:]]
    for segment in parts:
        if segment in ("", "."):
            continue
        if segment == "..":
            if not stack:
                return None, "its `..` climbs above the root"
            stack.pop()
        else:
            stack.append(segment)
    trailing = bool(stack) and parts[-1] in ("", ".", "..")
    return "/" + "/".join(stack) + ("/" if trailing else ""), ""


_PARAMETERS: Final = re.compile(r";|%3B")  # where a segment's path parameters start


def _bare(segment: str) -> str:
    """A segment without its path parameters (``a;jsessionid=1`` → ``a``; ``;x`` → ``""``)."""
    return _PARAMETERS.split(segment, maxsplit=1)[0]


def without_parameters(segment: str) -> str:
    """A normalised path segment as parameter-stripping servers read it (``token;x`` and
    ``token%3Bx`` are ``token``)."""
    return _bare(segment)


def _dot_segment(segment: str) -> str:
    """``.``/``..`` carrying parameters (``..;x``, ``.%3Bx``) or an empty segment carrying
    them (``;x``) are what parameter-stripping servers make of them: ``..``, ``.``, ``""``."""
    bare = _bare(segment)
    return bare if bare in ("", ".", "..") else segment


def _segments(path: str) -> tuple[str, ...]:
    return tuple(s for s in path.split("/") if s)


@lru_cache(maxsize=8192)
def path_pattern(text: str) -> tuple[str, ...] | None:
    if not text.startswith("/"):
        return None
    canonical, _ = normalize_path_or_problem(text, pattern=True)
    return None if canonical is None else _segments(canonical)


@lru_cache(maxsize=4096)
def _segment_regex(glob: str) -> re.Pattern[str]:
    return re.compile("[^/]*".join(re.escape(piece) for piece in glob.split("*")))


def _segment_matches(glob: str, segment: str) -> bool:
    if glob == "*":
        return True
    if "*" in glob:
        return _segment_regex(glob).fullmatch(segment) is not None
    return glob == segment


def _glob_segments(pattern: tuple[str, ...], segments: tuple[str, ...]) -> bool:
    # reach[j]: the pattern so far can consume exactly the first j segments.
    reach = [True] + [False] * len(segments)
    for glob in pattern:
        if glob == "**":
            seen = False
            for j, ok in enumerate(reach):
                seen = seen or ok
                reach[j] = seen
        else:
            reach = [False] + [reach[j] and _segment_matches(glob, segments[j])
                               for j in range(len(segments))]
    return reach[-1]


def path_matches(pattern: str, path: str, *, deny: bool = False) -> bool:
    """Whether the path glob ``pattern`` covers the already-normalised ``path``.

    Segments with path parameters are read both as sent and without their parameters (the
    two ways origins read them): for an allow (``deny=False``) both readings must match, for
    a deny either one does, so neither kind of origin can be reached around a rule.
    """
    compiled = path_pattern(pattern)
    if compiled is None:
        return False
    segments = _segments(path)
    raw = _glob_segments(compiled, segments)
    if not any(_PARAMETERS.search(s) for s in (*segments, *compiled)):
        return raw
    stripped = _glob_segments(tuple(_bare(g) for g in compiled),
                              tuple(_bare(s) for s in segments))
    return (raw or stripped) if deny else (raw and stripped)


def valid_path_pattern(text: str) -> bool:
    """Whether ``text`` is a path glob the evaluator can match (starts with ``/``)."""
    return path_pattern(text) is not None
