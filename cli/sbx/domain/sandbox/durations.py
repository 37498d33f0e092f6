"""Durations as people write them on a command line: ``90``, ``90s``, ``30m``, ``2h`` (and
``7d`` where days make sense: how long a policy rule lasts, how far back a log goes)."""

from __future__ import annotations

import math
import re
from typing import Final

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason

_DURATION: Final = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$", re.IGNORECASE)
_UNIT_SECONDS: Final = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str, *, flag: str = "--timeout", days: bool = False) -> float:
    """Seconds; a bare number is seconds. Zero, negative and malformed values are refused, and
    days (``7d``) unless ``days``."""
    match = _DURATION.match(text)
    unit = match.group(2).lower() if match is not None else ""
    if match is None or (unit == "d" and not days):
        forms = "90, 90s, 30m, 2h or 7d" if days else "90, 90s, 30m or 2h"
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"{flag} must be a duration like {forms}, not {text!r}")
    seconds = float(match.group(1)) * _UNIT_SECONDS[unit]
    if not math.isfinite(seconds) or seconds <= 0:
        raise SbxError(Reason.INVALID_ARGUMENT, f"{flag} must be longer than zero, not {text!r}")
    return seconds


__all__ = ["parse_duration"]
