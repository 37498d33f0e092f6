"""The files role through the docker SDK: a container's mounts, and archives read from and
written to it (``GET``/``HEAD``/``PUT /containers/{id}/archive``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from sbx.base.errors import EngineUnavailable
from sbx.base.reasons import Reason
from sbx.seams.driver.client import SdkClient
from sbx.seams.engine import (
    PATH_STAT_HEADER,
    PathStat,
    SandboxFiles,
    header_path_stat,
    path_stat,
    short_error,
    situation_hint,
)
from sbx.seams.enginebounds import transfer
from sbx.seams.inspected import sandbox_files

CHUNK = 1024 * 1024


class SdkFiles(SdkClient):
    """Files (:class:`sbx.seams.engine.Files`)."""

    def sandbox_files(self, container_id: str) -> SandboxFiles:
        with self._engine_errors("inspecting the sandbox", Reason.START_FAILED):
            attrs = self._api.inspect_container(container_id)
        return sandbox_files(attrs)

    def archive_stat(self, container_id: str, path: str) -> PathStat | None:
        """The path's stat, or None when it does not exist in the container."""
        action = f"looking up {path} in the sandbox"
        with self._engine_errors(action, Reason.COPY_REFUSED):
            # The SDK has no stat-only call; its client is a requests session.
            response = self._api.head(
                self._api._url("/containers/{0}/archive", container_id),
                params={"path": path})
            if response.status_code == 404:
                return None
            self._api._raise_for_status(response)
        raw = header_path_stat(response.headers.get(PATH_STAT_HEADER))
        return path_stat(raw) if raw is not None else None

    def archive_read(self, container_id: str, path: str) -> Iterator[bytes]:
        """The tar the engine makes of ``path``, in chunks, never silent for long (close the
        iterator to stop early)."""
        import urllib3

        action = f"copying {path} out of the sandbox"
        with self._engine_errors(action, Reason.COPY_REFUSED, transfer(self._env)):
            try:
                chunks, _stat = self._api.get_archive(container_id, path, chunk_size=CHUNK)
                yield from chunks
            except urllib3.exceptions.HTTPError as exc:
                raise EngineUnavailable(f"{action}: the stream broke: {short_error(exc)}",
                                        hint=situation_hint(self._env, str(exc))) from exc

    def archive_write(self, container_id: str, path: str, tar: Any) -> None:
        """Extract ``tar`` (bytes or a readable file) into the directory ``path``; the engine
        refuses a read-only root or mount."""
        action = f"copying into the sandbox at {path}"
        with self._engine_errors(action, Reason.COPY_REFUSED, transfer(self._env)):
            self._api.put_archive(container_id, path, tar)


__all__ = ["SdkFiles"]
