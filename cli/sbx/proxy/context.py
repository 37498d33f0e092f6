"""What every part of one proxy shares: its config, its current phase, its error channel, the
rules it decides with and the request log it writes.

One :class:`ProxyContext` per proxy, made by :class:`~sbx.proxy.server.EgressProxy`
and
handed to each collaborator (no module-level state). The phase changes install → runtime, once;
the rules change when the user policy does (:mod:`sbx.proxy.userrules`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sbx.domain.egress.proxyconfig import ProxyConfig, ProxyLimits
from sbx.domain.egress.requestlog import NullSink
from sbx.domain.kits.compose import Network, Phase
from sbx.proxy.recorder import Recorder
from sbx.proxy.stdoutlines import StdoutLines
from sbx.proxy.streams import Stream
from sbx.proxy.userrules import UserRules


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
    rules: UserRules | None = None  # the user policy overlay (None: the kits' rules alone)
    # Where records, audit events and the phase go as lines (ProxyConfig.stream_records).
    lines: StdoutLines | None = None
    recorder: Recorder = field(init=False)

    def __post_init__(self) -> None:
        self.recorder = Recorder(self, NullSink())

    @property
    def limits(self) -> ProxyLimits:
        return self.config.limits

    @property
    def network(self) -> Network | None:
        """The rules to decide with now: the kits', with the user policy in force."""
        if self.rules is None:
            return self.config.network
        return self.rules.network()

    @property
    def explain_command(self) -> str:
        return self.config.explain_command


__all__ = ["ConnState", "ProxyContext"]
