"""The typer application: global options build one AppContext; commands are thin adapters.

Command modules are imported here, but each imports its core module (and through it the docker
SDK) only inside the command function, so ``sbx --help`` stays fast.
"""

from __future__ import annotations

from typing import Annotated

import typer

from sbx import __version__
from sbx.commands import explain as explain_command
from sbx.commands import run as run_command
from sbx.commands import version as version_command

app = typer.Typer(
    name="sbx",
    help="Run AI agents inside locked-down Docker containers, with the permissions their kits "
         "declare.",
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"sbx {__version__}")
        raise typer.Exit(0)


@app.callback()
def main_callback(
    ctx: typer.Context,
    verbose: Annotated[int, typer.Option(
        "--verbose", "-v", count=True,
        help="More detail on stderr (repeat for engine calls).")] = 0,
    traceback: Annotated[bool, typer.Option(
        "--traceback", help="Re-raise unexpected errors with a traceback.")] = False,
    version: Annotated[bool, typer.Option(
        "--version", callback=_version_callback, is_eager=True,
        help="Print the version and exit.")] = False,
) -> None:
    """sbx: hardened sandboxes for AI agents."""
    launch = ctx.obj
    ctx.obj = launch.context(verbose=verbose, traceback=traceback)


app.command("run", context_settings={"allow_interspersed_args": True})(run_command.run)
app.command("explain")(explain_command.explain)
app.command("version")(version_command.version)

__all__ = ["app"]
