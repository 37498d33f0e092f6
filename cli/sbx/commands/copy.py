"""`sbx cp SRC NAME:DST`, `sbx cp NAME:SRC DST`: adapter to :func:`sbx.usecases.named.copy.copy`."""

from __future__ import annotations

from typing import Annotated

import typer

from sbx.base.render import Envelope
from sbx.domain.sandbox.limitflags import parse_size
from sbx.usecases.named import copy as copy_usecase


def cp(
    ctx: typer.Context,
    source: Annotated[str, typer.Argument(metavar="SRC", help="NAME:PATH or a host path.")],
    destination: Annotated[str, typer.Argument(metavar="DEST",
                                               help="NAME:PATH or a host path.")],
    max_size: Annotated[str, typer.Option(
        "--max-size", metavar="SIZE",
        help="Refuse a copy holding more file data than this (Docker's sizes; default 1g).")
    ] = "1g",
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON envelope.")] = False,
) -> int:
    """Copy files between the host and a named sandbox (Docker's `cp` syntax).

    Into the sandbox only onto its writable mounts (the workspace when read-write, HOME,
    volumes), never its read-only root, pinned paths or tmpfs; out of it, the archive is
    checked entry by entry (no absolute or `..` names, no link leading out, no device or
    setuid file) and bounded by --max-size.
    """
    app = ctx.obj
    limit = parse_size(max_size, flag="--max-size")
    result = copy_usecase.copy(app, source, destination, max_bytes=limit)
    renderer = app.renderer
    if as_json:
        renderer.envelope(Envelope(command="cp", status="ok", exit_code=0,
                                   data=result.as_dict()))
    else:
        renderer.message(f"{result.source} -> {result.destination} ({result.files} files, "
                         f"{result.bytes} bytes)")
    return 0


__all__ = ["cp"]
