"""`sbx ls` across every engine sandboxes live on: each engine's sandboxes with their state
there, and an engine that does not answer named as unreachable with why (its sandboxes listed
as ``unreachable``), never as one without sandboxes. Names that reach one daemon (its /info
ID) are listed once, under the first; the others are its aliases."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sbx.base.errors import SbxError
from sbx.domain.sandbox.records import SandboxRecord
from sbx.usecases import fleet
from sbx.usecases.context import AppContext
from sbx.usecases.named.listing import SandboxStatus, status_of, statuses
from sbx.usecases.sandboxstore import SandboxStore

UNREACHABLE = "unreachable"


@dataclass(frozen=True)
class EngineReach:
    """One engine the listing covered: its entry name (None: the environment's), its host,
    why it did not answer (None: it did), and the later names that reach the same daemon."""

    name: str | None
    host: str
    reason: str | None = None
    message: str | None = None
    aliases: tuple[str | None, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "host": self.host, "reachable": self.reason is None,
                "reason": self.reason, "message": self.message, "aliases": list(self.aliases)}


@dataclass(frozen=True)
class FleetListing:
    sandboxes: list[SandboxStatus]
    engines: list[EngineReach]
    fleet: bool  # more than the environment's one engine: the ENGINE column is shown


def list_everywhere(ctx: AppContext, *, include_runs: bool) -> FleetListing:
    store = SandboxStore(ctx.state_home)
    records = [r for r in (store.load(name) for name in store.names()) if r is not None]
    engines = fleet.every_engine(ctx)
    if len(engines) == 1 and engines[0][0] is None:  # one engine, as without [engines]
        return FleetListing(statuses(ctx, records, include_runs=include_runs), [], fleet=False)
    found: list[SandboxStatus] = []
    reached: list[EngineReach] = []
    for daemon in fleet.distinct(engines):
        name, on, aliases = daemon.name, daemon.ctx, daemon.aliases
        # its aliases' sandboxes too: else each would show again as a one-shot run of it
        mine = [r for r in records if r.engine == name or r.engine in aliases]
        host = on.env.get("DOCKER_HOST", "") or "(the environment's engine)"
        error = daemon.error
        if error is None:
            try:
                found.extend(statuses(on, mine, include_runs=include_runs, engine=name))
            except SbxError as failed:
                error = failed
        if error is not None:
            reached.append(EngineReach(name, host, error.reason.value, error.message, aliases))
            found.extend(_unreachable(ctx, mine, name))
            continue
        reached.append(EngineReach(name, host, aliases=aliases))
    order = {record.name: index for index, record in enumerate(records)}
    found.sort(key=lambda s: (order.get(s.name, len(order)), s.name))
    return FleetListing(found, reached, fleet=True)


def _unreachable(ctx: AppContext, records: list[SandboxRecord],
                 engine: str | None) -> list[SandboxStatus]:
    return [status_of(ctx, record, UNREACHABLE, engine) for record in records]


__all__ = ["UNREACHABLE", "EngineReach", "FleetListing", "list_everywhere"]
