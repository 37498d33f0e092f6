"""What `sbx run WORKLOAD [WORKSPACE]`'s positional words mean, checked before any work.

People coming from `docker run IMAGE CMD` type `sbx run ./kit ls`: the second word is then the
WORKSPACE, and a "does not exist" about `ls` leads nowhere. A word that names no directory and is
not written as a path is far more likely a command, so the refusal shows the `--` form.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from pathlib import Path

from sbx.errors import SbxError
from sbx.reasons import Reason


def check_workspace_word(workload: str, workspace: str | None, cwd: Path,
                         command: Sequence[str] | None) -> None:
    """Refuse a WORKSPACE that is no directory and reads as a command, hinting
    ``sbx run WORKLOAD -- WORD``. Paths (``./x``, ``/x``, ``a/b``) are left to the mount
    checks, which name the rule."""
    if workspace is None or os.sep in workspace or os.path.isdir(cwd / workspace):
        return
    from sbx.kits.local import looks_like_path  # only for a word that is no directory

    if looks_like_path(workspace):
        return
    suggested = shlex.join(["sbx", "run", workload, "--", workspace, *(command or ())])
    raise SbxError(
        Reason.INVALID_ARGUMENT,
        f"WORKSPACE {workspace!r} is no directory here; the word after the workload is the "
        "workspace, and a command to run in the sandbox goes after --",
        hint=f"To run {workspace!r} in the sandbox: {suggested}",
        details={"workspace": workspace})


__all__ = ["check_workspace_word"]
