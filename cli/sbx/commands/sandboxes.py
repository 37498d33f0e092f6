"""`sbx ls`, `attach`, `exec`, `logs`, `stop`, `rm`: adapters for named sandboxes
(:mod:`sbx.usecases.named`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from sbx.base.deferred import deferred
from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.views import sandboxes as sandboxes_view

if TYPE_CHECKING:
    from sbx.usecases.named import listing, removal, session
else:  # imported on first use: `sbx --help` loads no use case
    listing = deferred("sbx.usecases.named.listing")
    removal = deferred("sbx.usecases.named.removal")
    session = deferred("sbx.usecases.named.session")

NameArgument = Annotated[str, typer.Argument(metavar="NAME", help="The sandbox's name.")]
NamesArgument = Annotated[list[str], typer.Argument(metavar="NAME...",
                                                    help="One or more sandbox names.")]
PassthroughOption = Annotated[bool, typer.Option(
    "--terminal-passthrough",
    help="Let the sandbox's clipboard, title, hyperlink and notification sequences reach this "
         "terminal (dropped by default).")]


def ls(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON envelope.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print names only.")] = False,
    include_runs: Annotated[bool, typer.Option(
        "--all", help="Also list one-shot runs that are running now.")] = False,
) -> int:
    """List named sandboxes: NAME, WORKLOAD, KITS, STATUS, WORKSPACE, CREATED."""
    app = ctx.obj
    statuses = listing.list_sandboxes(app, include_runs=include_runs)
    sandboxes_view.sandbox_list(app.renderer, statuses, quiet=quiet)
    return 0


def attach(ctx: typer.Context, name: NameArgument,
           terminal_passthrough: PassthroughOption = False) -> int:
    """Attach to a running named sandbox (the detach keys leave it running)."""
    app = ctx.obj
    renderer = app.renderer
    return session.attach(app, name, app.streams, on_output=renderer.workload_output,
                        on_warning=renderer.warn, on_notice=renderer.note,
                        terminal_passthrough=terminal_passthrough)


def exec_(
    ctx: typer.Context,
    name: NameArgument,
    interactive: Annotated[bool | None, typer.Option(
        "--interactive", "-i", help="Forward stdin to the command.")] = None,
    tty: Annotated[bool | None, typer.Option(
        "--tty/--no-tty", "-t", help="Give the command a terminal.")] = None,
    env: Annotated[list[str] | None, typer.Option(
        "--env", "-e", metavar="NAME[=VALUE]",
        help="Set a variable for the command (repeatable).")] = None,
    terminal_passthrough: PassthroughOption = False,
) -> int:
    """Run a command in a running named sandbox: its user, hardening and egress.

    The command comes after `--`.
    """
    app = ctx.obj
    return session.exec_in(app, name, app.passthrough or (), app.streams, env=tuple(env or ()),
                         interactive=interactive, tty=tty, on_output=app.renderer.workload_output,
                         on_warning=app.renderer.warn, terminal_passthrough=terminal_passthrough)


def logs(
    ctx: typer.Context,
    name: NameArgument,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep following.")] = False,
    terminal_passthrough: PassthroughOption = False,
) -> int:
    """Print a named sandbox's output (its engine log, bounded)."""
    app = ctx.obj
    session.logs(app, name, app.streams, follow=follow, on_output=app.renderer.workload_output,
               terminal_passthrough=terminal_passthrough)
    return 0


def stop(ctx: typer.Context, names: NamesArgument) -> int:
    """Stop named sandboxes (SIGTERM, then SIGKILL after 10 s); their proxies stop too."""
    app = ctx.obj
    for name in removal.stop(app, names, on_warning=app.renderer.warn):
        app.renderer.message(name)
    return 0


def rm(
    ctx: typer.Context,
    names: NamesArgument,
    force: Annotated[bool, typer.Option(
        "--force", "-f", help="Do not ask (needed without a terminal).")] = False,
) -> int:
    """Remove named sandboxes and everything they own (HOME and volumes included)."""
    app = ctx.obj
    renderer = app.renderer
    if not force:
        if not renderer.interactive():
            raise SbxError(Reason.INVALID_ARGUMENT,
                           "sbx rm asks before it removes, and there is no terminal to ask on",
                           hint="Pass -f to remove without asking.")
        if not renderer.confirm(f"Remove {', '.join(names)} and everything it keeps "
                                "(HOME, volumes)?"):
            return 1
    for name in removal.remove(app, names, on_warning=renderer.warn):
        renderer.message(name)
    return 0


__all__ = ["attach", "exec_", "logs", "ls", "rm", "stop"]
