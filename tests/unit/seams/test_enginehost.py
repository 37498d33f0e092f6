"""Which engine the environment names (DOCKER_HOST, DOCKER_CONTEXT, docker's current context and
its metadata files), which transport reaches it, and how a failed ssh step is told."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.seams.connectors import SshConnector, TcpConnector, UnixConnector, ssh_failure
from sbx.seams.enginehost import resolve_endpoint, ssh_target
from sbx.seams.enginesocket import SocketEngine
from sbx.seams.transports import open_engine


def _context(config: Path, name: str, host: str, *, tls: bool = False,
             skip: bool = False) -> None:
    digest = hashlib.sha256(name.encode()).hexdigest()
    meta = config / "contexts" / "meta" / digest
    meta.mkdir(parents=True)
    (meta / "meta.json").write_text(json.dumps({
        "Name": name, "Metadata": {},
        "Endpoints": {"docker": {"Host": host, "SkipTLSVerify": skip}}}))
    if tls:
        files = config / "contexts" / "tls" / digest / "docker"
        files.mkdir(parents=True)
        for file_name in ("ca.pem", "cert.pem", "key.pem"):
            (files / file_name).write_text("x")


def test_docker_host_comes_first(tmp_path: Path) -> None:
    _context(tmp_path, "far", "ssh://me@far")
    env = {"DOCKER_HOST": "unix:///run/x.sock", "DOCKER_CONTEXT": "far",
           "DOCKER_CONFIG": str(tmp_path)}
    assert resolve_endpoint(env).host == "unix:///run/x.sock"
    assert resolve_endpoint(env).source == "DOCKER_HOST"


def test_docker_context_is_read_from_its_metadata_file(tmp_path: Path) -> None:
    _context(tmp_path, "far", "ssh://me@far:2222")
    endpoint = resolve_endpoint({"DOCKER_CONTEXT": "far", "DOCKER_CONFIG": str(tmp_path)})
    assert (endpoint.host, endpoint.source, endpoint.tls) == ("ssh://me@far:2222",
                                                              "context far", None)


def test_the_current_context_of_config_json(tmp_path: Path) -> None:
    _context(tmp_path, "box", "tcp://box:2376", tls=True)
    (tmp_path / "config.json").write_text(json.dumps({"currentContext": "box"}))
    endpoint = resolve_endpoint({"DOCKER_CONFIG": str(tmp_path)})
    assert endpoint.host == "tcp://box:2376"
    assert endpoint.tls is not None and endpoint.tls.verify
    assert endpoint.tls.ca == tmp_path / "contexts" / "tls" / hashlib.sha256(
        b"box").hexdigest() / "docker" / "ca.pem"


def test_default_context_and_no_config_are_the_local_socket(tmp_path: Path) -> None:
    assert resolve_endpoint({"DOCKER_CONFIG": str(tmp_path)}).host == \
        "unix:///var/run/docker.sock"
    (tmp_path / "config.json").write_text(json.dumps({"currentContext": "default"}))
    assert resolve_endpoint({"DOCKER_CONFIG": str(tmp_path)}).source == "default"


@pytest.mark.parametrize("setup", ["missing", "corrupt", "no-endpoint"])
def test_a_named_context_that_cannot_be_read_is_refused(tmp_path: Path, setup: str) -> None:
    if setup != "missing":
        meta = tmp_path / "contexts" / "meta" / hashlib.sha256(b"far").hexdigest()
        meta.mkdir(parents=True)
        (meta / "meta.json").write_text("{" if setup == "corrupt" else '{"Endpoints": {}}')
    with pytest.raises(SbxError) as raised:
        resolve_endpoint({"DOCKER_CONTEXT": "far", "DOCKER_CONFIG": str(tmp_path)})
    assert raised.value.reason is Reason.DOCKER_UNREACHABLE
    assert "'far'" in raised.value.message
    assert "docker context ls" in (raised.value.hint or "")


def test_docker_tls_verify_reads_docker_cert_path(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_text("x")
    endpoint = resolve_endpoint({"DOCKER_HOST": "tcp://box:2376", "DOCKER_TLS_VERIFY": "1",
                                 "DOCKER_CERT_PATH": str(tmp_path)})
    assert endpoint.tls is not None
    assert (endpoint.tls.ca, endpoint.tls.cert, endpoint.tls.verify) == (
        tmp_path / "ca.pem", None, True)


@pytest.mark.parametrize(("address", "parts"), [
    ("host", (None, "host", None)), ("me@host", ("me", "host", None)),
    ("me@host:2222", ("me", "host", 2222)), ("[::1]:22", (None, "::1", 22)),
])
def test_ssh_targets(address: str, parts: tuple[str | None, str, int | None]) -> None:
    target = ssh_target(address)
    assert (target.user, target.host, target.port) == parts


@pytest.mark.parametrize("address", ["-oProxyCommand=x", "host/path", "me:pw@host", "",
                                     "host?x=1", "-me@host"])
def test_ssh_targets_that_could_be_options_or_paths_are_refused(address: str) -> None:
    with pytest.raises(ValueError):
        ssh_target(address)
    with pytest.raises(SbxError) as raised:
        open_engine({"DOCKER_HOST": f"ssh://{address}"})
    assert raised.value.reason is Reason.DOCKER_UNREACHABLE


def test_the_ssh_command_ends_options_before_the_host() -> None:
    argv = SshConnector(ssh_target("me@box:2200"), share_dir="/tmp/s").argv()
    assert argv[-5:] == ["--", "box", "docker", "system", "dial-stdio"]
    assert "BatchMode=yes" in argv and "StrictHostKeyChecking=no" not in " ".join(argv)
    assert argv[argv.index("-p") + 1] == "2200" and argv[argv.index("-l") + 1] == "me"
    assert "ControlPath=/tmp/s/%C" in argv


@pytest.mark.parametrize(("env", "connector", "local"), [
    ({}, UnixConnector, True),
    ({"DOCKER_HOST": "ssh://me@box"}, SshConnector, False),
    ({"DOCKER_HOST": "tcp://127.0.0.1:2375"}, TcpConnector, True),
    ({"DOCKER_HOST": "tcp://10.9.9.9:2375", "SBX_ENGINE_PLAIN_TCP": "allow"}, TcpConnector,
     False),
])
def test_one_connector_per_transport(env: dict[str, str], connector: type,
                                     local: bool) -> None:
    engine = open_engine({"HOME": "/nonexistent", **env})
    assert isinstance(engine, SocketEngine)
    assert isinstance(engine._connector, connector)
    assert engine.location().local is local


def test_plain_tcp_to_another_host_is_refused() -> None:
    with pytest.raises(SbxError) as raised:
        open_engine({"DOCKER_HOST": "tcp://10.9.9.9:2375"})
    assert raised.value.reason is Reason.ENGINE_PLAIN_TCP
    assert "SBX_ENGINE_PLAIN_TCP=allow" in (raised.value.hint or "")


def test_tls_with_verification_skipped_is_refused(tmp_path: Path) -> None:
    _context(tmp_path, "lax", "tcp://box:2376", skip=True)
    with pytest.raises(SbxError) as raised:
        open_engine({"DOCKER_CONTEXT": "lax", "DOCKER_CONFIG": str(tmp_path)})
    assert raised.value.reason is Reason.ENGINE_PLAIN_TCP


@pytest.mark.parametrize(("said", "status", "reason", "step"), [
    ("Host key verification failed.", 255, Reason.ENGINE_HOST_KEY, "host's key"),
    ("@@@ WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED! @@@", 255, Reason.ENGINE_HOST_KEY,
     "host's key"),
    ("me@box: Permission denied (publickey).", 255, Reason.DOCKER_UNREACHABLE, "(logging in)"),
    ("ssh: connect to host box port 22: Connection refused", 255, Reason.DOCKER_UNREACHABLE,
     "(connecting)"),
    ("bash: line 1: docker: command not found", 127, Reason.DOCKER_UNREACHABLE,
     "dial-stdio"),
    ("Cannot connect to the Docker daemon at unix:///var/run/docker.sock.", 1,
     Reason.DOCKER_UNREACHABLE, "(reaching the Docker engine on the host)"),
    ("permission denied while trying to connect to the Docker daemon socket", 1,
     Reason.DOCKER_UNREACHABLE, "(reaching the Docker engine on the host)"),
])
def test_a_failed_ssh_step_is_named_with_the_host(said: str, status: int, reason: Reason,
                                                  step: str) -> None:
    error = ssh_failure(ssh_target("me@box:2200"), "reading engine info", said, status,
                        "the engine closed the connection", reached=False)
    assert error.reason is reason
    assert step in error.message and "ssh://me@box:2200" in error.message
    assert "ssh -p 2200 me@box" in (error.hint or "")
