"""What sbx reads of the host's ``/proc`` beside processes (those are
:mod:`sbx.seams.host.processes`'s): mount tables and the TCP listening tables. Parsing them is
the domain's and the use cases' job; reading them is here."""

from __future__ import annotations

from pathlib import Path
from typing import Final

TCP_TABLES: Final = ("/proc/net/tcp", "/proc/net/tcp6")


def mountinfo(pid: int | None = None) -> str:
    """The mount table of process ``pid`` (None: this process); raises OSError."""
    return Path(f"/proc/{'self' if pid is None else pid}/mountinfo").read_text(encoding="utf-8")


def tcp_tables() -> tuple[str, ...]:
    """The texts of the IPv4 and IPv6 TCP tables that could be read (none without /proc; no
    tcp6 without IPv6: nothing listens there as far as sbx can tell)."""
    texts = []
    for name in TCP_TABLES:
        try:
            texts.append(Path(name).read_text(encoding="ascii", errors="replace"))
        except OSError:
            continue
    return tuple(texts)


__all__ = ["TCP_TABLES", "mountinfo", "tcp_tables"]
