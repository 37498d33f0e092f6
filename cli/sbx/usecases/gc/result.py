"""What gc removed, kept and failed at: the result every caller reads."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Final

from sbx.base.reasons import ExitStatus, Reason

KINDS: Final = ("container", "network", "volume", "image", "firewall_rule", "run_dir", "proxy",
                 "staging", "cached_image")
# Why an object was kept, when that needs a human's attention (printed even without -v).
REPORTED_KEPT: Final = frozenset({"deadline_missing", "deadline_unreadable"})
# Failure kinds (the `reason` of a cleanup_failed audit record, as in PEERS A.6/A.7).
LIST_FAILED: Final = "list_failed"
LIST_INVALID: Final = "list_invalid"
DOCKER_UNREACHABLE: Final = "docker_unreachable"
FULL_ID: Final = re.compile(r"^[0-9a-f]{64}$")
IMAGE_ID: Final = re.compile(r"^sha256:[0-9a-f]{64}$")


@dataclass(frozen=True)
class GcRequest:
    dry_run: bool = False
    grace_s: int | None = None  # None: [gc] grace_seconds from the config
    named: bool = False  # --named: also remove stopped named sandboxes


@dataclass(frozen=True)
class GcItem:
    """One object gc removed (or would remove) or kept, and why (a stable token)."""

    kind: str  # container | network | volume | image | firewall_rule | run_dir | proxy
    id: str  # full id, volume name, image id, rule spec, run directory name, or pid
    run_id: str | None
    why: str
    detail: str = ""

    @property
    def short(self) -> str:
        return short_id(self.id)

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "id": self.id, "run_id": self.run_id, "why": self.why,
                "detail": self.detail}


@dataclass(frozen=True)
class GcFailure:
    kind: str  # list_failed | list_invalid | docker_unreachable | <kind>_remove_failed | ...
    reason: Reason
    message: str
    target: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "reason": self.reason.value, "message": self.message,
                "target": self.target}


@dataclass
class GcResult:
    outcome: str  # done | skipped (never ran a sandbox) | locked (another gc runs)
    dry_run: bool
    grace_s: int | None
    removed: list[GcItem] = field(default_factory=list)
    kept: list[GcItem] = field(default_factory=list)
    failed: list[GcFailure] = field(default_factory=list)
    deferred: int = 0
    note: str | None = None
    # what the check of a crashed run's writable directories found (sbx.usecases.workspace_check)
    workspace_warnings: list[str] = field(default_factory=list)

    @property
    def exit_status(self) -> ExitStatus:
        return Reason.CLEANUP_FAILED.exit_status if self.failed else ExitStatus.OK

    @property
    def reported(self) -> list[GcItem]:
        """Kept objects a human must look at (a deadline sbx cannot read)."""
        return [item for item in self.kept if item.why in REPORTED_KEPT]

    def counts(self) -> dict[str, int]:
        counter = Counter(item.kind for item in self.removed)
        return {kind: counter.get(kind, 0) for kind in KINDS}

    def as_dict(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome,
            "dry_run": self.dry_run,
            "grace_seconds": self.grace_s,
            "removed": [item.as_dict() for item in self.removed],
            "kept": [item.as_dict() for item in self.kept],
            "failed": [failure.as_dict() for failure in self.failed],
            "deferred": self.deferred,
            "counts": self.counts(),
            "note": self.note,
            "workspace_warnings": self.workspace_warnings,
        }


def short_id(ident: str) -> str:
    if IMAGE_ID.match(ident):
        ident = ident.removeprefix("sha256:")
    return ident[:12] if FULL_ID.match(ident) else ident
