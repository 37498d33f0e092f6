"""``long-running@1``: the workload runs independently of client sessions.

A config-less singleton, not on the surface (it changes when the host stops the workload, not
what it may reach).
"""

from __future__ import annotations

from typing import Final

from sbx.domain.kits.captypes.base import Handler
from sbx.domain.kits.types import LONG_RUNNING


class LongRunning(Handler):
    types = (LONG_RUNNING,)
    refusal = ("sbx does not yet keep a workload running apart from its client's session")
    singleton = True
    configless = True
    on_surface = False


HANDLER: Final = LongRunning()

__all__ = ["HANDLER", "LongRunning"]
