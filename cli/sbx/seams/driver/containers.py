"""The containers role through the docker SDK: create, start, wait, stop, remove, inspect, and
files put into a container."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.seams.engine import (
    ContainerActivity,
    create_kwargs,
)
from sbx.seams.enginebounds import (
    AnswerExceeded,
    quick,
    waiting,
)
from sbx.seams.inspected import network_address

if TYPE_CHECKING:

    from docker.models.containers import Container

    from sbx.seams.containerspec import ContainerSpec

from sbx.seams.driver.client import SdkClient, is_read_timeout


class SdkContainers(SdkClient):
    """Containers (:class:`sbx.seams.engine.Containers`)."""

    def create(self, spec: ContainerSpec) -> str:
        kwargs = create_kwargs(spec)
        name = kwargs.pop("name", None)
        stdin_once = kwargs.pop("stdin_once", True)
        kwargs.pop("use_config_proxy", None)  # the config is built here: nothing is injected
        with self._engine_errors("creating the sandbox container", Reason.CREATE_FAILED):
            host_config = self._api.create_host_config(**kwargs.pop("host_config"))
            config = self._api.create_container_config(host_config=host_config, **kwargs)
            # The SDK ties StdinOnce to stdin_open; a named sandbox keeps its stdin open across
            # attaches (a detach must not close the workload's stdin).
            if kwargs.get("stdin_open"):
                config["StdinOnce"] = stdin_once
            created = self._api.create_container_from_config(config, name=name)
        return str(created["Id"])

    def start(self, container_id: str) -> None:
        with self._engine_errors("starting the sandbox container", Reason.START_FAILED):
            self._api.start(container_id)

    def wait(self, container_id: str, timeout_s: float) -> int | None:
        """The exit status, or None when the container still runs after ``timeout_s``."""
        import requests

        with self._engine_errors("waiting for the sandbox", Reason.START_FAILED,
                                 waiting(timeout_s)):
            try:
                result: dict[str, Any] = self._api.wait(container_id,
                                                              timeout=max(timeout_s, 0.001))
            except AnswerExceeded as exc:
                if exc.slow:
                    return None
                raise
            except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError) as exc:
                if is_read_timeout(exc):
                    return None
                raise
        return int(result.get("StatusCode", -1))

    def stop(self, container_id: str, timeout_s: int) -> None:
        """Graceful stop (SIGTERM, then SIGKILL after ``timeout_s``); gone or stopped is fine."""
        import docker

        bound = waiting(timeout_s + quick(self._env).idle_s)  # the engine waits timeout_s
        with self._engine_errors("stopping the sandbox", Reason.CLEANUP_FAILED, bound):
            try:
                self._api.stop(container_id, timeout=timeout_s)
            except docker.errors.NotFound:
                return

    def kill(self, container_id: str) -> None:
        import docker

        with self._engine_errors("stopping the sandbox", Reason.CLEANUP_FAILED):
            try:
                self._api.kill(container_id)
            except docker.errors.APIError as exc:
                # Already stopped or gone: nothing left to kill.
                if exc.status_code not in (404, 409):
                    raise

    def send_signal(self, container_id: str, signal: str) -> None:
        """``signal`` (a name, e.g. ``SIGUSR1``) to the container's main process."""
        with self._engine_errors(f"signalling {container_id[:12]}", Reason.PROXY_FAILED):
            self._api.kill(container_id, signal=signal)

    def remove_container(self, container_id: str) -> bool:
        """Force-remove; True when it is gone (including when it was already gone)."""
        import docker

        with self._engine_errors("removing the sandbox", Reason.CLEANUP_FAILED):
            try:
                self._api.remove_container(container_id, force=True, v=True)
            except docker.errors.NotFound:
                return True
            except docker.errors.APIError as exc:
                if exc.status_code == 409 and "already in progress" in str(exc):
                    return self._gone(container_id)
                raise
        return True

    def _gone(self, container_id: str) -> bool:
        """Another removal is under way: confirmed, not assumed (a dead container left by a
        removal the engine gave up on is removed again)."""
        import time

        import docker

        seconds = quick(self._env).idle_s
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            with self._engine_errors("removing the sandbox", Reason.CLEANUP_FAILED):
                try:
                    attrs = self._api.inspect_container(container_id)
                except docker.errors.NotFound:
                    return True
                if (attrs.get("State") or {}).get("Status") == "dead":
                    try:
                        self._api.remove_container(container_id, force=True, v=True)
                        return True
                    except docker.errors.NotFound:
                        return True
                    except docker.errors.APIError:
                        pass
            time.sleep(0.1)
        raise SbxError(Reason.CLEANUP_FAILED,
                       f"removing the sandbox: the engine was still removing it after "
                       f"{seconds:g}s")

    def container_state(self, container_id: str) -> str | None:
        """``running``, ``exited``, ``created``...; None when the container does not exist."""
        import docker

        with self._engine_errors("inspecting the sandbox", Reason.START_FAILED):
            try:
                attrs = self._api.inspect_container(container_id)
            except docker.errors.NotFound:
                return None
        return str((attrs.get("State") or {}).get("Status") or "") or None

    def container_finished_at(self, container_id: str) -> float | None:
        """When a stopped container stopped (unix time); None while it runs or is gone."""
        from datetime import datetime

        import docker

        with self._engine_errors("inspecting the sandbox", Reason.START_FAILED):
            try:
                attrs = self._api.inspect_container(container_id)
            except docker.errors.NotFound:
                return None
        state = attrs.get("State") or {}
        if state.get("Running"):
            return None
        raw = str(state.get("FinishedAt") or "")
        try:
            # RFC 3339 with nanoseconds: keep microseconds for fromisoformat.
            head = raw.partition(".")[0]
            stamp = datetime.fromisoformat(head + ("+00:00" if raw.endswith("Z") else ""))
        except ValueError:
            return None
        return stamp.timestamp() if stamp.year > 1 else None

    def container_pid(self, container_id: str) -> int | None:
        """The host pid of the container's first process; None once it is not running."""
        with self._engine_errors("inspecting the sandbox", Reason.START_FAILED):
            attrs = self._api.inspect_container(container_id)
        pid = int((attrs.get("State") or {}).get("Pid") or 0)
        return pid or None

    def container_activity(self, container_id: str) -> ContainerActivity | None:
        """Its live exec sessions and CPU time so far (one-shot stats: no second sample's
        wait); None when the container does not exist."""
        import docker

        with self._engine_errors("inspecting the sandbox", Reason.START_FAILED):
            try:
                attrs = self._api.inspect_container(container_id)
            except docker.errors.NotFound:
                return None
            running = (attrs.get("State") or {}).get("Status") == "running"
            stats = self._api.stats(container_id, stream=False, one_shot=True) \
                if running else {}
        usage = ((stats or {}).get("cpu_stats") or {}).get("cpu_usage") or {}
        total = usage.get("total_usage")
        cpu_ns = total if isinstance(total, int) and not isinstance(total, bool) else None
        return ContainerActivity(running, len(attrs.get("ExecIDs") or ()), cpu_ns)

    def container_ip(self, container_id: str, network: str) -> str | None:
        """The container's address on ``network``; None once it has stopped (no address)."""
        with self._engine_errors("reading the sandbox's address", Reason.START_FAILED):
            attrs = self._api.inspect_container(container_id)
        networks = (attrs.get("NetworkSettings") or {}).get("Networks") or {}
        return str((networks.get(network) or {}).get("IPAddress") or "") or None

    def network_endpoint(self, container_id: str, network: str) -> tuple[str, int] | None:
        """The container's address and prefix length on ``network`` (None: it has none)."""
        with self._engine_errors("reading a container's address", Reason.START_FAILED):
            attrs = self._api.inspect_container(container_id)
        return network_address(attrs, network)

    def put_archive(self, container_id: str, path: str, tar: bytes) -> None:
        with self._engine_errors(f"writing files into the sandbox at {path}"):
            if not self._api.put_archive(container_id, path, tar):
                raise SbxError(Reason.CREATE_FAILED, f"the engine refused files at {path}")

    def path_exists(self, container_id: str, path: str) -> bool:
        import docker

        with self._engine_errors(f"checking {path} in the sandbox"):
            try:
                self._api.get_archive(container_id, path)
            except docker.errors.NotFound:
                return False
        return True

    def container(self, container_id: str) -> Container:
        """The SDK object, for tests that inspect what was created (never used by sbx itself)."""
        with self._engine_errors("inspecting the sandbox"):
            return self._client.containers.get(container_id)



__all__ = ["SdkContainers"]
