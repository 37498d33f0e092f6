"""When a named sandbox counts as idle, for ``[sandbox] idle_stop`` (its keeper stops it).

Idle means *all* of these, for the whole period: no client (no live exec session in the
engine, no ``sbx run``/``sbx attach`` holding its client lock), no egress request through its
proxy (the request log's last write), and the workload's CPU use below
:data:`CPU_IDLE_FRACTION` of one core between every two samples. Any one of them, once, starts
the period over; a sample that cannot tell (the engine's stats missing, the CPU counter going
backwards) counts as activity: the watcher never stops a sandbox on what it could not see.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

CPU_IDLE_FRACTION: Final = 0.05  # of one core: an agent waiting for input uses far less


@dataclass(frozen=True)
class Sample:
    """What the keeper saw at ``at`` (wall-clock seconds, as the request log's times are)."""

    at: float
    clients: int  # live exec sessions plus attached sbx clients
    last_request: float | None  # when the proxy last wrote a request record, if ever
    cpu_ns: int | None  # the container's total CPU time so far; None: unknown


class IdleWatch:
    """Fed one :class:`Sample` at a time; says when the sandbox has been idle ``idle_s``."""

    def __init__(self, idle_s: float, *, cpu_fraction: float = CPU_IDLE_FRACTION) -> None:
        self.idle_s = idle_s
        self.cpu_fraction = cpu_fraction
        self.active_at: float | None = None  # the last time anything showed activity
        self._previous: Sample | None = None

    def observe(self, sample: Sample) -> bool:
        """Record ``sample``; True once nothing was active for ``idle_s`` up to it."""
        previous, self._previous = self._previous, sample
        if self.active_at is None or previous is None or self._active(previous, sample):
            self.active_at = sample.at  # the first sample starts the period: it may be busy
        if sample.last_request is not None:
            self.active_at = max(self.active_at, min(sample.last_request, sample.at))
        return sample.at - self.active_at >= self.idle_s

    def idle_for(self, now: float) -> float:
        return 0.0 if self.active_at is None else max(0.0, now - self.active_at)

    def _active(self, previous: Sample, sample: Sample) -> bool:
        if sample.clients > 0 or previous.clients > 0:
            return True  # a client that left since the last sample may have left just now
        if sample.cpu_ns is None or previous.cpu_ns is None or sample.cpu_ns < previous.cpu_ns:
            return True
        elapsed = sample.at - previous.at
        if elapsed <= 0:
            return True  # the clock went back: what happened between is unknown
        return (sample.cpu_ns - previous.cpu_ns) / 1e9 >= self.cpu_fraction * elapsed


__all__ = ["CPU_IDLE_FRACTION", "IdleWatch", "Sample"]
