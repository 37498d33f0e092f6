"""``kit-registry@1``: a route to the runtime's kit registry, which only this request opens.

A config-less singleton; on the surface as a service entry.
"""

from __future__ import annotations

from typing import Final

from sbx.domain.kits.captypes.base import Handler
from sbx.domain.kits.types import KIT_REGISTRY


class KitRegistry(Handler):
    types = (KIT_REGISTRY,)
    refusal = ("sbx runs no kit registry a sandbox could be routed to")
    singleton = True
    configless = True


HANDLER: Final = KitRegistry()

__all__ = ["HANDLER", "KitRegistry"]
