"""``agent-sessions@1``: the headless verbs a harness drives (prompt, resume, continue, list).

Descriptor side: at least one verb; ``prompt`` references ``{{.Prompt}}`` and ``resume``
``{{.SessionID}}``. One author per sandbox (the workload's); not on the surface.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

from sbx.domain.kits.captypes.base import (
    CapabilityEntry,
    Handler,
    Merge,
    Out,
    add_sole,
    blank_command,
    deferred,
    items,
    sole,
)
from sbx.domain.kits.types import AGENT_SESSIONS, INTERACTIVE_SESSIONS

if TYPE_CHECKING:
    from sbx.domain.kits.composed import ComposedParts, Origin

PROMPT: Final = "{{.Prompt}}"
SESSION_ID: Final = "{{.SessionID}}"


class AgentSessions(Handler):
    types = (AGENT_SESSIONS,)
    implemented = True  # sbx run --prompt/--resume/--continue, sbx sessions
    singleton = True
    on_surface = False
    field = "agent_sessions"
    label = "agent-sessions"

    def check(self, entry: CapabilityEntry, config: Mapping[str, Any], kind: str | None,
              out: Out) -> None:
        check_verbs(entry, config, out)

    def add(self, merge: Merge, origin: Origin, item: Mapping[str, Any],
            config: Mapping[str, Any], optional: bool) -> None:
        add_sole(merge, origin, self.types[0], self.label, item, optional)

    def finish(self, merge: Merge, parts: dict[str, Any]) -> None:
        parts[self.field] = sole(merge, self.types[0])

    def effective(self, composition: ComposedParts) -> Iterable[tuple[str, Any, bool]]:
        entry = getattr(composition, self.field)
        if entry is not None:
            yield entry.type, entry.config, entry.optional


def check_verbs(entry: CapabilityEntry, config: Mapping[str, Any], out: Out) -> None:
    interactive = entry.type == INTERACTIVE_SESSIONS
    if interactive:
        verbs = any(k in config for k in ("prompt", "resume", "continue", "newSession",
                                          "sessionPicker"))
        listed = "list" in config and not empty_command(config.get("list"))
    else:
        verbs = any(items(config.get(k)) for k in ("prompt", "resume", "continue"))
        listed = not empty_command(config.get("list"))
    if not verbs and not listed:
        out.add(entry.at("config"), "declares no verbs; drop the entry instead")
    for key, needle in (("prompt", PROMPT), ("resume", SESSION_ID)):
        argv = config.get(key)
        if items(argv) and not deferred(argv) and not _argv_has(argv, needle):
            out.add(entry.at("config", key), f"{key} must reference {needle}")
    if interactive and "list" in config and empty_command(config.get("list")):
        out.add(entry.at("config", "list"), "list must name a command")


def _argv_has(argv: Any, needle: str) -> bool:
    return any(isinstance(a, str) and needle in a for a in items(argv))


def empty_command(command: Any) -> bool:
    if command is None:
        return True
    if isinstance(command, str):
        return not command.strip()
    if isinstance(command, list):
        return not command or blank_command(command)
    return False


HANDLER: Final = AgentSessions()

__all__ = ["HANDLER", "PROMPT", "SESSION_ID", "AgentSessions", "check_verbs", "empty_command"]
