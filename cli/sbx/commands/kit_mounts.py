"""`sbx kit mounts [--rm KIT [--path PATH]]`: the kits' host-mount@1 directories."""

from __future__ import annotations

from typing import Annotated

import typer

from sbx.base.errors import SbxError
from sbx.base.paths import host_mounts_home
from sbx.base.reasons import Reason
from sbx.domain.sandbox import hostmounts
from sbx.views import kit as kit_view


def mounts(
    ctx: typer.Context,
    remove: Annotated[str | None, typer.Option(
        "--rm", metavar="KIT",
        help="Remove this kit's directories (its identity or its directory's hash, as listed), "
             "with everything in them.")] = None,
    path: Annotated[str | None, typer.Option(
        "--path", metavar="PATH", help="With --rm: only the directory of this sandbox path.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON envelope.")] = False,
) -> int:
    """List the host directories kits keep with host-mount@1 (kit identity, path in the
    sandbox, host directory), or remove one kit's. They outlive every sandbox: sbx removes
    them only here. SBX_HOST_MOUNTS chooses where they live (default
    $XDG_DATA_HOME/sbx/host-mounts or ~/.local/share/sbx/host-mounts)."""
    app = ctx.obj
    store = hostmounts.HostMountStore(host_mounts_home(app.env))
    if remove is None:
        if path is not None:
            raise SbxError(Reason.INVALID_ARGUMENT, "--path needs --rm KIT",
                           hint="sbx kit mounts --rm KIT --path PATH")
        kit_view.host_mounts(app.renderer, list(store.listing()))
        return 0
    try:
        gone = store.remove(remove, path)
    except OSError as error:
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"cannot remove the directories of {remove}: {error.strerror}") from None
    if not gone:
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"no host-mount@1 directory of {remove}"
                       + (f" for {path}" if path else ""),
                       hint="List them with: sbx kit mounts")
    kit_view.host_mounts(app.renderer, gone, removed=True)
    return 0


__all__ = ["mounts"]
