"""The socket transport's create body is the SDK's, for every shape a sandbox spec takes;
its transport choice follows DOCKER_HOST (the engine tests drive both against dockerd)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from sbx.domain.egress.proxycontainer import proxy_spec
from sbx.domain.sandbox.hardening import (
    BindMount,
    ContainerSpec,
    Limits,
    build_spec,
    deadline_check,
)
from sbx.seams.engine import create_body, create_kwargs
from sbx.seams.enginesocket import SocketEngine
from sbx.seams.transports import open_engine

LIMITS = Limits(memory_bytes=1 << 30, pids=64, cpu_millis=500, tmp_bytes=1 << 26,
                workspace_bytes=1 << 27, home_bytes=1 << 26)


def _spec(**changes: Any) -> ContainerSpec:
    values: dict[str, Any] = {
        "image": "sha256:" + "b" * 64, "uid": 1000, "gid": 1000, "limits": LIMITS,
        "workspace_target": "/workspace", "workspace_bind": None, "extra_binds": (),
        "command": ("echo", "hi"), "entrypoint": None, "env": {"A": "1", "EMPTY": ""},
        "home": "/home/sbx", "labels": {"dev.sbx.managed": "true"}, "image_labels": {},
        "extra_tmpfs": {},
        "privileged": False, "network_mode": "none", "tty": False, "stdin_open": False,
        "stdin_once": True, "engine_log": False, "home_volume": None, "name": None,
    }
    values.update(changes)
    return build_spec(**values)


def _sdk_body(spec: ContainerSpec) -> dict[str, Any]:
    """What SdkEngine.create sends: the SDK's config, top-level nulls dropped."""
    from docker.api.client import APIClient

    api = APIClient(base_url="unix:///nonexistent.sock", version="1.41")
    kwargs = create_kwargs(spec)
    kwargs.pop("name", None)
    stdin_once = kwargs.pop("stdin_once", True)
    kwargs.pop("use_config_proxy", None)
    host_config = api.create_host_config(**kwargs.pop("host_config"))
    config = api.create_container_config(host_config=host_config, **kwargs)
    if kwargs.get("stdin_open"):
        config["StdinOnce"] = stdin_once
    return {key: value for key, value in config.items() if value is not None}


SPECS = {
    "plain": _spec(),
    "stdin": _spec(stdin_open=True),
    "named keeps stdin": _spec(stdin_open=True, stdin_once=False, name="sbx-n-1",
                               engine_log=True),
    "tty": _spec(tty=True, stdin_open=True),
    "entrypoint": _spec(entrypoint=("/bin/sh", "/.sbx/startup"), command=None),
    "workspace and binds": _spec(workspace_bind=BindMount("/src", "/workspace", True),
                                 extra_binds=(BindMount("/a", "/b", False),
                                              BindMount("vol", "/v", False, volume=True))),
    "tmpfs": _spec(extra_tmpfs={"/cache": "rw,size=1024,mode=700"}),
    "privileged": _spec(privileged=True),
    "network": _spec(network_mode="sbx-net"),
    "runtime": _spec(runtime="runsc"),
    "proxy beside the engine": proxy_spec("sbx-runtime/x:1", run_id="r1", network="sbx-net",
                                          labels={"dev.sbx.run": "r1"}, runtime=None),
}


@pytest.mark.parametrize("name", sorted(SPECS))
def test_create_body_is_what_the_sdk_sends(name: str) -> None:
    spec = SPECS[name]
    assert create_body(spec) == _sdk_body(spec)


def test_create_body_with_a_deadline_healthcheck() -> None:
    spec = dataclasses.replace(_spec(), healthcheck=deadline_check(2_000_000_000, 60.0))
    assert create_body(spec) == _sdk_body(spec)


@pytest.mark.parametrize(("env", "host"), [
    ({}, "unix:///var/run/docker.sock"),
    ({"DOCKER_HOST": "unix:///run/user/1000/docker.sock"}, "unix:///run/user/1000/docker.sock"),
    ({"DOCKER_HOST": "tcp://127.0.0.1:2375"}, "tcp://127.0.0.1:2375"),
    ({"DOCKER_HOST": "ssh://me@host"}, "ssh://me@host"),
    ({"DOCKER_HOST": "unix://"}, None), ({"SBX_ENGINE_SOCKET": "0"}, None),
])
def test_transport_follows_docker_host(env: dict[str, str], host: str | None) -> None:
    chosen = open_engine({"HOME": "/nonexistent", **env})
    assert (chosen.location().host if isinstance(chosen, SocketEngine) else None) == host


def test_an_absent_socket_is_engine_unreachable(tmp_path: Any) -> None:
    from sbx.base.errors import EngineUnavailable
    from sbx.base.reasons import Reason

    driver = SocketEngine({}, str(tmp_path / "missing.sock"))
    with pytest.raises(EngineUnavailable) as raised:
        driver.info()
    assert raised.value.reason is Reason.DOCKER_UNREACHABLE
    assert "cannot reach the Docker engine" in raised.value.message


@pytest.mark.parametrize("transport", ["socket", "sdk"])
def test_an_unreachable_engine_of_engines_is_named_by_its_entry(tmp_path: Any,
                                                                 transport: str) -> None:
    """sbx, not the user, set DOCKER_HOST from [engines]: the error names the entry, and
    the hint says to check it, not to unset a variable the user never set."""
    from sbx.base.errors import EngineUnavailable
    from sbx.seams.driver import SdkEngine
    from sbx.seams.enginehost import ENGINE_NAME_ENV

    host = f"unix://{tmp_path / 'missing.sock'}"
    env = {"HOME": "/nonexistent", "DOCKER_HOST": host, ENGINE_NAME_ENV: "far"}
    driver = SocketEngine(env, str(tmp_path / "missing.sock")) if transport == "socket" \
        else SdkEngine(env)
    with pytest.raises(EngineUnavailable) as raised:
        driver.info()
    assert raised.value.message.startswith("engine far: ")
    assert raised.value.details["engine"] == "far"
    assert "Engine far of [engines]" in (raised.value.hint or "")
    assert "unset" not in (raised.value.hint or "")


# -- a pull's progress stream, from a canned engine on a unix socket ----------------------------

def _canned_engine(path: str, answers: list[bytes]) -> tuple[Any, list[bytes]]:
    """A one-connection-per-answer engine: reads a request head, sends the next answer in
    small pieces (so JSON lines and chunks straddle reads), closes."""
    import socket as socket_module
    import threading

    server = socket_module.socket(socket_module.AF_UNIX, socket_module.SOCK_STREAM)
    server.bind(path)
    server.listen(4)
    requests: list[bytes] = []

    def serve() -> None:
        for answer in answers:
            conn, _ = server.accept()
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                requests.append(data)
                try:
                    for start in range(0, len(answer), 7):
                        conn.sendall(answer[start:start + 7])
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client may close once it has read the last chunk's size line
        server.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread, requests


def _chunked(*pieces: bytes) -> bytes:
    body = b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in pieces) + b"0\r\n\r\n"
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" \
        b"Transfer-Encoding: chunked\r\n\r\n" + body


IMAGE_JSON = (b'{"Id": "sha256:abc", "RepoTags": [], "Config": {"User": "agent"}}')


def test_a_pull_reads_the_progress_stream_as_it_comes(tmp_path: Any) -> None:
    path = str(tmp_path / "engine.sock")
    lines = (b'{"status":"Pulling from kits/x","id":"1"}\r\n{"status":"Downloading",'
             b'"progressDetail":{},"progress":"[=>  ] 1MB/4MB","id":"aa"}\r\n'
             b'{"status":"Digest: sha256:d"}\r\n')
    thread, requests = _canned_engine(path, [
        _chunked(lines[:30], lines[30:95], lines[95:]),
        b"HTTP/1.1 200 OK\r\nContent-Length: " + str(len(IMAGE_JSON)).encode() + b"\r\n\r\n"
        + IMAGE_JSON])
    seen: list[str] = []
    engine = SocketEngine({}, path, lambda _host: {"username": "u", "password": "p"})
    image = engine.pull_image(f"h:5000/kits/x@sha256:{'d' * 64}", seen.append)
    thread.join(timeout=5)
    assert image.id == "sha256:abc" and image.user == "agent"
    assert seen == ["1 Pulling from kits/x", "aa Downloading [=>  ] 1MB/4MB",
                    "Digest: sha256:d"]
    head = requests[0].decode()
    assert head.startswith(f"POST /images/create?tag=sha256%3A{'d' * 64}"
                           "&fromImage=h%3A5000%2Fkits%2Fx HTTP/1.1")
    import base64
    import json

    auth = next(line for line in head.split("\r\n") if line.startswith("X-Registry-Auth: "))
    assert json.loads(base64.urlsafe_b64decode(auth.split(": ", 1)[1])) == \
        {"username": "u", "password": "p"}


@pytest.mark.parametrize(("answer", "reason", "text"), [
    (_chunked(b'{"status":"Pulling"}\r\n{"errorDetail":{"message":"manifest unknown"},'
              b'"error":"manifest unknown"}\r\n'), "registry_unreachable",
     "pulling h:5000/x:1 failed: manifest unknown"),
    (b"HTTP/1.1 404 Not Found\r\nContent-Length: 62\r\n\r\n"
     b'{"message":"pull access denied, repository does not exist..."}', "image_missing",
     "image not found"),
    (b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 20\r\n\r\n"
     b'{"message":"boom!!"}', "registry_unreachable", "the engine answered 500"),
])
def test_a_pull_failure_is_reason_coded(tmp_path: Any, answer: bytes, reason: str,
                                        text: str) -> None:
    from sbx.base.errors import SbxError

    path = str(tmp_path / "engine.sock")
    thread, _requests = _canned_engine(path, [answer])
    with pytest.raises(SbxError) as raised:
        SocketEngine({}, path).pull_image("h:5000/x:1", lambda _line: None)
    thread.join(timeout=5)
    assert raised.value.reason.value == reason
    assert text in raised.value.message
