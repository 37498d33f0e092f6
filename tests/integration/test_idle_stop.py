"""`[sandbox] idle_stop` on a real engine: an idle named sandbox stops by itself (its keeper,
started for it even without egress or ports), one with an exec session is left running
through the same window, `sbx ls` and `sbx explain NAME` say `stopped_idle`, and a start
clears it."""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.kits import capabilities, network_policy, rule
from tests.support.origin import Internet
from tests.support.sbxproc import SBX, Finished, run_sbx

from .conftest import BUSYBOX, make_kit

pytestmark = pytest.mark.docker

IDLE_S = 4
SESSION_S = 15  # longer than the idle one takes to stop
WAIT_S = 40.0  # first sample, the period, the stop: well under this
# PID 1 ends on SIGTERM at once, so a stop takes no grace.
WORKLOAD = ("sh", "-c", 'trap "exit 0" TERM; sleep 600 & wait')


@pytest.fixture
def env(state_home: Path, tmp_path: Path) -> dict[str, str]:
    config = tmp_path / "config.toml"
    config.write_text(f"[sandbox]\nidle_stop = {IDLE_S}\n", encoding="utf-8")
    return {**os.environ, "SBX_HOME": str(state_home), "SBX_CONFIG": str(config)}


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_kit(tmp_path_factory.mktemp("kits"), "idle",
                    f"FROM {BUSYBOX}\nUSER agent\nWORKDIR /workspace\nCMD [\"sh\"]\n")


def sbx(env: dict[str, str], *args: str, timeout: float = 120) -> Finished:
    return run_sbx(list(args), env=env, timeout=timeout)


def ls(env: dict[str, str]) -> dict[str, dict[str, Any]]:
    done = sbx(env, "ls", "--json")
    assert done.returncode == 0, done.stderr
    envelope = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return {s["name"]: s for s in envelope["data"]["sandboxes"]}


def wait_for(check: Callable[[], bool], limit_s: float = WAIT_S) -> float:
    """Seconds until ``check`` held (polled, bounded); fails at ``limit_s``."""
    started = time.monotonic()
    while time.monotonic() - started < limit_s:
        if check():
            return time.monotonic() - started
        time.sleep(0.5)
    pytest.fail(f"not within {limit_s} s")


def test_idle_sandbox_stops_and_one_with_an_exec_session_does_not(
        kit: Path, env: dict[str, str], cleanup: list[str], state_home: Path) -> None:
    idle, busy = (f"i-{uuid.uuid4().hex[:10]}" for _ in range(2))
    cleanup.extend([idle, busy])
    for name in (idle, busy):
        done = sbx(env, "run", "--name", name, "-d", str(kit), "--", *WORKLOAD)
        assert done.returncode == 0, done.stderr
    # A session in `busy` that does nothing (no CPU, no egress): a client is enough. (An
    # exec outlives a killed client in the engine, and still counts: it is let end by itself.)
    with subprocess.Popen([str(SBX), "exec", busy, "--", "sleep", str(SESSION_S)],
                          env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE) as session:
        try:
            took = wait_for(lambda: ls(env)[idle]["status"] == "exited")
            assert took >= IDLE_S - 1  # not before the period (counted from its first sample)
            time.sleep(2)  # the same window and then some: the session keeps it running
            listed = ls(env)
            assert listed[busy]["status"] == "running" and listed[busy]["reason"] is None
            assert session.poll() is None
            assert session.wait(timeout=SESSION_S + 30) == 0
        finally:
            if session.poll() is None:
                session.kill()
                session.wait(timeout=10)
    # Its session over, `busy` is idle too and stops by itself, a period later.
    ended = time.monotonic()
    wait_for(lambda: ls(env)[busy]["status"] == "exited")
    assert time.monotonic() - ended >= IDLE_S - 1
    assert ls(env)[busy]["reason"] == "stopped_idle"
    entry = ls(env)[idle]
    assert entry["reason"] == "stopped_idle"
    assert entry["stopped"]["idle_s"] == IDLE_S
    table = sbx(env, "ls")
    assert "exited (stopped_idle)" in table.stdout.decode()
    # The stop went the normal way: the keeper (started for it: no egress, no ports) is gone.
    # the keeper ends a moment after the container: its proxy and forwarder go first
    wait_for(lambda: not (state_home / "runs" / entry["run_id"] / "keeper.pid").exists())
    explained = sbx(env, "explain", idle)
    assert explained.returncode == 0, explained.stderr
    text = explained.stdout.decode()
    assert "stopped (stopped_idle)" in text and f"sbx start {idle}" in text
    reason = sbx(env, "explain", "stopped_idle")
    assert reason.returncode == 0 and b"sbx start NAME" in reason.stdout
    # A start clears the reason and the idle stop watches again.
    started = sbx(env, "start", idle)
    assert started.returncode == 0, started.stderr
    entry = ls(env)[idle]
    assert entry["status"] == "running" and entry["reason"] is None
    wait_for(lambda: ls(env)[idle]["status"] == "exited")
    assert ls(env)[idle]["reason"] == "stopped_idle"


def test_an_attached_client_keeps_it_running_until_it_goes(
        kit: Path, env: dict[str, str], cleanup: list[str]) -> None:
    name = f"a-{uuid.uuid4().hex[:10]}"
    cleanup.append(name)
    done = sbx(env, "run", "--name", name, "-d", "--idle-stop", "3", str(kit), "--", *WORKLOAD)
    assert done.returncode == 0, done.stderr
    with subprocess.Popen([str(SBX), "attach", name], env=env,
                          stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL) as client:
        try:
            time.sleep(3 + 5)  # the period (--idle-stop beats the config's) and then some
            assert ls(env)[name]["status"] == "running"
            assert client.poll() is None
        finally:
            client.kill()  # gone without a word: its lock goes with it
            client.wait(timeout=10)
            if client.stdin is not None:
                client.stdin.close()
    gone = time.monotonic()
    wait_for(lambda: ls(env)[name]["status"] == "exited")
    assert time.monotonic() - gone >= 3 - 1
    entry = ls(env)[name]
    assert entry["reason"] == "stopped_idle" and entry["stopped"]["idle_s"] == 3


def test_idle_stop_is_refused_where_it_cannot_apply(kit: Path, env: dict[str, str]) -> None:
    one_shot = sbx(env, "run", "--idle-stop", "5", str(kit), "--", "true")
    assert one_shot.returncode == 2  # invalid_argument
    assert b"--idle-stop applies to a named sandbox" in one_shot.stderr
    assert b"sbx run --name NAME --idle-stop 30m" in one_shot.stderr
    zero = sbx(env, "run", "--name", "never-made", "--idle-stop", "0", str(kit))
    assert zero.returncode == 2 and b"--idle-stop must be longer than zero" in zero.stderr
    assert "never-made" not in ls(env)


def test_egress_through_its_proxy_keeps_it_running(
        tmp_path: Path, state_home: Path, internet: Internet, cleanup: list[str],
        kit_factory: Callable[..., Path]) -> None:
    """Requests through the proxy (the local internet, a few ms of CPU each) keep a sandbox
    with a keeper-owned proxy running; once they stop it is idle, and its proxy goes too."""
    internet.origin.clear()
    config = internet.sbx_config(tmp_path / "config.toml")
    with config.open("a", encoding="utf-8") as handle:
        handle.write(f"[sandbox]\nidle_stop = {IDLE_S}\n")
    env = {**os.environ, "SBX_HOME": str(state_home), "SBX_CONFIG": str(config)}
    kit = kit_factory("netidle", "FROM sbx-base/bookworm:1\nUSER agent\nWORKDIR /workspace\n"
                      "CMD [\"bash\"]\n", capabilities(network_policy(
                          version=2, runtime=[rule(["api.github.com"], methods=["GET"])])))
    name = f"e-{uuid.uuid4().hex[:10]}"
    cleanup.append(name)
    calls = 12  # one every 2 s: longer than three periods
    loop = (f'trap "exit 0" TERM; for i in $(seq {calls}); do curl -s -m 5 -o /dev/null '
            'https://api.github.com/zen; sleep 2 & wait; done; sleep 600 & wait')
    done = sbx(env, "run", "--name", name, "-d", str(kit), "--", "bash", "-c", loop)
    assert done.returncode == 0, done.stderr
    started = time.monotonic()
    time.sleep(IDLE_S * 3)
    assert ls(env)[name]["status"] == "running"  # requests every 2 s: never idle
    wait_for(lambda: ls(env)[name]["status"] == "exited", limit_s=calls * 2 + WAIT_S)
    assert time.monotonic() - started >= calls * 2 * 0.8  # not before the requests ended
    assert len([r for r in internet.origin.requests() if r.path == "/zen"]) >= calls // 2
    entry = ls(env)[name]
    assert entry["reason"] == "stopped_idle"
    # the keeper ends a moment after the container: its proxy and forwarder go first
    wait_for(lambda: not (state_home / "runs" / entry["run_id"] / "keeper.pid").exists())
