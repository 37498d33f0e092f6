"""``acp@1``: how to start an agent's Agent Client Protocol adapter inside the sandbox.

Descriptor side: ``agent`` is an unversioned provides name, ``command`` names a command; one
entry per normalized agent in a block and across kits (an identical restatement merges). Not on
the surface.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

from sbx.domain.kits.captypes.base import (
    CapabilityEntry,
    Handler,
    Keyed,
    Keys,
    Merge,
    Out,
    blank_command,
    merged,
    restated,
    show,
    string,
)
from sbx.domain.kits.composed import canonical_config
from sbx.domain.kits.placeholders import contains_placeholder
from sbx.domain.kits.types import ACP
from sbx.domain.kits.versions import VersionError, check_name, normalize_name

if TYPE_CHECKING:
    from sbx.domain.kits.composed import ComposedParts, Origin


class AcpType(Handler):
    types = (ACP,)
    implemented = True  # sbx run --acp (sbx.domain.kits.acp)
    on_surface = False

    def check(self, entry: CapabilityEntry, config: Mapping[str, Any], kind: str | None,
              out: Out) -> None:
        agent = config.get("agent")
        if isinstance(agent, str) and agent and not contains_placeholder(agent):
            if "@" in agent:
                out.add(entry.at("config", "agent"), "agent must be an unversioned provides "
                                                     "name")
            else:
                try:
                    check_name(agent)
                except VersionError as exc:
                    out.add(entry.at("config", "agent"), str(exc))
        if blank_command(config.get("command")):
            out.add(entry.at("config", "command"), "must name a command")

    def claim(self, entry: CapabilityEntry, keys: Keys, out: Out) -> None:
        agent = string(entry.config.get("agent"))
        if agent and not contains_placeholder(agent):
            previous = keys.claim("acp", normalize_name(agent), entry.path)
            if previous is not None:
                out.add(entry.at("config", "agent"), f"ACP for agent {agent!r} already "
                                                     f"declared at {show(previous)}")

    def add(self, merge: Merge, origin: Origin, item: Mapping[str, Any],
            config: Mapping[str, Any], optional: bool) -> None:
        table = merge.table("acp")
        agent = normalize_name(str(config.get("agent", "")))
        held = table.get(agent)
        if held is None:
            table[agent] = Keyed(origin, item, optional, [origin])
            return
        if canonical_config(held.item.get("config")) != canonical_config(item.get("config")):
            merge.problem(f"{held.origin} and {origin} both declare an acp@1 adapter for agent "
                          f"{config.get('agent')!r} with different settings; one agent has one "
                          "adapter")
            return
        restated(held, origin, optional)

    def finish(self, merge: Merge, parts: dict[str, Any]) -> None:
        parts["acp"] = tuple(merged(k) for k in merge.table("acp").values())

    def effective(self, composition: ComposedParts) -> Iterable[tuple[str, Any, bool]]:
        for entry in composition.acp:
            yield entry.type, entry.config, entry.optional


HANDLER: Final = AcpType()

__all__ = ["HANDLER", "AcpType"]
