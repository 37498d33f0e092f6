"""Kit arg ``pattern`` values: RE2 syntax, matched in linear time (KIT-SPEC-V3 §1.6).

The spec's dialect is RE2 (Go's ``regexp``), not Python's ``re``: no lookaround, no
backreferences, and no backtracking, so a match costs time linear in the value whatever the
pattern. Python's ``re`` backtracks — ``^(a+)+$`` against ``aaaa…a!`` never finishes — so kit
patterns are compiled and matched by RE2 itself (the ``google-re2`` binding), never by ``re``.

A pattern is checked when its descriptor is validated (bad RE2 syntax is ``invalid_kit`` naming
the field) and the same compiled program is used when a value is matched (a whole-value match).
Compiled programs are cached per pattern; RE2 bounds each program's memory (``max_mem``), and a
pattern longer than :data:`MAX_PATTERN_LENGTH` is refused before it reaches the compiler.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any, Final

MAX_PATTERN_LENGTH: Final = 4096  # characters; real arg patterns are a few dozen
# RE2's own default, stated: the compiled program of one pattern never takes more memory.
MAX_PROGRAM_BYTES: Final = 8 << 20
# Friendlier words for what RE2 rejects most often: Perl-only constructs.
_PERL_ONLY: Final = re.compile(r"\(\?[=!]|\(\?<[=!]|\\[1-9]")


class PatternError(ValueError):
    """A pattern RE2 does not accept; the message says why (never quoting a matched value)."""


@lru_cache(maxsize=256)
def compile_pattern(pattern: str) -> Any:
    """The RE2 program for ``pattern``, or :class:`PatternError` saying why there is none."""
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise PatternError(f"the pattern is longer than {MAX_PATTERN_LENGTH} characters")
    if _PERL_ONLY.search(pattern):
        raise PatternError("uses a lookaround or backreference, which RE2 (the spec's regex "
                           "dialect) does not support")
    try:
        encoded = pattern.encode("utf-8")
    except UnicodeEncodeError:
        raise PatternError("the pattern is not valid UTF-8 text") from None
    import re2

    options = re2.Options()
    options.log_errors = False  # RE2 would print its own copy of the error to stderr
    options.max_mem = MAX_PROGRAM_BYTES
    try:
        return re2.compile(encoded, options)
    except re2.error as exc:
        raise PatternError(f"invalid pattern: {_text(exc)} (RE2 syntax)") from None


def full_match(pattern: str, value: str) -> bool:
    """Whether RE2 ``pattern`` matches all of ``value`` (linear time in ``len(value)``).

    Raises :class:`PatternError` for a pattern RE2 does not accept. A value that is not valid
    Unicode text (lone surrogates from a non-UTF-8 command line) is matched byte for byte, as Go
    matches invalid UTF-8: such bytes match no character class.
    """
    program = compile_pattern(pattern)
    return program.fullmatch(value.encode("utf-8", "surrogatepass")) is not None


def check_pattern(pattern: str) -> str | None:
    """Why ``pattern`` is not a usable RE2 pattern, or None."""
    try:
        compile_pattern(pattern)
    except PatternError as exc:
        return str(exc)
    return None


def _text(exc: Exception) -> str:
    detail = exc.args[0] if exc.args else ""
    if isinstance(detail, bytes):
        detail = detail.decode("utf-8", "replace")
    return " ".join(str(detail).split())[:200] or "rejected by RE2"


__all__ = ["MAX_PATTERN_LENGTH", "MAX_PROGRAM_BYTES", "PatternError", "check_pattern",
           "compile_pattern", "full_match"]
