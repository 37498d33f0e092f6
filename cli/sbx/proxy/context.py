"""What every part of one proxy shares: its config, its current phase and its error channel.

One :class:`ProxyContext` per proxy, made by :class:`~sbx.proxy.server.EgressProxy`
and
handed to each collaborator (no module-level state). The phase is the only thing that changes:
install → runtime, once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sbx.domain.egress.proxyconfig import ProxyConfig, ProxyLimits
from sbx.domain.kits.compose import Network, Phase
from sbx.proxy.streams import Stream


@dataclass
class ConnState:
    """One client connection: the phase it was opened in and every stream it holds (all
    aborted when the connection ends, or when the phase it was opened in closes)."""

    phase: Phase
    streams: list[Stream] = field(default_factory=list)


@dataclass
class ProxyContext:
    config: ProxyConfig
    phase: Phase
    stderr: Callable[[str], None]
    conns: dict[asyncio.Task[Any], ConnState] = field(default_factory=dict)

    @property
    def limits(self) -> ProxyLimits:
        return self.config.limits

    @property
    def network(self) -> Network | None:
        return self.config.network

    @property
    def explain_command(self) -> str:
        return self.config.explain_command


__all__ = ["ConnState", "ProxyContext"]
