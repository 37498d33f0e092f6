"""`sbx secret set|ls|rm|import`: adapters to :mod:`sbx.core.secretops` and the store.

``set`` reads the value from stdin (one trailing newline stripped), so it never appears in the
shell history or the process list; on a terminal it prompts without echo instead. With
``--from-env`` / ``--from-command`` only the source is stored. A missing secret given to ``rm``
is an ``invalid_argument`` (exit 2), like any name that does not exist.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from sbx.errors import SbxError
from sbx.reasons import Reason

_SERVICE_HELP = "The service name a kit's credential@1 uses (e.g. github)."


def set_secret(
    ctx: typer.Context,
    service: Annotated[str, typer.Argument(metavar="SERVICE", help=_SERVICE_HELP)],
    from_env: Annotated[str | None, typer.Option(
        "--from-env", metavar="VAR",
        help="Read the value from this variable of sbx's environment at each run start "
             "(only the name is stored).")] = None,
    from_command: Annotated[str | None, typer.Option(
        "--from-command", metavar="CMD",
        help="Run this command on the host (/bin/sh -c) at each run start and use what it "
             "prints (only the command is stored).")] = None,
    no_verify: Annotated[bool, typer.Option(
        "--no-verify", help="With --from-env/--from-command: do not try the source now.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON envelope.")] = False,
) -> int:
    """Store the secret for SERVICE, or where to get it at each run.

    The value is read from stdin (on a terminal, sbx prompts without echo; one trailing newline
    is stripped) and stored in the OS keyring when one is available, else in the state home's
    file store (0600); the output says which. With --from-env or --from-command nothing secret
    is stored: the value is resolved on the host when a run starts and handed to the egress
    proxy only.

    Example: printf %s "$GH_TOKEN" | sbx secret set github

    Example: sbx secret set github --from-command 'gh auth token'
    """
    from sbx.core import secretops
    from sbx.secrets import SecretStore

    app = ctx.obj
    store = SecretStore(app.state_home)
    if from_env is not None or from_command is not None:
        info = secretops.set_reference(store, service, app.env, from_env=from_env,
                                       from_command=from_command, verify=not no_verify)
    else:
        info = secretops.set_value(store, service, lambda: secretops.read_value_from(
            sys.stdin, lambda: app.renderer.read_secret(f"Secret for {service}: ")))
    app.renderer.secret_stored(info, store.directory)
    return 0


def ls(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON envelope.")] = False,
) -> int:
    """List secrets, masked: service, value mask, length, last update, where it lives."""
    from sbx.secrets import SecretStore

    ctx.obj.renderer.secret_list(SecretStore(ctx.obj.state_home).services())
    return 0


def rm(
    ctx: typer.Context,
    service: Annotated[str, typer.Argument(metavar="SERVICE", help=_SERVICE_HELP)],
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON envelope.")] = False,
) -> int:
    """Remove the secret for SERVICE, from the OS keyring too (exit 2 when there is none)."""
    from sbx.secrets import SecretStore

    app = ctx.obj
    if not SecretStore(app.state_home).remove(service):
        raise SbxError(Reason.INVALID_ARGUMENT, f"no secret stored for {service!r}",
                       hint="`sbx secret ls` lists the stored services.",
                       details={"service": service})
    app.renderer.secret_removed(service)
    return 0


__all__ = ["ls", "rm", "set_secret"]
