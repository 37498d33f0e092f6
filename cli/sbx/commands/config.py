"""`sbx config path` and `sbx config show`: adapters to :mod:`sbx.usecases.configview`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from sbx.base.deferred import deferred
from sbx.views import config as config_output

if TYPE_CHECKING:
    from sbx.usecases import configview
else:  # deferred: the config loader and its schema; `sbx config show --help` loads none
    configview = deferred("sbx.usecases.configview")


def path(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON envelope.")] = False,
) -> int:
    """Print the path of the config file sbx reads (it need not exist).

    $SBX_CONFIG when set (that file must exist), else $XDG_CONFIG_HOME/sbx/config.toml, else
    ~/.config/sbx/config.toml. Example: $EDITOR "$(sbx config path)"
    """
    config_output.config_location(ctx.obj.renderer, configview.config_location(ctx.obj.env))
    return 0


def show(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON envelope.")] = False,
) -> int:
    """Show every setting in effect, with its value and where it came from.

    Each line is `section.key = value  (source; how to change it)`, where the source is the
    config file and line, or `default`. The file is validated as every command validates it:
    an unknown key or an out-of-range value is invalid_config.
    """
    app = ctx.obj
    config_output.config_view(app.renderer, configview.config_view(app.load_config()))
    return 0


__all__ = ["path", "show"]
