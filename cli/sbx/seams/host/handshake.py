"""How sbx starts each program of its own and knows it is ready: one :class:`Handshake` per
program, used by both sides (the starter builds the argv and parses the ready line; the
program writes that line), so the two cannot drift apart.

A program prints exactly one ready line on its stdout, ``<PREFIX> <n> [<n> ...]`` (decimal
numbers, one space apart), once it serves; anything else on that line means it did not start.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True)
class Handshake:
    module: str  # run as ``python -m <module>``
    ready_prefix: str
    ready_fields: int  # how many numbers the ready line carries
    former_modules: tuple[str, ...] = ()  # names earlier releases ran it under (still running)
    interpreter_flags: tuple[str, ...] = ()

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, *self.interpreter_flags, "-m", self.module, *args]

    def ready_line(self, *numbers: int) -> str:
        if len(numbers) != self.ready_fields:
            raise ValueError(f"{self.module}'s ready line carries {self.ready_fields} numbers")
        return " ".join((self.ready_prefix, *(str(number) for number in numbers))) + "\n"

    def parse_ready(self, line: bytes) -> tuple[int, ...] | None:
        """The numbers of a ready line; None for anything else (no line, another prefix, too
        few numbers, a number that does not parse)."""
        prefix, _, rest = line.decode("utf-8", "replace").strip().partition(" ")
        fields = rest.split()
        if prefix != self.ready_prefix or len(fields) < self.ready_fields:
            return None
        try:
            return tuple(int(field, 10) for field in fields[:self.ready_fields])
        except ValueError:
            return None

    def runs_as(self, cmdline: list[bytes]) -> bool:
        """Whether a process's arguments are this program's (this release's or an earlier)."""
        return any(name.encode() in cmdline for name in (self.module, *self.former_modules))


# The egress proxy: ``python -m sbx.proxy CONFIG_PATH RUN_ID``; ready line: its port.
PROXY: Final = Handshake("sbx.proxy", "SBX-PROXY-READY", 1,
                         former_modules=("sbx.domain.egress.proxy",))
# A named sandbox's keeper: ``python -m sbx.keeper RUN_DIR RUN_ID``; ready line: the port
# and pid of the proxy it keeps.
KEEPER: Final = Handshake("sbx.keeper", "SBX-KEEPER-READY", 2,
                          former_modules=("sbx.usecases.keeper",))

# This user's resident helper: ``python -P -m sbx.resident SOCKET IDLE_SECONDS`` (-P: the
# directory it was started in is not on its module path); ready line: its pid.
RESIDENT: Final = Handshake("sbx.resident", "SBX-RESIDENT-READY", 1, interpreter_flags=("-P",))

__all__ = ["KEEPER", "PROXY", "RESIDENT", "Handshake"]
