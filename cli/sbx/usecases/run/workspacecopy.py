"""``--workspace-mode copy``: the workspace copied at creation into a volume the sandbox owns,
through the engine's archive endpoint, so it works on an engine that cannot see this disk and
the same way on the local one.

The archive is `sbx cp`'s (:func:`sbx.domain.sandbox.copyin.archive_of`): a link is copied as
a link and never followed, a hard link as a file of its own, a device, FIFO or socket refused,
setuid/setgid bits dropped, every entry given to the sandbox's user, and the whole held to
``[sandbox] workspace_copy_bytes`` before anything is created (refused over it, never cut).

Nothing is mounted back, so the workspace trust checks of a bound workspace (pinned git paths,
the after-run quarantine of planted host-exec files) do not apply: the sandbox never writes
this disk. What leaves it does so through ``sbx cp NAME:PATH DEST``, whose extraction refuses
links leading out, devices and setuid files.

A ``--clone`` sandbox's workspace is the same kind of volume, made empty (its root the
sandbox user's, mode 0755): the checkout is cloned into it after the start
(sbx.usecases.named.clone), and it lives, is kept and removed as a copied one does.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import IO, Final

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.sandbox.copyin import archive_of
from sbx.seams.engine import Files
from sbx.usecases.run.plan import RunPlan

# Where the helper container mounts the volume while it is filled (never in the sandbox).
FILL_TARGET: Final = "/sbx-workspace-copy"
EMPTY_MODE: Final = 0o755  # an empty (--clone) workspace's root


def workspace_archive(plan: RunPlan) -> IO[bytes] | None:
    """The workspace volume's archive, made before anything is created; None: no volume.
    Refused (``workspace_copy_refused``) when it is over the bound or holds a special file."""
    if plan.workspace_volume is None:
        return None
    if plan.workspace_copy is None:  # --clone's: only the root, the checkout comes later
        with tempfile.TemporaryDirectory(prefix="sbx-empty-") as empty:
            os.chmod(empty, EMPTY_MODE)
            return archive_of(Path(empty), FILL_TARGET.lstrip("/"), uid=plan.user.uid,
                              gid=plan.user.gid, max_bytes=0)[0]
    config = plan.full()[1]
    bound = config.sandbox.workspace_copy_bytes
    try:
        archive, _files = archive_of(Path(plan.workspace_copy), FILL_TARGET.lstrip("/"),
                                     uid=plan.user.uid, gid=plan.user.gid,
                                     max_bytes=bound.value)
    except SbxError as error:
        if error.reason is not Reason.COPY_REFUSED:
            raise
        raise SbxError(
            Reason.WORKSPACE_COPY_REFUSED,
            f"the workspace {plan.workspace_copy} cannot be copied in: {error.message}",
            hint=_hint(str(error.details.get("rule", "")), bound.value, bound.source),
            details={**error.details, "workspace": plan.workspace_copy,
                     "bound": bound.value}) from error
    return archive


def fill(driver: Files, plan: RunPlan, archive: IO[bytes]) -> None:
    """The workspace volume filled from ``archive`` (the volume's root gets the sandbox user
    and the workspace's mode) by a helper container that is never started."""
    assert plan.workspace_volume is not None  # noqa: S101 - a copied plan names its volume
    driver.fill_volume(plan.workspace_volume, plan.image.id, archive, target=FILL_TARGET,
                       labels=plan.labels)


def _hint(rule: str, bound: int, source: str) -> str:
    if rule == "too_large":
        return (f"Raise the bound under [sandbox] in the config file (now {bound} bytes, "
                f"{source}), e.g. `workspace_copy_bytes = {bound * 2}`, or copy a smaller "
                "directory; nothing was created.")
    if rule == "device_entry":
        return ("Remove the device, FIFO or socket from the workspace (a copy carries none), "
                "or on the local engine bind it (`--workspace-mode bind`); nothing was created.")
    return "Copy a smaller directory, or on the local engine `--workspace-mode bind`."


__all__ = ["FILL_TARGET", "fill", "workspace_archive"]
