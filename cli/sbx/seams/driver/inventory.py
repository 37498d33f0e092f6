"""The inventory role through the docker SDK: what the engine is and where, and what it holds
(for gc, doctor and the image cache)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.seams.engine import (
    CachedImage,
    EngineInfo,
    EngineLocation,
    OwnedObject,
    RawListing,
    Reservation,
    engine_info,
)
from sbx.seams.enginebounds import timeout_s, waiting
from sbx.seams.enginehost import is_loopback, resolve_endpoint, tcp_target

if TYPE_CHECKING:
    pass

from sbx.seams.driver.client import SdkClient, engine_timestamp


class SdkInventory(SdkClient):
    """Inventory (:class:`sbx.seams.engine.Inventory`)."""

    def location(self) -> EngineLocation:
        if self._sdk_connector is not None:
            return self._sdk_connector.location
        endpoint = resolve_endpoint(self._env)
        local = endpoint.scheme == "unix"
        if endpoint.scheme == "tcp":
            with contextlib.suppress(ValueError):
                local = is_loopback(tcp_target(endpoint.address, tls=False)[0])
        return EngineLocation(endpoint.host, local=local)


    def info(self) -> EngineInfo:
        with self._engine_errors("reading engine info", Reason.DOCKER_UNREACHABLE):
            info: dict[str, Any] = self._client.info()
        return engine_info(info, str(self._api.api_version))

    def list_owned(self, labels: Mapping[str, str]) -> list[OwnedObject]:
        """Containers, networks and volumes carrying every given label (all states)."""
        filters = [f"{k}={v}" for k, v in labels.items()]
        objects: list[OwnedObject] = []
        with self._engine_errors("listing sbx objects", Reason.CLEANUP_FAILED):
            for c in self._api.containers(all=True, filters={"label": filters}):
                names = c.get("Names") or [""]
                objects.append(OwnedObject("container", str(c["Id"]), str(names[0]).lstrip("/"),
                                           dict(c.get("Labels") or {}), str(c.get("State", ""))))
            for n in self._api.networks(filters={"label": filters}):
                objects.append(OwnedObject("network", str(n["Id"]), str(n.get("Name", "")),
                                           dict(n.get("Labels") or {}), ""))
            volumes = self._api.volumes(filters={"label": filters}) or {}
            for v in volumes.get("Volumes") or []:
                objects.append(OwnedObject("volume", str(v["Name"]), str(v["Name"]),
                                           dict(v.get("Labels") or {}), ""))
        return objects


    def list_labelled(self, labels: Mapping[str, str]) -> RawListing:
        """Containers (all states), networks and volumes carrying every given label, raw."""
        filters = {"label": [f"{k}={v}" for k, v in labels.items()]}
        with self._engine_errors("listing sbx objects", Reason.CLEANUP_FAILED):
            containers = self._api.containers(all=True, filters=filters)
            networks = self._api.networks(filters=filters)
            volumes = self._api.volumes(filters=filters)
        if not isinstance(containers, list) or not isinstance(networks, list) \
                or not isinstance(volumes, dict | None):
            raise SbxError(Reason.CLEANUP_FAILED,
                           "listing sbx objects: the engine answered an unexpected shape")
        raw_volumes = (volumes or {}).get("Volumes") or []
        if not isinstance(raw_volumes, list):
            raise SbxError(Reason.CLEANUP_FAILED,
                           "listing sbx objects: the engine's volume list is not a list")
        return RawListing(tuple(containers), tuple(networks), tuple(raw_volumes))

    def list_labelled_images(self, labels: Mapping[str, str]) -> tuple[Any, ...]:
        """Images (all, untagged ones included) carrying every given label, raw as the engine
        sent them: ``sbx gc`` parses them strictly itself (see :class:`RawListing`)."""
        filters = {"label": [f"{k}={v}" for k, v in labels.items()]}
        with self._engine_errors("listing sbx images", Reason.CLEANUP_FAILED):
            images = self._api.images(all=True, filters=filters)
        if not isinstance(images, list):
            raise SbxError(Reason.CLEANUP_FAILED,
                           "listing sbx images: the engine answered an unexpected shape")
        return tuple(images)

    def cached_images(self, repositories: Sequence[str], *,
                      inspect: Callable[[str, tuple[str, ...]], bool] | None = None,
                      ) -> list[CachedImage]:
        """Every image with a tag in one of ``repositories`` (``name/``: every repository
        under it), with its tags and when it was last tagged. With ``inspect``, only the
        images it picks by id and listed tags are inspected for that time (one call each);
        the others come with the tags the listing gave (the engine may give only those that
        matched the repository) and no time."""
        import docker

        found: dict[str, CachedImage] = {}
        with self._engine_errors("listing cached sbx images", Reason.CLEANUP_FAILED):
            for repository in repositories:
                pattern = f"{repository}*" if repository.endswith("/") else repository
                for entry in self._api.images(filters={"reference": pattern}) or []:
                    ident = str(entry.get("Id", ""))
                    if not ident or ident in found:
                        continue
                    listed = tuple(str(tag) for tag in entry.get("RepoTags") or ())
                    if inspect is not None and not inspect(ident, listed):
                        found[ident] = CachedImage(ident, listed, None)
                        continue
                    try:
                        attrs = self._api.inspect_image(ident)
                    except docker.errors.ImageNotFound:
                        continue  # removed meanwhile
                    found[ident] = CachedImage(
                        ident, tuple(attrs.get("RepoTags") or ()),
                        engine_timestamp((attrs.get("Metadata") or {}).get("LastTagTime")))
        return list(found.values())

    def local_images(self) -> list[tuple[str, int]]:
        """``(reference, size in bytes)`` of every tagged local image, smallest first."""
        with self._engine_errors("listing local images", Reason.IMAGE_MISSING):
            images = self._api.images()
        found: list[tuple[str, int]] = []
        for image in images or []:
            size = int(image.get("Size") or 0)
            found.extend((str(tag), size) for tag in image.get("RepoTags") or ()
                         if tag and tag != "<none>:<none>")
        return sorted(found, key=lambda item: (item[1], item[0]))


    def disk_usage(self) -> Mapping[str, Any]:
        """The engine's own accounting (``GET /system/df``): images, containers (with
        ``SizeRw``) and volumes (with ``UsageData``), raw; ``sbx df`` picks this home's."""
        with self._engine_errors("reading the engine's disk usage", Reason.DOCKER_UNREACHABLE,
                                 waiting(max(timeout_s(self._env), 120.0))):
            found = self._api.df()
        if not isinstance(found, dict):
            raise SbxError(Reason.DOCKER_UNREACHABLE,
                           "reading the engine's disk usage: the engine answered an "
                           "unexpected shape")
        return found

    def object_users(self, kind: str, ident: str) -> list[str]:
        """Ids of every container (any state, any owner) that uses a network, volume or image
        (an image: created from it or from an image built on it).

        A network is matched by id *and* name: a created, never-started container is attached
        by name only (its endpoint has no network id yet), and the id filter alone misses it.
        """
        import docker

        with self._engine_errors(f"listing the users of {kind} {ident[:12]}",
                                 Reason.CLEANUP_FAILED):
            if kind == "network":
                try:
                    name = str(self._api.inspect_network(ident).get("Name") or ident)
                except docker.errors.NotFound:
                    return []
                found = self._api.containers(all=True, filters={"network": [ident, name]})
            elif kind == "image":
                found = self._api.containers(all=True, filters={"ancestor": ident})
            else:
                found = self._api.containers(all=True, filters={"volume": ident})
        return [str(c.get("Id", "")) for c in found or []]

    def present(self, kind: str, idents: Sequence[str]) -> set[str]:
        """Which of ``idents`` (full container/network ids, or volume names) still exist.

        One listing per call, filtered by id (exact for full ids) or name (a substring filter,
        so the answer is intersected exactly): this is how a removal is confirmed.
        """
        wanted = set(idents)
        if not wanted:
            return set()
        with self._engine_errors(f"confirming removal of {len(wanted)} {kind}(s)",
                                 Reason.CLEANUP_FAILED):
            if kind == "container":
                found = self._api.containers(all=True, filters={"id": sorted(wanted)})
                names = {str(c.get("Id", "")) for c in found or []}
            elif kind == "network":
                found = self._api.networks(ids=sorted(wanted))
                names = {str(n.get("Id", "")) for n in found or []}
            else:
                listing = self._api.volumes(filters={"name": sorted(wanted)}) or {}
                names = {str(v.get("Name", "")) for v in listing.get("Volumes") or []}
        return wanted & names

    def reservations(self, labels: Mapping[str, str]) -> list[Reservation]:
        """The limits of the running containers carrying every given label (one inspect
        each: a listing does not carry a container's HostConfig)."""
        import docker

        filters = {"label": [f"{k}={v}" for k, v in labels.items()], "status": ["running"]}
        found: list[Reservation] = []
        with self._engine_errors("reading what sbx's sandboxes reserve",
                                 Reason.DOCKER_UNREACHABLE):
            for c in self._api.containers(filters=filters) or []:
                try:
                    config = self._api.inspect_container(str(c["Id"])).get("HostConfig") or {}
                except docker.errors.NotFound:
                    continue  # gone since the listing: it reserves nothing now
                nano, memory = config.get("NanoCpus"), config.get("Memory")
                found.append(Reservation(
                    str(c["Id"]), nano // 1_000_000 if isinstance(nano, int) else 0,
                    memory if isinstance(memory, int) else 0))
        return found


__all__ = ["SdkInventory"]
