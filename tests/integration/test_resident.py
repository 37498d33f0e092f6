"""The resident helper on a real engine, used as a person uses it: `sbx resident start`, then
plain `sbx` commands (the console script) served by it — their bytes, exit statuses, signals
and terminal sessions exactly as without it; callers it must not serve run the command
themselves; another user cannot reach it; a killed helper or caller loses nothing and leaves
nothing; changed code and idleness end it."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sbx.seams import resident as wire
from sbx.seams.driver import SdkEngine
from tests.support.sbxproc import SBX, run_sbx

from . import test_session_tty as tty
from .conftest import TESTER_UID, FarHost, owned, user_owned

pytestmark = pytest.mark.docker

pane = tty.pane
shell_kit = tty.shell_kit
WAIT_S = 30.0


def wait_until(probe: Callable[[], Any], what: str, timeout: float = WAIT_S) -> Any:
    """The session tests' bounded poll (tty.wait_for), for a probe whose false answer waits."""
    return tty.wait_for(lambda: probe() or None, timeout=timeout, what=lambda: what)


def gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


@contextlib.contextmanager
def sandboxed(words: list[str], kit: Path, env: dict[str, str], engine: SdkEngine,
              state_home: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``sbx run --rm KIT WORDS`` started, once its sandbox exists."""
    with subprocess.Popen([str(SBX), "run", "--rm", str(kit), *words], env=env,
                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE) as client:
        wait_until(lambda: [o for o in owned(engine, state_home) if o.kind == "container"],
                   "the sandbox to exist", timeout=90)
        yield client


@pytest.fixture
def runtime() -> Iterator[Path]:
    """A runtime directory of this test (short: a socket's path has at most 107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="sbxr-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def env(state_home: Path, runtime: Path) -> dict[str, str]:
    environment = {**os.environ, "SBX_HOME": str(state_home), "SBX_CONFIG": os.devnull,
                   "NO_COLOR": "1", "XDG_RUNTIME_DIR": str(runtime)}
    environment.pop("SBX_RESIDENT", None)
    return environment


def status(env: dict[str, str]) -> dict[str, Any]:
    done = run_sbx(["resident", "status", "--json"], env=env)
    assert done.returncode == 0, done.stderr
    data: dict[str, Any] = json.loads(done.stdout)["data"]
    return data


@pytest.fixture
def helper(env: dict[str, str]) -> Iterator[dict[str, Any]]:
    started = run_sbx(["resident", "start", "--idle", "300", "--json"], env=env, timeout=120)
    assert started.returncode == 0, started.stderr
    data: dict[str, Any] = json.loads(started.stdout)["data"]
    assert data["running"] and data["started_now"]
    yield data
    run_sbx(["resident", "stop"], env=env)
    with_pid = data["pid"]
    wait_until(lambda: gone(with_pid), f"the helper {with_pid} to exit")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    (path / "marker").write_text("here\n", encoding="utf-8")
    return user_owned(path)


def test_commands_are_served_with_their_bytes_status_and_directory(
        helper: dict[str, Any], env: dict[str, str], kit_factory: Callable[..., Path],
        workspace: Path) -> None:
    kit = kit_factory("shell", tty.SHELL_KIT)
    before = status(env)
    data = os.urandom(256 * 1024) + b"\0\r\n\x1b[31m" * 64
    echoed = run_sbx(["run", "--rm", str(kit), ".", "--", "cat"], env=env, data=data,
                     cwd=workspace)
    assert echoed.returncode == 0, echoed.stderr
    assert echoed.stdout == data
    failed = run_sbx(["run", "--rm", str(kit), ".", "--", "sh", "-c",
                      "cat /workspace/marker; echo to-stderr >&2; exit 7"], env=env,
                     cwd=workspace)
    assert (failed.returncode, failed.stdout) == (7, b"here\n")
    assert b"to-stderr\n" in failed.stderr
    listed = run_sbx(["ls", "--json"], env=env, cwd=workspace)
    assert listed.returncode == 0 and json.loads(listed.stdout)["status"] == "ok"
    after = status(env)
    assert after["served"] == before["served"] + 3
    assert after["declined"] == before["declined"]
    assert after["child_cpu_s"] > before["child_cpu_s"]


def test_a_caller_unlike_the_helper_runs_the_command_itself(
        helper: dict[str, Any], env: dict[str, str]) -> None:
    before = status(env)
    limited = run_sbx(["ls"], env=env, prefix=["prlimit", "--nofile=512:512", str(SBX)])
    assert limited.returncode == 0, limited.stderr
    middle = status(env)
    assert middle["served"] == before["served"]
    assert middle["last_declined"] == "runs with another limits"
    bypassed = run_sbx(["ls"], env={**env, "SBX_RESIDENT": "0"})
    assert bypassed.returncode == 0, bypassed.stderr
    after = status(env)
    assert after["served"] == before["served"]
    assert after["declined"] == middle["declined"] == before["declined"] + 1


def test_ctrl_c_reaches_the_command_and_everything_it_made_goes(
        helper: dict[str, Any], env: dict[str, str], kit_factory: Callable[..., Path],
        engine: SdkEngine, state_home: Path) -> None:
    kit = kit_factory("shell", tty.SHELL_KIT)
    with sandboxed(["--", "sleep", "60"], kit, env, engine, state_home) as client:
        client.send_signal(signal.SIGINT)
        _out, err = client.communicate(timeout=WAIT_S)
    assert client.returncode == 130, err
    assert b"(interrupted)" in err
    wait_until(lambda: not owned(engine, state_home), "the run's objects to go")


def test_a_killed_caller_hangs_up_its_command(
        helper: dict[str, Any], env: dict[str, str], kit_factory: Callable[..., Path],
        engine: SdkEngine, state_home: Path) -> None:
    kit = kit_factory("shell", tty.SHELL_KIT)
    with sandboxed(["--", "sleep", "60"], kit, env, engine, state_home) as client:
        client.kill()
        client.wait(WAIT_S)
    wait_until(lambda: not owned(engine, state_home), "the hung-up run's objects to go")
    wait_until(lambda: status(env)["commands_running"] == 0, "the helper to reap its fork")


def test_a_killed_helper_loses_no_byte_and_is_replaced(
        helper: dict[str, Any], env: dict[str, str], kit_factory: Callable[..., Path],
        engine: SdkEngine, state_home: Path) -> None:
    kit = kit_factory("shell", tty.SHELL_KIT)
    with sandboxed(["--", "sh", "-c", "echo started; sleep 3; echo done"], kit, env, engine,
                   state_home) as client:
        os.kill(helper["pid"], signal.SIGKILL)
        out, err = client.communicate(timeout=WAIT_S)
    # the fork outlives its helper and reports its own exit status
    assert (client.returncode, out) == (0, b"started\ndone\n"), err
    wait_until(lambda: not owned(engine, state_home), "the run's objects to go")
    assert Path(helper["socket"]).exists()  # left by the killed helper
    listed = run_sbx(["ls"], env=env)  # the stale socket refuses: run here
    assert listed.returncode == 0, listed.stderr
    assert not status(env)["running"]
    again = run_sbx(["resident", "start", "--idle", "300", "--json"], env=env, timeout=120)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["data"]["started_now"]
    helper["pid"] = json.loads(again.stdout)["data"]["pid"]  # stopped by the fixture


def test_another_user_cannot_reach_the_helper(helper: dict[str, Any]) -> None:
    probe = ("import socket, sys\n"
             "s = socket.socket(socket.AF_UNIX)\n"
             "try:\n    s.connect(sys.argv[1])\nexcept PermissionError:\n    sys.exit(13)\n")
    done = subprocess.run(["setpriv", f"--reuid={TESTER_UID}", f"--regid={TESTER_UID}",
                           "--clear-groups", "/usr/bin/python3", "-c", probe, helper["socket"]],
                          capture_output=True, timeout=WAIT_S, check=False)
    assert done.returncode == 13, done.stderr
    directory = Path(helper["socket"]).parent
    assert directory.stat().st_mode & 0o777 == 0o700
    assert Path(helper["socket"]).stat().st_mode & 0o777 == 0o600


def test_a_directory_others_can_enter_is_never_used(env: dict[str, str], runtime: Path) -> None:
    directory = runtime / "sbx"
    directory.mkdir(mode=0o700)
    directory.chmod(0o755)
    refused = run_sbx(["resident", "start"], env=env)
    assert refused.returncode == 125
    assert b"(resident_unavailable)" in refused.stderr and b"chmod 700" in refused.stderr
    assert not list(directory.glob("*.sock"))


def test_changed_code_ends_the_helper(helper: dict[str, Any], env: dict[str, str]) -> None:
    module = Path(__file__).resolve().parents[2] / "cli" / "sbx" / "usecases" / "codeprint.py"
    times = module.stat()
    try:
        os.utime(module, ns=(times.st_atime_ns, times.st_mtime_ns + 1_000_000_000))
        listed = run_sbx(["ls"], env=env)
        assert listed.returncode == 0, listed.stderr
        wait_until(lambda: gone(helper["pid"]), "the helper to exit after the code changed")
    finally:
        os.utime(module, ns=(times.st_atime_ns, times.st_mtime_ns))
    assert not Path(helper["socket"]).exists()


def test_start_replaces_a_helper_of_changed_code(helper: dict[str, Any],
                                                  env: dict[str, str]) -> None:
    module = Path(__file__).resolve().parents[2] / "cli" / "sbx" / "usecases" / "codeprint.py"
    times = module.stat()
    try:
        os.utime(module, ns=(times.st_atime_ns, times.st_mtime_ns + 1_000_000_000))
        again = run_sbx(["resident", "start", "--json"], env=env, timeout=120)
        assert again.returncode == 0, again.stderr
        data = json.loads(again.stdout)["data"]
        assert data["started_now"] and data["pid"] != helper["pid"]
        assert gone(helper["pid"])
        helper["pid"] = data["pid"]  # stopped by the fixture
        assert status(env)["running"]
    finally:
        os.utime(module, ns=(times.st_atime_ns, times.st_mtime_ns))


def test_an_idle_helper_exits(env: dict[str, str]) -> None:
    started = run_sbx(["resident", "start", "--idle", "1", "--json"], env=env, timeout=120)
    assert started.returncode == 0, started.stderr
    data = json.loads(started.stdout)["data"]
    wait_until(lambda: gone(data["pid"]), "the idle helper to exit")
    assert not Path(data["socket"]).exists()
    assert not status(env)["running"]


def test_a_terminal_session_through_the_helper(pane: tty.Pane, shell_kit: Path,
                                               runtime: Path, state_home: Path) -> None:
    pane.type(f"export XDG_RUNTIME_DIR={runtime}; sbx resident start --idle 300 && "
              "echo helper-started")
    pane.wait(r"^helper-started$", timeout=120)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TMUX", "SBX_", "LC_"))}
    env.update({**tty.TERMINAL_ENV, "XDG_RUNTIME_DIR": str(runtime)})
    pid = status(env)["pid"]
    try:
        before = status(env)["served"]
        pane.sbx("a", "kits/shell")
        pane.wait(tty.BUSYBOX_PROMPT)
        pane.ask("stty size", rf"^{tty.ROWS} {tty.COLUMNS}$")
        pane.tmux("resize-window", "-t", pane.name, "-x", "120", "-y", "40")
        pane.ask("stty size", r"^40 120$")
        pane.type('echo "sle""eping"; sleep 100')
        pane.wait(r"^sleeping$")
        pane.keys("C-c")
        pane.type('echo "al""ive"')
        pane.wait(r"^alive$")
        pane.type("exit 7")
        assert pane.status("a") == 7
        saved, restored = pane.settings("a")
        assert saved == restored
        assert status(env)["served"] == before + 1
        # a background job on the terminal runs itself: job control applies to it, and
        # would not to a fork outside the terminal's session
        pane.type(f"SBX_HOME={state_home} SBX_CONFIG=/dev/null sbx ls > listed.txt & wait $!; "
                  "echo bg-rc=$?")
        pane.wait(r"^bg-rc=0$")
        assert (pane.workdir / "listed.txt").read_text(encoding="utf-8").startswith("NAME")
        assert status(env)["served"] == before + 1
    finally:
        os.kill(pid, signal.SIGTERM)
        wait_until(lambda: gone(pid), "the pane's helper to exit")


def test_a_directory_another_user_made_is_never_used(env: dict[str, str], runtime: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("making a directory of another user needs root")
    directory = runtime / "sbx"
    directory.mkdir(mode=0o700)
    os.chown(directory, TESTER_UID, TESTER_UID)
    refused = run_sbx(["resident", "start"], env=env)
    assert refused.returncode == 125
    assert f"belongs to uid {TESTER_UID}".encode() in refused.stderr
    assert b"export XDG_RUNTIME_DIR=" in refused.stderr
    listed = run_sbx(["ls"], env=env)  # the command runs itself, never through that directory
    assert listed.returncode == 0, listed.stderr
    assert not list(directory.iterdir())


def test_a_run_on_a_far_engine_through_the_helper(far_host: FarHost, runtime: Path,
                                                   state_home: Path,
                                                   kit_factory: Callable[..., Path]) -> None:
    kit = kit_factory("shell", tty.SHELL_KIT)
    env = far_host.env(state_home, XDG_RUNTIME_DIR=str(runtime))
    started = run_sbx(["resident", "start", "--idle", "300", "--json"], env=env, timeout=120)
    assert started.returncode == 0, started.stderr
    pid = json.loads(started.stdout)["data"]["pid"]
    try:
        done = run_sbx(["run", str(kit), "--", "sh", "-c", "echo out; echo err >&2; exit 7"],
                       env=env, timeout=180)
        assert (done.returncode, done.stdout) == (7, b"out\n"), done.stderr
        assert done.stderr.endswith(b"err\n")
        assert far_host.containers(state_home) == []
        answer = status(env)
        assert answer["served"] == 1 and answer["commands_running"] == 0
        # the fork, its exit handlers run, left no process of its own behind the helper
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text(encoding="utf-8").split()
        assert children == []
    finally:
        run_sbx(["resident", "stop"], env=env)
        wait_until(lambda: gone(pid), "the helper to exit")


def test_a_fork_that_cannot_take_the_command_gives_it_back(helper: dict[str, Any],
                                                           env: dict[str, str],
                                                           tmp_path: Path) -> None:
    """A request whose directory descriptor is a file (fchdir fails in the fork): the fork
    declines after the accept, before anything of the command ran, and says so."""
    helper_path = json.loads(subprocess.run(
        [sys.executable, "-P", "-c", "import json, sys; print(json.dumps(sys.path))"],
        env=env, capture_output=True, text=True, timeout=WAIT_S, check=True).stdout)
    marker = tmp_path / "not-a-directory"
    marker.write_text("x", encoding="utf-8")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(WAIT_S)
        sock.connect(helper["socket"])
        not_dir = os.open(marker, os.O_RDONLY)
        try:
            wire.send_frame(sock, {
                "op": "run", "argv": ["ls"], "env": env, "argv0": str(SBX), "std": [1, 2],
                "streams": wire.stream_shapes(), "facts": wire.process_facts(),
                "path": [str(SBX.parent), *helper_path], "executable": wire.interpreter()},
                [1, 2, not_dir])
        finally:
            os.close(not_dir)
        accepted = wire.recv_frame(sock)
        assert accepted is not None and accepted[0]["op"] == "accept", accepted
        for fd in accepted[1]:
            os.close(fd)
        wire.send_frame(sock, {"op": "go"})
        answer = wire.recv_frame(sock)
    assert answer is not None and answer[0]["op"] == "decline"
    assert "could not take it" in answer[0]["why"]
    assert status(env)["served"] == 1  # accepted, then given back
