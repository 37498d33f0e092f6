"""`sbx ports NAME`: a named sandbox's published ports (its kits' and its -p ones), each with
where it is published now (None while the sandbox is stopped: its keeper forwards them only
while it runs)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sbx.domain.sandbox import runrecord
from sbx.seams.host import processes
from sbx.usecases import keeper, publishedports
from sbx.usecases.context import AppContext
from sbx.usecases.named.listing import load_named


@dataclass(frozen=True)
class PortRow:
    container: int
    source: str  # "kit" (port@1) or "publish" (-p)
    host: str
    host_port: int | None  # None: not published now (stopped)
    asked: int  # the host port asked for (0: any free one)

    def as_dict(self) -> dict[str, object]:
        return {"container": self.container, "transport": "tcp", "source": self.source,
                "host": self.host, "host_port": self.host_port, "asked_host_port": self.asked}

    def where(self) -> str:
        """Where it is reachable now, as `sbx ports` and `sbx explain NAME` spell it."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.host_port}" if self.host_port is not None else "- (stopped)"


def sandbox_ports(ctx: AppContext, word: str) -> tuple[str, list[PortRow]]:
    """(name, its ports): what it was created with, matched with what its keeper publishes."""
    record = load_named(ctx, word, command="`sbx ports`")
    run_dir = runrecord.run_dir(ctx.state_home, record.run_id)
    wanted = publishedports.read_wanted(run_dir)
    if wanted is None:
        return record.name, []
    live = publishedports.read_published(run_dir) if _keeper_alive(run_dir) else []
    rows = []
    for binding in wanted[1]:
        now = next((p for p in live if p.get("container") == binding.container_port
                    and p.get("source") == binding.source and p.get("host") == binding.host
                    and (binding.host_port in (0, p.get("host_port")))), None)
        if now is not None:
            live.remove(now)
        port = now.get("host_port") if now is not None else None
        rows.append(PortRow(binding.container_port, binding.source, binding.host,
                            port if isinstance(port, int) else None, binding.host_port))
    return record.name, rows


def _keeper_alive(run_dir: Path) -> bool:
    """A keeper killed hard leaves its published list behind: only a live one's counts."""
    try:
        pid = int((run_dir / keeper.PID_FILE).read_text(encoding="ascii").strip())
    except (OSError, ValueError):
        return False
    return processes.pid_alive(pid)


__all__ = ["PortRow", "sandbox_ports"]
