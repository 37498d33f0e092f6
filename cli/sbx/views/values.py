"""Config values as people read them (sizes, durations, empty values), for every view that
shows settings (`sbx config show`, `sbx explain`)."""

from __future__ import annotations

from typing import Any


def setting(item: Any) -> str:
    """A config value as people read it: sizes in IEC units (``4 GiB``), durations in the
    largest whole unit (``1 h``), an empty or unset value as ``none``, lists comma-joined,
    text without quotes. Falls back to the core's own spelling when no typed value came."""
    extra = getattr(item, "extra", None) or {}
    if "raw" not in extra:
        return str(item.value)
    value, name = extra["raw"], str(item.name)
    if value is None or value in ("", [], ()):
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        if name.endswith("_bytes"):
            return iec(value)
        if name.endswith("_ms"):
            return duration(value, 1)
        if name.endswith("_seconds") or name.endswith("_ttl"):
            return duration(value, 1000)
        if name.endswith("cpu_millis"):
            return f"{value / 1000:g} CPU" + ("" if value == 1000 else "s")
        return str(value)
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    return str(value)


def iec(number: int) -> str:
    for unit, name in ((1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if number >= unit and number % unit == 0:
            return f"{number // unit} {name}"
    return f"{number} bytes"


def duration(count: int, ms_per: int) -> str:
    millis = count * ms_per
    for unit, name in ((3_600_000, "h"), (60_000, "min"), (1000, "s")):
        if millis >= unit and millis % unit == 0:
            return f"{millis // unit} {name}"
    return f"{millis} ms"


__all__ = ["duration", "iec", "setting"]
