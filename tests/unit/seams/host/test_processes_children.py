"""Host commands sbx runs end whole: on exit, on timeout, on too much output and on an
interrupt, every process they started is gone — in their process group, moved to another group
of their session, or escaped into a session of their own — and a timeout is a reason."""

from __future__ import annotations

import json
import os
import signal
import stat
import sys
import time
from pathlib import Path

import pytest

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.credentials.secretsources import run_command
from sbx.seams import registry_auth
from sbx.seams.driver import registry_credentials
from sbx.seams.host import processes as children

PATH = {"PATH": os.environ["PATH"]}


def _gone_within(pids: list[int], seconds: float = 5.0) -> list[int]:
    """The pids still alive (not zombies) after at most ``seconds``."""
    deadline = time.monotonic() + seconds
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        alive = [pid for pid in alive if _alive(pid)]
        if alive:
            time.sleep(0.05)
    return alive


def _alive(pid: int) -> bool:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return text.rpartition(")")[2].split()[0] != "Z"


def _pids(path: Path) -> list[int]:
    return [int(word) for word in path.read_text().split()]


BACKGROUND = {
    "same group": "sleep 300 & echo $! >> {pids}",
    "own group": (f"{sys.executable} -c 'import os,time; os.setpgid(0, 0); "
                  "open(\"{pids}\", \"a\").write(f\"{{os.getpid()}} \"); time.sleep(300)' &"
                  " sleep 0.5"),
    "own session": "setsid sleep 300 & echo $! >> {pids}; sleep 0.3",
    "double fork": "(sleep 300 & echo $! >> {pids}) & sleep 0.3",
    "nohup, no pipes": "nohup sleep 300 >/dev/null 2>&1 </dev/null & echo $! >> {pids}",
}


@pytest.mark.slow
@pytest.mark.parametrize("how", sorted(BACKGROUND))
def test_what_a_finished_command_left_running_is_killed(tmp_path: Path, how: str) -> None:
    pids = tmp_path / "pids"
    pids.write_text("")
    done = children.run(["/bin/sh", "-c", BACKGROUND[how].format(pids=pids) + "\necho value"],
                        timeout=10, env=PATH)
    assert done.returncode == 0 and done.stdout == b"value\n"
    started = _pids(pids)
    assert started, "the command started nothing"
    assert _gone_within(started) == []


@pytest.mark.slow
@pytest.mark.parametrize("how", sorted(BACKGROUND))
def test_a_command_that_times_out_is_ended_whole(tmp_path: Path, how: str) -> None:
    pids = tmp_path / "pids"
    pids.write_text("")
    script = BACKGROUND[how].format(pids=pids) + f"\necho $$ >> {pids}\nsleep 300"
    with pytest.raises(children.CommandTimeout) as raised:
        children.run(["/bin/sh", "-c", script], timeout=2, env=PATH)
    assert "did not finish within 2s" in str(raised.value)
    assert _gone_within(_pids(pids)) == []


def test_a_command_that_prints_without_end_is_ended(tmp_path: Path) -> None:
    done = children.run(["/bin/sh", "-c", "yes"], timeout=10, max_output=100_000)
    assert done.overflow and len(done.stdout) > 100_000
    assert done.returncode == -signal.SIGKILL


@pytest.mark.slow
def test_an_interrupt_ends_the_command_whole(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    pids.write_text("")

    def interrupt(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 1.0)
    try:
        with pytest.raises(KeyboardInterrupt):
            children.run(["/bin/sh", "-c", f"sleep 300 & echo $! $$ >> {pids}; wait"],
                         timeout=30, env=PATH)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert _gone_within(_pids(pids)) == []


def test_input_reaches_the_command_and_output_comes_back() -> None:
    done = children.run(["/bin/sh", "-c", "tr a-z A-Z; echo err >&2; exit 3"], timeout=10,
                        input_data=b"hello\n", env=PATH)
    assert (done.returncode, done.stdout, done.stderr) == (3, b"HELLO\n", b"err\n")


# -- a secret's --from-command ------------------------------------------------------------------


def test_a_secret_command_that_backgrounds_a_child_leaves_nothing(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    value = run_command("github", f"sleep 300 & echo $! > {pids}; echo tok-123",
                        PATH)
    assert value == "tok-123"
    assert _gone_within(_pids(pids)) == []


@pytest.mark.slow
def test_a_secret_command_timeout_is_a_reason(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    with pytest.raises(SbxError) as raised:
        run_command("github", f"setsid sleep 300 & echo $! > {pids}; sleep 300", PATH,
                    timeout=1)
    assert raised.value.reason is Reason.COMMAND_TIMEOUT
    assert "did not finish within 1s" in raised.value.message
    assert _gone_within(_pids(pids)) == []


# -- Docker credential helpers --------------------------------------------------------------


def _helper(tmp_path: Path, name: str, body: str) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    helper = bin_dir / f"docker-credential-{name}"
    helper.write_text("#!/bin/sh\n" + body + "\n")
    helper.chmod(helper.stat().st_mode | stat.S_IXUSR)
    config = tmp_path / "docker"
    config.mkdir(exist_ok=True)
    (config / "config.json").write_text(json.dumps({"credsStore": name}))
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}", "DOCKER_CONFIG": str(config),
            "HOME": str(tmp_path)}


@pytest.mark.slow
def test_a_credential_helper_that_hangs_is_ended_with_a_reason(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry_credentials, "HELPER_TIMEOUT_S", 1.0)
    pids = tmp_path / "pids"
    env = _helper(tmp_path, "hang", f"sleep 300 & echo $! > {pids}\nexec sleep 301")
    monkeypatch.setenv("PATH", env["PATH"])  # the SDK looks helpers up on the process's PATH
    with pytest.raises(SbxError) as raised:
        registry_auth.resolve("registry.example:5000", env)
    assert raised.value.reason is Reason.COMMAND_TIMEOUT
    assert "docker-credential-hang did not finish within 1s" in raised.value.message
    assert _gone_within(_pids(pids)) == []


def test_a_credential_helper_still_answers(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    pids = tmp_path / "pids"
    env = _helper(tmp_path, "good", f"read host; sleep 300 & echo $! > {pids}\n"
                  'echo "{\\"Username\\": \\"me\\", \\"Secret\\": \\"pw-$host\\"}"')
    monkeypatch.setenv("PATH", env["PATH"])
    found = registry_auth.resolve("registry.example:5000", env)
    assert found is not None
    assert (found.username, found.password) == ("me", "pw-registry.example:5000")
    assert _gone_within(_pids(pids)) == []


def test_a_child_of_sbx_that_exited_before_is_left_to_its_owner() -> None:
    """Adopting what a command left must never reap one of sbx's own children (an exited
    proxy not waited for yet): its owner still reads its real status."""
    import subprocess

    own = subprocess.Popen(["/bin/sh", "-c", "exit 7"])
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _alive(own.pid):
        time.sleep(0.02)
    children.run(["/bin/sh", "-c", "sleep 300 & echo x"], timeout=10, env=PATH)
    assert own.wait(timeout=5) == 7
