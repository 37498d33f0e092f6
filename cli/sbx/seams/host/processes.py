"""The one place sbx starts host processes (the only ``subprocess`` import of the package).

**Commands** sbx runs and waits for (a secret's ``--from-command``, Docker credential
helpers, mkfs and mount, iptables): each starts a session of its own, and when it ends — it
exited, its time ran out, it printed too much, or sbx is interrupted — the whole session is
killed, so nothing it started in the background outlives it.

A command is done when its first process exits: what it left running is killed then too, and
its output pipes close with it. The first process is reaped only after its session was killed,
so its pid (the session's and the group's id) cannot be reused by another process meanwhile.
While a command runs, sbx is its descendants' subreaper (Linux ``PR_SET_CHILD_SUBREAPER``): a
process that left the session (``setsid``) is handed to sbx when its parent dies, and is
killed with its own session then. What survives is a command's process whose parent outlives
sbx's kill, or one that sbx's own SIGKILL leaves behind (the README's residual risk).

**Programs** sbx starts and owns (the egress proxy, a named sandbox's keeper): started with
:func:`start_program` through their :class:`~sbx.seams.host.handshake.Handshake`, the one
start/ready exchange each has. Their stdin is the owner pipe; they run until stopped.

Processes sbx did not start are only looked at and signalled here: :func:`pid_alive`,
:func:`cmdline`, :func:`send_signal`.
"""

from __future__ import annotations

import contextlib
import functools
import os
import select
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from sbx.seams.host.handshake import Handshake

# What callers catch without importing subprocess themselves.
CalledProcessError = subprocess.CalledProcessError
SubprocessError = subprocess.SubprocessError
TimeoutExpired = subprocess.TimeoutExpired
Popen = subprocess.Popen

DRAIN_S: Final = 1.0  # after the first process exits: what is still in the pipes
_POLL_S: Final = 0.05
_KILL_ROUNDS: Final = 50
_PR_SET_CHILD_SUBREAPER: Final = 36
_PR_GET_CHILD_SUBREAPER: Final = 37


@dataclass(frozen=True)
class Finished:
    returncode: int
    stdout: bytes
    stderr: bytes
    overflow: bool = False  # it printed more than max_output: killed, the rest unread


class CommandTimeout(subprocess.TimeoutExpired):
    """The command did not finish within its time; its whole session was killed."""

    def __init__(self, argv: Sequence[str], seconds: float) -> None:
        super().__init__(list(argv), seconds)

    def __str__(self) -> str:
        return f"{self.cmd[0]} did not finish within {self.timeout:g}s"


def run(argv: Sequence[str], *, timeout: float, input_data: bytes | None = None,
        env: Mapping[str, str] | None = None, max_output: int = 1024 * 1024,
        keep_stderr: bool = True, check: bool = False) -> Finished:
    """Run ``argv`` in a new session and wait for it, at most ``timeout`` seconds; raises
    :class:`CommandTimeout` (a ``subprocess.TimeoutExpired``, after killing the session),
    OSError (it could not start) and, with ``check``, ``subprocess.CalledProcessError``."""
    with _Adoption() as adoption:
        process = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE if input_data is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE if keep_stderr else subprocess.DEVNULL,
            env=dict(env) if env is not None else None, start_new_session=True, close_fds=True)
        outputs = {"stdout": bytearray(), "stderr": bytearray()}
        ended = False
        try:
            if input_data is not None and process.stdin is not None:
                _feed(process, input_data, time.monotonic() + timeout)
            overflow = _collect(process, adoption, outputs, time.monotonic() + timeout,
                                max_output)
            ended = overflow is False
            if overflow is None:
                raise CommandTimeout(argv, timeout)
        finally:
            if not ended:  # a timeout, too much output, an interrupt: end it all now
                killed = end_session(process.pid) > 0
                status = process.wait()
                adoption.sweep(process.pid, killed=killed)
            else:
                status = process.wait()
            for pipe in (process.stdin, process.stdout, process.stderr):
                if pipe is not None:
                    with contextlib.suppress(OSError):
                        pipe.close()
    if check and status != 0:
        raise subprocess.CalledProcessError(status, list(argv), bytes(outputs["stdout"]),
                                            bytes(outputs["stderr"]))
    return Finished(status, bytes(outputs["stdout"]), bytes(outputs["stderr"]), overflow)


class _Adoption:
    """sbx as the subreaper of what it starts, for as long as inside: afterwards, children it
    did not have before (processes that escaped a command's session and were orphaned) are
    killed with their sessions and reaped."""

    def __init__(self) -> None:
        self.before: set[int] = set()
        self.previous: int | None = None

    def __enter__(self) -> _Adoption:
        self.previous = _subreaper(None)
        if self.previous is not None and not self.previous:
            _subreaper(1)
        # Zombies too: a child of sbx's own that exited (not reaped yet) is never taken.
        self.before = {pid for pid, _sid in _processes(parent=os.getpid(), zombies=True)}
        return self

    def __exit__(self, *_exc: object) -> None:
        if self.previous is not None and not self.previous:
            _subreaper(0)

    def sweep(self, command: int, *, killed: bool = True) -> None:
        """Kill and reap the processes handed to sbx since it entered. ``killed``: processes
        of the command were just killed, so orphans may still be on their way."""
        if self.previous is None:
            return  # not Linux: nothing is handed to sbx
        quiet = 0
        for _ in range(_KILL_ROUNDS):
            adopted = [(pid, sid) for pid, sid in _processes(parent=os.getpid(), zombies=True)
                       if pid not in self.before and pid != command]
            for pid, sid in adopted:
                if sid == pid:
                    end_session(pid)
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, 0)
            if not adopted and not killed:
                return
            # An orphan is handed over only once its parent is gone: look again.
            killed = bool(adopted)
            quiet = 0 if adopted else quiet + 1
            if quiet >= 2:
                return
            time.sleep(0.005)


def _subreaper(value: int | None) -> int | None:
    """Set this process's child-subreaper attribute (None: only read it); its value before,
    None where prctl is not available."""
    prctl = _prctl()
    if prctl is None:
        return None
    import ctypes

    current = ctypes.c_int(0)
    if prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(current), 0, 0, 0) != 0:
        return None
    if value is not None and prctl(_PR_SET_CHILD_SUBREAPER, value, 0, 0, 0) != 0:
        return None
    return current.value


@functools.cache
def _prctl() -> Any:
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def _feed(process: subprocess.Popen[bytes], data: bytes, deadline: float) -> None:
    """Write ``data`` to the command's stdin and close it, within the deadline."""
    assert process.stdin is not None  # noqa: S101 -- stdin=PIPE when data is given
    fd = process.stdin.fileno()
    os.set_blocking(fd, False)
    view = memoryview(data)
    with contextlib.suppress(BrokenPipeError):
        while view:
            left = deadline - time.monotonic()
            if left <= 0:
                return  # the output side reports the timeout
            _, ready, _ = select.select([], [fd], [], min(left, _POLL_S))
            if ready:
                view = view[os.write(fd, view):]
    with contextlib.suppress(OSError):
        process.stdin.close()


def _collect(process: subprocess.Popen[bytes], adoption: _Adoption,
             outputs: dict[str, bytearray], deadline: float, max_output: int) -> bool | None:
    """Read stdout and stderr until the first process exits, then end its session and take
    what is left in the pipes (briefly). True when the output went over ``max_output`` (the
    session is not ended yet), None when the deadline passed first (nor then), False once the
    command finished and its session was ended."""
    pipes = {pipe.fileno(): name for name, pipe in (("stdout", process.stdout),
                                                   ("stderr", process.stderr)) if pipe}
    exit_fd = _exit_fd(process.pid)
    exited_at: float | None = None
    try:
        while pipes or exited_at is None:
            now = time.monotonic()
            if exited_at is None and _exited(process.pid):
                exited_at = now
                # Background children: their pipes close with them.
                adoption.sweep(process.pid, killed=end_session(process.pid) > 0)
            if exited_at is not None and now - exited_at > DRAIN_S:
                break
            if now >= deadline:
                return None
            watched = list(pipes) + ([exit_fd] if exit_fd is not None and exited_at is None
                                     else [])
            wait = min(deadline - now, _POLL_S if exit_fd is None else DRAIN_S)
            ready, _, _ = select.select(watched, [], [], wait) if watched else ([], [], [])
            if not watched:
                time.sleep(min(wait, _POLL_S))
            for fd in ready:
                if fd == exit_fd:
                    continue  # seen by _exited on the next turn
                data = os.read(fd, 65536)
                if not data:
                    del pipes[fd]
                    continue
                outputs[pipes[fd]] += data
                if sum(len(value) for value in outputs.values()) > max_output:
                    return True
    finally:
        if exit_fd is not None:
            os.close(exit_fd)
    return False


def _exit_fd(pid: int) -> int | None:
    """A descriptor that becomes readable when ``pid`` exits (Linux 5.3+), else None (then
    the exit is polled)."""
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        fd: int = opener(pid)
    except OSError:
        return None
    return fd


def _exited(pid: int) -> bool:
    """Whether ``pid`` (a child) has exited, without reaping it (its pid stays reserved)."""
    try:
        found = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return found is not None and found.si_pid == pid


def end_session(sid: int) -> int:
    """Kill every process of the session ``sid`` (the pid of a child started with
    ``start_new_session``): its process group at once, then any member that moved to another
    group, until none is left (bounded). Returns how many live processes it found."""
    killed = 0
    for _ in range(_KILL_ROUNDS):
        members = [pid for pid in session_members(sid) if pid != sid or not _exited(pid)]
        if not members:
            return killed
        killed += len(members)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(sid, signal.SIGKILL)
        for pid in members:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.005)
    return killed


def session_members(sid: int) -> list[int]:
    """Live (non-zombie) processes whose session is ``sid``, from /proc."""
    return [pid for pid, _sid in _processes(session=sid)]


def _processes(*, session: int | None = None, parent: int | None = None,
               zombies: bool = False) -> list[tuple[int, int]]:
    """(pid, session) of the processes in ``session`` or with ``parent``, from /proc."""
    found: list[tuple[int, int]] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            fd = os.open(f"/proc/{entry}/stat", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            text = os.read(fd, 1024)
        except OSError:
            continue
        finally:
            os.close(fd)
        # pid (comm) state ppid pgrp session ...: comm may hold spaces and parentheses.
        fields = text.rpartition(b")")[2].split()
        if len(fields) < 4 or (fields[0] == b"Z" and not zombies):
            continue
        ppid, sid = int(fields[1]), int(fields[3])
        if (session is None or sid == session) and (parent is None or ppid == parent):
            found.append((int(entry), sid))
    return found


# -- programs sbx starts and owns -------------------------------------------------------------


_READY_POLL_S: Final = 0.1


@dataclass
class Program:
    """A program sbx started (:func:`start_program`): its stdin is the owner pipe while open."""

    process: subprocess.Popen[bytes]
    ready: tuple[int, ...] = ()  # the numbers of its ready line
    stopped: bool = field(default=False)

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def send_signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def close_owner_pipe(self) -> None:
        """EOF on the program's stdin: the sign that its owner is gone."""
        stdin = self.process.stdin
        if stdin is not None and not stdin.closed:
            with contextlib.suppress(OSError):
                stdin.close()

    def stop(self, timeout: float) -> None:
        """Close the owner pipe, then SIGTERM and (after ``timeout``) SIGKILL; reaped."""
        if self.stopped:
            return
        self.stopped = True
        self.close_owner_pipe()
        if self.alive():
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout)
        if self.process.stdout is not None:
            self.process.stdout.close()


def start_program(handshake: Handshake, args: Sequence[str], *, owner_line: bytes, log: Path,
                  append_log: bool = False, env: Mapping[str, str], ready_timeout: float,
                  keep_owner_pipe: bool = True, stop_timeout: float = 5.0) -> Program | None:
    """Start ``handshake``'s program with ``args`` in a session of its own, write
    ``owner_line`` on its stdin (kept open as the owner pipe, or closed when not
    ``keep_owner_pipe``) and wait for its ready line, at most ``ready_timeout`` seconds.
    None when no valid ready line came: the program was killed and reaped then."""
    with log.open("ab" if append_log else "wb") as stderr:
        process = subprocess.Popen(
            handshake.argv(*args), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=stderr, env=dict(env), start_new_session=True)
    assert process.stdin is not None and process.stdout is not None  # noqa: S101 - PIPEs
    program = Program(process)
    try:
        process.stdin.write(owner_line)
        process.stdin.flush()
    except OSError:
        pass  # it died already: the ready line below never comes, and that is reported
    if not keep_owner_pipe:
        program.close_owner_pipe()
    deadline = time.monotonic() + ready_timeout
    line = b""
    while time.monotonic() < deadline and process.poll() is None:
        readable, _, _ = select.select([process.stdout], [], [], _READY_POLL_S)
        if readable:
            line = process.stdout.readline()
            break
    ready = handshake.parse_ready(line)
    if not keep_owner_pipe or ready is None:
        process.stdout.close()
    if ready is None:
        program.close_owner_pipe()
        if process.poll() is None:
            with contextlib.suppress(OSError):
                process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(stop_timeout)
        return None
    program.ready = ready
    return program


# -- processes sbx did not start ----------------------------------------------------------------


def spawn_on_socket(argv: Sequence[str], stdio_fd: int) -> subprocess.Popen[bytes]:
    """A long-lived child whose stdin and stdout are ``stdio_fd`` (one end of a socket pair)
    and whose stderr sbx reads after it ends: the tunnel to a remote engine. It runs in a
    session of its own, so a Ctrl-C at the terminal reaches sbx, not the tunnel its cleanup
    still needs."""
    return subprocess.Popen(list(argv), stdin=stdio_fd, stdout=stdio_fd, stderr=subprocess.PIPE,
                            start_new_session=True, close_fds=True)


def pid_alive(pid: int) -> bool:
    """True when ``pid`` names a live (non-zombie) process; unknown counts as alive."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return True
    fields = text.rpartition(")")[2].split()
    return not fields or fields[0] != "Z"


def cmdline(pid: int) -> list[bytes] | None:
    """The arguments ``pid`` was started with (from /proc), None when it cannot be read."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return raw.split(b"\0")


def send_signal(pid: int, signum: int) -> None:
    """Signal ``pid``; raises ProcessLookupError and PermissionError as ``os.kill`` does."""
    os.kill(pid, signum)


__all__ = ["DRAIN_S", "CalledProcessError", "CommandTimeout", "Finished", "Program",
           "SubprocessError", "TimeoutExpired", "cmdline", "end_session", "pid_alive", "run",
           "send_signal", "session_members", "start_program"]
