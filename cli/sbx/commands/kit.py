"""`sbx kit push DIR REF`: adapter to :func:`sbx.core.kitpush.push_kit`."""

from __future__ import annotations

from typing import Annotated

import typer


def push(
    ctx: typer.Context,
    directory: Annotated[str, typer.Argument(metavar="DIR", help="A local kit directory.")],
    reference: Annotated[str, typer.Argument(
        metavar="REF", help="Where to publish it: host[:port]/repo:tag, e.g. "
                            "127.0.0.1:5000/kits/shell:1.")],
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print one JSON envelope with the pushed digest.")] = False,
) -> int:
    """Build a local kit's image as `sbx run` does, push it as REF, and annotate it.

    After the engine pushes the image, its manifest is re-put through the registry API with the
    kit annotations: vnd.docker.sandbox.kit.descriptor (the descriptor as compact JSON),
    vnd.docker.sandbox.kit.schema-version ("3") and vnd.docker.sandbox.kit.capabilities (the
    requested capability types, sorted and comma-joined; absent when none). Annotating changes
    the manifest, so the digest printed is the annotated manifest's: pin that one.
    """
    from sbx.core.kitpush import push_kit

    app = ctx.obj
    result = push_kit(app, directory, reference, progress=app.renderer.progress)
    app.renderer.kit_pushed(result)
    return 0


__all__ = ["push"]
