"""What a host name resolves to, for ``sbx explain``: ``/etc/hosts`` alone by default (nothing
leaves the machine), or the system resolver when asked (what the egress proxy uses)."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Final

HOSTS_FILE: Final = Path("/etc/hosts")
MAX_HOSTS_BYTES: Final = 4 * 1024 * 1024


def from_hosts_file(name: str, path: Path = HOSTS_FILE) -> list[str]:
    """The addresses ``path`` gives ``name`` (case-insensitive, one trailing dot ignored)."""
    wanted = name.lower().rstrip(".")
    try:
        with path.open("rb") as handle:
            text = handle.read(MAX_HOSTS_BYTES).decode("utf-8", "replace")
    except OSError:
        return []
    found: list[str] = []
    for line in text.splitlines():
        fields = line.split("#", 1)[0].split()
        if len(fields) >= 2 and fields[0] not in found \
                and wanted in (f.lower().rstrip(".") for f in fields[1:]):
            found.append(fields[0])
    return found


def from_resolver(name: str, port: int) -> list[str]:
    """The system resolver's answer (empty when it has none)."""
    try:
        infos = socket.getaddrinfo(name, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return []
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


__all__ = ["HOSTS_FILE", "from_hosts_file", "from_resolver"]
