"""Durations as people write them on a command line: ``90``, ``90s``, ``30m``, ``2h``."""

from __future__ import annotations

import math
import re
from typing import Final

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason

_DURATION: Final = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*$", re.IGNORECASE)
_UNIT_SECONDS: Final = {"": 1, "s": 1, "m": 60, "h": 3600}


def parse_duration(text: str, *, flag: str = "--timeout") -> float:
    """Seconds; a bare number is seconds. Zero, negative and malformed values are refused."""
    match = _DURATION.match(text)
    if match is None:
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"{flag} must be a duration like 90, 90s, 30m or 2h, not {text!r}")
    seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2).lower()]
    if not math.isfinite(seconds) or seconds <= 0:
        raise SbxError(Reason.INVALID_ARGUMENT, f"{flag} must be longer than zero, not {text!r}")
    return seconds


__all__ = ["parse_duration"]
