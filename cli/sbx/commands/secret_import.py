"""`sbx secret import [SERVICE]... [--yes] [--dry-run]`: adapter to
:func:`sbx.usecases.secretops.import_secrets`."""

from __future__ import annotations

import functools
from typing import Annotated

import typer

from sbx.domain.credentials import secrets
from sbx.usecases import secretops
from sbx.views import secret as secret_view


def import_secrets(
    ctx: typer.Context,
    services: Annotated[list[str] | None, typer.Argument(
        metavar="[SERVICE]...",
        help="Only these services (default: every known variable that is set).")] = None,
    yes: Annotated[bool, typer.Option(
        "--yes", "-y", help="Import without asking (needed when stdin is not a terminal).")
    ] = False,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Only list what would be imported.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON envelope.")] = False,
) -> int:
    """Offer the API keys found in the environment as secrets, asking for each.

    Looks for ANTHROPIC_API_KEY, OPENAI_API_KEY, GEMINI_API_KEY, GOOGLE_API_KEY,
    GH_TOKEN/GITHUB_TOKEN, GITLAB_TOKEN, MISTRAL_API_KEY, GROQ_API_KEY, OPENROUTER_API_KEY,
    XAI_API_KEY, DEEPSEEK_API_KEY and HF_TOKEN. On a terminal each one is offered with its
    variable, service and length (never its value); elsewhere --yes imports them all. A
    service that already has a secret is left as it is.
    """
    app = ctx.obj
    renderer = app.renderer
    confirm = (functools.partial(secret_view.confirm_import, renderer)
               if renderer.interactive() and not yes else None)
    result = secretops.import_secrets(secrets.SecretStore(app.state_home), app.env,
                                      services=services or (), yes=yes, dry_run=dry_run,
                                      confirm=confirm)
    secret_view.secret_import(renderer, result)
    return 0


__all__ = ["import_secrets"]
