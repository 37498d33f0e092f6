"""`sbx run claude .`: the kept sandbox of a workload and workspace, as a named one.

The decision and the name are sbx.domain.sandbox.keep's; what follows is `sbx run --name`'s own
path (sbx.usecases.named.start): created the first time, started and attached after that, its
install hooks run once.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable

from sbx.base.errors import SbxError
from sbx.domain.sandbox.keep import keeps, kept_name
from sbx.usecases.context import AppContext
from sbx.usecases.run.request import RunRequest
from sbx.usecases.sandboxstore import SandboxStore


def kept_request(ctx: AppContext, request: RunRequest,
                 on_notice: Callable[[str], None]) -> RunRequest:
    """The request with the kept sandbox's name when this run is kept, else as it was."""
    workspace = request.workspace
    if request.keep is None and request.name is None and workspace is not None:
        mode = ctx.load_config().sandbox.keep.value
        short = _short_name(ctx, request.workload)
    else:
        mode, short = "never", False
    if not keeps(mode=mode, short_name=short, workspace=workspace is not None,
                 flag=request.keep, named=request.name is not None):
        return request
    assert workspace is not None  # noqa: S101 - keeps() refuses a kept run without one
    real = os.path.realpath(os.path.join(ctx.cwd, workspace))
    store = SandboxStore(ctx.state_home)

    def holder(name: str) -> str | None:
        record = store.load(name)
        if record is None:
            return None
        # a copied workspace's sandbox is held by the directory it was copied from
        workspace = record.workspace or record.request.get("workspace_copy")
        return os.path.realpath(str(workspace)) if workspace else ""

    name = kept_name(_kit_word(ctx, request.workload), real, holder)
    record = store.load(name)
    if record is None:
        on_notice(f"kept as {name}; `sbx rm {name}` removes it")
        return dataclasses.replace(request, name=name)
    # the same directory however it is spelt now (`.`, `../app`): as the sandbox recorded it
    spelt = (record.request.get("options") or {}).get("workspace", workspace)
    return dataclasses.replace(request, name=name, workspace=str(spelt))


def _short_name(ctx: AppContext, workload: str) -> bool:
    # The kit resolver (the lock, the registry's names): only a run without --keep/--rm asks.
    from sbx.domain.kits.reference import name_of

    try:
        return name_of(workload, cwd=ctx.cwd, lock_home=ctx.state_home).source == "bundled"
    except SbxError:
        return False  # the run itself says what the word names (or does not)


def _kit_word(ctx: AppContext, workload: str) -> str:
    """What the name starts with: a short name as typed, a kit path's directory name."""
    path = os.path.join(ctx.cwd, workload)
    if os.path.isfile(path):
        return os.path.basename(os.path.dirname(os.path.realpath(path)))
    return os.path.basename(os.path.realpath(path)) if os.path.isdir(path) else workload


__all__ = ["kept_request"]
