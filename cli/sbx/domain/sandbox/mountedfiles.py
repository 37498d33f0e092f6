"""Kit files (``lifecycle@1`` ``files``) whose path lies on a file system sbx mounts at start.

The create step writes kit files into the per-run image, but ``/tmp``, the sandbox's HOME, a
``tmpfs`` volume and a private (tmpfs) workspace are fresh mounts at every start: a file baked
under one of them would be hidden by the mount, and the workload would never see it. Such a
file is therefore baked under ``/.sbx/files/`` instead (root-owned, read-only to the sandbox)
and copied to its path by a startup step sbx puts before the kits' own startup hooks, with the
declared mode; ``overwrite: false`` keeps a file already there (a named sandbox's HOME
persists across starts).
"""

from __future__ import annotations

import dataclasses
import posixpath
import shlex
from collections.abc import Sequence
from typing import Final

from sbx.domain.kits.compose import Hook
from sbx.domain.sandbox.capabilities import CapabilityPlan
from sbx.domain.sandbox.lifecycle import SBX_DIR, KitFile

STAGED_DIR: Final = f"{SBX_DIR}/files"
DEFAULT_MODE: Final = 0o644


def under(path: str, roots: Sequence[str]) -> bool:
    """``path`` lies inside one of ``roots`` (the root itself is a mount point, not a file)."""
    normal = posixpath.normpath(path)
    return any(normal.startswith(root.rstrip("/") + "/") for root in roots if root)


def with_mounted_files(capabilities: CapabilityPlan, roots: Sequence[str]) -> CapabilityPlan:
    """The capability plan with the files under ``roots`` staged and copied at start."""
    files = capabilities.lifecycle.files
    moved = [kit_file for kit_file in files if under(kit_file.path, roots)]
    if not moved:
        return capabilities
    kept = [kit_file for kit_file in files if not under(kit_file.path, roots)]
    staged: list[KitFile] = []
    # New directories are the sandbox user's alone (a credential file's ~/.claude, say).
    lines = ["set -eu", "umask 077"]
    for number, kit_file in enumerate(moved):
        source = f"{STAGED_DIR}/{number}"
        staged.append(dataclasses.replace(kit_file, path=source, mode=0o644,
                                          owner_is_sandbox_user=False, overwrite=True))
        target = shlex.quote(posixpath.normpath(kit_file.path))
        mode = f"{kit_file.mode if kit_file.mode is not None else DEFAULT_MODE:o}"
        copy = (f"mkdir -p {shlex.quote(posixpath.dirname(posixpath.normpath(kit_file.path)))}"
                f" && cat {shlex.quote(source)} > {target} && chmod {mode} {target}")
        lines.append(copy if kit_file.overwrite else f"[ -e {target} ] || {{ {copy}; }}")
    hook = Hook(stage="startup", command="\n".join(lines) + "\n", user=None, env=(),
                background=False,
                description="sbx: put the kit files that live on start-up mounts in place",
                config={}, kit="sbx", index=-1, position=0,
                declared_at="lifecycle@1 files (on /tmp, HOME or a tmpfs)")
    lifecycle = capabilities.lifecycle
    return dataclasses.replace(capabilities, lifecycle=dataclasses.replace(
        lifecycle, files=(*kept, *staged), startup=(hook, *lifecycle.startup)))


__all__ = ["STAGED_DIR", "under", "with_mounted_files"]
