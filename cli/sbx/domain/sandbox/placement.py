"""Which configured engine a new sandbox goes to: the least-loaded one that answered.

An engine's room is what its ``/info`` says it has (CPUs, memory) minus what the sandboxes sbx
runs there reserve (their limits). The sandbox goes where the scarcer of the two resources
leaves the largest share free once it is placed; engines where it does not fit at all come
after every engine where it does; ties keep the order of ``[engines]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class EngineLoad:
    """One reachable engine: what it has and what sbx's sandboxes there reserve."""

    name: str
    cpu_millis: int  # NCPU * 1000
    memory_bytes: int  # MemTotal
    reserved_cpu_millis: int = 0
    reserved_memory_bytes: int = 0

    def free_share(self, cpu_millis: int, memory_bytes: int) -> float:
        """The smaller of the free CPU and free memory shares once the sandbox is placed
        (negative when it does not fit)."""
        shares = []
        if self.cpu_millis > 0:
            shares.append((self.cpu_millis - self.reserved_cpu_millis - cpu_millis)
                          / self.cpu_millis)
        if self.memory_bytes > 0:
            shares.append((self.memory_bytes - self.reserved_memory_bytes - memory_bytes)
                          / self.memory_bytes)
        return min(shares) if shares else -1.0


def place(loads: Sequence[EngineLoad], *, cpu_millis: int, memory_bytes: int) -> str | None:
    """The name of the engine the sandbox goes to; None when no engine answered."""
    best: tuple[float, int] | None = None
    chosen = None
    for order, load in enumerate(loads):
        score = (load.free_share(cpu_millis, memory_bytes), -order)
        if best is None or score > best:
            best, chosen = score, load.name
    return chosen


__all__ = ["EngineLoad", "place"]
