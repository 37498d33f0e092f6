"""``port@1``: a container port published to the host, on ``127.0.0.1`` with an ephemeral port.

One entry per (container, transport) in a block; merged on that key; on the surface as
``<container>/<transport>``. Only tcp is forwarded: a udp port refuses a required entry and is
skipped and recorded when optional.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.kits.captypes.base import (
    CapabilityEntry,
    Handler,
    Keys,
    Merge,
    Out,
    config_of,
    missing,
    opt_str,
    show,
)
from sbx.domain.kits.composed import Port
from sbx.domain.kits.placeholders import contains_placeholder
from sbx.domain.kits.selectionrecord import SelectionRecord
from sbx.domain.kits.types import PORT

if TYPE_CHECKING:
    from sbx.domain.kits.captypes.base import SandboxPlanner
    from sbx.domain.kits.composed import ComposedParts, Origin
    from sbx.domain.kits.surfacetypes import Surface, Widening


class PortType(Handler):
    types = (PORT,)
    implemented = True

    def claim(self, entry: CapabilityEntry, keys: Keys, out: Out) -> None:
        config = entry.config
        container = config.get("container")
        transport = config.get("transport", "tcp")
        if isinstance(container, int) and not isinstance(container, bool) \
                and isinstance(transport, str) and not contains_placeholder(transport):
            previous = keys.claim("port", f"{container}/{transport}", entry.path)
            if previous is not None:
                out.add(entry.at("config", "container"), f"port {container}/{transport} "
                                                         f"already declared at "
                                                         f"{show(previous)}")

    def add(self, merge: Merge, origin: Origin, item: Mapping[str, Any],
            config: Mapping[str, Any], optional: bool) -> None:
        container, transport = _parts(config)
        merge.collapse("ports", f"{container}/{transport}", origin, item, optional)

    def finish(self, merge: Merge, parts: dict[str, Any]) -> None:
        ports = []
        for keyed in merge.table("ports").values():
            cfg = config_of(keyed.item)
            container, transport = _parts(cfg)
            ports.append(Port(container, transport, opt_str(cfg.get("name")), keyed.optional,
                              tuple(keyed.origins)))
        parts["ports"] = tuple(ports)

    def effective(self, composition: ComposedParts) -> Iterable[tuple[str, Any, bool]]:
        for port in composition.ports:
            yield PORT, port.config(), port.optional

    def project(self, ctype: str, config: Any, lists: dict[str, list[str]],
                flags: dict[str, bool]) -> bool:
        if not isinstance(config, Mapping):
            return False
        container, transport = config.get("container"), config.get("transport") or "tcp"
        if isinstance(container, bool) or not isinstance(container, int):
            return False
        lists["ports"].append(f"{container}/{transport}")
        return True

    def widenings(self, granted: Surface, candidate: Surface) -> Iterator[Widening]:
        yield from missing("ports", granted.ports, candidate.ports)

    def plan(self, composition: ComposedParts, planner: SandboxPlanner) -> None:
        """TCP ports are forwarded; UDP cannot be (refused when required, skipped when
        optional)."""
        for port in composition.ports:
            if port.transport == "tcp":
                planner.add_port(port.container)
                continue
            origin = port.origins[0]
            reason = f"{port.container}/{port.transport}: only tcp ports can be published"
            if port.optional:
                planner.skip(SelectionRecord(origin.kit, origin.path, PORT, reason))
                continue
            raise SbxError(Reason.UNSUPPORTED_CAPABILITY,
                           f"refused: {origin.kit} {origin.path} ({PORT}) {reason}",
                           hint="Mark the port optional, or publish it over tcp.")


def _parts(cfg: Mapping[str, Any]) -> tuple[int, str]:
    container = cfg.get("container")
    transport = cfg.get("transport") or "tcp"
    return (container if isinstance(container, int) else 0), str(transport)


HANDLER: Final = PortType()

__all__ = ["HANDLER", "PortType"]
