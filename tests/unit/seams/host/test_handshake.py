"""Host I/O sits behind sbx.seams.host: ``subprocess`` is imported in one module, ``ctypes`` only
where libc is called, and the domain and use cases neither start, signal nor read /proc
themselves. The programs sbx starts (proxy, keeper) each have one start/ready handshake, used by
both sides, started for real here."""

from __future__ import annotations

import ast
import errno
import functools
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from sbx.seams.host import processes
from sbx.seams.host.handshake import KEEPER, PROXY, Handshake

PACKAGE = Path(__file__).resolve().parents[4] / "cli" / "sbx"

# module (relative to cli/sbx) -> why it may import the module named
ALLOWED: dict[str, dict[str, str]] = {
    "subprocess": {
        "seams/host/processes.py": "the one place sbx starts host processes",
    },
    "ctypes": {
        "seams/host/processes.py": "prctl: sbx as the subreaper of the commands it runs",
        "seams/host/mounts.py": "libc mount/umount2 for staging",
    },
}
# Calls that start, replace or signal processes: only the host seams make them.
PROCESS_CALLS = {"kill", "killpg", "fork", "forkpty", "system", "popen", "execv", "execve",
                 "execvp", "execvpe", "execl", "execle", "execlp", "execlpe", "spawnv",
                 "spawnve", "spawnvp", "spawnvpe", "posix_spawn", "posix_spawnp", "pidfd_open"}
NO_HOST_IO = ("domain/", "usecases/", "views/", "commands/", "base/")


@dataclass(frozen=True)
class _Facts:
    imports: frozenset[str]  # top-level modules imported anywhere (function-local too)
    os_calls: tuple[tuple[int, str], ...]  # (line, name) of os.<name> for PROCESS_CALLS
    strings: tuple[tuple[int, str], ...]  # code string literals (docstrings left out)


@functools.cache
def _package() -> dict[str, _Facts]:
    """One parse of every module of cli/sbx, by path relative to it."""
    facts: dict[str, _Facts] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {id(node.value) for node in ast.walk(tree)
                      if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}
        imports: set[str] = set()
        calls: list[tuple[int, str]] = []
        strings: list[tuple[int, str]] = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                imports.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                imports.add(node.module.split(".")[0])
            elif isinstance(node, ast.Attribute) and node.attr in PROCESS_CALLS \
                    and isinstance(node.value, ast.Name) and node.value.id == "os":
                calls.append((node.lineno, node.attr))
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and id(node) not in docstrings:
                strings.append((node.lineno, node.value))
        facts[path.relative_to(PACKAGE).as_posix()] = _Facts(frozenset(imports), tuple(calls),
                                                             tuple(strings))
    return facts


@pytest.mark.slow
def test_the_seams_fixture_sees_the_whole_package() -> None:
    modules = _package()
    assert "subprocess" in modules["seams/host/processes.py"].imports
    assert "ctypes" in modules["seams/host/mounts.py"].imports
    assert any(text.startswith("/proc/") for _, text
                                      in modules["seams/host/procfs.py"].strings)
    assert len(modules) > 150


@pytest.mark.parametrize("name", sorted(ALLOWED))
def test_only_the_host_seams_import(name: str) -> None:
    found = {path for path, facts in _package().items() if name in facts.imports}
    assert found == set(ALLOWED[name]), f"{name} imported outside its seam: " \
        f"{sorted(found - set(ALLOWED[name]))}; missing: {sorted(set(ALLOWED[name]) - found)}"


def test_the_layers_above_the_seams_start_signal_and_read_proc_through_them() -> None:
    problems: list[str] = []
    for path, facts in _package().items():
        if not path.startswith(NO_HOST_IO):
            continue
        problems += [f"{path}:{line}: os.{name}" for line, name in facts.os_calls]
        # An f-string's leading part is a literal of its own: f"/proc/{pid}" is seen too.
        problems += [f"{path}:{line}: reads {text!r}" for line, text in facts.strings
                     if text.startswith("/proc/")]
    assert not problems, "host I/O outside sbx.seams.host:\n" + "\n".join(problems)


def test_each_ready_prefix_is_written_once_in_code() -> None:
    """The programs and their starters share one Handshake: no second spelling of a prefix."""
    for prefix in (PROXY.ready_prefix, KEEPER.ready_prefix):
        places = [path for path, facts in _package().items()
                  for _, text in facts.strings if prefix in text]
        assert places == ["seams/host/handshake.py"], (prefix, places)


@pytest.mark.parametrize("handshake", [PROXY, KEEPER], ids=["proxy", "keeper"])
def test_the_ready_line_round_trips_and_nothing_else_parses(handshake: Handshake) -> None:
    numbers = tuple(range(3128, 3128 + handshake.ready_fields))
    line = handshake.ready_line(*numbers)
    assert line.endswith("\n") and "  " not in line
    assert handshake.parse_ready(line.encode()) == numbers
    other = KEEPER if handshake is PROXY else PROXY
    for wrong in (b"", b"\n", handshake.ready_prefix.encode(),
                  other.ready_line(*range(other.ready_fields)).encode(),
                  f"{handshake.ready_prefix}X 1 2".encode(),
                  f"{handshake.ready_prefix} 12ab 7".encode(),
                  f"{handshake.ready_prefix} {' '.join(['1'] * (handshake.ready_fields - 1))}"
                  .encode()):
        assert handshake.parse_ready(wrong) is None, wrong
    with pytest.raises(ValueError, match="numbers"):
        handshake.ready_line(*numbers, 1)


def test_the_programs_run_as_their_own_top_level_packages() -> None:
    assert PROXY.argv("c.json", "run-1") == [sys.executable, "-m", "sbx.proxy", "c.json", "run-1"]
    assert KEEPER.argv("dir", "run-1")[1:3] == ["-m", "sbx.keeper"]
    for handshake in (PROXY, KEEPER):
        assert (PACKAGE / handshake.module.split(".")[1] / "__main__.py").is_file()
    # A keeper an earlier release started is still recognised (sbx stop/rm can end it).
    assert KEEPER.runs_as([b"python3", b"-m", b"sbx.usecases.keeper", b"dir", b"run-1"])
    assert KEEPER.runs_as([b"python3", b"-m", b"sbx.keeper", b"dir", b"run-1"])
    assert not KEEPER.runs_as([b"python3", b"-m", b"sbx.proxy", b"dir", b"run-1"])


# -- start_program, for real ------------------------------------------------------------------


def _program(tmp_path: Path, body: str) -> tuple[Handshake, dict[str, str]]:
    """A program ``python -m sbxtestprog`` with ``body``; the environment to find it."""
    (tmp_path / "sbxtestprog.py").write_text(f"import os, sys, time\n{body}\n")
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(tmp_path)}
    return Handshake("sbxtestprog", "TEST-READY", 2), env


def test_a_program_gets_its_owner_line_and_is_ready(tmp_path: Path) -> None:
    handshake, env = _program(tmp_path, (
        "line = sys.stdin.readline().strip()\n"
        "open(sys.argv[1], 'w').write(line)\n"
        "print('TEST-READY 7 ' + str(os.getpid()), flush=True)\n"
        "sys.stdin.read()\n"  # until the owner pipe closes
        "sys.stderr.write('owner gone')\n"))
    seen = tmp_path / "seen"
    program = processes.start_program(handshake, (str(seen),), owner_line=b"token|x\n",
                                      log=tmp_path / "log", env=env, ready_timeout=20)
    assert program is not None
    try:
        assert program.ready == (7, program.pid) and program.alive()
        assert seen.read_text() == "token|x"
    finally:
        program.close_owner_pipe()
        deadline = time.monotonic() + 10
        while program.alive() and time.monotonic() < deadline:
            time.sleep(0.02)
        program.stop(5)
    assert not program.alive()
    assert (tmp_path / "log").read_text() == "owner gone"  # it saw EOF, not a signal


def test_a_program_that_never_gets_ready_is_killed_and_reaped(tmp_path: Path) -> None:
    handshake, env = _program(tmp_path, (
        "open(sys.argv[1], 'w').write(str(os.getpid()))\n"
        "print('NOT-READY 1 2', flush=True)\n"
        "time.sleep(60)\n"))
    pid_file = tmp_path / "pid"
    assert processes.start_program(handshake, (str(pid_file),), owner_line=b"\n",
                                   log=tmp_path / "log", env=env, ready_timeout=20) is None
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # killed, and reaped (no zombie keeps the pid)


@pytest.mark.slow
def test_a_program_silent_past_its_timeout_is_not_ready(tmp_path: Path) -> None:
    handshake, env = _program(tmp_path, "time.sleep(60)")
    started = time.monotonic()
    assert processes.start_program(handshake, (), owner_line=b"\n", log=tmp_path / "log",
                                   env=env, ready_timeout=0.5) is None
    assert time.monotonic() - started < 30


def test_a_detached_program_keeps_running_without_its_owner_pipe(tmp_path: Path) -> None:
    """The keeper's way: the owner line, then stdin and stdout closed; it runs on."""
    handshake, env = _program(tmp_path, (
        "line = sys.stdin.readline()\n"
        "print('TEST-READY 1 2', flush=True)\n"
        "time.sleep(60)\n"))
    program = processes.start_program(handshake, (), owner_line=b"t\n", log=tmp_path / "log",
                                      env=env, ready_timeout=20, keep_owner_pipe=False)
    assert program is not None
    try:
        assert program.process.stdin is not None and program.process.stdin.closed
        time.sleep(0.2)
        assert program.alive()
        assert os.getsid(program.pid) == program.pid  # a session of its own
    finally:
        processes.send_signal(program.pid, signal.SIGKILL)
        program.process.wait(10)


def test_cmdline_and_liveness_of_processes_sbx_did_not_start() -> None:
    args = processes.cmdline(os.getpid())
    assert args is not None and any(b"python" in arg for arg in args)
    assert processes.pid_alive(os.getpid()) and not processes.pid_alive(0)
    assert processes.cmdline(2**22 + 12345) is None


# -- mounts: what a failure of the tools and of libc becomes ----------------------------------


def test_remounting_a_missing_volume_file_is_create_failed_with_its_fix(tmp_path: Path) -> None:
    from sbx.base.errors import SbxError
    from sbx.base.reasons import Reason
    from sbx.domain.sandbox.sources import Staging

    staging = Staging(tmp_path / "home" / "run")
    (tmp_path / "home").mkdir()
    with pytest.raises(SbxError) as caught:
        staging.remount_filesystem(tmp_path / "gone.img")  # mount(8) exits non-zero
    assert caught.value.reason is Reason.CREATE_FAILED
    assert f"could not mount the volume file system {tmp_path / 'gone.img'}: " \
        in caught.value.message
    assert "sbx rm" in (caught.value.hint or "")
    assert staging.release() == []  # the point it made is gone again


def test_unmounting_what_is_not_mounted_is_an_errno_not_an_exception(tmp_path: Path) -> None:
    from sbx.seams.host import mounts

    code = mounts.detach(tmp_path)  # a plain directory: nothing is mounted there
    assert code in ((errno.EINVAL,) if os.geteuid() == 0 else (errno.EPERM, errno.EINVAL))
