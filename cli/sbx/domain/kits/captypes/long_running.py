"""``long-running@1``: the workload runs independently of client sessions.

A config-less singleton, not on the surface (it changes when the host stops the workload, not
what it may reach). A named sandbox is exactly that: detaching, closing the terminal or
ending the CLI leaves it running, and only ``sbx stop``/``sbx rm`` stop it. A one-shot run
ends with its session by design, so there the type is refused (``long_running_unnamed``,
fixed by ``--name``) when required and skipped and recorded when optional.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from sbx.base.errors import SbxError
from sbx.base.reasons import REGISTRY, Reason
from sbx.domain.kits.captypes.base import Handler
from sbx.domain.kits.selectionrecord import SelectionRecord
from sbx.domain.kits.types import LONG_RUNNING

if TYPE_CHECKING:
    from sbx.domain.kits.captypes.base import SandboxPlanner
    from sbx.domain.kits.composed import ComposedParts


class LongRunning(Handler):
    types = (LONG_RUNNING,)
    singleton = True
    configless = True
    on_surface = False
    implemented = True

    def plan(self, composition: ComposedParts, planner: SandboxPlanner) -> None:
        entry = next((e for e in composition.others if e.type == LONG_RUNNING), None)
        if entry is None or planner.named is not False:
            return
        origin = entry.origins[0]
        why = "a one-shot run ends with its session; a named sandbox (--name) outlives it"
        if entry.optional:
            planner.skip(SelectionRecord(origin.kit, origin.path, LONG_RUNNING, why))
            return
        raise SbxError(Reason.LONG_RUNNING_UNNAMED,
                       f"refused: {origin.kit} {origin.path} ({LONG_RUNNING}): {why}",
                       hint=REGISTRY[Reason.LONG_RUNNING_UNNAMED].fix,
                       details={"kit": origin.kit, "path": origin.path})


HANDLER: Final = LongRunning()

__all__ = ["HANDLER", "LongRunning"]
