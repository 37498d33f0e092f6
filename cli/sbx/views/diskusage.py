"""Output of `sbx df`."""

from __future__ import annotations

from typing import Any

from sbx.base.render import Envelope, Renderer

SECTIONS = (("images", "IMAGES"), ("sandboxes", "SANDBOXES"), ("volumes", "VOLUMES"),
            ("homes", "HOMES"), ("state", "STATE HOME"), ("reclaimable", "RECLAIMABLE BY GC"))


def disk_usage(renderer: Renderer, usage: Any, *, as_json: bool) -> None:
    if as_json:
        renderer.envelope(Envelope(command="df", status="ok", exit_code=0,
                                   data=usage.as_dict()))
        return
    totals = usage.totals()
    renderer.table(("TYPE", "COUNT", "SIZE"),
                   [(title, str(len(getattr(usage, key))), human(totals[key]))
                    for key, title in SECTIONS])
    for key, title in SECTIONS:
        items = getattr(usage, key)
        if not items:
            continue
        renderer.message("")
        renderer.message(title)
        renderer.table(("NAME", "SIZE", "DETAIL"),
                       [(u.name, human(u.bytes), u.detail or "-") for u in items])
    if usage.note:
        renderer.message(f"gc: {usage.note}")


def human(size: int) -> str:
    value = float(size)
    for unit in ("B", "kB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f}{unit}" if unit == "B" else f"{value:.1f}{unit}"
        value /= 1000
    return f"{size}B"  # pragma: no cover - the loop returns


__all__ = ["disk_usage", "human"]
