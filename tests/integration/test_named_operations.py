"""The operations on named sandboxes a Docker sbx user expects, on a real engine: `sbx start
NAME` without the workload, `stop -t SECONDS` (the grace before SIGKILL), `logs --tail N`,
`exec` on a stopped sandbox (it is started, and said so), run ids wherever a name is taken (a
one-shot run's id only by `stop`), and `rm --all [--json]`."""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from sbx.base import labels
from sbx.seams.driver import SdkEngine
from tests.support.sbxproc import SBX, Finished, run_sbx

from .conftest import BUSYBOX, make_kit, owned

pytestmark = pytest.mark.docker

WAIT_S = 60.0
# Five lines, then wait; on SIGTERM take 3 s to finish cleanly (so a grace shorter than that
# ends in SIGKILL, exit 137, and a longer one in a clean exit 0 after "graceful").
WORKLOAD = ("trap 'sleep 3; echo graceful; exit 0' TERM; for i in 1 2 3 4 5; do echo line$i; "
            "done; while :; do sleep 1 & wait; done")


@pytest.fixture
def env(state_home: Path) -> dict[str, str]:
    return {**os.environ, "SBX_HOME": str(state_home), "SBX_CONFIG": os.devnull}


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_kit(tmp_path_factory.mktemp("kits"), "ops",
                    f"FROM {BUSYBOX}\nUSER agent\nWORKDIR /workspace\nCMD [\"sh\"]\n")


def sbx(env: dict[str, str], *args: str, timeout: float = 120) -> Finished:
    return run_sbx(list(args), env=env, timeout=timeout)


def ls(env: dict[str, str], *extra: str) -> dict[str, dict[str, Any]]:
    done = sbx(env, "ls", "--json", *extra)
    assert done.returncode == 0, done.stderr
    return {s["name"]: s for s in json.loads(done.stdout)["data"]["sandboxes"]}


def _exit_code(name: str) -> int:
    found = subprocess.run(["docker", "ps", "-aq", "--filter", f"label={labels.NAME}={name}",
                            "--filter", f"label={labels.ROLE}={labels.ROLE_SANDBOX}"],
                           capture_output=True, text=True, timeout=30, check=True)
    [container] = found.stdout.split()
    state = subprocess.run(["docker", "inspect", "-f", "{{.State.ExitCode}}", container],
                           capture_output=True, text=True, timeout=30, check=True)
    return int(state.stdout.strip())


def log(env: dict[str, str], *args: str) -> bytes:
    """`sbx logs ARGS`' output; a named sandbox has a terminal, whose lines end in CR LF."""
    done = sbx(env, "logs", *args)
    assert done.returncode == 0, done.stderr
    return done.stdout.replace(b"\r\n", b"\n")


def _wait_for_logs(env: dict[str, str], name: str, text: bytes) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if text in log(env, name):
            return
        time.sleep(0.2)
    pytest.fail(f"{text!r} never reached {name}'s log")


def test_start_stop_grace_tail_and_exec_on_a_stopped_sandbox(env: dict[str, str], kit: Path,
                                                             cleanup: list[str]) -> None:
    name = f"ops-{uuid.uuid4().hex[:8]}"
    cleanup.append(name)
    created = sbx(env, "run", "--name", name, "-d", str(kit), "--", "sh", "-c", WORKLOAD)
    assert created.returncode == 0, created.stderr
    _wait_for_logs(env, name, b"line5\n")
    # logs --tail N / -n N: the last N lines only.
    assert log(env, "--tail", "2", name) == b"line4\nline5\n"
    assert log(env, "-n", "1", name) == b"line5\n"
    assert log(env, "-n", "0", name) == b""
    refused = sbx(env, "logs", "--tail", "-1", name)
    assert refused.returncode == 2 and b"invalid_argument" in refused.stderr
    # stop -t 0: no grace, the 3-second TERM handler is killed (137).
    stopped = sbx(env, "stop", "-t", "0", name)
    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stdout.decode() == f"{name}\n"
    assert ls(env)[name]["status"] == "exited" and _exit_code(name) == 137
    # sbx start NAME: no workload given; the same container, running again.
    started = sbx(env, "start", name)
    assert started.returncode == 0, started.stderr
    assert started.stdout.decode() == f"{name}\n" and ls(env)[name]["status"] == "running"
    again = sbx(env, "start", name)
    assert again.returncode == 0 and b"running already" in again.stderr
    # stop -t 30: the handler has its 3 s and exits cleanly.
    _wait_for_logs(env, name, b"line5\nline1\n")  # the second start's output
    assert sbx(env, "stop", "-t", "30", name).returncode == 0
    assert _exit_code(name) == 0 and b"graceful" in log(env, name)
    # exec on a stopped sandbox starts it, and says so on stderr only.
    done = sbx(env, "exec", name, "--", "echo", "hi")
    assert done.returncode == 0, done.stderr
    assert done.stdout.replace(b"\r\n", b"\n") == b"hi\n"
    assert f"{name} was stopped: started it".encode() in done.stderr
    assert ls(env)[name]["status"] == "running"
    assert b"was stopped" not in sbx(env, "exec", name, "--", "true").stderr


def test_run_ids_are_taken_where_names_are(env: dict[str, str], kit: Path, cleanup: list[str],
                                           engine: SdkEngine, state_home: Path) -> None:
    name = f"ids-{uuid.uuid4().hex[:8]}"
    cleanup.append(name)
    assert sbx(env, "run", "--name", name, "-d", str(kit), "--", "sh", "-c",
               WORKLOAD).returncode == 0
    run_id = ls(env)[name]["run_id"]
    assert len(run_id) == 32
    _wait_for_logs(env, name, b"line5\n")
    assert log(env, "-n", "1", run_id[:12]) == b"line5\n"
    assert sbx(env, "exec", run_id, "--", "echo", "by id").stdout == b"by id\n"
    assert sbx(env, "stop", "-t", "0", run_id[:12]).stdout.decode() == f"{run_id[:12]}\n"
    assert ls(env)[name]["status"] == "exited"
    assert sbx(env, "start", run_id[:12]).stdout.decode() == f"{name}\n"
    short = sbx(env, "logs", run_id[:8])  # shorter than ls shows: not an id, no such name
    assert short.returncode == 2 and b"no sandbox named" in short.stderr
    # A one-shot run: its id stops it, and nothing else takes it.
    one_shot = subprocess.Popen([str(SBX), "run", str(kit), "--", "sleep", "600"], env=env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + WAIT_S
        runs: list[dict[str, Any]] = []
        while not runs and time.monotonic() < deadline:
            runs = [s for s in ls(env, "--all").values() if s["name"].startswith("(run ")
                    and s["status"] == "running"]
            time.sleep(0.2)
        assert runs, "the one-shot run never showed in `sbx ls --all`"
        run = runs[0]["run_id"]
        for command in (["exec", run[:12], "--", "true"], ["logs", run[:12]],
                        ["attach", run], ["start", run[:12]], ["rm", "-f", run[:12]]):
            refused = sbx(env, *command)
            assert refused.returncode == 2, (command, refused.stderr)
            assert b"one-shot run" in refused.stderr and b"sbx stop" in refused.stderr
        stopped = sbx(env, "stop", "-t", "0", run[:12])
        assert stopped.returncode == 0, stopped.stderr
        one_shot.wait(timeout=WAIT_S)
        assert one_shot.returncode in (137, 143)  # its sleep ended by the stop's signal
    finally:
        if one_shot.poll() is None:
            one_shot.kill()
            one_shot.wait(timeout=WAIT_S)
        for pipe in (one_shot.stdout, one_shot.stderr):
            if pipe is not None:
                pipe.close()
    assert [o for o in owned(engine, state_home)
            if labels.value(o.labels, labels.NAME) is None and o.kind == "container"] == []


def test_rm_all_removes_every_named_sandbox_and_says_which(
        env: dict[str, str], kit: Path, cleanup: list[str], engine: SdkEngine,
        state_home: Path) -> None:
    names = sorted(f"all-{i}-{uuid.uuid4().hex[:6]}" for i in range(2))
    cleanup.extend(names)
    for each in names:
        assert sbx(env, "run", "--name", each, "-d", str(kit), "--", "sleep",
                   "600").returncode == 0
    assert sbx(env, "stop", "-t", "0", names[0]).returncode == 0  # stopped ones go too
    both = sbx(env, "rm", "--all", "a-name")
    assert both.returncode == 2 and b"not both" in both.stderr
    unasked = sbx(env, "rm", "--all")
    assert unasked.returncode == 2 and b"-f" in unasked.stderr and set(ls(env)) == set(names)
    done = sbx(env, "rm", "--all", "-f", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["data"]["removed"] == names
    assert ls(env) == {} and owned(engine, state_home) == []
    empty = sbx(env, "rm", "--all", "-f")
    assert empty.returncode == 0 and empty.stdout == b""
    assert b"no named sandboxes" in empty.stderr
