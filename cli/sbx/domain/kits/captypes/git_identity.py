"""``git-identity@1``: the user's git ``user.name`` and ``user.email``, chosen by the runtime.

A config-less singleton; on the surface as a service entry (its presence discloses the pair).
sbx takes the pair from the host's global git config (never a repository's) and bakes it into
the sandbox's own image as a system-level config that includes the image's ``/etc/gitconfig``
first: the sandbox's ``~/.gitconfig`` and every repository's config still take precedence, no
``GIT_AUTHOR_*`` variable overrides them, and a named sandbox keeps the pair it was created with.
Required with no identity on the host → ``git_identity_missing``; optional → skipped, recorded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.kits.captypes.base import Handler
from sbx.domain.kits.selectionrecord import SelectionRecord
from sbx.domain.kits.types import GIT_IDENTITY

if TYPE_CHECKING:
    from sbx.domain.kits.captypes.base import SandboxPlanner
    from sbx.domain.kits.composed import ComposedParts

CONFIG_PATH: Final = "/.sbx/gitconfig"
IMAGE_CONFIG: Final = "/etc/gitconfig"
FIX: Final = ("git config --global user.name 'Your Name' && "
              "git config --global user.email you@example.com")


def config_text(name: str, email: str) -> str | None:
    """The system config naming the pair; None when a value cannot be one git config value."""
    quoted = [_quote(name), _quote(email)]
    if None in quoted:
        return None
    return (f"[include]\n\tpath = {IMAGE_CONFIG}\n"
            f"[user]\n\tname = {quoted[0]}\n\temail = {quoted[1]}\n")


def _quote(value: str) -> str | None:
    if not value.strip() or any(c in value for c in "\n\r\0"):
        return None
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\t", "\\t") + '"'


class GitIdentity(Handler):
    types = (GIT_IDENTITY,)
    singleton = True
    configless = True
    implemented = True

    def plan(self, composition: ComposedParts, planner: SandboxPlanner) -> None:
        entry = next((e for e in composition.others if e.type == GIT_IDENTITY), None)
        if entry is None:
            return
        identity = planner.git_identity()
        text = config_text(*identity) if identity is not None else None
        if text is not None:
            planner.add_file(kit="sbx", where=GIT_IDENTITY, path=CONFIG_PATH, content=text,
                             mode=0o644)
            planner.add_env("GIT_CONFIG_SYSTEM", CONFIG_PATH)
            return
        origin = entry.origins[0]
        why = ("the host's global git config has no usable user.name and user.email"
               if identity is None else "the host's git user.name or user.email spans lines")
        if entry.optional:
            planner.skip(SelectionRecord(origin.kit, origin.path, GIT_IDENTITY, why))
            return
        raise SbxError(
            Reason.GIT_IDENTITY_MISSING,
            f"refused: {origin.kit} {origin.path} ({GIT_IDENTITY}) needs a git identity: {why}",
            hint=f"Set one: {FIX}", details={"kit": origin.kit, "path": origin.path})


HANDLER: Final = GitIdentity()

__all__ = ["CONFIG_PATH", "FIX", "HANDLER", "GitIdentity", "config_text"]
