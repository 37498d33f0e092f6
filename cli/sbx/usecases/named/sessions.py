"""Session verbs in a named (or kept) sandbox, as recorded: what `sbx run NAME…
--prompt|--resume|--continue` and `sbx sessions NAME` (sbx.usecases.named.start) run.

The verbs and the launch argv are the ones recorded when the sandbox was created (the
workload's own declaration, sbx.usecases.namedcreated.session_record); each runs as a process
of the sandbox (as `sbx exec` does: its user, hardening and egress), which is created first
when missing and started when stopped. The sandbox's own workload stays as it was created.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.kits.acp import Adapter, adapters_of, choose_adapter
from sbx.domain.kits.sessions import SessionAsk, SessionVerbs, session_argv
from sbx.domain.sandbox.records import SandboxRecord


@dataclass(frozen=True)
class SessionList:
    """`sbx sessions NAME`: the ids the list verb printed, most recent first."""

    name: str
    ids: tuple[str, ...]
    command: tuple[str, ...]
    exit_code: int

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "sessions": list(self.ids), "command": list(self.command),
                "exit_code": self.exit_code}


def recorded_argv(record: SandboxRecord, ask: SessionAsk, *, terminal: bool) -> tuple[str, ...]:
    kept = record.request.get("sessions")
    if not isinstance(kept, Mapping):
        raise SbxError(Reason.SESSIONS_UNSUPPORTED,
                       f"{record.name} was created before sbx kept its session verbs",
                       hint=f"sbx run --name {record.name} --recreate {record.workload}")
    headless, tui = _verbs(kept.get("agent_sessions")), _verbs(kept.get("interactive"))
    verbs = tui if terminal and tui is not None else headless or tui
    launch = [str(a) for a in kept.get("launch") or ()]
    tail = kept.get("lifecycle_interactive")
    return session_argv(launch, verbs, ask,
                        lifecycle_tail=[str(a) for a in tail] if isinstance(tail, list) else None)


def recorded_adapter(record: SandboxRecord) -> Adapter:
    """The ACP adapter `sbx run NAME --acp` starts, chosen from what the sandbox recorded."""
    kept = record.request.get("acp")
    if not isinstance(kept, Mapping):
        raise SbxError(Reason.ACP_UNAVAILABLE,
                       f"{record.name} was created before sbx kept its kits' ACP adapters",
                       hint=f"sbx run --name {record.name} --recreate {record.workload}")
    adapters = kept.get("adapters")
    return choose_adapter(
        adapters_of(a for a in adapters if isinstance(a, Mapping))
        if isinstance(adapters, list) else (),
        [str(p) for p in kept.get("provided") or ()],
        [str(p) for p in kept.get("workload_provides") or ()], workload=record.workload)


def _verbs(entry: Any) -> SessionVerbs | None:
    if not isinstance(entry, Mapping) or not isinstance(entry.get("config"), Mapping):
        return None
    return SessionVerbs(str(entry.get("type")), entry["config"])


__all__ = ["SessionList", "recorded_adapter", "recorded_argv"]
