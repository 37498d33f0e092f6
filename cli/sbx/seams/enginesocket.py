"""The engine spoken to directly, over any connector (:mod:`sbx.seams.enginehttp`): the calls a
run and a pull make (create, attach, start, wait, remove, info, inspect, tag, pull), so those
paths need neither the docker SDK nor requests. :class:`SocketEngine` is every transport's
engine class (chosen by :mod:`sbx.seams.transports`); what it does not speak itself is its
base's, the SDK's, through the same connector. Every answer is read within the bounds of
:mod:`sbx.seams.enginebounds` (a total time and a size; a pull by its silence and message
length), and an attach stream is released from them once its head is read.
"""

from __future__ import annotations

import atexit
import json
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import closing, contextmanager
from typing import TYPE_CHECKING, Any, Final

from sbx.base.errors import EngineUnavailable, SbxError
from sbx.base.labels import own_labels
from sbx.base.reasons import Reason
from sbx.seams.connectors import Connector, UnixConnector
from sbx.seams.driver import SdkEngine
from sbx.seams.engine import (
    PATH_STAT_HEADER,
    EngineInfo,
    EngineLocation,
    ImageInfo,
    ImageProbe,
    PathStat,
    SandboxFiles,
    create_body,
    engine_info,
    first_file_of_archive,
    header_path_stat,
    image_info,
    named_entry,
    path_stat,
    probed_paths,
    registry_chunk,
    short_error,
    situation_hint,
    split_tag,
)
from sbx.seams.enginebounds import (
    AnswerBound,
    AnswerExceeded,
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
from sbx.seams.enginehttp import EngineConnections, Response, body_of, is_chunked, read_head
from sbx.seams.http11 import parse_head
from sbx.seams.inspected import network_address, sandbox_files
from sbx.seams.session.stream import AttachedStream
from sbx.seams.signals import deferred_interrupts

if TYPE_CHECKING:
    from sbx.seams.containerspec import ContainerSpec

class _StillRunning(Exception):
    """A wait whose time ran out: the container still runs."""


class SocketEngine(SdkEngine):
    """An engine reached through a :class:`~sbx.seams.connectors.Connector` (its unix socket,
    tcp, tcp+TLS, ssh): the calls of a run's hot path made straight with a small HTTP/1.1
    exchange, so that a run from the plan cache never imports the SDK (requests,
    urllib3, charset detection: the largest import of a run); every other call is
    :class:`SdkEngine`'s, through the same connector (the SDK imported on first use).

    Its own calls: :meth:`info`, :meth:`image`, :meth:`tag_image`, :meth:`create`,
    :meth:`attach`, :meth:`start`, :meth:`wait`, :meth:`resize`, :meth:`kill`,
    :meth:`remove_container`, :meth:`container_pid`, :meth:`probe_image`,
    :meth:`image_path_modes`, :meth:`pull_image`, the files role (:meth:`sandbox_files`,
    :meth:`archive_stat`, :meth:`archive_read`, :meth:`archive_write`) and :meth:`disk_usage`,
    with the SDK's signatures and errors. Paths
    carry no API version: the engine then speaks its own, which is the version the SDK
    negotiates with it too. The create body is the SDK's (``create_container_config`` +
    ``create_host_config``), built here from the same :func:`create_kwargs` (a unit test holds
    the two equal). A pull's progress stream is read as it comes (the SDK's ``pull(stream=True,
    decode=True)``). ``SBX_ENGINE_SOCKET=0`` sends every call through the SDK instead.
    """

    def __init__(self, env: Mapping[str, str], connector: Connector | str,
                 credentials: Callable[[str], Mapping[str, str] | None] = lambda _host: None,
                 ) -> None:
        if isinstance(connector, str):  # a local socket's path
            connector = UnixConnector(connector)
        super().__init__(env, credentials, connector=connector)
        self._connector = connector
        self._connections = EngineConnections(connector)
        # Before the connector's own exit handler (atexit runs the last registered first):
        # a kept ssh connection would hold its tunnel open.
        atexit.register(self._connections.close)
        self._reached = False

    # -- transport -----------------------------------------------------------------------------

    def _call(self, method: str, path: str, *, action: str, reason: Reason,
              params: Mapping[str, Any] | None = None, body: Any = None,
              bound: AnswerBound | None = None,
              waits: bool = False) -> tuple[int, bytes, Response]:
        """(status, body, response) of one request, held to ``bound`` (default: a quick
        call's); a transport failure or an answer past its bound is an
        :class:`EngineUnavailable`, except the time running out on a call that ``waits``
        (:class:`_StillRunning`)."""
        target = path + ("?" + urllib.parse.urlencode(params) if params else "")
        payload = json.dumps(body).encode() if body is not None else b""
        request = (f"{method} {target} HTTP/1.1\r\nHost: docker\r\nUser-Agent: sbx\r\n"
                   + ("Content-Type: application/json\r\n" if body is not None else "")
                   + f"Content-Length: {len(payload)}\r\n\r\n").encode() + payload
        try:
            response = self._connections.exchange(request, bound or quick(self._env),
                                                  expect_body=method != "HEAD")
        except AnswerExceeded as exc:
            if waits and exc.slow:
                raise _StillRunning from None
            raise exceeded(action, exc, self._env) from None
        except (OSError, ValueError) as exc:
            raise self._unreachable(action, exc) from exc
        self._reached = True
        return response.status, response.body, response

    def _unreachable(self, action: str, exc: BaseException) -> SbxError:
        detail = f"{type(exc).__name__}: {exc}" if isinstance(exc, OSError) else str(exc)
        told = self._connector.unreachable(action, detail, reached=self._reached)
        if told is None and not self._reached:
            told = EngineUnavailable(f"cannot reach the Docker engine: {short_error(detail)}",
                                     hint=situation_hint(self._env, detail))
        elif told is None:
            told = EngineUnavailable(f"{action}: lost the Docker engine: {short_error(detail)}",
                                     hint=situation_hint(self._env, detail))
        return named_entry(self._env, told)

    def _json(self, method: str, path: str, *, action: str, reason: Reason,
              params: Mapping[str, Any] | None = None, body: Any = None,
              ok: tuple[int, ...] = (200, 201, 204),
              bound: AnswerBound | None = None, waits: bool = False) -> tuple[int, Any]:
        """(status, decoded JSON or None); statuses outside ``ok`` are the engine's refusal."""
        status, data, _response = self._call(method, path, action=action, reason=reason,
                                             params=params, body=body, bound=bound,
                                             waits=waits)
        decoded: Any = None
        if data:
            try:
                decoded = json.loads(data)
            except ValueError:
                decoded = None
        if status not in ok:
            raise _refusal(action, reason, status, decoded, data)
        return status, decoded

    # -- the hot path ----------------------------------------------------------------------------

    def location(self) -> EngineLocation:
        return self._connector.location

    def info(self) -> EngineInfo:
        action = "reading engine info"
        _status, data, response = self._call("GET", "/info", action=action,
                                             reason=Reason.DOCKER_UNREACHABLE)
        try:
            info = json.loads(data)
        except ValueError as exc:
            raise EngineUnavailable(f"{action}: the engine answered no JSON") from exc
        if _status != 200 or not isinstance(info, dict):
            raise _refusal(action, Reason.DOCKER_UNREACHABLE, _status, info, data)
        return engine_info(info, str(response.headers.get("api-version") or ""))

    def image(self, ref: str) -> ImageInfo | None:
        status, attrs = self._json(
            "GET", f"/images/{urllib.parse.quote(ref, safe='/:@')}/json",
            action=f"inspecting image {ref}", reason=Reason.IMAGE_MISSING,
            ok=(200, 400, 404))
        if status != 200 or not isinstance(attrs, dict):
            return None  # absent, or a malformed reference: not present for a run
        return image_info(attrs)

    def tag_image(self, image: str, ref: str) -> None:
        repository, tag = split_tag(ref)
        params = {"repo": repository, **({"tag": tag} if tag else {}), "force": 1}
        self._json("POST", f"/images/{urllib.parse.quote(image, safe=':')}/tag",
                   action=f"tagging {image[:19]} as {ref}", reason=Reason.IMAGE_MISSING,
                   params=params)

    def create(self, spec: ContainerSpec) -> str:
        params = {"name": spec.name} if spec.name else None
        _status, created = self._json("POST", "/containers/create",
                                      action="creating the sandbox container",
                                      reason=Reason.CREATE_FAILED, params=params,
                                      body=create_body(spec))
        if not isinstance(created, dict) or not created.get("Id"):
            raise SbxError(Reason.CREATE_FAILED,
                           "creating the sandbox container: the engine answered no id")
        return str(created["Id"])

    def start(self, container_id: str) -> None:
        self._json("POST", f"/containers/{container_id}/start",
                   action="starting the sandbox container", reason=Reason.START_FAILED,
                   ok=(204, 304))

    def attach(self, container_id: str, *, stdin: bool,
               detach_keys: str | None = None) -> AttachedStream:
        """As the SDK's attach: the upgraded connection, before the start, so it
        carries every byte; read up to the end of the headers and not one byte further."""
        action = "attaching to the sandbox"
        params: dict[str, Any] = {"stdout": 1, "stderr": 1, "stream": 1, "logs": 0,
                                  "stdin": 1 if stdin else 0}
        if detach_keys:
            params["detachKeys"] = detach_keys
        request = (f"POST /containers/{container_id}/attach?{urllib.parse.urlencode(params)} "
                   "HTTP/1.1\r\nHost: docker\r\nUser-Agent: sbx\r\nConnection: Upgrade\r\n"
                   "Upgrade: tcp\r\nContent-Length: 0\r\n\r\n").encode()
        bound = quick(self._env)
        with bounded(bound):
            try:
                sock = self._connections.open(bound.idle_s)
            except (OSError, ValueError) as exc:
                raise self._unreachable(action, exc) from exc
        try:
            with bounded(bound):
                try:
                    sock.sendall(request)
                    status, _headers = parse_head(read_head(sock))
                    if status not in (101, 200):
                        body = sock.recv(65536)
                        raise _refusal(action, Reason.START_FAILED, status, _maybe_json(body),
                                       body)
                except AnswerExceeded as exc:
                    raise exceeded(action, exc, self._env) from None
                except (OSError, ValueError) as exc:
                    raise self._unreachable(action, exc) from exc
        except BaseException:
            sock.close()
            raise
        sock.release()  # the workload's output from here on: never cut
        return AttachedStream(sock)

    def wait(self, container_id: str, timeout_s: float) -> int | None:
        try:
            _status, result = self._json(
                "POST", f"/containers/{container_id}/wait", action="waiting for the sandbox",
                reason=Reason.START_FAILED, bound=waiting(timeout_s), waits=True)
        except _StillRunning:
            return None
        return int((result or {}).get("StatusCode", -1)) if isinstance(result, dict) else -1

    def resize(self, container_id: str, *, rows: int, columns: int) -> None:
        self._json("POST", f"/containers/{container_id}/resize",
                   action="resizing the sandbox terminal", reason=Reason.START_FAILED,
                   params={"h": rows, "w": columns}, ok=(200, 204, 404, 409, 500))

    def kill(self, container_id: str) -> None:
        self._json("POST", f"/containers/{container_id}/kill", action="stopping the sandbox",
                   reason=Reason.CLEANUP_FAILED, ok=(204, 404, 409))

    def remove_container(self, container_id: str) -> bool:
        action = "removing the sandbox"
        status, data, _response = self._call(
            "DELETE", f"/containers/{container_id}", action=action,
            reason=Reason.CLEANUP_FAILED, params={"force": 1, "v": 1})
        if status in (204, 404):
            return True
        decoded = _maybe_json(data)
        if status == 409 and "already in progress" in _message(decoded, data):
            return self._removal_confirmed(container_id, action)
        raise _refusal(action, Reason.CLEANUP_FAILED, status, decoded, data)

    def _removal_confirmed(self, container_id: str, action: str) -> bool:
        """Another removal is under way (gc, the engine's own): confirmed, not assumed; a
        removal the engine gave up on leaves a dead container, removed here again."""
        import time

        deadline = time.monotonic() + timeout_s(self._env)
        while time.monotonic() < deadline:
            status, data, _response = self._call(
                "GET", f"/containers/{container_id}/json", action=action,
                reason=Reason.CLEANUP_FAILED)
            if status == 404:
                return True
            state = _maybe_json(data)
            if isinstance(state, dict) and (state.get("State") or {}).get("Status") == "dead":
                retried, _data, _response = self._call(
                    "DELETE", f"/containers/{container_id}", action=action,
                    reason=Reason.CLEANUP_FAILED, params={"force": 1, "v": 1})
                if retried in (204, 404):
                    return True
            time.sleep(0.1)
        raise SbxError(Reason.CLEANUP_FAILED,
                       f"{action}: the engine was still removing it after "
                       f"{timeout_s(self._env):g}s")

    # -- probes: a container of an image, never started (a new image's users and mount points)

    @contextmanager
    def _probe(self, image_id: str, labels: Mapping[str, str], action: str) -> Iterator[str]:
        """As the SDK path's probe: created with interrupts held back, always removed; none of
        the image's ``dev.sbx.*`` labels passes for sbx's (:func:`own_labels`)."""
        image = self.image(image_id)
        labels = own_labels(image.labels if image is not None else {}, labels)
        cid: str | None = None
        try:
            with deferred_interrupts():
                _status, created = self._json(
                    "POST", "/containers/create", action=action, reason=Reason.CREATE_FAILED,
                    body={"Image": image_id, "Cmd": ["/nonexistent-sbx-probe"],
                          "Labels": dict(labels), "NetworkDisabled": True, "Tty": False,
                          "OpenStdin": False, "StdinOnce": False, "AttachStdin": False,
                          "AttachStdout": True, "AttachStderr": True})
                if not isinstance(created, dict) or not created.get("Id"):
                    raise SbxError(Reason.CREATE_FAILED, f"{action}: the engine answered no id")
                cid = str(created["Id"])
            yield cid
        finally:
            if cid is not None:
                with deferred_interrupts():
                    self.remove_container(cid)

    def probe_image(self, image_id: str, *, files: Sequence[str], dirs: Sequence[str],
                    labels: Mapping[str, str], paths: Sequence[str] = ()) -> ImageProbe:
        action = f"reading {', '.join((*files, *dirs, *paths))} from image {image_id[:19]}"
        found: dict[str, bytes | None] = {}
        with self._probe(image_id, labels, action) as cid:
            for path in files:
                status, data, _response = self._call(
                    "GET", f"/containers/{cid}/archive", action=action,
                    reason=Reason.CREATE_FAILED, params={"path": path})
                if status == 404:
                    found[path] = None
                elif status != 200:
                    raise _refusal(action, Reason.CREATE_FAILED, status, _maybe_json(data),
                                   data)
                else:
                    found[path] = first_file_of_archive(data)

            def head(path: str) -> tuple[bool, str | None]:
                status, _data, response = self._call(
                    "HEAD", f"/containers/{cid}/archive", action=action,
                    reason=Reason.CREATE_FAILED, params={"path": path})
                return status == 200, response.headers.get(PATH_STAT_HEADER)

            modes, stats = probed_paths(dirs, paths, head)
        return ImageProbe(found, modes, stats)

    def container_state(self, container_id: str) -> str | None:
        """As the SDK's (None: no such container), on the socket: a re-entry loads no SDK."""
        status, attrs = self._json("GET", f"/containers/{container_id}/json",
                                   action="inspecting the sandbox", reason=Reason.START_FAILED,
                                   ok=(200, 404))
        if status == 404:
            return None
        state = attrs.get("State") if isinstance(attrs, dict) else None
        if not isinstance(state, dict):  # an answer with no state is no answer
            raise SbxError(Reason.START_FAILED, "inspecting the sandbox: the engine's answer "
                           "has no container state")
        return str(state.get("Status") or "") or None

    def container_pid(self, container_id: str) -> int | None:
        _status, attrs = self._json("GET", f"/containers/{container_id}/json",
                                    action="inspecting the sandbox", reason=Reason.START_FAILED)
        state = (attrs or {}).get("State") if isinstance(attrs, dict) else None
        pid = int((state or {}).get("Pid") or 0)
        return pid or None

    def network_endpoint(self, container_id: str, network: str) -> tuple[str, int] | None:
        _status, attrs = self._json("GET", f"/containers/{container_id}/json",
                                    action="reading a container's address",
                                    reason=Reason.START_FAILED)
        return network_address(attrs if isinstance(attrs, dict) else {}, network)

    def send_signal(self, container_id: str, signal: str) -> None:
        self._json("POST", f"/containers/{container_id}/kill", params={"signal": signal},
                   action=f"signalling {container_id[:12]}", reason=Reason.PROXY_FAILED,
                   ok=(204,))

    # -- networks a run's proxy joins ----------------------------------------------------------

    def find_network(self, name: str) -> str | None:
        status, attrs = self._json("GET", f"/networks/{urllib.parse.quote(name, safe='')}",
                                   action=f"reading network {name}",
                                   reason=Reason.CREATE_FAILED, ok=(200, 404))
        if status == 404 or not isinstance(attrs, dict):
            return None
        return str(attrs.get("Id") or "") or None

    def connect_network(self, network_id: str, container_id: str) -> None:
        self._json("POST", f"/networks/{network_id}/connect", body={"Container": container_id},
                   action=f"connecting {container_id[:12]} to network {network_id[:12]}",
                   reason=Reason.CREATE_FAILED, ok=(200,))

    # -- files and disk usage: the files role and `sbx df`, as the SDK's ------------------------

    def sandbox_files(self, container_id: str) -> SandboxFiles:
        _status, attrs = self._json("GET", f"/containers/{container_id}/json",
                                    action="inspecting the sandbox", reason=Reason.START_FAILED)
        return sandbox_files(attrs if isinstance(attrs, dict) else {})

    def archive_stat(self, container_id: str, path: str) -> PathStat | None:
        action = f"looking up {path} in the sandbox"
        status, data, response = self._call("HEAD", f"/containers/{container_id}/archive",
                                            action=action, reason=Reason.COPY_REFUSED,
                                            params={"path": path})
        if status == 404:
            return None
        if status != 200:
            raise _refusal(action, Reason.COPY_REFUSED, status, _maybe_json(data), data)
        raw = header_path_stat(response.headers.get(PATH_STAT_HEADER))
        return path_stat(raw) if raw is not None else None

    def disk_usage(self) -> Mapping[str, Any]:
        _status, found = self._json("GET", "/system/df",
                                    action="reading the engine's disk usage",
                                    reason=Reason.DOCKER_UNREACHABLE,
                                    bound=waiting(max(timeout_s(self._env), 120.0)))
        if not isinstance(found, dict):
            raise SbxError(Reason.DOCKER_UNREACHABLE, "reading the engine's disk usage: the "
                           "engine answered an unexpected shape")
        return found

    def archive_read(self, container_id: str, path: str) -> Iterator[bytes]:
        """``GET …/archive``: the tar as it comes, never silent for long, any length (the
        caller bounds what it keeps)."""
        action = f"copying {path} out of the sandbox"
        target = (f"/containers/{container_id}/archive?"
                  + urllib.parse.urlencode({"path": path}))
        head = (f"GET {target} HTTP/1.1\r\nHost: docker\r\nUser-Agent: sbx\r\n"
                "Connection: close\r\n\r\n").encode()
        yield from self._exchange_stream(head, None, action)

    def archive_write(self, container_id: str, path: str, tar: Any) -> None:
        """``PUT …/archive`` with the tar (bytes or a seekable file) as the body."""
        action = f"copying into the sandbox at {path}"
        if isinstance(tar, bytes | bytearray):
            import io

            tar = io.BytesIO(bytes(tar))
        size = tar.seek(0, 2)
        tar.seek(0)
        target = (f"/containers/{container_id}/archive?"
                  + urllib.parse.urlencode({"path": path}))
        head = (f"PUT {target} HTTP/1.1\r\nHost: docker\r\nUser-Agent: sbx\r\n"
                "Content-Type: application/x-tar\r\nConnection: close\r\n"
                f"Content-Length: {size}\r\n\r\n").encode()
        for _chunk in self._exchange_stream(head, tar, action):
            pass

    def _exchange_stream(self, head: bytes, body: Any, action: str) -> Iterator[bytes]:
        """One request on its own connection (its body read from ``body`` when given); the
        answer's body as it arrives, or the engine's refusal (``copy_refused``)."""
        try:
            sock = self._connections.open(timeout_s(self._env))
        except (OSError, ValueError) as exc:
            raise self._unreachable(action, exc) from exc
        with closing(sock), bounded(transfer(self._env)):
            try:
                sock.sendall(head)
                while body is not None and (chunk := body.read(1024 * 1024)):
                    sock.sendall(chunk)
                status, headers = parse_head(read_head(sock))
                self._reached = True
                if status != 200:
                    cap_body()
                    data = b"".join(body_of(sock, headers))
                    raise _refusal(action, Reason.COPY_REFUSED, status, _maybe_json(data),
                                   data)
                yield from body_of(sock, headers)
            except AnswerExceeded as exc:
                raise exceeded(action, exc, self._env) from None
            except (OSError, ValueError) as exc:
                raise self._unreachable(action, exc) from exc

    # -- a pull ----------------------------------------------------------------------------------

    def pull_image(self, ref: str, on_line: Callable[[str], None]) -> ImageInfo:
        """As the SDK's ``pull(ref, stream=True, decode=True, auth_config=...)``: ``POST
        /images/create?fromImage=REPO&tag=TAG`` (a digest is the tag, as the SDK splits it),
        the credentials in ``X-Registry-Auth``, then the engine's JSON progress objects read
        as they come; an ``error`` among them is the pull's failure."""
        action = f"pulling {ref}"
        params = {"tag": "latest", "fromImage": ref}  # docker.utils.parse_repository_tag:
        if "@" in ref:
            params["fromImage"], params["tag"] = ref.rsplit("@", 1)
        elif ":" in ref and "/" not in ref.rsplit(":", 1)[1]:
            params["fromImage"], params["tag"] = ref.rsplit(":", 1)
        auth = ""
        auth_config = self._auth_config(ref)
        if auth_config is not None:
            import base64

            auth = ("X-Registry-Auth: " + base64.urlsafe_b64encode(
                json.dumps(dict(auth_config)).encode()).decode("ascii") + "\r\n")
        request = (f"POST /images/create?{urllib.parse.urlencode(params)} HTTP/1.1\r\n"
                   "Host: docker\r\nUser-Agent: sbx\r\nConnection: close\r\n" + auth
                   + "Content-Length: 0\r\n\r\n").encode()
        try:
            sock = self._connections.open(timeout_s(self._env))
        except (OSError, ValueError) as exc:
            raise self._unreachable(action, exc) from exc
        # As long as the engine works on it (a pull can be long), but never silent for long
        # and never one message without end.
        with closing(sock), bounded(stream(self._env)):
            try:
                sock.sendall(request)
                status, headers = parse_head(read_head(sock))
                self._reached = True
                if status != 200 or not is_chunked(headers):
                    cap_body()  # an answer, not a stream
                body = body_of(sock, headers)
                if status != 200:
                    data = b"".join(body)
                    raise _refusal(action, Reason.REGISTRY_UNREACHABLE, status,
                                   _maybe_json(data), data)
                for decoded in json_lines(body):
                    if isinstance(decoded, dict):
                        registry_chunk(action, decoded, on_line)
            except AnswerExceeded as exc:
                raise exceeded(action, exc, self._env) from None
            except (OSError, ValueError) as exc:
                raise self._unreachable(action, exc) from exc
        image = self.image(ref)
        if image is None:
            raise SbxError(Reason.IMAGE_MISSING, f"pulling {ref} left no image")
        return image


def _maybe_json(data: bytes) -> Any:
    try:
        return json.loads(data) if data else None
    except ValueError:
        return None


def _message(decoded: Any, data: bytes) -> str:
    if isinstance(decoded, dict) and decoded.get("message"):
        return str(decoded["message"])
    return data.decode("utf-8", "replace").strip()


# The SDK's ImageNotFound fragments (docker.errors._image_not_found_explanation_fragments).
_IMAGE_NOT_FOUND: Final = ("no such image", "not found: does not exist or no pull access",
                           "repository does not exist",
                           "was found but does not match the specified platform")


def _refusal(action: str, reason: Reason, status: int, decoded: Any, data: bytes) -> SbxError:
    """The engine's refusal, worded as the SDK's APIError reads (status, class, message)."""
    message = _message(decoded, data)
    kind = "Client" if 400 <= status < 500 else "Server"
    text = short_error(f"{status} {kind} Error: ({message!r})")
    if status == 404 and any(f in message.lower() for f in _IMAGE_NOT_FOUND):
        return SbxError(Reason.IMAGE_MISSING, f"{action}: image not found: {text}",
                        hint="Build or `sbx pull` it first; sbx never pulls at run time.")
    return SbxError(reason, f"{action}: the engine answered {text}")
