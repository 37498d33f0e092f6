"""Every type sbx does not know, and the presence table the config-less types share.

An unknown type is refused by name when required and skipped and recorded when optional
(sbx.domain.kits.selection); when it is kept (an optional entry a test selects anyway, or a
type sbx knows by name only) it merges on the exact request and, like every request the surface
has no field for, lands in ``services`` as its type (with a digest of its config).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, Final

from sbx.domain.kits.captypes.base import PRESENCE, Handler, Merge, merged, missing

if TYPE_CHECKING:
    from sbx.domain.kits.composed import ComposedParts
    from sbx.domain.kits.surfacetypes import Surface, Widening


class Unknown(Handler):
    def finish(self, merge: Merge, parts: dict[str, Any]) -> None:
        parts["others"] = tuple(merged(k) for k in merge.table(PRESENCE).values())

    def effective(self, composition: ComposedParts) -> Iterable[tuple[str, Any, bool]]:
        for entry in composition.others:
            yield entry.type, entry.config, entry.optional

    def widenings(self, granted: Surface, candidate: Surface) -> Iterator[Widening]:
        yield from missing("services", granted.services, candidate.services)


HANDLER: Final = Unknown()

__all__ = ["HANDLER", "Unknown"]
