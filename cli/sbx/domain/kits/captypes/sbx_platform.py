"""``sbx@1``: the workload targets the sandbox agent platform (the host launches the agent:
:mod:`sbx.domain.sandbox.platform`).

A config-less, workload-only singleton (a mixin's image config never becomes the composed
image's); not on the surface.
"""

from __future__ import annotations

from typing import Final

from sbx.domain.kits.captypes.base import CapabilityEntry, Handler, Out
from sbx.domain.kits.types import SBX


class SbxPlatform(Handler):
    types = (SBX,)
    implemented = True  # the launch under bash as the image's user (sbx.domain.sandbox.platform)
    singleton = True
    configless = True
    on_surface = False

    def check_entry(self, entry: CapabilityEntry, kind: str | None, out: Out) -> None:
        if kind == "mixin":
            out.add(entry.at("type"), f"{SBX} is workload-only: a mixin's image config never "
                                      "becomes the composed image's")


HANDLER: Final = SbxPlatform()

__all__ = ["HANDLER", "SbxPlatform"]
