"""Output of the config commands."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sbx.base.render import Envelope, Renderer
from sbx.views.values import setting

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
        renderer.plain(f"  {item.name} = {setting(item)}  ({item.source}; {item.change})")


__all__ = ["config_location", "config_view"]
