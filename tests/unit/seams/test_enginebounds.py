"""Every engine answer has a total time and a size bound, through both transports (the engine's
socket spoken directly, and the docker SDK), ended with a reason; a hijacked stream is not cut.

The engine is :class:`tests.support.hostileengine.HostileEngine`, a unix socket server that
answers every request in one hostile way. In-process tests use a one-second bound
(``SBX_ENGINE_TIMEOUT=1``); the console-script tests measure the memory of the sbx process.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.seams import enginebounds
from sbx.seams.driver import SdkEngine
from sbx.seams.enginebounds import AnswerExceeded, json_lines
from sbx.seams.enginesocket import SocketEngine
from sbx.seams.transports import open_engine
from tests.support.hostileengine import OK_HEAD, HostileEngine

HOSTILE = ("slow_body", "huge_body", "huge_declared", "huge_header", "endless_headers",
           "endless_chunk", "endless_chunks", "slowloris")
TRANSPORTS = ("socket", "sdk")
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def engine_path() -> Iterator[Path]:
    # AF_UNIX paths are short: keep it under /tmp rather than pytest's deep tmp_path.
    import tempfile

    directory = Path(tempfile.mkdtemp(prefix="sbx-hostile-", dir="/tmp"))
    yield directory / "engine.sock"
    for entry in directory.iterdir():
        entry.unlink()
    directory.rmdir()


def _env(path: Path, transport: str, seconds: str = "1") -> dict[str, str]:
    env = {"DOCKER_HOST": f"unix://{path}", "SBX_ENGINE_TIMEOUT": seconds}
    if transport == "sdk":
        env["SBX_ENGINE_SOCKET"] = "0"
    return env


def _info(path: Path, transport: str) -> Callable[[], Any]:
    driver = open_engine(_env(path, transport))
    return driver.info


@pytest.mark.slow
@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("behaviour", HOSTILE)
def test_a_hostile_answer_ends_with_a_reason(engine_path: Path, behaviour: str,
                                             transport: str) -> None:
    with HostileEngine(engine_path, behaviour) as engine:
        started = time.monotonic()
        with pytest.raises(SbxError) as raised:
            _info(engine_path, transport)()
        elapsed = time.monotonic() - started
    assert raised.value.reason is Reason.DOCKER_UNREACHABLE
    assert engine.requests, "the engine was never asked"
    # Bounded: a generous multiple of the one-second bound, never "until killed".
    assert elapsed < 20, f"{behaviour} over {transport} took {elapsed:.1f}s"


@pytest.mark.slow
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_the_reason_says_which_bound_and_how_to_raise_it(engine_path: Path,
                                                         transport: str) -> None:
    with HostileEngine(engine_path, "slow_body"), pytest.raises(SbxError) as slow:
        _info(engine_path, transport)()
    assert "took longer than 1s in total" in slow.value.message
    assert "SBX_ENGINE_TIMEOUT" in (slow.value.hint or "")
    other = engine_path.with_name("other.sock")
    with HostileEngine(other, "huge_body"), pytest.raises(SbxError) as large:
        _info(other, transport)()
    assert "is larger than 16 MiB" in large.value.message


@pytest.mark.slow
def test_a_silent_engine_is_ended_by_the_total_bound_too(engine_path: Path) -> None:
    def silent(conn: socket.socket) -> None:
        time.sleep(5)

    with HostileEngine(engine_path, silent), pytest.raises(SbxError) as raised:
        SocketEngine(_env(engine_path, "socket"), str(engine_path)).info()
    assert "took longer than 1s" in raised.value.message


@pytest.mark.slow
def test_a_plain_engine_still_answers(engine_path: Path) -> None:
    info = {"ServerVersion": "20.10.99", "OSType": "linux", "CgroupVersion": "2",
            "SecurityOptions": ["name=seccomp"], "ApiVersion": "1.41"}
    body = json.dumps(info).encode()

    def answer(conn: socket.socket) -> None:
        # A chunked answer whose chunks arrive one by one, each in time.
        conn.sendall(OK_HEAD + b"Transfer-Encoding: chunked\r\n\r\n")
        for start in range(0, len(body), 7):
            piece = body[start:start + 7]
            conn.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
        conn.sendall(b"0\r\n\r\n")

    for transport in TRANSPORTS:
        with HostileEngine(engine_path, answer):
            found = _info(engine_path, transport)()
        engine_path.unlink()
        assert found.version == "20.10.99"
        assert found.security_options == ("name=seccomp",)


@pytest.mark.slow
def test_a_wait_that_runs_out_is_none_not_an_error(engine_path: Path) -> None:
    def slow(conn: socket.socket) -> None:
        time.sleep(3)

    for transport in TRANSPORTS:
        driver = _driver(engine_path, transport)
        with HostileEngine(engine_path, slow):
            assert driver.wait("c" * 64, 0.5) is None
        engine_path.unlink()


# -- a hijacked stream is the workload's: only its head is bounded ------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_an_attach_stream_is_not_cut_by_the_bound(engine_path: Path, transport: str) -> None:
    def upgrade(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 101 UPGRADED\r\nContent-Type: application/vnd.docker.raw-stream"
                     b"\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n")
        time.sleep(0.3)  # as the engine: nothing before the start, after the head is read
        conn.sendall(b"first ")
        time.sleep(1.6)  # longer than the bound of one second
        conn.sendall(b"x" * (20 * 1024 * 1024))  # more than any answer may be
        conn.sendall(b" last")

    driver = _driver(engine_path, transport)
    with HostileEngine(engine_path, upgrade):
        stream = driver.attach("c" * 64, stdin=False)
        received = bytearray()
        buffer = bytearray(65536)
        try:
            while count := stream.recv_into(buffer):
                received += buffer[:count]
        finally:
            stream.close()
    assert received.startswith(b"first ") and received.endswith(b" last")
    assert len(received) == 6 + 20 * 1024 * 1024 + 5


@pytest.mark.slow
def test_an_attach_head_is_bounded(engine_path: Path) -> None:
    with HostileEngine(engine_path, "slowloris"), pytest.raises(SbxError) as raised:
        SocketEngine(_env(engine_path, "socket"), str(engine_path)).attach("c" * 64,
                                                                            stdin=False)
    assert raised.value.reason is Reason.DOCKER_UNREACHABLE


# -- progress streams: idle time and message size, not total -----------------------------------


def _driver(path: Path, transport: str) -> SdkEngine:
    """A driver for the engine at ``path``; through the SDK, its client already made (the
    SDK's version negotiation answered by a plain engine)."""
    driver = open_engine(_env(path, transport))
    if transport == "sdk":
        with HostileEngine(path, "plain"):
            driver._client  # noqa: B018 -- the version negotiation, first
        path.unlink()
    return driver


def _pull(path: Path, transport: str, driver: SdkEngine) -> list[str]:
    lines: list[str] = []
    driver._auth_config = lambda ref: None  # type: ignore[method-assign]
    assert isinstance(driver, SocketEngine) == (transport == "socket")
    driver.pull_image("example.test/kit:1", lines.append)
    return lines


@pytest.mark.slow
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_pull_message_without_end_is_refused(engine_path: Path, transport: str) -> None:
    def endless_line(conn: socket.socket) -> None:
        conn.sendall(OK_HEAD + b"Transfer-Encoding: chunked\r\n\r\n")
        conn.sendall(b"%x\r\n%s\r\n" % (27, b'{"status": "Pulling"}\r\n    '))
        piece = b"x" * 65536
        for _ in range(64):  # 4 MiB of one message, in many chunks
            conn.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))

    driver = _driver(engine_path, transport)
    with HostileEngine(engine_path, endless_line), pytest.raises(SbxError) as raised:
        _pull(engine_path, transport, driver)
    assert "message longer than 1 MiB" in raised.value.message


@pytest.mark.slow
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_pull_chunk_without_end_is_refused(engine_path: Path, transport: str) -> None:
    driver = _driver(engine_path, transport)
    with HostileEngine(engine_path, "endless_chunk"), pytest.raises(SbxError) as raised:
        _pull(engine_path, transport, driver)
    assert "message longer than 1 MiB" in raised.value.message


@pytest.mark.slow
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_silent_pull_is_ended_by_its_idle_bound(engine_path: Path, transport: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(enginebounds, "STREAM_IDLE_S", 1.0)

    def stalls(conn: socket.socket) -> None:
        conn.sendall(OK_HEAD + b"Transfer-Encoding: chunked\r\n\r\n")
        line = b'{"status": "Downloading"}\n'
        conn.sendall(b"%x\r\n%s\r\n" % (len(line), line))
        time.sleep(5)

    driver = _driver(engine_path, transport)
    with HostileEngine(engine_path, stalls), pytest.raises(SbxError) as raised:
        _pull(engine_path, transport, driver)
    assert "sent nothing for 1s" in raised.value.message


@pytest.mark.slow
def test_a_long_pull_that_keeps_talking_is_not_cut(engine_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the one-second total of a quick call: a stream has no total bound."""
    monkeypatch.setattr(enginebounds, "STREAM_IDLE_S", 1.0)
    image = {"Id": "sha256:" + "a" * 64, "RepoTags": ["example.test/kit:1"], "Config": {}}

    def pull_then_inspect(conn: socket.socket) -> None:
        request = conn.recv(65536)
        if request.startswith(b"GET /images/"):
            body = json.dumps(image).encode()
            conn.sendall(OK_HEAD + b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            return
        conn.sendall(OK_HEAD + b"Transfer-Encoding: chunked\r\n\r\n")
        for index in range(8):
            line = json.dumps({"status": "Downloading", "id": str(index)}).encode() + b"\n"
            conn.sendall(b"%x\r\n%s\r\n" % (len(line), line))
            time.sleep(0.3)
        conn.sendall(b"0\r\n\r\n")

    class _Replaying(HostileEngine):
        def _serve(self, conn: socket.socket) -> None:
            with conn:
                pull_then_inspect(conn)

    driver = _driver(engine_path, "socket")
    with _Replaying(engine_path, pull_then_inspect):
        lines = _pull(engine_path, "socket", driver)
    assert len(lines) == 8


def test_json_lines_bounds_a_line_however_it_is_cut() -> None:
    pieces = [b'{"a": 1}\n{"b": ', b"2}\n", b"y" * 600, b"y" * 600]
    seen = []
    with pytest.raises(AnswerExceeded):
        for value in json_lines(pieces, max_line=1000):
            seen.append(value)
    assert seen == [{"a": 1}, {"b": 2}]
    assert list(json_lines([b'{"a":', b" 1}"])) == [{"a": 1}]


# -- the console script: a reason, within a bound, in bounded memory ---------------------------


def _sbx_rss(args: list[str], env: dict[str, str], errors: Path) -> tuple[int, bytes, int]:
    """(exit status, stderr, peak resident KiB) of ``sbx ARGS``."""
    with errors.open("wb") as stderr:
        process = subprocess.Popen([sys.executable, "-m", "sbx", *args],
                                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                   stderr=stderr, env=env, cwd=ROOT)
    deadline = time.monotonic() + 90
    while True:
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            process.kill()
            os.waitpid(process.pid, 0)
            pytest.fail(f"sbx {args[0]} did not end within 90s")
        time.sleep(0.05)
    process.returncode = os.waitstatus_to_exitcode(status)
    return process.returncode, errors.read_bytes(), usage.ru_maxrss


@pytest.mark.slow
@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("behaviour", ["huge_body", "endless_chunk", "slow_body"])
def test_sbx_ends_with_a_reason_in_bounded_memory(engine_path: Path, tmp_path: Path,
                                                  behaviour: str, transport: str) -> None:
    config = tmp_path / "config.toml"
    config.write_text("", encoding="utf-8")
    env = {**os.environ, **_env(engine_path, transport, seconds="3"),
           "SBX_HOME": str(tmp_path / "home"), "SBX_CONFIG": str(config),
           "SBX_PLAN_CACHE": "0"}
    run = ["run", str(ROOT / "examples" / "hello"), "--access", "none", "--", "true"]
    with HostileEngine(engine_path, "plain"):
        _status, _err, baseline = _sbx_rss(run, env, tmp_path / "plain.err")
    engine_path.unlink()
    with HostileEngine(engine_path, behaviour):
        status, stderr, peak = _sbx_rss(run, env, tmp_path / "hostile.err")
    assert status == 125, stderr
    assert stderr.rstrip().splitlines()[-2].endswith(b"(docker_unreachable)"), stderr
    assert b"sbx stopped reading" in stderr
    growth_mib = (peak - baseline) / 1024
    assert growth_mib < 100, f"{behaviour}: {growth_mib:.0f} MiB more than a plain engine's"


@pytest.mark.slow
@pytest.mark.parametrize("behaviour", ["slow_body", "huge_body", "endless_chunk", "slowloris",
                                       "endless_headers"])
def test_a_hostile_engine_over_tcp_is_bounded_too(behaviour: str) -> None:
    with HostileEngine(None, behaviour) as engine:
        driver = open_engine({"DOCKER_HOST": f"tcp://127.0.0.1:{engine.port}",
                               "SBX_ENGINE_TIMEOUT": "1"})
        started = time.monotonic()
        with pytest.raises(SbxError) as raised:
            driver.info()
        elapsed = time.monotonic() - started
    assert raised.value.reason is Reason.DOCKER_UNREACHABLE
    assert elapsed < 20, f"{behaviour} over tcp took {elapsed:.1f}s"
