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

    def create_network(self, name: str, labels: Mapping[str, str], *, bridge: str | None,
                       internal: bool, host_address: bool = True) -> str:
        """A per-run bridge network, with a known bridge name when ``bridge`` is given (for the
        host firewall rules); without ``host_address`` the engine's host has no address on it,
        so nothing of that host answers there."""
        # A sandbox's network routes nowhere; a proxy's egress network is an ordinary one.
        options = {"com.docker.network.bridge.enable_ip_masquerade": "false"} if internal else {}
        if bridge is not None:
            options["com.docker.network.bridge.name"] = bridge
        if not host_address:
            options["com.docker.network.bridge.inhibit_ipv4"] = "true"
        with self._engine_errors(f"creating network {name}", Reason.CREATE_FAILED):
            created = self._api.create_network(
                name, driver="bridge", internal=internal, labels=dict(labels),
                check_duplicate=True, options=options)
        return str(created["Id"])

    def network_gateway(self, network_id: str) -> str:
        """The host's address on a network (where the egress proxy listens)."""
        return self._ipam_value(network_id, "Gateway").split("/")[0]

    def find_network(self, name: str) -> str | None:
        """The id of the network called ``name``; None when there is none."""
        import docker

        with self._engine_errors(f"reading network {name}", Reason.CREATE_FAILED):
            try:
                attrs = self._api.inspect_network(name)
            except docker.errors.NotFound:
                return None
        return str(attrs.get("Id") or "") or None

    def _ipam_value(self, network_id: str, key: str) -> str:
        with self._engine_errors("reading the sandbox network", Reason.CREATE_FAILED):
            attrs = self._api.inspect_network(network_id)
        for entry in (attrs.get("IPAM") or {}).get("Config") or []:
            value = str(entry.get(key) or "")
            if value:
                return value
        raise SbxError(Reason.CREATE_FAILED,
                       f"network {network_id[:12]} has no {key.lower()} address")

    def connect_network(self, network_id: str, container_id: str) -> None:
        with self._engine_errors(f"connecting {container_id[:12]} to network {network_id[:12]}",
                                 Reason.CREATE_FAILED):
            self._api.connect_container_to_network(container_id, network_id)

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
