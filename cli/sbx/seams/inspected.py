"""What an engine's inspect answer for a container says, read the same way by every
transport (the SDK's and sbx's own client)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sbx.seams.engine import SandboxFiles, SandboxMount


def sandbox_files(attrs: Mapping[str, Any]) -> SandboxFiles:
    """A container's inspect answer → its user, root and mounts (tmpfs ones included)."""
    host = attrs.get("HostConfig") or {}
    mounts = [SandboxMount(str(m.get("Destination", "")), bool(m.get("RW")),
                           str(m.get("Type", "")))
              for m in attrs.get("Mounts") or ()]
    mounts += [SandboxMount(str(target), "ro" not in str(options).split(","), "tmpfs")
               for target, options in (host.get("Tmpfs") or {}).items()]
    return SandboxFiles(user=str((attrs.get("Config") or {}).get("User") or ""),
                        read_only_root=bool(host.get("ReadonlyRootfs")), mounts=tuple(mounts),
                        image=str(attrs.get("Image") or ""))


def network_address(attrs: Mapping[str, Any], network: str) -> tuple[str, int] | None:
    """(address, prefix length) of an inspected container on ``network``; None without one."""
    networks = (attrs.get("NetworkSettings") or {}).get("Networks") or {}
    entry = networks.get(network) or {}
    address = str(entry.get("IPAddress") or "")
    prefix = entry.get("IPPrefixLen")
    if not address or not isinstance(prefix, int) or isinstance(prefix, bool):
        return None
    return address, prefix


__all__ = ["network_address", "sandbox_files"]
