"""The permission gate of local kits at run time: what a kit asks for now, against what the
user approved at its last run (:mod:`sbx.domain.kits.approvals`).

A kit directory can change between two runs — edited by its author, or rewritten by whatever
had write access to it (a sandbox whose workspace held it). So before a run starts anything,
each local kit's effective descriptor is projected onto its permission surface (the one
:mod:`sbx.domain.kits.surface` computes for ``sbx pull``, credential destinations included) and
compared with the recorded one by the pull gate's own decision
(:func:`sbx.domain.kits.lock.decide`):

- no record: the first run of this kit here is recorded as approved (the user named it on the
  command line), and what it asks for is shown once;
- nothing new (the same, or narrower: the narrower surface is recorded): it runs;
- a widening: shown and asked on a terminal, or approved by ``--accept``; otherwise refused
  (``permission_widened``) with the same command plus ``--accept`` to paste, and nothing is
  recorded or started.

Approvals and refusals are audited as the pull gate's are. Pulled kits are gated by ``sbx pull``
(their descriptors live in the state home, out of any sandbox's reach), so they are not here.
"""

from __future__ import annotations

import datetime
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.kits.approvals import (
    approval,
    approvals_path,
    kit_identity,
    read_approvals,
    updating,
)
from sbx.domain.kits.lock import GateResult, LockDecision, decide, lock_path, read_lock
from sbx.domain.kits.surface import Surface, Widening, format_widenings, surface
from sbx.seams import audit

if TYPE_CHECKING:
    from sbx.domain.kits.kitset import KitSet

# (kit as shown, its widenings) -> approved?
Confirm = Callable[[str, Sequence[Widening]], bool]


@dataclass(frozen=True)
class KitSurface:
    """One local kit of a run and what it asks for."""

    reference: str  # as the user wrote it
    path: str  # its record key (sbx.domain.kits.approvals.kit_identity)
    descriptor: str  # the real path of the descriptor file it was read from
    permissions: Surface

    def to_json(self) -> dict[str, Any]:
        return {"reference": self.reference, "path": self.path, "descriptor": self.descriptor,
                "permissions": self.permissions.to_json()}


@dataclass(frozen=True)
class KitVerdict:
    kit: KitSurface
    result: GateResult
    recorded: Surface | None  # what was approved before
    approved: float | None = None  # when

    @property
    def pending(self) -> bool:
        return self.result.decision is LockDecision.REFUSED


def kit_surfaces(kit_set: KitSet, effective: Mapping[str, Mapping[str, Any]],
                 cwd: Path) -> tuple[KitSurface, ...]:
    """The surface of each local kit's effective descriptor (args and ``kit.env`` expanded:
    what the run really grants); pulled kits are the lock's."""
    out = []
    for loaded in kit_set.kits:
        local = loaded.local
        if local.image is not None:
            continue
        data = effective.get(local.reference, local.descriptor.data)
        out.append(KitSurface(local.reference, kit_identity(local, cwd),
                              str(local.descriptor_file.resolve()), surface(data)))
    return tuple(out)


def judge(state_home: Path, kits: Sequence[KitSurface], *, accept: bool = False,
          confirm: Confirm | None = None) -> tuple[KitVerdict, ...]:
    """Each kit's verdict against the records (no prompt when ``confirm`` is None); reads,
    never writes."""
    approvals = read_approvals(state_home)
    verdicts = []
    for kit in kits:
        previous = approvals.granted(kit.path, kit.descriptor)
        ask = None if confirm is None else (lambda ws, k=kit: confirm(k.reference, ws))
        result = decide(previous.permissions if previous else None, kit.permissions,
                        accept=accept, confirm=ask, first_needs_approval=False)
        if (previous is not None and result.decision is LockDecision.WITHIN
                and previous.permissions == kit.permissions):
            result = GateResult(LockDecision.UNCHANGED)
        verdicts.append(KitVerdict(kit, result, previous.permissions if previous else None,
                                   previous.approved if previous else None))
    return tuple(verdicts)


def approve(state_home: Path, kits: Sequence[KitSurface], *, accept: bool,
            confirm: Confirm | None, command: str, run_id: str | None,
            on_notice: Callable[[str], None]) -> tuple[KitVerdict, ...]:
    """The gate of a run (and of any start that uses kits read again): refuse, with nothing
    recorded, when a widening was not approved; else record what changed and go on."""
    verdicts = judge(state_home, kits, accept=accept, confirm=confirm)
    refused = [v for v in verdicts if v.pending]
    for verdict in verdicts:
        if verdict.pending or verdict.result.via is not None:
            _audit(state_home, verdict, run_id)
    if refused:
        raise _refusal(refused, command)
    changed = [v for v in verdicts if v.result.decision is not LockDecision.UNCHANGED]
    if changed:
        with updating(state_home) as box:
            for verdict in changed:
                kit = verdict.kit
                box[0] = box[0].with_entry(approval(kit.path, kit.descriptor, kit.permissions,
                                                    _via(verdict.result)))
    for verdict in verdicts:
        if verdict.result.decision is LockDecision.NEW and verdict.result.widenings:
            on_notice(f"first run of kit {verdict.kit.reference} here: recorded what it asks "
                      "for; a later run that asks for more stops for approval\n"
                      + format_widenings(verdict.result.widenings))
    return verdicts


@dataclass(frozen=True)
class PermissionState:
    """What ``sbx explain WORKLOAD`` says about one kit's permissions: what it asks for now,
    what was approved (and where that is recorded), and what the next run would do."""

    reference: str
    kind: str  # "local" | "pulled"
    status: str  # "first-run" | "approved" | "narrower" | "widened" | "locked" | "not locked"
    permissions: Surface  # asked for now
    recorded: Surface | None  # approved (the record, or the lock entry)
    record: str  # the file it is recorded in
    approved: str | None = None  # when (local), or the locked digest (pulled)
    widenings: tuple[Widening, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"reference": self.reference, "kind": self.kind, "status": self.status,
                "permissions": self.permissions.to_json(),
                "recorded": None if self.recorded is None else self.recorded.to_json(),
                "record": self.record, "approved": self.approved,
                "widenings": [w.as_dict() for w in self.widenings]}


def permission_states(state_home: Path, kit_set: KitSet,
                      effective: Mapping[str, Mapping[str, Any]],
                      cwd: Path) -> tuple[PermissionState, ...]:
    """Each kit's :class:`PermissionState`, judged as the run's gate judges it (nothing is
    asked or recorded)."""
    record = str(approvals_path(state_home))
    states: dict[str, PermissionState] = {}
    status = {LockDecision.NEW: "first-run", LockDecision.UNCHANGED: "approved",
              LockDecision.WITHIN: "narrower", LockDecision.REFUSED: "widened"}
    for verdict in judge(state_home, kit_surfaces(kit_set, effective, cwd)):
        kit = verdict.kit
        states[kit.reference] = PermissionState(
            kit.reference, "local", status.get(verdict.result.decision, "approved"),
            kit.permissions, verdict.recorded, record,
            None if verdict.approved is None else _when(verdict.approved),
            verdict.result.widenings)
    lock = None
    for loaded in kit_set.kits:
        if loaded.local.image is None:
            continue
        lock = lock or read_lock(lock_path(state_home))
        entry = lock.get(loaded.reference)
        permissions = surface(effective.get(loaded.reference, loaded.local.descriptor.data))
        states[loaded.reference] = PermissionState(
            loaded.reference, "pulled", "locked" if entry else "not locked", permissions,
            entry.permissions if entry else None, str(lock_path(state_home)),
            entry.digest if entry else None)
    return tuple(states[k.reference] for k in kit_set.kits if k.reference in states)


def accept_command(argv: Sequence[str] | None, passthrough: Sequence[str] | None) -> str:
    """The command line that was run, with ``--accept`` after its subcommand (global flags
    come first: sbx.__main__ hoists them); a generic form when the words are unknown."""
    if not argv:
        return "sbx run --accept ..."
    words = list(argv)
    index = next((i for i, word in enumerate(words) if not word.startswith("-")), None)
    if index is None:
        return "sbx run --accept ..."
    if "--accept" not in words:
        words.insert(index + 1, "--accept")
    tail = ["--", *passthrough] if passthrough is not None else []
    return shlex.join(["sbx", *words, *tail])


def _when(stamp: float) -> str:
    return datetime.datetime.fromtimestamp(stamp).isoformat(" ", "seconds")


def _via(result: GateResult) -> str:
    if result.decision is LockDecision.NEW:
        return "first-run"
    if result.decision is LockDecision.WITHIN:
        return "narrowed"
    return result.via or "accept-flag"


def _audit(state_home: Path, verdict: KitVerdict, run_id: str | None) -> None:
    kit = verdict.kit
    details: dict[str, Any] = {"reference": kit.reference, "path": kit.path,
                               "descriptor": kit.descriptor, "local": True,
                               "widenings": [w.as_dict() for w in verdict.result.widenings]}
    if verdict.pending:
        audit.record(state_home, audit.KIT_WIDENING_REFUSED, run_id=run_id,
                     severity="warning", details=details)
    else:
        audit.record(state_home, audit.KIT_WIDENING_ACCEPTED, run_id=run_id,
                     severity="warning", details={**details, "via": verdict.result.via})


def _refusal(refused: Sequence[KitVerdict], command: str) -> SbxError:
    names = ", ".join(v.kit.reference for v in refused)
    when = [v.approved for v in refused if v.approved is not None]
    since = f" (approved {_when(min(when))})" if when else ""
    body = "\n".join(f"{v.kit.reference} ({v.kit.descriptor}):\n"
                     + format_widenings(v.result.widenings) for v in refused)
    return SbxError(
        Reason.PERMISSION_WIDENED,
        f"kit {names} asks for more than at its last approved run{since}; nothing was started "
        "and nothing was recorded",
        body=body,
        hint="Review the widenings (did you make these changes?), then run again on a terminal "
             f"and confirm, or approve them with --accept: {command}",
        details={"kits": [{"reference": v.kit.reference, "path": v.kit.path,
                           "descriptor": v.kit.descriptor,
                           "widenings": [w.as_dict() for w in v.result.widenings]}
                          for v in refused],
                 "problems": [w.as_dict() for v in refused for w in v.result.widenings],
                 "accept": command})


__all__ = ["Confirm", "KitSurface", "KitVerdict", "PermissionState", "accept_command",
           "approve", "judge", "kit_surfaces", "permission_states"]
