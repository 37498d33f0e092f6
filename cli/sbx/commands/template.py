"""`sbx save NAME TAG`, `sbx template ls`, `sbx template rm TAG`: templates of named sandboxes
(sbx.usecases.templates)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from sbx.base.deferred import deferred
from sbx.views import template as template_view

if TYPE_CHECKING:
    from sbx.usecases import templates
else:  # deferred: the pipeline (the kits' fingerprint); `--help` loads none
    templates = deferred("sbx.usecases.templates")

TagArgument = Annotated[str, typer.Argument(
    metavar="TAG", help="The template's local image tag, e.g. my-agent:v1.")]


def save(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(metavar="NAME", help="The named sandbox to save.")],
    tag: TagArgument,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON envelope.")] = False,
) -> int:
    """Save a named sandbox's image and HOME as a template image TAG on its engine.

    What its install hooks made and what HOME holds are kept; nothing of its boundary is (no
    proxy token, CA, credential file, per-run variable): a save whose files hold the proxy
    token is refused. The sandbox may be running (HOME is taken as it is at that moment) or
    stopped. `sbx run --template TAG --name NEW` starts a sandbox from it.
    """
    app = ctx.obj
    saved = templates.save(app, name, tag, on_notice=app.renderer.note)
    template_view.saved(app.renderer, saved)
    return 0


def ls(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON envelope.")] = False,
) -> int:
    """List the templates on the engine: TAG, WORKLOAD, KITS, SAVED FROM, CREATED."""
    app = ctx.obj
    template_view.listing(app.renderer, templates.listing(app))
    return 0


def rm(ctx: typer.Context, tag: TagArgument) -> int:
    """Remove a template's tag (the image goes with its last tag); refuses an image that is
    not an sbx template."""
    app = ctx.obj
    removed = templates.remove(app, tag)
    template_view.removed(app.renderer, removed)
    return 0


__all__ = ["ls", "rm", "save"]
