"""``git-identity@1``: the user's git ``user.name`` and ``user.email``, chosen by the runtime.

A config-less singleton; on the surface as a service entry (its presence discloses the pair).
"""

from __future__ import annotations

from typing import Final

from sbx.domain.kits.captypes.base import Handler
from sbx.domain.kits.types import GIT_IDENTITY


class GitIdentity(Handler):
    types = (GIT_IDENTITY,)
    singleton = True
    configless = True


HANDLER: Final = GitIdentity()

__all__ = ["GitIdentity", "HANDLER"]
