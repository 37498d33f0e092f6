"""The docker SDK client every role of :class:`~sbx.seams.driver.SdkEngine` shares: built once,
its transport bounded, and every SDK or transport error translated into a reason-coded
:class:`~sbx.base.errors.SbxError` at one place (:meth:`SdkClient._engine_errors`)."""

from __future__ import annotations

import functools
import math
import socket
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from sbx.base.errors import EngineUnavailable, SbxError
from sbx.base.reasons import Reason
from sbx.seams.engine import (
    named_entry,
    short_error,
    situation_hint,
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
    timeout_s,
)

if TYPE_CHECKING:

    import docker

    from sbx.seams.connectors import Connector


# The DOCKER_HOST the SDK is built with when a connector carries its connections: it makes the
# SDK mount a unix adapter, which bound_transport replaces; nothing ever connects to it.
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


class SdkClient:
    """The SDK client and its error boundary; the role parts are built on it."""

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
                bound_transport(api, self._sdk_connector)
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
                raise named_entry(self._env, told or EngineUnavailable(
                    f"cannot reach the Docker engine: {message}", hint=hint)) from exc
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
            raise named_entry(self._env, told or EngineUnavailable(
                f"{action}: lost the Docker engine: {short_error(exc)}",
                hint=situation_hint(self._env, str(exc)))) from exc

    def _told(self, action: str, detail: str, *, reached: bool) -> SbxError | None:
        connector = self._sdk_connector
        return None if connector is None else connector.unreachable(action, detail,
                                                                    reached=reached)


def upgraded_socket(response: Any) -> socket.socket:
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


def bound_transport(api: Any, connector: Connector | None = None) -> None:
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


def is_read_timeout(exc: BaseException) -> bool:
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


def engine_timestamp(raw: object) -> float | None:
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


__all__ = ["SdkClient", "bound_transport", "engine_timestamp", "is_read_timeout",
           "upgraded_socket"]
