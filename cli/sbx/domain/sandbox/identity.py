"""Who the sandbox runs as, and where its HOME is.

The sandbox user, first match wins:

1. ``--user UID[:GID]`` (GID defaults to UID);
2. the owner of a host workspace, when that owner is not root — so files the agent creates in
   the user's project belong to the user on the host;
3. the image's USER when it is not root, else ``[sandbox] user`` (see
   :func:`sbx.domain.sandbox.images.resolve_user`).

uid 0 and gid 0 are always refused. A read-write workspace the chosen user cannot write is
refused (``workspace_unwritable``) rather than silently read-only — except for a root-owned
workspace when the config says ``[sandbox] root_workspace = "sandbox-user"``, which runs as
the image/config user and says so in a warning.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Final

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.sandbox.images import SandboxUser
from sbx.domain.sandbox.sources import OpenedSource

ROOT_WORKSPACE_CHOICES: Final = ("refuse", "sandbox-user")
FALLBACK_HOME: Final = "/home/sbx"
_USER_FLAG: Final = re.compile(r"^(\d{1,10})(?::(\d{1,10}))?$")
_MAX_ID: Final = 4294967294


@dataclass(frozen=True)
class WorkspaceOwner:
    path: str
    uid: int
    gid: int
    mode: int

    @classmethod
    def of_opened(cls, source: OpenedSource) -> WorkspaceOwner:
        """From the opened directory itself: what was checked is what is judged."""
        return cls(source.path, source.uid, source.gid, source.mode & 0o7777)


def parse_user_flag(text: str) -> tuple[int, int]:
    match = _USER_FLAG.match(text.strip())
    if match is None:
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"--user must be UID or UID:GID in numbers, not {text!r}",
                       hint="e.g. --user 1000 or --user 1000:1000 (names are not looked up).")
    uid = int(match.group(1))
    gid = int(match.group(2)) if match.group(2) is not None else uid
    if uid == 0 or gid == 0:
        raise SbxError(Reason.ROOT_USER, f"--user {text} would run the sandbox as uid/gid 0",
                       hint="Pass a non-zero uid and gid.")
    if uid > _MAX_ID or gid > _MAX_ID:
        raise SbxError(Reason.INVALID_ARGUMENT, f"--user {text} is out of range")
    return uid, gid


def can_write(owner: WorkspaceOwner, uid: int, gid: int) -> bool:
    """Whether ``uid:gid`` (with no supplementary groups, as in the sandbox) may create files
    in the directory, by its mode bits."""
    if owner.uid == uid:
        return bool(owner.mode & 0o300 == 0o300)
    if owner.gid == gid:
        return bool(owner.mode & 0o030 == 0o030)
    return bool(owner.mode & 0o003 == 0o003)


def choose_user(*, flag: str | None, owner: WorkspaceOwner | None, access: str,
                root_workspace: str, image_user: Callable[[], SandboxUser],
                ) -> tuple[SandboxUser, tuple[str, ...]]:
    """(the sandbox user, warnings). ``image_user`` is called only when rule 3 applies."""
    if flag is not None:
        uid, gid = parse_user_flag(flag)
        user = SandboxUser(uid, gid, "flag --user")
    elif owner is not None and owner.uid != 0:
        if owner.gid == 0:
            raise SbxError(
                Reason.ROOT_USER,
                f"the workspace {owner.path} belongs to group 0 (root); the sandbox would take "
                "its owner's uid:gid and run in the root group",
                hint=f"Pass --user {owner.uid}:GID with a non-root group, or chgrp the "
                     "directory.")
        user = SandboxUser(owner.uid, owner.gid, f"owner of the workspace {owner.path}")
    else:
        user = image_user()
    if owner is None or access != "rw" or can_write(owner, user.uid, user.gid):
        return user, ()
    if owner.uid == 0 and flag is None and root_workspace == "sandbox-user":
        return user, (f"the workspace {owner.path} belongs to root (mode {owner.mode:o}); the "
                      f"sandbox runs as {user.uid}:{user.gid} as [sandbox] root_workspace "
                      "says, and can write there only what the mode allows",)
    hints = [f"pass --access ro to mount {owner.path} read-only"]
    if owner.uid == 0:
        hints.append("run on a directory you own")
        hints.append('set [sandbox] root_workspace = "sandbox-user" in the config to run as '
                     "the image's user anyway")
    else:
        hints.append(f"drop --user (the sandbox then runs as the owner {owner.uid}:"
                     f"{owner.gid})")
    raise SbxError(
        Reason.WORKSPACE_UNWRITABLE,
        f"the sandbox user {user.uid}:{user.gid} ({user.source}) cannot write the workspace "
        f"{owner.path} (owner {owner.uid}:{owner.gid}, mode {owner.mode:o}), and --access is rw",
        hint="; or ".join(hints).capitalize() + ".",
        details={"workspace": owner.path, "uid": user.uid, "gid": user.gid})


def home_path(*, taken: Collection[str]) -> str:
    """Where the sandbox's HOME tmpfs goes: :data:`FALLBACK_HOME`, a path of its own.

    Not the image user's home from /etc/passwd: a tmpfs there would hide what the image and
    the create step put in it (tools under ~/.local, the agent-context profile beside a
    workspace at ~/workspace). Never on top of, or inside, another mount (``taken``: the
    workspace, /tmp, volumes, binds); a mount inside HOME is fine (the engine mounts the
    parent first).
    """
    if not any(_overlaps(FALLBACK_HOME, target) for target in taken):
        return FALLBACK_HOME
    return _free_home(taken)


def _free_home(taken: Collection[str]) -> str:
    for index in range(100):
        path = f"/sbx-home{index or ''}"
        if not any(_overlaps(path, target) for target in taken):
            return path
    raise SbxError(Reason.INVALID_ARGUMENT, "no free path for the sandbox's HOME")


def _overlaps(home: str, target: str) -> bool:
    """HOME would hide ``target`` or sit inside it."""
    home, target = posixpath.normpath(home), posixpath.normpath(target)
    return home == target or home.startswith(target.rstrip("/") + "/")


__all__ = ["FALLBACK_HOME", "ROOT_WORKSPACE_CHOICES", "WorkspaceOwner", "can_write",
           "choose_user", "home_path", "parse_user_flag"]
