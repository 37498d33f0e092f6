"""The sessions role through the docker SDK: attach, output, resize, and exec."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from sbx.base.reasons import Reason
from sbx.seams.driver.client import SdkClient, upgraded_socket
from sbx.seams.enginebounds import (
    BoundedSocket,
)
from sbx.seams.session.stream import AttachedStream


class SdkSessions(SdkClient):
    """Sessions and exec (:class:`sbx.seams.engine.Sessions`)."""

    def attach(self, container_id: str, *, stdin: bool,
               detach_keys: str | None = None) -> AttachedStream:
        """The container's attach stream (stdout, stderr and, when asked, stdin), as a socket.

        Call it before :meth:`start`: the engine then copies every byte the workload writes,
        from the first, into this connection, and ends it only after the last, so nothing is
        missed at either end (unlike a followed log). Without a TTY the bytes are framed
        (:mod:`sbx.seams.session.frames`); with one they are the terminal's raw stream.
        """
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
        sock = upgraded_socket(response)
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

    def exec_attach(self, container_id: str, argv: Sequence[str], *, user: str,
                    env: Mapping[str, str], workdir: str | None, tty: bool,
                    stdin: bool) -> tuple[AttachedStream, str]:
        """An exec in a running sandbox with its stream attached (raw with a TTY, framed
        without); returns the stream and the exec id. The exec runs with the container's
        hardening (capabilities, no-new-privileges, cgroup limits, network) as ``user``."""
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
        return AttachedStream(upgraded_socket(response), keep=response), exec_id

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


__all__ = ["SdkSessions"]
