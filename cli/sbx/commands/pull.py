"""`sbx pull REF... [--accept] [--json]`: adapter to :func:`sbx.usecases.pull.pull`."""

from __future__ import annotations

from typing import Annotated

import typer

from sbx.commands import pull_fast


def pull(
    ctx: typer.Context,
    references: Annotated[list[str], typer.Argument(
        metavar="REF...",
        help="Registry references, host[:port]/repo[:tag][@sha256:...].")],
    accept: Annotated[bool, typer.Option(
        "--accept", help="Approve permission widenings of already locked kits without asking."),
    ] = False,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print one JSON envelope listing what was pulled and pinned.")] = False,
) -> int:
    """Fetch kits and plain images from a registry and pin kits' digests in the lock.

    One manifest GET per reference reads the kit descriptor from the manifest annotation
    vnd.docker.sandbox.kit.descriptor (falling back from an index to the platform manifest)
    and revalidates it; an invalid descriptor pulls nothing (invalid_kit). A reference without
    the annotation is pulled as a plain image. For a kit already in the lock
    (<state>/kits.lock.json) the new permission surface is compared with the approved one:
    widenings are listed as `+ category: detail` and need confirmation on a terminal or
    --accept, else the pull is refused (permission_widened) and nothing changes; narrowing
    applies silently. Layers are pulled by digest, then the lock is written atomically.
    """
    pull_fast.remember(ctx.obj, references, accept=accept)
    return pull_fast.run_pull(ctx.obj, references, accept=accept)


__all__ = ["pull"]
