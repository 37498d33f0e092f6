"""One capability entry's selection outcome (selected, skipped or refused, and why): apart
from :mod:`sbx.domain.kits.selection`, which looks the type handlers up, so the handlers can
report with it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SelectionRecord:
    kit: str
    path: str  # e.g. capabilities[1] or capabilities[2].group
    type: str  # capability type, or "group" for a group
    reason: str = ""
    members: tuple[str, ...] = ()  # member paths, for groups
    rejected: tuple[str, ...] = ()  # member paths that could not be provided
    rejected_types: tuple[str, ...] = ()  # their types, aligned with ``rejected``

    def as_dict(self) -> dict[str, Any]:
        return {"kit": self.kit, "path": self.path, "type": self.type, "reason": self.reason,
                "members": list(self.members), "rejected": list(self.rejected)}


__all__ = ["SelectionRecord"]
