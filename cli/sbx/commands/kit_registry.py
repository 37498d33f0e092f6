"""`sbx kit registry [--rm NAME[:TAG]]`: what sandboxes granted kit-registry@1 pushed."""

from __future__ import annotations

from typing import Annotated

import typer

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.egress.kitregistry import HOST, STORE_DIR, TAG_PATTERN, valid_name
from sbx.usecases.kitstore import KitStore, TagInfo
from sbx.views import kit as kit_view


def registry(
    ctx: typer.Context,
    remove: Annotated[str | None, typer.Option(
        "--rm", metavar="NAME[:TAG]",
        help="Remove this tag (or, without :TAG, the whole repository); blobs nothing else "
             "uses go with it.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON envelope.")] = False,
) -> int:
    """List what sandboxes pushed to sbx's kit registry (NAME, TAG, DIGEST, SIZE), or remove
    a tag or repository. Only sandboxes whose kits declare kit-registry@1 reach it, as
    $SBX_KIT_REGISTRY (kit-registry.sbx.internal), and only repositories under kits/."""
    app = ctx.obj
    store = KitStore(app.state_home / STORE_DIR)
    if remove is None:
        found = [info for name in store.repositories() for tag in store.tags(name)
                 if (info := store.tag_info(name, tag)) is not None]
        kit_view.kit_registry(app.renderer, found, host=HOST)
        return 0
    name, _, tag = remove.partition(":")
    if not valid_name(name) or (tag and TAG_PATTERN.fullmatch(tag) is None):
        raise SbxError(Reason.INVALID_ARGUMENT, f"{remove!r} is not NAME or NAME:TAG of the "
                       "kit registry", hint="List them with: sbx kit registry")
    try:
        gone = store.remove(name, tag or None)
    except OSError as error:
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"cannot remove {remove} from the kit registry: {error.strerror}"
                       ) from None
    if not gone:
        raise SbxError(Reason.INVALID_ARGUMENT, f"the kit registry has no {remove}",
                       hint="List them with: sbx kit registry")
    kit_view.kit_registry(app.renderer, [TagInfo(g.partition(":")[0], g.partition(":")[2],
                                                 "", "", 0) for g in gone],
                          host=HOST, removed=True)
    return 0


__all__ = ["registry"]
