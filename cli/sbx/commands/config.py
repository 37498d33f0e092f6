"""`sbx config path` and `sbx config show`: adapters to :mod:`sbx.usecases.configview`."""

from __future__ import annotations

from typing import Annotated

import typer

from sbx.views import config as config_output


def path(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON envelope.")] = False,
) -> int:
    """Print the path of the config file sbx reads (it need not exist).

    $SBX_CONFIG when set (that file must exist), else $XDG_CONFIG_HOME/sbx/config.toml, else
    ~/.config/sbx/config.toml. Example: $EDITOR "$(sbx config path)"
    """
    from sbx.usecases.configview import config_location

    config_output.config_location(ctx.obj.renderer, config_location(ctx.obj.env))
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
    from sbx.usecases.configview import config_view

    app = ctx.obj
    config_output.config_view(app.renderer, config_view(app.load_config()))
    return 0


__all__ = ["path", "show"]
