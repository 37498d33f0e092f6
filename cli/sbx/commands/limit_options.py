"""`--memory`, `--cpus`, `--pids`: the resource flags of every command that creates a sandbox
(Docker's forms; parsed by sbx.domain.sandbox.limitflags, bounded by the config)."""

from __future__ import annotations

from typing import Annotated

import typer

MemoryOption = Annotated[str | None, typer.Option(
    "--memory", "-m", metavar="SIZE",
    help="Memory limit in Docker's sizes (128m, 2g, or bytes); swap is the same. At most "
         "[sandbox] memory_bytes; over it is refused, never truncated.")]
CpusOption = Annotated[str | None, typer.Option(
    "--cpus", metavar="N",
    help="CPU limit in CPUs (0.5, 1.5); at most [sandbox] cpu_millis / 1000.")]
PidsOption = Annotated[str | None, typer.Option(
    "--pids", metavar="N", help="Process limit; at most [sandbox] pids.")]
IdleStopOption = Annotated[str | None, typer.Option(
    "--idle-stop", metavar="DURATION",
    help="Stop the named sandbox once idle this long (no client, no egress request, almost "
         "no CPU): 90, 90s, 30m or 2h (default [sandbox] idle_stop: never).")]

__all__ = ["CpusOption", "IdleStopOption", "MemoryOption", "PidsOption"]
