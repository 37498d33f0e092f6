"""`sbx ls`, `ports`, `start`, `attach`, `exec`, `logs`, `sessions`, `stop`, `rm`: adapters for
named sandboxes (:mod:`sbx.usecases.named`). Wherever a NAME is taken, so is its run id (full, or
the 12 characters `sbx ls --all` shows)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from sbx.base.deferred import deferred
from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.views import kit as kit_view
from sbx.views import sandboxes as sandboxes_view

if TYPE_CHECKING:
    from sbx.usecases import fleet
    from sbx.usecases.named import everywhere, listing, removal, session
    from sbx.usecases.named import ports as named_ports
    from sbx.usecases.named import start as starting
else:  # deferred: each command loads its own use case; `--help` loads none
    listing = deferred("sbx.usecases.named.listing")
    removal = deferred("sbx.usecases.named.removal")
    session = deferred("sbx.usecases.named.session")
    named_ports = deferred("sbx.usecases.named.ports")
    starting = deferred("sbx.usecases.named.start")
    # the engine a sandbox lives on, and ls across engines: loaded with the use cases
    fleet = deferred("sbx.usecases.fleet")
    everywhere = deferred("sbx.usecases.named.everywhere")

NameArgument = Annotated[str, typer.Argument(metavar="NAME",
                                             help="The sandbox's name (or its run id).")]
NamesArgument = Annotated[list[str], typer.Argument(
    metavar="NAME...", help="One or more sandbox names (or run ids).")]
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
    """List named sandboxes: NAME, WORKLOAD, KITS, STATUS, WORKSPACE, CREATED.

    With [engines] configured: across every engine, with an ENGINE column; an engine that does
    not answer is listed as unreachable, with why.

    `-q` alone reads only the state home (never the engine): the shell completions call it
    for sandbox names.
    """
    app = ctx.obj
    if quiet and not include_runs and not as_json:
        for name in listing.sandbox_names(app):
            app.renderer.message(name)
        return 0
    found = everywhere.list_everywhere(app, include_runs=include_runs)
    sandboxes_view.sandbox_list(app.renderer, found.sandboxes, quiet=quiet,
                                engines=found.engines if found.fleet else None)
    return 0


def ports(
    ctx: typer.Context, name: NameArgument,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON envelope.")] = False,
) -> int:
    """List a named sandbox's published ports: CONTAINER, HOST (where it is reachable now),
    SOURCE (kit: a kit's port@1; publish: a -p given at its creation)."""
    app = fleet.for_sandbox(ctx.obj, name)  # on the engine it lives on
    found, rows = named_ports.sandbox_ports(app, name)
    sandboxes_view.port_list(app.renderer, found, rows)
    return 0


def start(ctx: typer.Context, name: NameArgument) -> int:
    """Start a stopped named sandbox as it was created, without giving its workload again.

    The same checks as every start: its host paths judged and opened again, its kits read
    again (what they changed since is applied or named, as for `sbx run --name`). Prints the
    name; a running sandbox is left as it is.
    """
    app = fleet.for_sandbox(ctx.obj, name)  # on the engine it lives on
    renderer = app.renderer
    started, did = starting.start_named(app, name, on_warning=renderer.warn,
                                        on_notice=renderer.note,
                                        confirm=kit_view.named_confirmation(renderer))
    if not did:
        renderer.note(f"{started} is running already")
    renderer.message(started)
    return 0


def attach(ctx: typer.Context, name: NameArgument,
           terminal_passthrough: PassthroughOption = False) -> int:
    """Attach to a running named sandbox (the detach keys leave it running)."""
    app = fleet.for_sandbox(ctx.obj, name)  # on the engine it lives on
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
    """Run a command in a named sandbox: its user, hardening and egress.

    The command comes after `--`. A stopped sandbox is started first (said on stderr), as
    `sbx start` starts it.
    """
    app = fleet.for_sandbox(ctx.obj, name)  # on the engine it lives on
    renderer = app.renderer
    return starting.exec_started(app, name, app.passthrough or (), app.streams,
                                 env=tuple(env or ()), interactive=interactive, tty=tty,
                                 on_output=renderer.workload_output, on_warning=renderer.warn,
                                 on_notice=renderer.note,
                                 terminal_passthrough=terminal_passthrough)


def logs(
    ctx: typer.Context,
    name: NameArgument,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep following.")] = False,
    tail: Annotated[int | None, typer.Option(
        "--tail", "-n", metavar="N", help="Only the last N lines (then follow, with -f).")
    ] = None,
    terminal_passthrough: PassthroughOption = False,
) -> int:
    """Print a named sandbox's output (its engine log, bounded)."""
    app = fleet.for_sandbox(ctx.obj, name)  # on the engine it lives on
    session.logs(app, name, app.streams, follow=follow, on_output=app.renderer.workload_output,
                 terminal_passthrough=terminal_passthrough, tail=tail)
    return 0


def sessions(
    ctx: typer.Context,
    name: NameArgument,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON envelope.")] = False,
) -> int:
    """List the agent's resumable sessions in a named or kept sandbox, most recent first.

    Runs the list verb its workload kit declares (agent-sessions@1) in the sandbox, started
    if stopped; an id goes to `sbx run ... --resume ID`. Exit status: the list command's.
    """
    app = fleet.for_sandbox(ctx.obj, name)  # on the engine it lives on
    renderer = app.renderer
    listed = starting.list_sessions(app, name, on_output=renderer.workload_output,
                                    on_warning=renderer.warn, on_notice=renderer.note)
    sandboxes_view.session_list(renderer, listed, as_json=as_json)
    return int(listed.exit_code)


def stop(
    ctx: typer.Context,
    names: NamesArgument,
    timeout: Annotated[int, typer.Option(
        "--time", "-t", metavar="SECONDS",
        help="Seconds to wait after SIGTERM before SIGKILL (default 10; 0 kills at once).")
    ] = 10,
) -> int:
    """Stop named sandboxes (SIGTERM, then SIGKILL after -t seconds); their proxies stop too.

    A one-shot run's id (from `sbx ls --all`) stops that run; its sbx removes it as on any
    exit.
    """
    app = ctx.obj
    for word in names:  # each on the engine it lives on
        on = fleet.for_sandbox(app, word)
        for name in removal.stop(on, [word], on_warning=app.renderer.warn, timeout_s=timeout):
            app.renderer.message(name)
    return 0


def rm(
    ctx: typer.Context,
    names: Annotated[list[str] | None, typer.Argument(
        metavar="NAME...", help="Sandbox names (or run ids); none with --all.")] = None,
    force: Annotated[bool, typer.Option(
        "--force", "-f", help="Do not ask (needed without a terminal).")] = False,
    every: Annotated[bool, typer.Option(
        "--all", help="Every named sandbox of this state home.")] = False,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print one JSON envelope naming what was removed.")] = False,
) -> int:
    """Remove named sandboxes and everything they own (HOME and volumes included); prints
    each name removed."""
    app = ctx.obj
    renderer = app.renderer
    if every == bool(names):
        raise SbxError(Reason.INVALID_ARGUMENT,
                       "name the sandboxes to remove, or give --all (not both)",
                       hint="sbx rm NAME..., or sbx rm --all -f")
    names = removal.all_names(app) if every else list(names or ())
    if not names:
        sandboxes_view.removed(renderer, [])
        return 0
    if not force:
        if not renderer.interactive():
            raise SbxError(Reason.INVALID_ARGUMENT,
                           "sbx rm asks before it removes, and there is no terminal to ask on",
                           hint="Pass -f to remove without asking.")
        if not renderer.confirm(f"Remove {', '.join(names)} and everything it keeps "
                                "(HOME, volumes)?"):
            return 1
    removed = [gone for word in names  # each on the engine it lives on
               for gone in removal.remove(fleet.for_sandbox(app, word), [word],
                                          on_warning=renderer.warn)]
    sandboxes_view.removed(renderer, removed)
    return 0


__all__ = ["attach", "exec_", "logs", "ls", "rm", "sessions", "start", "stop"]
