"""``agent-interactive-sessions@1``: the terminal verbs a human-facing host launches.

Descriptor side: as agent-sessions@1, plus ``newSession`` and ``sessionPicker``; a stated
``newSession`` agrees with lifecycle@1's ``interactive`` tail, and a ``list`` with
agent-sessions@1's (within a block and across the composition). One author per sandbox; not on
the surface.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from sbx.domain.kits.captypes.agent_sessions import AgentSessions
from sbx.domain.kits.captypes.base import SOLE, Block, Merge, Out, config_of, literal_argv, show
from sbx.domain.kits.types import AGENT_SESSIONS, INTERACTIVE_SESSIONS, LIFECYCLE


class AgentInteractiveSessions(AgentSessions):
    types = (INTERACTIVE_SESSIONS,)
    field = "agent_interactive_sessions"
    label = "agent-interactive-sessions"

    def check_block(self, block: Block, out: Out) -> None:
        """lifecycle.interactive == newSession; the two ``list``s agree."""
        life, inter, head = (block.first(LIFECYCLE), block.first(INTERACTIVE_SESSIONS),
                             block.first(AGENT_SESSIONS))
        if life is not None and inter is not None and "interactive" in life.config \
                and "newSession" in inter.config:
            tail, new = (literal_argv(life.config.get("interactive")),
                         literal_argv(inter.config.get("newSession")))
            if tail is not None and new is not None and tail != new:
                out.add(inter.at("config", "newSession"), f"newSession {new} disagrees with "
                                                          f"lifecycle interactive {tail} at "
                                                          f"{show(life.path)}; they name the "
                                                          "same launch")
        if head is not None and inter is not None:
            a, b = literal_argv(head.config.get("list")), literal_argv(inter.config.get("list"))
            if a and b and a != b:
                out.add(inter.at("config", "list"), f"list differs from the agent-sessions list "
                                                    f"at {show(head.path)}; both enumerate the "
                                                    "same sessions, so they name one command")

    def finish(self, merge: Merge, parts: dict[str, Any]) -> None:
        super().finish(merge, parts)
        held = merge.table(SOLE).get(INTERACTIVE_SESSIONS)
        lifecycle = parts.get("lifecycle")
        if held is None or lifecycle is None or lifecycle.interactive is None:
            return
        new_session = config_of(held.item).get("newSession")
        if isinstance(new_session, list) and tuple(map(str, new_session)) \
                != lifecycle.interactive:
            merge.problem(f"{held.origin} and {lifecycle.interactive_origin}: newSession "
                          f"{new_session!r} disagrees with lifecycle interactive "
                          f"{list(lifecycle.interactive)!r}; they name the same launch")


def new_session_of(config: Mapping[str, Any]) -> list[str] | None:
    value = config.get("newSession")
    return [str(v) for v in value] if isinstance(value, list) else None


HANDLER: Final = AgentInteractiveSessions()

__all__ = ["HANDLER", "AgentInteractiveSessions", "new_session_of"]
