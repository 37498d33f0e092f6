"""The networks and volumes role through the docker SDK."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason

if TYPE_CHECKING:


    pass

from sbx.seams.driver.client import SdkClient


class SdkNetworks(SdkClient):
    """Networks and volumes (:class:`sbx.seams.engine.Networks`)."""

    def create_network(self, name: str, labels: Mapping[str, str], *, bridge: str,
                       internal: bool) -> str:
        """A per-run bridge network with a known bridge name (for the host firewall rules)."""
        with self._engine_errors(f"creating network {name}", Reason.CREATE_FAILED):
            created = self._api.create_network(
                name, driver="bridge", internal=internal, labels=dict(labels),
                check_duplicate=True,
                options={"com.docker.network.bridge.name": bridge,
                         "com.docker.network.bridge.enable_ip_masquerade": "false"})
        return str(created["Id"])

    def network_gateway(self, network_id: str) -> str:
        """The host's address on a network (where the egress proxy listens)."""
        with self._engine_errors("reading the sandbox network", Reason.CREATE_FAILED):
            attrs = self._api.inspect_network(network_id)
        for entry in (attrs.get("IPAM") or {}).get("Config") or []:
            gateway = str(entry.get("Gateway") or "").split("/")[0]
            if gateway:
                return gateway
        raise SbxError(Reason.CREATE_FAILED, f"network {network_id[:12]} has no gateway address")

    def remove_network(self, network_id: str) -> bool:
        """Remove a network; True when it is gone (including when it was already gone)."""
        import docker

        with self._engine_errors(f"removing network {network_id[:12]}", Reason.CLEANUP_FAILED):
            try:
                self._api.remove_network(network_id)
            except docker.errors.NotFound:
                return True
        return True

    def create_volume(self, name: str, labels: Mapping[str, str]) -> str:
        with self._engine_errors(f"creating volume {name}", Reason.CREATE_FAILED):
            created = self._api.create_volume(name=name, driver="local", labels=dict(labels))
        return str(created["Name"])

    def remove_volume(self, name: str) -> bool:
        """Remove a volume; True when it is gone (including when it was already gone)."""
        import docker

        with self._engine_errors(f"removing volume {name[:24]}", Reason.CLEANUP_FAILED):
            try:
                self._api.remove_volume(name)
            except docker.errors.NotFound:
                return True
        return True


__all__ = ["SdkNetworks"]
