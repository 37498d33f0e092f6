"""``kit-registry@1``: a route to sbx's kit registry, which only this request opens.

A config-less singleton; on the surface as a service entry, so its arrival widens at the pull
gate. The egress proxy answers the registry's name itself (:mod:`sbx.proxy.kitregistry`) for a
sandbox granted it, over the state home's kit store and scoped to ``kits/``; for any other
sandbox the name is refused at the boundary. The sandbox learns the name from ``SBX_KIT_REGISTRY``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from sbx.domain.kits.captypes.base import Handler
from sbx.domain.kits.types import KIT_REGISTRY

HOST: Final = "kit-registry.sbx.internal"  # .internal: reserved for private use (ICANN, 2024)
ENV_NAME: Final = "SBX_KIT_REGISTRY"  # what the sandbox reads: the registry's host name

if TYPE_CHECKING:
    from sbx.domain.kits.captypes.base import SandboxPlanner
    from sbx.domain.kits.composed import ComposedParts


class KitRegistryType(Handler):
    types = (KIT_REGISTRY,)
    singleton = True
    configless = True
    implemented = True

    def plan(self, composition: ComposedParts, planner: SandboxPlanner) -> None:
        if any(e.type == KIT_REGISTRY for e in composition.others):
            planner.add_kit_registry()
            planner.add_env(ENV_NAME, HOST)


HANDLER: Final = KitRegistryType()

__all__ = ["ENV_NAME", "HANDLER", "HOST", "KitRegistryType"]
