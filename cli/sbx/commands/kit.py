"""`sbx kit push DIR REF`: adapter to :func:`sbx.usecases.kitpush.push_kit`."""

from __future__ import annotations

from typing import Annotated

import typer

from sbx.usecases import kitpush
from sbx.views import kit as kit_view


def push(
    ctx: typer.Context,
    directory: Annotated[str, typer.Argument(metavar="DIR", help="A local kit directory.")],
    reference: Annotated[str, typer.Argument(
        metavar="REF", help="Where to publish it: host[:port]/repo:tag, e.g. "
                            "127.0.0.1:5000/kits/shell:1.")],
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print one JSON envelope with the pushed digest.")] = False,
    arg: Annotated[list[str] | None, typer.Option(
        "--arg", metavar="NAME=VALUE",
        help="A build-phase kit arg (one declaring buildArg), repeatable; the published "
             "descriptor carries its value.")] = None,
) -> int:
    """Build a local kit's image as `sbx run` does, push it as REF, and annotate it.

    The published descriptor has its build-phase args (buildArg) expanded; create-phase args
    stay for whoever runs the kit. The image gets a kit-sources layer with
    /usr/share/sandbox/kit/<stem>/kit.yaml (the published descriptor), kit.dockerfile (the
    recipe) and each agent-context contentFile, whose field then names that in-image path. A
    mixin without a recipe publishes that layer alone. kind: set kits are refused (sbx does
    not merge sets).

    After the engine pushes the image, its manifest is re-put through the registry API with the
    kit annotations: vnd.docker.sandbox.kit.descriptor (the descriptor as compact JSON),
    vnd.docker.sandbox.kit.schema-version ("3") and vnd.docker.sandbox.kit.capabilities (the
    requested capability types, sorted and comma-joined; absent when none). Annotating changes
    the manifest, so the digest printed is the annotated manifest's: pin that one.
    """
    app = ctx.obj
    result = kitpush.push_kit(app, directory, reference, progress=app.renderer.progress,
                              arg_items=tuple(arg or ()))
    kit_view.kit_pushed(app.renderer, result)
    return 0


__all__ = ["push"]
