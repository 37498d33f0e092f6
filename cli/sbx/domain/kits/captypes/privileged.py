"""``privileged@1``: a privileged container, which removes most of the sandbox's protections.

Refused (``consent_required``) unless the user passed ``--allow-privileged`` for the run. A
config-less singleton; on the surface as ``privileged: true``, so asking for it widens.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Final

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.kits.captypes.base import Handler
from sbx.domain.kits.surfacetypes import Widening
from sbx.domain.kits.types import PRIVILEGED

if TYPE_CHECKING:
    from sbx.domain.kits.captypes.base import SandboxPlanner
    from sbx.domain.kits.composed import ComposedParts
    from sbx.domain.kits.surfacetypes import Surface, Widening

PRIVILEGED_DETAIL: Final = "requests privileged execution"


class PrivilegedType(Handler):
    types = (PRIVILEGED,)
    singleton = True
    configless = True
    implemented = True

    def project(self, ctype: str, config: Any, lists: dict[str, list[str]],
                flags: dict[str, bool]) -> bool:
        flags["privileged"] = True
        return True

    def widenings(self, granted: Surface, candidate: Surface) -> Iterator[Widening]:
        if candidate.privileged and not granted.privileged:
            yield Widening("privileged", PRIVILEGED_DETAIL)

    def plan(self, composition: ComposedParts, planner: SandboxPlanner) -> None:
        entries = [e for e in composition.others if e.type == PRIVILEGED]
        if not entries:
            return
        if planner.allow_privileged:
            planner.set_privileged()
            return
        kits = ", ".join(sorted({o.kit for e in entries for o in e.origins}))
        raise SbxError(
            Reason.CONSENT_REQUIRED,
            f"{kits} requests privileged execution ({PRIVILEGED}), which removes most of the "
            "sandbox's protections",
            hint="Pass --allow-privileged to consent for this run, or drop the kit.",
            details={"kits": kits})


HANDLER: Final = PrivilegedType()

__all__ = ["HANDLER", "PRIVILEGED_DETAIL", "PrivilegedType"]
