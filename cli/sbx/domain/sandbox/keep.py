"""Which `sbx run` gets a kept sandbox, and the name it is kept under.

A kept sandbox is a named sandbox (sbx.usecases.named) that sbx names itself: one per workload
and workspace, ``<workload>-<workspace directory>`` (``claude-myproject``), re-entered by the
next run of the same words. Agent short names are kept by default; kit paths stay one-shot
(scripts and CI rely on nothing being left behind) unless ``--keep`` or ``[sandbox] keep =
"always"``; ``--rm`` forces a one-shot run.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from pathlib import PurePath
from typing import Final

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.sandbox.records import NAME_PATTERN

KEEP_MODES: Final = ("agents", "always", "never")
_MAX_NAME: Final = 63
_HASH_CHARS: Final = 6
_UNSAFE: Final = re.compile(r"[^a-z0-9.-]+")


def keeps(*, mode: str, short_name: bool, workspace: bool, flag: bool | None,
          named: bool) -> bool:
    """Whether this run is kept. ``flag``: True for ``--keep``, False for ``--rm``, None for
    neither; ``named``: ``--name`` was given (that sandbox is kept whatever the mode)."""
    if named:
        if flag is False:
            raise SbxError(Reason.INVALID_ARGUMENT,
                           "--rm contradicts --name: a named sandbox is kept until `sbx rm`",
                           hint="Drop --rm (or drop --name for a one-shot run).")
        return False  # the named path already keeps it: nothing to decide here
    if flag is not None:
        if flag and not workspace:
            raise SbxError(Reason.INVALID_ARGUMENT,
                           "--keep needs a WORKSPACE: a kept sandbox is one per workspace",
                           hint="Give the directory (`sbx run --keep KIT .`) or a name "
                                "(`sbx run --name NAME KIT`).")
        return flag
    if not workspace or mode == "never":
        return False
    return mode == "always" or short_name


def kept_base(workload: str, workspace: str) -> str:
    """The readable name: the workload's last path part and the workspace directory's name,
    lower-cased, with anything outside the name pattern turned into '-'."""
    kit = _part(PurePath(workload.rstrip("/")).name.removesuffix(".yaml")) or "kit"
    directory = _part(PurePath(workspace).name) or "root"
    return _trim(f"{kit}-{directory}", _MAX_NAME)


def kept_name(workload: str, workspace_real: str,
              holder: Callable[[str], str | None]) -> str:
    """The kept sandbox's name for this workload and workspace (a real path). ``holder(name)``
    is the real workspace path recorded for an existing sandbox of that name, or None when the
    name is free. A name another workspace holds gets a short hash of this one's real path."""
    base = kept_base(workload, workspace_real)
    held = holder(base)
    if held is None or held == workspace_real:
        return base
    digest = hashlib.sha256(workspace_real.encode("utf-8", "surrogateescape")).hexdigest()
    name = f"{_trim(base, _MAX_NAME - _HASH_CHARS - 1)}-{digest[:_HASH_CHARS]}"
    held = holder(name)
    if held is not None and held != workspace_real:
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"the kept names {base} and {name} are both taken by other workspaces",
                       hint=f"Name it yourself: sbx run --name NAME {workload} {workspace_real}")
    return name


def _part(text: str) -> str:
    return _UNSAFE.sub("-", text.lower()).strip("-.")


def _trim(name: str, limit: int) -> str:
    name = name[:limit].rstrip("-.")
    assert NAME_PATTERN.fullmatch(name), name  # noqa: S101 - both parts are non-empty
    return name


__all__ = ["KEEP_MODES", "kept_base", "kept_name", "keeps"]
