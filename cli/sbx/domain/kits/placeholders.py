"""The ``${{ kit.args.NAME }}`` and ``${{ kit.env.NAME }}`` placeholders of KIT-SPEC-V3 §3: how
they are spelled and how to find them in text. Pure text functions, shared by the rules pass and
argument expansion.
"""

from __future__ import annotations

import re
from typing import Final

_WS: Final = r"[ \t\n\f\r]*"  # RE2's \s: ASCII only, as in the reference implementation
_NAME: Final = r"[A-Za-z_][A-Za-z0-9_]*"
_BOUNDARY: Final = r"(?![A-Za-z0-9_])"
ARG_REF: Final = re.compile(rf"\$\{{\{{{_WS}kit\.args\.({_NAME}){_WS}\}}\}}")
ENV_REF: Final = re.compile(rf"\$\{{\{{{_WS}kit\.env\.({_NAME}){_WS}\}}\}}")
ARG_OPENER: Final = re.compile(rf"\$\{{\{{{_WS}kit\.args{_BOUNDARY}")
ENV_OPENER: Final = re.compile(rf"\$\{{\{{{_WS}kit\.env{_BOUNDARY}")
KIT_OPENER: Final = re.compile(rf"\$\{{\{{{_WS}kit\.(?:args|env){_BOUNDARY}")
ARG_NAME: Final = re.compile(_NAME)


def contains_arg_ref(text: str) -> bool:
    return "${{" in text and ARG_REF.search(text) is not None


def contains_env_ref(text: str) -> bool:
    """Any ``${{ kit.env`` opener, well-formed or not (a malformed one must fail, not pass)."""
    return "${{" in text and ENV_OPENER.search(text) is not None


def contains_placeholder(text: str) -> bool:
    return "${{" in text and KIT_OPENER.search(text) is not None


def referenced_args(text: str) -> list[str]:
    """Arg names referenced in ``text``, in order of first appearance."""
    return list(dict.fromkeys(m.group(1) for m in ARG_REF.finditer(text)))


def whole_arg_ref(text: str) -> str | None:
    """The arg name when ``text`` is exactly one reference, else None."""
    match = ARG_REF.fullmatch(text)
    return match.group(1) if match else None


def malformed_placeholders(text: str) -> bool:
    """Whether a ``${{ kit.args`` / ``${{ kit.env`` opener does not start a valid reference."""
    if "${{" not in text:
        return False
    for opener in KIT_OPENER.finditer(text):
        start = opener.start()
        if not (ARG_REF.match(text, start) or ENV_REF.match(text, start)):
            return True
    return False


__all__ = ["ARG_NAME", "ARG_OPENER", "ARG_REF", "ENV_OPENER", "ENV_REF", "KIT_OPENER",
           "contains_arg_ref", "contains_env_ref", "contains_placeholder", "malformed_placeholders",
           "referenced_args", "whole_arg_ref"]
