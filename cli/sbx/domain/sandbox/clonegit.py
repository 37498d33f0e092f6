"""Pure decisions of a --clone sandbox: its branch, the host HEAD it starts from, and which
refs a bundle brought out of the sandbox may hold (only the sandbox's branch)."""

from __future__ import annotations

import re

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason

COMMIT = re.compile(r"[0-9a-f]{40}([0-9a-f]{24})?")


def branch_of(name: str) -> str:
    return f"sbx/{name}"


def start_commit(workspace: str, rev_parse_status: int, head: str) -> str:
    """The commit the clone starts from, from ``git rev-parse --verify -q HEAD``'s status and
    output; an unborn HEAD is refused (nothing to clone), a detached one is used as it is."""
    head = head.strip()
    if rev_parse_status != 0 or not COMMIT.fullmatch(head):
        raise SbxError(Reason.HEAD_UNBORN, f"the repository of {workspace} has no commit at "
                       "HEAD", hint=f"git -C {workspace} commit --allow-empty -m start")
    return head


def bundle_commit(name: str, list_heads: str) -> str:
    """The one commit a fetched bundle may bring: its ``sbx/NAME`` branch; any other ref (or
    none) is refused, so a sandbox cannot plant tags or other branches on the host."""
    wanted = f"refs/heads/{branch_of(name)}"
    refs = [line.split(" ", 1) for line in list_heads.splitlines() if line.strip()]
    if len(refs) != 1 or len(refs[0]) != 2 or refs[0][1] != wanted \
            or not COMMIT.fullmatch(refs[0][0]):
        raise SbxError(Reason.COPY_REFUSED, f"the bundle from {name} holds refs other than "
                       f"{wanted} (rule bundle_refs); nothing was fetched",
                       details={"rule": "bundle_refs",
                                "refs": [r[-1] for r in refs]},
                       hint=f"sbx exec {name} -- git branch  (the sandbox's work belongs on "
                            f"{branch_of(name)})")
    return refs[0][0]


__all__ = ["branch_of", "bundle_commit", "start_commit"]
