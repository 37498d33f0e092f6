"""`sbx secret set|ls|rm`: adapters to :class:`sbx.secrets.SecretStore`.

``set`` reads the value from stdin (one trailing newline stripped), so it never appears in the
shell history or the process list. On a terminal it prompts without echo instead. A missing
secret given to ``rm`` is an ``invalid_argument`` (exit 2), like any name that does not exist.
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
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON envelope.")] = False,
) -> int:
    """Store the secret for SERVICE; the value is read from stdin.

    On a terminal, sbx prompts for it without echo. One trailing newline is stripped.

    Example: printf %s "$GH_TOKEN" | sbx secret set github
    """
    from sbx.secrets import (
        MAX_VALUE_BYTES,
        SecretStore,
        normalize_value,
        read_value,
        validate_service,
    )

    app = ctx.obj
    validate_service(service)  # before asking for a value the store would refuse anyway
    stdin = sys.stdin
    if stdin is not None and stdin.isatty():
        value = normalize_value(app.renderer.read_secret(f"Secret for {service}: "))
    elif stdin is not None:
        raw = getattr(stdin, "buffer", None)  # a text-only stream (tests) has no buffer
        value = (read_value(raw) if raw is not None
                 else normalize_value(stdin.read(MAX_VALUE_BYTES + 3)))
    else:
        raise SbxError(Reason.INVALID_ARGUMENT, "no stdin to read the secret value from",
                       hint='Pipe the value: printf %s "$TOKEN" | sbx secret set SERVICE')
    app.renderer.secret_stored(SecretStore(app.state_home).set(service, value))
    return 0


def ls(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON envelope.")] = False,
) -> int:
    """List stored secrets, masked: service, value mask, length, last update."""
    from sbx.secrets import SecretStore

    app = ctx.obj
    app.renderer.secret_list(SecretStore(app.state_home).services())
    return 0


def rm(
    ctx: typer.Context,
    service: Annotated[str, typer.Argument(metavar="SERVICE", help=_SERVICE_HELP)],
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON envelope.")] = False,
) -> int:
    """Remove the secret for SERVICE (exit 2 when there is none)."""
    from sbx.secrets import SecretStore

    app = ctx.obj
    if not SecretStore(app.state_home).remove(service):
        raise SbxError(Reason.INVALID_ARGUMENT, f"no secret stored for {service!r}",
                       hint="`sbx secret ls` lists the stored services.",
                       details={"service": service})
    app.renderer.secret_removed(service)
    return 0


__all__ = ["ls", "rm", "set_secret"]
