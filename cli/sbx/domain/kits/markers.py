"""The markers that delimit sbx's managed section of an agent profile, and their neutraliser.

``agent-context@1`` writes a profile (``AGENTS.md``) whose kit index sits between
:data:`INDEX_START` and :data:`INDEX_END`. Kit prose goes inside that section and is untrusted
(KIT-SPEC-V3 §3: "treat as untrusted prose"), so it must not be able to close the section early
or open a forged one. A reader — a person, a tool, the agent's model — does not compare markers
byte for byte: ``<!--SBX:END-->``, ``<!--  sbx : end -->``, the same in fullwidth letters
or with Cyrillic look-alikes for s and x, or a marker split by a zero-width space all read as
sbx's own. :func:`neutralise` therefore rewrites every comment opener that *reads* as
``<!-- sbx`` — compared after Unicode compatibility folding (NFKC), case folding, dropping
invisible characters (format, combining and control characters), treating any whitespace and
any dash as equivalent, and mapping the common Cyrillic/Greek look-alikes — to ``<!-- kit``.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Final

MARKER_PREFIX: Final = "<!-- sbx:"
INDEX_START: Final = "<!-- sbx:kit-index -->"
INDEX_END: Final = "<!-- sbx:end -->"
REPLACEMENT: Final = "<!-- kit"

# Letters that look like the ones in "<!-- sbx" but survive NFKC (Unicode's confusables for
# exactly these characters; cheap, and the folding below catches the rest).
_LOOKALIKES: Final = {
    # s
    "\u0455": "s", "\u0405": "s", "\ua731": "s", "\u01bd": "s", "\u0282": "s",
    # b
    "\u0184": "b", "\u042c": "b", "\u044c": "b", "\u13cf": "b", "\u15af": "b", "\u0185": "b",
    "\u0432": "b", "\u0412": "b", "\u03b2": "b", "\u0392": "b",
    # x
    "\u0445": "x", "\u0425": "x", "\u03c7": "x", "\u03a7": "x", "\u00d7": "x", "\u2a2f": "x",
    "\u166e": "x", "\u157d": "x",
    # <  and  !
    "\u2039": "<", "\u02c2": "<", "\u1438": "<", "\u2329": "<", "\u3008": "<", "\u276e": "<",
    "\u01c3": "!", "\u2d51": "!",
}
_OPENER: Final = re.compile(r"< *! *(?:- *)+s *b *x")
# Every character that folds to "<" (NFKC: fullwidth and small forms; the look-alikes above).
_LESS_THAN: Final = frozenset({"<", "\uff1c", "\ufe64",
                               *(c for c, to in _LOOKALIKES.items() if to == "<")})


def _fold(char: str) -> str:
    """What ``char`` reads as for the comparison ("" when it is invisible)."""
    category = unicodedata.category(char)
    if char.isspace():
        return " "
    if category in ("Cf", "Cc", "Mn", "Me"):
        return ""
    if category == "Pd" or char in "\u2212\u2043\ufe63\uff0d":
        return "-"
    folded = unicodedata.normalize("NFKC", char).casefold()
    return "".join(_LOOKALIKES.get(c, c) for c in folded)


def neutralise(text: str) -> str:
    """``text`` with every opener that reads as ``<!-- sbx`` rewritten to ``<!-- kit``."""
    if _LESS_THAN.isdisjoint(text):
        return text  # nothing that reads as "<": the common case costs one scan
    folded: list[str] = []
    origin: list[int] = []  # for each folded character, the index of its source character
    for index, char in enumerate(text):
        for piece in _fold(char):
            folded.append(piece)
            origin.append(index)
    skeleton = "".join(folded)
    out: list[str] = []
    kept = 0
    for match in _OPENER.finditer(skeleton):
        start = origin[match.start()]
        end = origin[match.end() - 1] + 1
        out.append(text[kept:start])
        out.append(REPLACEMENT)
        kept = end
    out.append(text[kept:])
    return "".join(out)


__all__ = ["INDEX_END", "INDEX_START", "MARKER_PREFIX", "REPLACEMENT", "neutralise"]
