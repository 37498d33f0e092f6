"""Output of the config commands."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sbx.base.render import Envelope, Renderer

if TYPE_CHECKING:
    from sbx.usecases.configview import ConfigLocation, ConfigView


def config_location(renderer: Renderer, result: ConfigLocation) -> None:
    if renderer.as_json:
        renderer.envelope(Envelope(command="config path", status="ok", exit_code=0,
                               data=result.as_dict()))
        return
    renderer.plain(str(result.path))


def config_view(renderer: Renderer, result: ConfigView) -> None:
    if renderer.as_json:
        renderer.envelope(Envelope(command="config show", status="ok", exit_code=0,
                               data=result.as_dict()))
        return
    state = "" if result.exists else " (absent: every value is the default)"
    renderer.plain(f"config file: {result.path}{state}")
    for item in result.settings:
        renderer.plain(f"  {item.name} = {_setting(item)}  ({item.source}; {item.change})")


def _setting(item: Any) -> str:
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
            return _iec(value)
        if name.endswith("_ms"):
            return _duration(value, 1)
        if name.endswith("_seconds") or name.endswith("_ttl"):
            return _duration(value, 1000)
        if name.endswith("cpu_millis"):
            return f"{value / 1000:g} CPU" + ("" if value == 1000 else "s")
        return str(value)
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    return str(value)


def _iec(number: int) -> str:
    for unit, name in ((1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if number >= unit and number % unit == 0:
            return f"{number // unit} {name}"
    return f"{number} bytes"


def _duration(count: int, ms_per: int) -> str:
    millis = count * ms_per
    for unit, name in ((3_600_000, "h"), (60_000, "min"), (1000, "s")):
        if millis >= unit and millis % unit == 0:
            return f"{millis // unit} {name}"
    return f"{millis} ms"

__all__ = ['config_location', 'config_view']
