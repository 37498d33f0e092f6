"""A sandbox's published ports: its kits' ``port@1`` and its ``-p``, as one list of bindings
for the one forwarder (sbx.seams.ports), and what a named sandbox's run directory keeps of them.

A one-shot run forwards in its own process. A named sandbox's ports are forwarded by its keeper
(:mod:`sbx.keeper`), so they stay reachable with no ``sbx`` attached: the run directory holds
what to publish (:data:`WANTED`, written at creation, read at every start) and what is
published now (:data:`PUBLISHED`, written by the keeper once it listens; gone when it stops).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.seams import owned, ports
from sbx.seams.ports import KIT, PUBLISH, Binding, PublishedPort, check_free

if TYPE_CHECKING:
    from sbx.domain.sandbox.capabilities import CapabilityPlan

WANTED: Final = "ports.json"
PUBLISHED: Final = "ports.published.json"
MAX_BYTES: Final = 256 * 1024


def bindings_of(capabilities: CapabilityPlan | None) -> list[Binding]:
    """The kits' ports (each on a free loopback port), then the ``-p`` ones as asked."""
    if capabilities is None:
        return []
    kit = [Binding(port, KIT) for port in capabilities.ports]
    return kit + [Binding(p.container_port, PUBLISH, p.host_ip, p.host_port)
                  for p in capabilities.published]


def check_host_ports(capabilities: CapabilityPlan | None) -> None:
    """A -p host port something holds is refused (``port_taken``) before the sandbox is made."""
    if capabilities is not None and capabilities.published:
        check_free(bindings_of(capabilities))


def forward(address: str, bindings: Sequence[Binding]
            ) -> tuple[ports.PortForwarder, list[PublishedPort]]:
    """A one-shot run's forwarder, in this process; ``port_taken``/``start_failed`` when the
    host cannot listen (the caller's cleanup stops what did start)."""
    forwarder = ports.PortForwarder(address)  # through its module: one seam to replace
    try:
        return forwarder, forwarder.start(bindings)
    except SbxError:
        forwarder.stop()
        raise


def published_now(run_dir: Path) -> list[PublishedPort]:
    """What a named sandbox's keeper publishes now."""
    published = []
    for p in read_published(run_dir):
        container, host_port = p.get("container"), p.get("host_port")
        if isinstance(container, int) and isinstance(host_port, int):
            published.append(PublishedPort(container, str(p.get("transport", "tcp")),
                                           str(p.get("host", "")), host_port,
                                           str(p.get("source", KIT))))
    return published


def write_wanted(run_dir: Path, bindings: Sequence[Binding], network: str) -> None:
    owned.write_file(run_dir / WANTED, json.dumps(
        {"network": network, "bindings": [b.as_dict() for b in bindings]}).encode("utf-8"))


def read_wanted(run_dir: Path) -> tuple[str, list[Binding]] | None:
    """(network, bindings) of a named sandbox with ports; None without any."""
    data = _read(run_dir / WANTED)
    if not isinstance(data, dict) or not isinstance(data.get("network"), str):
        return None
    try:
        return data["network"], [Binding.from_dict(b) for b in data.get("bindings") or ()]
    except (ValueError, TypeError, AttributeError) as error:
        raise SbxError(Reason.STATE_CORRUPT, f"{run_dir / WANTED} cannot be read ({error})",
                       hint="`sbx rm -f NAME` and create the sandbox again.") from error


def write_published(run_dir: Path, published: Sequence[PublishedPort]) -> None:
    owned.write_file(run_dir / PUBLISHED,
                     json.dumps([p.as_dict() for p in published]).encode("utf-8"))


def forget_published(run_dir: Path) -> None:
    with contextlib.suppress(OSError):
        (run_dir / PUBLISHED).unlink()


def read_published(run_dir: Path) -> list[dict[str, Any]]:
    data = _read(run_dir / PUBLISHED)
    return [p for p in data if isinstance(p, dict)] if isinstance(data, list) else []


def announce(published: Sequence[PublishedPort], on_notice: Callable[[str], None]) -> None:
    for port in published:
        host = f"[{port.host}]" if ":" in port.host else port.host
        source = " (-p)" if port.source == PUBLISH else ""
        on_notice(f"port {port.key}{source} is published on {host}:{port.host_port}")


def _read(path: Path) -> Any:
    try:
        raw = owned.read_bytes(path, max_bytes=MAX_BYTES)
        return json.loads(raw) if raw is not None else None
    except (OSError, ValueError):
        return None


__all__ = ["KIT", "PUBLISHED", "WANTED", "announce", "bindings_of", "check_host_ports",
           "forget_published", "forward", "published_now", "read_published", "read_wanted",
           "write_published", "write_wanted"]
