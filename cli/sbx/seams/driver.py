"""The Docker driver: the only module that imports the docker SDK.

Everything sbx asks of the engine through the SDK goes through :class:`SdkEngine`, which returns
dataclasses and translates every SDK or transport exception into a reason-coded
:class:`~sbx.base.errors.SbxError` at one boundary (:func:`_engine_errors`). The SDK is imported
lazily inside the factory so that ``sbx --help`` and ``sbx explain`` never pay for it.

A local engine's hot-path calls are made by :class:`sbx.seams.enginesocket.SocketEngine` (a
subclass speaking the socket directly); :mod:`sbx.seams.transports` picks the class once, where
the engine is opened. The values and the role protocols live in :mod:`sbx.seams.engine`.

Two SDK conveniences are avoided on purpose: ``containers.run`` (it pulls a missing image — sbx
never pulls at run time) and ``auto_remove`` (sbx needs the exit status before removal and removes
explicitly on every path).
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import math
import socket
import struct
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from contextlib import closing, contextmanager
from typing import TYPE_CHECKING, Any

from sbx.base.errors import EngineUnavailable, SbxError
from sbx.base.labels import own_labels
from sbx.base.reasons import Reason
from sbx.seams.engine import (
    MAX_IMAGE_FILE_BYTES,
    CachedImage,
    Driver,
    EngineInfo,
    EngineLocation,
    ImageInfo,
    OwnedObject,
    RawListing,
    create_kwargs,
    image_info,
    registry_chunk,
    short_error,
    situation_hint,
    split_tag,
    unix_mode,
)
from sbx.seams.enginebounds import (
    AnswerBound,
    AnswerExceeded,
    BoundedSocket,
    bounded,
    cap_body,
    exceeded,
    json_lines,
    quick,
    stream,
    timeout_s,
    transfer,
    waiting,
)
from sbx.seams.signals import deferred_interrupts

if TYPE_CHECKING:
    from pathlib import Path

    import docker
    from docker.models.containers import Container

    from sbx.seams.connectors import Connector
    from sbx.seams.containerspec import ContainerSpec
    from sbx.seams.session.stream import AttachedStream

# The DOCKER_HOST the SDK is built with when a connector carries its connections: it makes the
# SDK mount a unix adapter, which _bound_transport replaces; nothing ever connects to it.
_CONNECTOR_PLACEHOLDER = "unix:///nonexistent/sbx-connector.sock"


def _collect_failed_client(error: BaseException) -> None:
    """The SDK gives no handle on a client whose first request failed: only the frames in the
    error's traceback chain hold it, and its socket would be closed by the garbage collector
    whenever it ran, with a ResourceWarning at some unrelated place. Drop those frames (the
    message stays) and collect it here, where the cause is known."""
    import gc
    import warnings

    seen: set[int] = set()
    link: BaseException | None = error
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        while link is not None and id(link) not in seen:
            seen.add(id(link))
            link.__traceback__ = None
            link = link.__cause__ or link.__context__
        gc.collect()


class SdkEngine(Driver):
    """Every role through the docker SDK: the transport for engines sbx's own client does not
    speak, and the base of those it does (:mod:`sbx.seams.transports` chooses)."""

    def __init__(self, env: Mapping[str, str],
                 credentials: Callable[[str], Mapping[str, str] | None] = lambda _host: None,
                 *, connector: Connector | None = None) -> None:
        self._env = env
        # The SDK's connections come from the connector when there is one (the transport's
        # own); without one the SDK speaks what DOCKER_HOST names (SBX_ENGINE_SOCKET=0).
        self._sdk_connector = connector
        self._client_obj: docker.DockerClient | None = None
        # The user's registry credentials for a host, as the SDK's auth_config (None:
        # anonymous); handed in by the factory, so the driver never imports their resolver.
        self._credentials = credentials

    # -- plumbing ----------------------------------------------------------------------------

    @property
    def _client(self) -> docker.DockerClient:
        if self._client_obj is None:
            import docker
            import requests

            try:
                # The API version is asked for below, once the connections are bounded.
                from docker.constants import MINIMUM_DOCKER_API_VERSION

                environment = dict(self._env)
                if self._sdk_connector is not None:
                    # A unix adapter, replaced at once by one on the connector's streams.
                    environment = {k: v for k, v in environment.items()
                                   if not k.startswith("DOCKER_TLS")}
                    environment["DOCKER_HOST"] = _CONNECTOR_PLACEHOLDER
                client = docker.DockerClient.from_env(
                    environment=environment, timeout=math.ceil(timeout_s(self._env)),
                    version=MINIMUM_DOCKER_API_VERSION)
                api: Any = client.api
                _bound_transport(api, self._sdk_connector)
                # The answer also proves the engine answers; no separate ping.
                with bounded(quick(self._env)):
                    version = api.version(api_version=False).get("ApiVersion")
                if not isinstance(version, str) or not version:
                    raise docker.errors.DockerException(
                        "the engine's /version answer names no ApiVersion")
                api._version = version  # what from_env's own negotiation sets
            except AnswerExceeded as exc:
                raise exceeded("cannot reach the Docker engine", exc, self._env) from None
            except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
                message, hint = short_error(exc), situation_hint(self._env, str(exc))
                _collect_failed_client(exc)
                told = self._told("cannot reach the Docker engine", str(exc), reached=False)
                raise told or EngineUnavailable(f"cannot reach the Docker engine: {message}",
                                                hint=hint) from exc
            self._client_obj = client
        return self._client_obj

    @property
    def _api(self) -> Any:
        # The low-level client. Typed as Any: its stubs lag the SDK, and the log reader needs
        # two of its private helpers.
        return self._client.api

    @contextmanager
    def _engine_errors(self, action: str, reason: Reason = Reason.CREATE_FAILED,
                       bound: AnswerBound | str | None = "quick") -> Iterator[None]:
        """Translate SDK and transport errors into reason-coded errors, at one place; every
        engine read inside is held to ``bound`` (sbx.seams.enginebounds): a quick call's by
        default, None for a stream of the workload's own output."""
        import docker
        import requests

        try:
            with bounded(quick(self._env) if bound == "quick"
                         else bound if isinstance(bound, AnswerBound) else None):
                yield
        except SbxError:
            raise
        except AnswerExceeded as exc:
            raise exceeded(action, exc, self._env) from None
        except docker.errors.ImageNotFound as exc:
            raise SbxError(
                Reason.IMAGE_MISSING, f"{action}: image not found: {short_error(exc)}",
                hint="Build or `sbx pull` it first; sbx never pulls at run time.") from exc
        except docker.errors.APIError as exc:
            raise SbxError(reason, f"{action}: the engine answered {short_error(exc)}") from exc
        except (requests.exceptions.ConnectionError, docker.errors.DockerException) as exc:
            told = self._told(action, str(exc), reached=True)
            raise told or EngineUnavailable(
                f"{action}: lost the Docker engine: {short_error(exc)}",
                hint=situation_hint(self._env, str(exc))) from exc

    def _told(self, action: str, detail: str, *, reached: bool) -> SbxError | None:
        connector = self._sdk_connector
        return None if connector is None else connector.unreachable(action, detail,
                                                                    reached=reached)

    def location(self) -> EngineLocation:
        if self._sdk_connector is not None:
            return self._sdk_connector.location
        from sbx.seams.enginehost import is_loopback, resolve_endpoint, tcp_target

        endpoint = resolve_endpoint(self._env)
        local = endpoint.scheme == "unix"
        if endpoint.scheme == "tcp":
            with contextlib.suppress(ValueError):
                local = is_loopback(tcp_target(endpoint.address, tls=False)[0])
        return EngineLocation(endpoint.host, local=local)

    # -- queries -----------------------------------------------------------------------------

    def info(self) -> EngineInfo:
        with self._engine_errors("reading engine info", Reason.DOCKER_UNREACHABLE):
            info: dict[str, Any] = self._client.info()
        security = tuple(str(s) for s in info.get("SecurityOptions") or ())
        return EngineInfo(
            version=str(info.get("ServerVersion", "")),
            api_version=str(self._api.api_version),
            os=str(info.get("OSType", "")),
            cgroup_version=str(info.get("CgroupVersion", "")),
            cgroup_driver=str(info.get("CgroupDriver", "")),
            rootless=any("rootless" in s for s in security),
            security_options=security,
        )

    def image(self, ref: str) -> ImageInfo | None:
        import docker

        with self._engine_errors(f"inspecting image {ref}", Reason.IMAGE_MISSING):
            try:
                attrs: dict[str, Any] = self._api.inspect_image(ref)
            except docker.errors.ImageNotFound:
                return None
            except docker.errors.APIError as exc:
                # A malformed reference is "not present" as far as a run is concerned.
                if exc.status_code in (400, 404):
                    return None
                raise
        return image_info(attrs)

    # -- build -------------------------------------------------------------------------------

    def build(self, context_tar: bytes, dockerfile: str, tag: str, labels: Mapping[str, str],
              on_line: Callable[[str], None],
              build_args: Mapping[str, str] | None = None) -> ImageInfo:
        log: list[str] = []
        # Long by nature (a RUN step may be silent for long): bounded in idle time and
        # message size, not in total.
        with self._engine_errors(f"building {tag}", Reason.BUILD_FAILED, stream(self._env)):
            chunks = self._api.build(
                fileobj=io.BytesIO(context_tar), custom_context=True,
                dockerfile=dockerfile, tag=tag, labels=dict(labels),
                buildargs=dict(build_args or {}),
                rm=True, forcerm=True, pull=False, decode=False, nocache=False,
                # A kit's RUN steps get no network: the default bridge would give them a route
                # out and the host's resolver, outside any policy. What needs the network
                # belongs in an install-phase hook, which goes through the egress proxy.
                network_mode="none",
            )
            with closing(chunks):
                for chunk in json_lines(chunks):
                    if not isinstance(chunk, dict):
                        continue
                    if "error" in chunk:
                        detail = str(chunk.get("error", "")).strip()
                        raise SbxError(
                            Reason.BUILD_FAILED, f"building {tag} failed: {detail}",
                            hint="Fix the dockerfile; its base image must be present locally.",
                            details={"log_tail": log[-20:]})
                    text = str(chunk.get("stream", "")).strip()
                    if text:
                        log.append(text)
                        on_line(text)
        image = self.image(tag)
        if image is None:
            raise SbxError(Reason.BUILD_FAILED, f"building {tag} produced no image",
                           details={"log_tail": log[-20:]})
        return image

    def read_image_file(self, image_id: str, path: str,
                        labels: Mapping[str, str]) -> bytes | None:
        """Read one file out of an image without starting anything (create, copy, remove)."""
        import docker

        action = f"reading {path} from image {image_id[:19]}"
        with self._probe_container(image_id, labels, action) as cid, \
                self._engine_errors(action):
            try:
                chunks, _stat = self._api.get_archive(cid, path)
            except docker.errors.NotFound:
                return None
            data = b"".join(chunks)
        import tarfile

        with tarfile.open(fileobj=io.BytesIO(data)) as archive:
            for member in archive.getmembers():
                if member.isfile() and member.size <= MAX_IMAGE_FILE_BYTES:
                    extracted = archive.extractfile(member)
                    return extracted.read() if extracted else None
        return None

    def image_path_modes(self, image_id: str, paths: Sequence[str],
                         labels: Mapping[str, str]) -> dict[str, int | None]:
        """The permission bits (with setuid/setgid/sticky, as in ``stat``) of directories in an
        image; None for a path that is absent or not a directory. Nothing is started: one
        container is created, its paths stat'ed (HEAD on the archive endpoint), removed."""
        import base64

        action = f"inspecting paths in image {image_id[:19]}"
        modes: dict[str, int | None] = {}
        with self._probe_container(image_id, labels, action) as cid, \
                self._engine_errors(action):
            for path in paths:
                response = self._api.head(self._api._url("/containers/{0}/archive", cid),
                                          params={"path": path})
                header = response.headers.get("X-Docker-Container-Path-Stat")
                if response.status_code != 200 or not header:
                    modes[path] = None
                    continue
                stat = json.loads(base64.b64decode(header))
                modes[path] = unix_mode(int(stat.get("mode", 0)))
        return modes

    @contextmanager
    def _probe_container(self, image_id: str, labels: Mapping[str, str],
                         action: str) -> Iterator[str]:
        """A container of ``image_id`` that is never started, removed on the way out; created
        and handed over with interrupts held back, so a signal cannot orphan it. None of the
        image's ``dev.sbx.*`` labels passes for sbx's (:func:`own_labels`)."""
        image = self.image(image_id)
        labels = own_labels(image.labels if image is not None else {}, labels)
        cid: str | None = None
        try:
            # A signal during the create is raised at the end of this block, inside the try,
            # so the container is removed whatever happens.
            with deferred_interrupts(), self._engine_errors(action):
                cid = str(self._api.create_container(
                    image_id, command=["/nonexistent-sbx-probe"], labels=dict(labels),
                    network_disabled=True)["Id"])
            yield cid
        finally:
            if cid is not None:
                with deferred_interrupts():
                    self.remove_container(cid)

    def derive_image(self, image: ImageInfo, tar: bytes, tag: str, *,
                     image_labels: Mapping[str, str],
                     helper_labels: Mapping[str, str]) -> ImageInfo:
        """``image`` plus the files (and directory modes) in ``tar``, committed as ``tag`` with
        ``image``'s run configuration. Nothing is started; the helper container carries
        ``helper_labels`` so a crash leaves nothing ``sbx gc`` cannot find."""
        with self._probe_container(image.id, helper_labels, f"preparing image {tag}") as cid:
            self.put_archive(cid, "/", tar)
            return self.commit(cid, tag, {**image.labels, **own_labels(image.labels,
                                                                         image_labels)}, image)

    # -- containers --------------------------------------------------------------------------

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

    def stop(self, container_id: str, timeout_s: int) -> None:
        """Graceful stop (SIGTERM, then SIGKILL after ``timeout_s``); gone or stopped is fine."""
        import docker

        bound = waiting(timeout_s + quick(self._env).idle_s)  # the engine waits timeout_s
        with self._engine_errors("stopping the sandbox", Reason.CLEANUP_FAILED, bound):
            try:
                self._api.stop(container_id, timeout=timeout_s)
            except docker.errors.NotFound:
                return

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

    def container_state(self, container_id: str) -> str | None:
        """``running``, ``exited``, ``created``...; None when the container does not exist."""
        import docker

        with self._engine_errors("inspecting the sandbox", Reason.START_FAILED):
            try:
                attrs = self._api.inspect_container(container_id)
            except docker.errors.NotFound:
                return None
        return str((attrs.get("State") or {}).get("Status") or "") or None

    def exec_attach(self, container_id: str, argv: Sequence[str], *, user: str,
                    env: Mapping[str, str], workdir: str | None, tty: bool,
                    stdin: bool) -> tuple[AttachedStream, str]:
        """An exec in a running sandbox with its stream attached (raw with a TTY, framed
        without); returns the stream and the exec id. The exec runs with the container's
        hardening (capabilities, no-new-privileges, cgroup limits, network) as ``user``."""
        from sbx.seams.session.stream import AttachedStream

        api = self._api
        with self._engine_errors("starting a command in the sandbox", Reason.START_FAILED):
            created = api.exec_create(container_id, list(argv), stdout=True, stderr=True,
                                      stdin=stdin, tty=tty, user=user,
                                      environment=dict(env) or None, workdir=workdir)
            exec_id = str(created["Id"])
            response = api.post(api._url("/exec/{0}/start", exec_id),
                                headers={"Connection": "Upgrade", "Upgrade": "tcp",
                                         "Content-Type": "application/json"},
                                data=json.dumps({"Tty": tty, "Detach": False}), stream=True)
            api._raise_for_status(response)
        return AttachedStream(_upgraded_socket(response), keep=response), exec_id

    def exec_exit_code(self, exec_id: str) -> int | None:
        with self._engine_errors("reading a command's status", Reason.START_FAILED):
            info = self._api.exec_inspect(exec_id)
        code = info.get("ExitCode")
        return None if info.get("Running") or code is None else int(code)

    def exec_resize(self, exec_id: str, *, rows: int, columns: int) -> None:
        import docker

        with self._engine_errors("resizing the command's terminal", Reason.START_FAILED):
            try:
                self._api.exec_resize(exec_id, height=rows, width=columns)
            except docker.errors.APIError as exc:
                if exc.status_code not in (404, 409, 500):
                    raise

    def start(self, container_id: str) -> None:
        with self._engine_errors("starting the sandbox container", Reason.START_FAILED):
            self._api.start(container_id)

    def output(self, container_id: str, *, follow: bool = True,
               tail: int | None = None) -> Iterator[tuple[str, bytes]]:
        """The container's stdout/stderr from its engine log (followed until it stops when
        ``follow``), as (stream, chunk) pairs. Only for containers that keep a (bounded) engine
        log: doctor's limit probe and named sandboxes; a run's output is read from its attach
        stream (:meth:`attach`)."""
        api = self._api
        params: dict[str, Any] = {"stdout": 1, "stderr": 1, "follow": 1 if follow else 0}
        if tail is not None:
            params["tail"] = tail
        with self._engine_errors("reading the sandbox's output", Reason.START_FAILED):
            # A TTY container's log is the terminal's raw stream, not framed.
            tty = bool((api.inspect_container(container_id).get("Config") or {}).get("Tty"))
            response = api._get(
                api._url("/containers/{0}/logs", container_id),
                params=params, stream=True, timeout=None)
            api._raise_for_status(response)

        def chunks() -> Iterator[tuple[str, bytes]]:
            # Docker's multiplexed framing: 8-byte header (stream id, 3 pad bytes, big-endian
            # length), then the payload; read through urllib3 so chunked encoding is undone.
            try:
                # The workload's own output: never cut (bound None).
                with self._engine_errors("reading the sandbox's output", Reason.START_FAILED,
                                         None):
                    while tty:
                        data = response.raw.read(65536, decode_content=False) \
                            if not hasattr(response.raw, "read1") else response.raw.read1(65536)
                        if not data:
                            return
                        yield "stdout", data
                    while True:
                        header = response.raw.read(8)
                        if len(header) < 8:
                            return
                        stream_id, length = struct.unpack(">BxxxL", header)
                        data = response.raw.read(length) if length else b""
                        if length and not data:
                            return
                        if data:
                            yield ("stderr" if stream_id == 2 else "stdout"), data
            finally:
                response.close()

        return chunks()

    def attach(self, container_id: str, *, stdin: bool,
               detach_keys: str | None = None) -> AttachedStream:
        """The container's attach stream (stdout, stderr and, when asked, stdin), as a socket.

        Call it before :meth:`start`: the engine then copies every byte the workload writes,
        from the first, into this connection, and ends it only after the last, so nothing is
        missed at either end (unlike a followed log). Without a TTY the bytes are framed
        (:mod:`sbx.seams.session.frames`); with one they are the terminal's raw stream.
        """
        from sbx.seams.session.stream import AttachedStream

        params: dict[str, Any] = {"stdout": 1, "stderr": 1, "stream": 1, "logs": 0,
                                  "stdin": 1 if stdin else 0}
        if detach_keys:
            params["detachKeys"] = detach_keys
        api = self._api
        with self._engine_errors("attaching to the sandbox", Reason.START_FAILED):
            response = api.post(
                api._url("/containers/{0}/attach", container_id), None,
                params=params, stream=True,
                headers={"Connection": "Upgrade", "Upgrade": "tcp"})
            api._raise_for_status(response)
        sock = _upgraded_socket(response)
        return AttachedStream(sock, keep=response)

    def resize(self, container_id: str, *, rows: int, columns: int) -> None:
        """Set the sandbox terminal's size (a TTY session); a finished container is ignored."""
        import docker

        with self._engine_errors("resizing the sandbox terminal", Reason.START_FAILED):
            try:
                self._api.resize(container_id, height=rows, width=columns)
            except docker.errors.APIError as exc:
                # Stopped or gone between the SIGWINCH and now: nothing to resize.
                if exc.status_code not in (404, 409, 500):
                    raise

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
                if _is_read_timeout(exc):
                    return None
                raise
        return int(result.get("StatusCode", -1))

    def kill(self, container_id: str) -> None:
        import docker

        with self._engine_errors("stopping the sandbox", Reason.CLEANUP_FAILED):
            try:
                self._api.kill(container_id)
            except docker.errors.APIError as exc:
                # Already stopped or gone: nothing left to kill.
                if exc.status_code not in (404, 409):
                    raise

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

    # -- the create step (install hooks, kit files) ---------------------------------------------

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

    def exec_stream(self, container_id: str, argv: Sequence[str], *, user: str,
                    workdir: str | None) -> tuple[Iterator[tuple[str, bytes]],
                                                  Callable[[], int]]:
        """Run ``argv`` in a running container; (output pairs, a function giving the status).

        The exec's raw socket is read frame by frame and closed when the output ends, so no
        engine connection outlives the hook.
        """
        from docker.utils import socket as docker_socket

        framing: Any = docker_socket  # untyped in the SDK's stubs
        with self._engine_errors("running a hook in the sandbox", Reason.START_FAILED):
            created = self._api.exec_create(container_id, list(argv), stdout=True, stderr=True,
                                            user=user, workdir=workdir)
            exec_id = str(created["Id"])
            sock = self._api.exec_start(exec_id, socket=True)
        raw = getattr(sock, "_sock", sock)
        if isinstance(raw, BoundedSocket):
            raw.release()  # the hook's output from here on: never cut

        def chunks() -> Iterator[tuple[str, bytes]]:
            try:
                with self._engine_errors("reading a hook's output", Reason.START_FAILED, None):
                    for stream_id, data in framing.frames_iter(raw, False):
                        if data:
                            yield ("stderr" if stream_id == framing.STDERR else "stdout"), data
            finally:
                # exec_start hands back the SocketIO of the hijacked HTTP response; the real
                # socket underneath must be closed too.
                sock.close()
                if raw is not sock:
                    raw.close()

        def status() -> int:
            with self._engine_errors("reading a hook's status", Reason.START_FAILED):
                code = self._api.exec_inspect(exec_id).get("ExitCode")
            return -1 if code is None else int(code)

        return chunks(), status

    def commit(self, container_id: str, tag: str, labels: Mapping[str, str],
               like: ImageInfo) -> ImageInfo:
        """Commit the container's filesystem with the run config of ``like`` (not the
        container's own: the create step ran a keepalive as root)."""
        repository, _, version = tag.partition(":")
        changes = [
            f"ENTRYPOINT {json.dumps(list(like.entrypoint or []))}",
            f"CMD {json.dumps(list(like.cmd or []))}",
            f"USER {like.user}" if like.user else "USER 0",
            f"WORKDIR {like.workdir or '/'}",
            *(f"LABEL {json.dumps(k)}={json.dumps(v)}" for k, v in sorted(labels.items())),
        ]
        # Held back from signals: the engine finishes a commit whose client went away, so an
        # interrupted request would leave an image the run's cleanup already looked for.
        with deferred_interrupts(), \
                self._engine_errors("saving the prepared sandbox image", Reason.CREATE_FAILED):
            self._api.commit(container_id, repository=repository, tag=version or "latest",
                             changes=changes)
        image = self.image(tag)
        if image is None:
            raise SbxError(Reason.CREATE_FAILED, f"committing {tag} produced no image")
        return image

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

    def container_pid(self, container_id: str) -> int | None:
        """The host pid of the container's first process; None once it is not running."""
        with self._engine_errors("inspecting the sandbox", Reason.START_FAILED):
            attrs = self._api.inspect_container(container_id)
        pid = int((attrs.get("State") or {}).get("Pid") or 0)
        return pid or None

    def container_ip(self, container_id: str, network: str) -> str | None:
        """The container's address on ``network``; None once it has stopped (no address)."""
        with self._engine_errors("reading the sandbox's address", Reason.START_FAILED):
            attrs = self._api.inspect_container(container_id)
        networks = (attrs.get("NetworkSettings") or {}).get("Networks") or {}
        return str((networks.get(network) or {}).get("IPAddress") or "") or None

    def create_volume(self, name: str, labels: Mapping[str, str]) -> str:
        with self._engine_errors(f"creating volume {name}", Reason.CREATE_FAILED):
            created = self._api.create_volume(name=name, driver="local", labels=dict(labels))
        return str(created["Name"])

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
                        _timestamp((attrs.get("Metadata") or {}).get("LastTagTime")))
        return list(found.values())

    def untag_image(self, ref: str) -> bool:
        """Remove the tag ``ref``, never by force: the image itself goes only with its last
        tag, and not while a container uses it. False when the engine refused (in use)."""
        import docker

        with self._engine_errors(f"removing the tag {ref}", Reason.CLEANUP_FAILED):
            try:
                self._api.remove_image(ref, force=False, noprune=False)
            except docker.errors.ImageNotFound:
                return True
            except docker.errors.APIError as exc:
                if exc.status_code == 409:  # a container (or a child image) uses it
                    return False
                raise
        return True

    def remove_image(self, ref: str) -> bool:
        import docker

        with self._engine_errors(f"removing image {ref}", Reason.CLEANUP_FAILED):
            try:
                self._api.remove_image(ref, force=True, noprune=False)
            except docker.errors.ImageNotFound:
                return True
        return True

    def container(self, container_id: str) -> Container:
        """The SDK object, for tests that inspect what was created (never used by sbx itself)."""
        with self._engine_errors("inspecting the sandbox"):
            return self._client.containers.get(container_id)

    # -- gc and doctor -------------------------------------------------------------------------

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

    def remove_network(self, network_id: str) -> bool:
        """Remove a network; True when it is gone (including when it was already gone)."""
        import docker

        with self._engine_errors(f"removing network {network_id[:12]}", Reason.CLEANUP_FAILED):
            try:
                self._api.remove_network(network_id)
            except docker.errors.NotFound:
                return True
        return True

    def remove_volume(self, name: str) -> bool:
        """Remove a volume; True when it is gone (including when it was already gone)."""
        import docker

        with self._engine_errors(f"removing volume {name[:24]}", Reason.CLEANUP_FAILED):
            try:
                self._api.remove_volume(name)
            except docker.errors.NotFound:
                return True
        return True

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

    # -- image assembly --------------------------------------------------------------------------

    def export_image(self, image_id: str,
                     labels: Mapping[str, str]) -> Generator[bytes, None, None]:
        """An image's filesystem as a tar stream, in chunks, without running anything.

        A helper container labelled ``labels`` is created (never started), exported and removed
        when the stream ends or is closed: close it when stopping early
        (``contextlib.closing``). Besides the image's own files the tar holds what the engine
        adds to every container (``/.dockerenv``, ``/etc/hostname``, ``/etc/hosts``,
        ``/etc/resolv.conf``, ``/etc/mtab``, ``/dev/console``, ``/dev/pts``, ``/dev/shm``).
        """
        import urllib3

        action = f"exporting the files of image {image_id[:19]}"
        with self._probe_container(image_id, labels, action) as cid, \
                self._engine_errors(action, Reason.BUILD_FAILED, transfer(self._env)):
            try:
                yield from self._api.export(cid)
            except urllib3.exceptions.HTTPError as exc:
                # The SDK streams the body through urllib3, whose errors requests never
                # wraps once the response has started.
                raise EngineUnavailable(f"{action}: the stream broke: {short_error(exc)}",
                                        hint=situation_hint(self._env, str(exc))) from exc

    # -- registry images ---------------------------------------------------------------------

    def tag_image(self, image: str, ref: str) -> None:
        """Tag a local image as ``ref`` (``host:port/repo:tag``)."""
        repository, tag = split_tag(ref)
        with self._engine_errors(f"tagging {image[:19]} as {ref}", Reason.IMAGE_MISSING):
            self._api.tag(image, repository, tag=tag, force=True)

    def push_image(self, ref: str, on_line: Callable[[str], None]) -> None:
        """Push a local tag to its registry; the stream's errors become reason-coded errors."""
        repository, tag = split_tag(ref)
        auth = self._auth_config(ref)
        with self._engine_errors(f"pushing {ref}", Reason.REGISTRY_UNREACHABLE,
                                 stream(self._env)), \
                closing(self._api.push(repository, tag=tag, stream=True, decode=False,
                                       auth_config=auth)) as pieces:
            for chunk in json_lines(pieces):
                if isinstance(chunk, dict):
                    registry_chunk(f"pushing {ref}", chunk, on_line)

    def _auth_config(self, ref: str) -> dict[str, str] | None:
        """The user's Docker credentials for ``ref``'s registry host, as the SDK's
        ``auth_config``; None for anonymous access."""
        first = ref.split("/", 1)[0]
        explicit = "/" in ref and ("." in first or ":" in first or first == "localhost")
        found = self._credentials(first if explicit else "docker.io")
        return None if found is None else dict(found)

    def pull_image(self, ref: str, on_line: Callable[[str], None]) -> ImageInfo:
        """Pull ``ref`` (best ``repo@sha256:...``) with progress lines; return the image."""
        auth = self._auth_config(ref)
        with self._engine_errors(f"pulling {ref}", Reason.REGISTRY_UNREACHABLE,
                                 stream(self._env)), \
                closing(self._api.pull(ref, stream=True, decode=False,
                                       auth_config=auth)) as pieces:
            for chunk in json_lines(pieces):
                if isinstance(chunk, dict):
                    registry_chunk(f"pulling {ref}", chunk, on_line)
        image = self.image(ref)
        if image is None:
            raise SbxError(Reason.IMAGE_MISSING, f"pulling {ref} left no image")
        return image


def _upgraded_socket(response: Any) -> socket.socket:
    """The raw socket under an upgraded (hijacked) HTTP response.

    The response's reader has consumed exactly the status line and headers: the attach is made
    before the container starts, so no stream byte can have been read ahead into its buffer.
    """
    raw = response.raw._fp.fp.raw  # the SocketIO http.client reads the response from
    sock = getattr(raw, "_sock", raw)
    if not isinstance(sock, socket.socket):  # pragma: no cover - ssh/npipe transports
        raise SbxError(Reason.START_FAILED,
                       "this engine transport cannot carry an interactive session",
                       hint="Let sbx speak to the engine itself: unset SBX_ENGINE_SOCKET.")
    if isinstance(sock, BoundedSocket):
        sock.release()  # the workload's output from here on: never cut
    return sock


def _bound_transport(api: Any, connector: Connector | None = None) -> None:
    """Make the SDK's connections :class:`BoundedSocket`\\ s (from ``connector`` when given,
    the transport's own streams), so each call's answer keeps to the bound
    :meth:`SdkEngine._engine_errors` sets (head and body, chunked or not), and cap a
    streaming call's answer that turns out to be a plain body. Without a connector, an engine
    the SDK reaches over TLS or ssh itself keeps the SDK's per-read timeout."""
    from docker.transport.unixconn import (
        UnixHTTPAdapter,
        UnixHTTPConnection,
        UnixHTTPConnectionPool,
    )

    api.hooks["response"].append(_cap_plain_body)
    # The SDK reads a progress stream chunk by chunk, each whole (a chunk may claim gigabytes)
    # and joins JSON without bound: its pull, push and build streams are read here instead.
    api._stream_helper = functools.partial(_stream_pieces, api)
    if connector is None and str(getattr(api, "base_url", "")).startswith("http://"):
        api.mount("http://", _bounded_tcp_adapter())
        return
    current = getattr(api, "_custom_adapter", None)
    if not isinstance(current, UnixHTTPAdapter):
        return

    opener = connector

    class _Connection(UnixHTTPConnection):
        def connect(self) -> None:
            if opener is not None:
                self.sock = opener.connect(self.timeout)
                return
            sock = BoundedSocket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(self.timeout)
            sock.connect(self.unix_socket)
            self.sock = sock

    class _Pool(UnixHTTPConnectionPool):
        def _new_conn(self) -> Any:
            timeout: Any = self.timeout
            return _Connection(self.base_url, self.socket_path, timeout)

    class _Adapter(UnixHTTPAdapter):
        def get_connection(self, url: Any, proxies: Any = None) -> _Pool:
            with self.pools.lock:
                pool = self.pools.get(url)
                if pool is None:
                    pool = _Pool(url, self.socket_path, self.timeout,
                                 maxsize=self.max_pool_size)
                    self.pools[url] = pool
            return pool

    adapter = _Adapter("http+unix://" + current.socket_path, current.timeout,
                       max_pool_size=current.max_pool_size)
    api.mount("http+docker://", adapter)
    api._custom_adapter = adapter
    current.close()


def _stream_pieces(api: Any, response: Any, decode: bool = False) -> Iterator[Any]:
    """The SDK's ``_stream_helper``, bounded: a chunked stream in pieces of at most 64 KiB
    (however large a chunk claims to be), JSON decoded line by line with a bound per line."""
    if str(response.headers.get("Transfer-Encoding", "")).lower() != "chunked":
        yield api._result(response, json=decode)  # an answer, not a stream (capped)
        return
    try:
        pieces = response.raw.stream(64 * 1024, decode_content=False)
        yield from json_lines(pieces) if decode else pieces
    finally:
        response.close()  # also when the reader stops early (a bound, an error message)


def _bounded_tcp_adapter() -> Any:
    """requests' adapter for a plain-tcp engine, its sockets :class:`BoundedSocket`\\ s."""
    import requests.adapters
    import urllib3.connection
    import urllib3.connectionpool

    class _Connection(urllib3.connection.HTTPConnection):
        def _new_conn(self) -> socket.socket:
            plain = super()._new_conn()
            timeout = plain.gettimeout()
            sock = BoundedSocket(fileno=plain.detach())
            sock.settimeout(timeout)
            return sock

    class _Pool(urllib3.connectionpool.HTTPConnectionPool):
        ConnectionCls = _Connection

    class _Adapter(requests.adapters.HTTPAdapter):
        def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
            super().init_poolmanager(*args, **kwargs)
            self.poolmanager.pool_classes_by_scheme = {
                **self.poolmanager.pool_classes_by_scheme, "http": _Pool}

    return _Adapter()


def _cap_plain_body(response: Any, *_args: Any, **_kwargs: Any) -> Any:
    if str(response.headers.get("Transfer-Encoding", "")).lower() != "chunked":
        cap_body()
    return response


def docker_auth_config(registry: str, config_file: Path,
                       env: Mapping[str, str]) -> dict[str, Any] | None:
    """The docker SDK's own resolution of ``registry``'s credentials from ``config_file``
    (``docker.auth``: ``credHelpers``, ``credsStore`` through ``docker.credentials``' helper
    protocol, then ``auths``), or None for anonymous access.

    The helper runs with ``env`` over the process environment and, as in the SDK and the
    docker CLI, is looked up on the process's PATH. Errors are :class:`ValueError` (an
    unreadable ``auths`` entry) or :class:`LookupError` (the named helper failed), carrying
    no text from the file or the helper, which may hold secrets.
    """
    import warnings

    from docker import auth, credentials
    from docker.errors import DockerException

    try:
        config = auth.load_config(config_path=str(config_file), credstore_env=dict(env))
    except (ValueError, TypeError, DockerException) as exc:
        raise ValueError(type(exc).__name__) from None
    store = None
    try:
        with warnings.catch_warnings():
            # The SDK warns when a helper is not on PATH; the caller reports that itself.
            warnings.simplefilter("ignore")
            store = config.get_credential_store(registry)
            if store:
                # The SDK's helper protocol, with the helper run as every host command is.
                internals: Any = config  # its store cache, as _get_store_instance fills it
                internals._stores[store] = _helper_store(store, internals._credstore_env)
            found = config.resolve_authconfig(registry)
    except _HelperTimeout:
        raise TimeoutError(f"docker-credential-{store}") from None
    except (DockerException, credentials.StoreError, ValueError, KeyError) as exc:
        raise LookupError(type(exc).__name__) from None
    return dict(found) if found else None


HELPER_TIMEOUT_S = 30.0


class _HelperTimeout(Exception):
    """A credential helper did not finish in time (it and what it started were ended)."""


def _helper_store(name: str, environment: Any) -> Any:
    """docker's ``credentials.Store`` for helper ``name``, its helper run in a session of its
    own with a deadline (sbx.seams.host.processes): a hanging helper cannot hang sbx, nor leave
    anything running, and what it prints on stderr never reaches the terminal."""
    from docker import credentials
    from docker.credentials import utils

    from sbx.seams.host import processes

    environment_of: Any = utils.create_environment_dict  # untyped in the SDK

    class _Store(credentials.Store):
        def _execute(self, subcmd: str, data_input: bytes | None) -> bytes:
            if self.exe is None:
                raise credentials.StoreError(f"{self.program} not installed or not available "
                                             "in PATH")
            try:
                done = processes.run([self.exe, subcmd], timeout=HELPER_TIMEOUT_S,
                                    input_data=data_input or b"",
                                    env=environment_of(self.environment))
            except processes.CommandTimeout:
                raise _HelperTimeout(self.program) from None
            except OSError as exc:
                raise credentials.StoreError(f"{self.program} could not run "
                                             f"({exc.strerror})") from None
            if done.returncode != 0:
                failed = processes.CalledProcessError(done.returncode, [self.exe, subcmd],
                                                       done.stdout)
                raise credentials.errors.process_store_error(failed, self.program)
            return done.stdout

    return _Store(name, environment=environment)


def docker_credential_store(registry: str, config_file: Path) -> str | None:
    """The credential helper the Docker config names for ``registry`` (``credHelpers``, else
    ``credsStore``), as the SDK chooses it; None when it names none."""
    from docker import auth
    from docker.errors import DockerException

    try:
        config = auth.load_config(config_path=str(config_file))
    except (ValueError, TypeError, DockerException):  # reported by docker_auth_config
        return None
    store = config.get_credential_store(registry)
    return str(store) if store else None


def _is_read_timeout(exc: BaseException) -> bool:
    import requests

    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, requests.exceptions.ReadTimeout):
            return True
        if "read timed out" in str(current).lower():
            return True
        current = current.__cause__ or current.__context__
    return False


def _timestamp(raw: object) -> float | None:
    """An engine time (RFC 3339 with nanoseconds, or the zero time) as unix seconds."""
    if not isinstance(raw, str) or not raw or raw.startswith("0001-"):
        return None
    import datetime

    text = raw.rstrip("Z")
    whole, _, fraction = text.partition(".")
    try:
        moment = datetime.datetime.fromisoformat(whole).replace(tzinfo=datetime.UTC)
    except ValueError:
        return None
    digits = "".join(ch for ch in fraction if ch.isdigit())[:6]
    return moment.timestamp() + (int(digits) / 10 ** len(digits) if digits else 0.0)


__all__ = ["SdkEngine", "docker_auth_config", "docker_credential_store"]
