"""``python -P -m sbx.resident SOCKET IDLE_SECONDS``: this user's resident helper, a process
that has sbx imported already and serves each command line handed to it over its socket
(sbx.seams.resident) from a fork of itself, with the caller's standard streams, working
directory, umask and environment. It holds no secret: only the forks run commands, and each
ends with its command.

It serves a caller only when the fork would run exactly as the caller would itself (same ids,
groups, limits, namespaces, cgroup, capabilities, same interpreter and installation, the same
values of every variable read while sbx was imported, the same code on disk); otherwise it
declines and the caller runs the command itself. It exits after IDLE_SECONDS with nothing to
do, on SIGTERM, on ``sbx resident stop``, or when sbx's code on disk changes.
"""

from __future__ import annotations

import atexit
import fcntl
import importlib
import io
import os
import pkgutil
import select
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator, MutableMapping
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import sbx
from sbx import __main__ as entry
from sbx import __version__
from sbx.seams import resident as wire
from sbx.seams.host.handshake import RESIDENT
from sbx.usecases import codeprint

REQUEST_TIMEOUT_S: Final = 2.0
GO_TIMEOUT_S: Final = 5.0
MAX_WAITING: Final = 64
# Imported before serving besides every module of sbx: what sbx's commands import inside their
# functions, on first use.
LIBRARIES: Final = ("typer", "click", "rich.console", "docker", "requests", "jsonschema",
                    "ruamel.yaml", "tomlkit", "h11", "json", "tarfile", "hashlib", "ssl",
                    "http.client", "urllib.parse", "uuid", "shlex", "getpass", "termios", "tty",
                    "pty", "selectors", "subprocess", "tempfile", "zipfile", "gzip")
SKIPPED: Final = ("sbx.resident", "sbx.launcher", "sbx.proxy", "sbx.keeper")


class RecordingEnviron(MutableMapping[str, str]):
    """``os.environ`` while sbx is imported: which variables a module read at import."""

    def __init__(self, real: MutableMapping[str, str]) -> None:
        self.real = real
        self.read: set[str] = set()
        self.listed = False

    def __getitem__(self, name: str) -> str:
        self.read.add(name)
        return self.real[name]

    def __contains__(self, name: object) -> bool:
        if isinstance(name, str):
            self.read.add(name)
        return name in self.real

    def __setitem__(self, name: str, value: str) -> None:
        self.real[name] = value

    def __delitem__(self, name: str) -> None:
        del self.real[name]

    def __iter__(self) -> Iterator[str]:
        self.listed = True
        return iter(self.real)

    def __len__(self) -> int:
        return len(self.real)

    def copy(self) -> dict[str, str]:
        self.listed = True
        return dict(self.real)


def preload() -> frozenset[str] | None:
    """Import every module of sbx the CLI can reach and the libraries its commands load later;
    the variables read meanwhile (None when a module listed the whole environment)."""
    real = os.environ
    recording = RecordingEnviron(real)
    # os.getenv reads this global; it is put back below, never cleared
    os.environ = recording  # type: ignore[assignment]  # noqa: B003
    try:
        for name in (*_modules(sbx.__path__, "sbx."), *LIBRARIES):
            _load(name)
    finally:
        os.environ = real  # noqa: B003
    return None if recording.listed else frozenset(recording.read)


def _modules(search: Any, prefix: str) -> Iterator[str]:
    """The names of the modules under a package's path, without importing a skipped one."""
    for info in pkgutil.iter_modules(search, prefix):
        if info.name.startswith(SKIPPED) or (
                info.name.endswith(".__main__") and info.name != "sbx.__main__"):
            continue
        yield info.name
        package = _load(info.name) if info.ispkg else None
        if package is not None:
            yield from _modules(package.__path__, info.name + ".")


def _load(name: str) -> Any:
    """A module by name, or None when it does not import here (an optional library)."""
    try:
        # deferred by design: this program exists to import all of sbx before serving
        return importlib.import_module(name)
    except Exception:
        return None


@dataclass
class Child:
    pid: int
    pidfd: int
    conn: socket.socket
    hung_up: bool = False


@dataclass
class Helper:
    """The serving loop's state: one listening socket, the forks and their callers."""

    listener: socket.socket
    path: Path
    idle_s: float
    env: dict[str, str]
    read: frozenset[str] | None
    facts: dict[str, Any]
    code: str
    search_path: list[str]
    interpreter: str = field(default_factory=wire.interpreter)  # its real file, read once
    bound_inode: int = 0  # the socket file this helper made (a successor's is left alone)
    wakeup_fd: int = -1  # readable when a signal arrived (signal.set_wakeup_fd)
    started: float = field(default_factory=time.time)
    last_busy: float = field(default_factory=time.monotonic)
    children: dict[int, Child] = field(default_factory=dict)  # by pidfd
    served: int = 0
    declined: int = 0
    last_declined: str = ""
    child_cpu_s: float = 0.0
    stopping: bool = False
    extra_fds: list[int] = field(default_factory=list)

    def decline_reason(self, body: dict[str, Any]) -> str | None:
        argv = body.get("argv")
        if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
            return "argv"
        verb = wire.verb(argv)
        if verb in wire.NOT_SERVED:
            return f"command {verb}"
        path = body.get("path")
        if body.get("executable") != self.interpreter or not isinstance(path, list) \
                or path[1:] != self.search_path:
            return "another interpreter or module path"
        env = body.get("env")
        if not isinstance(env, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
            return "env"
        facts = body.get("facts")
        if not isinstance(facts, dict):
            return "facts"
        differs = wire.facts_differ(self.facts, facts)
        if differs is not None:
            return f"runs with another {differs}"
        variable = wire.env_differs(self.env, env, self.read)
        if variable is not None:
            return f"another {variable}"
        if threading.active_count() != 1:
            return "threads"
        if codeprint.walk_fingerprint() != self.code:
            self.stopping = True
            return "sbx's code changed"
        return None

    def status(self) -> dict[str, Any]:
        return {"op": "status", "pid": os.getpid(), "version": __version__,
                "socket": str(self.path), "started": int(self.started),
                "idle_s": self.idle_s, "served": self.served, "declined": self.declined,
                "last_declined": self.last_declined,
                "variables_read_at_import": None if self.read is None else sorted(self.read),
                "commands_running": len(self.children), "child_cpu_s": round(self.child_cpu_s, 4),
                "rss_kib": _rss_kib()}


def _rss_kib() -> int:
    with suppress(OSError, ValueError), open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def serve(helper: Helper) -> None:
    poller = select.poll()
    poller.register(helper.listener.fileno(), select.POLLIN)
    helper.extra_fds.append(helper.listener.fileno())
    if helper.wakeup_fd >= 0:
        poller.register(helper.wakeup_fd, select.POLLIN)
    while True:
        if helper.stopping and not helper.children:
            return
        idle_for = time.monotonic() - helper.last_busy
        if not helper.children and idle_for >= helper.idle_s:
            return
        timeout_ms = max(10, int((helper.idle_s - idle_for) * 1000)) if not helper.children \
            else 1000
        try:
            events = poller.poll(timeout_ms)
        except InterruptedError:
            continue
        for fd, mask in events:
            if fd == helper.wakeup_fd:
                with suppress(OSError):
                    os.read(fd, 512)
            elif fd == helper.listener.fileno():
                _accept(helper, poller)
            elif fd in helper.children:
                _reap(helper, poller, helper.children[fd])
            else:
                child = next((c for c in helper.children.values() if c.conn.fileno() == fd),
                             None)
                if child is not None and mask & (select.POLLHUP | select.POLLRDHUP
                                                 | select.POLLERR):
                    # The caller went away: its command ends as a hung-up one would.
                    poller.unregister(fd)
                    child.hung_up = True
                    with suppress(OSError):
                        signal.pidfd_send_signal(child.pidfd, signal.SIGHUP)
        if helper.children:
            helper.last_busy = time.monotonic()


def _accept(helper: Helper, poller: select.poll) -> None:
    try:
        conn, _ = helper.listener.accept()
    except (BlockingIOError, InterruptedError):
        return
    helper.last_busy = time.monotonic()
    try:
        if wire.peer_uid(conn) != os.getuid():
            conn.close()
            return
        conn.settimeout(REQUEST_TIMEOUT_S)
        frame = wire.recv_frame(conn)
    except (OSError, wire.WireError, ValueError):
        conn.close()
        return
    if frame is None:
        conn.close()
        return
    body, fds = frame
    op = body.get("op")
    if op != "run":
        for fd in fds:
            os.close(fd)
        stale = codeprint.walk_fingerprint() != helper.code
        if op == "stop" or stale:
            helper.stopping = True
            _unlisten(helper, poller)
        with suppress(OSError):
            wire.send_frame(conn, helper.status() | {"op": op, "stale": stale})
        conn.close()
        return
    _run(helper, poller, conn, body, fds)


def _run(helper: Helper, poller: select.poll, conn: socket.socket, body: dict[str, Any],
         fds: list[int]) -> None:
    """Decline a command line, or fork and hand the caller the fork's pidfd."""
    reason = helper.decline_reason(body)
    std = body.get("std")
    if reason is None and (not isinstance(std, list) or len(fds) != len(std) + 1
                           or not all(s in (0, 1, 2) for s in std)):
        reason = "descriptors"
    if reason is not None or helper.stopping:
        helper.declined += 1
        helper.last_declined = reason or "stopping"
        for fd in fds:
            os.close(fd)
        with suppress(OSError, ValueError):
            sys.stderr.write(f"declined: {reason or 'stopping'}\n")
            sys.stderr.flush()
        with suppress(OSError):
            wire.send_frame(conn, {"op": "decline", "why": reason or "stopping"})
        conn.close()
        if helper.stopping:
            _unlisten(helper, poller)
        return
    pid = os.fork()
    if pid == 0:
        code = 70
        try:
            code = _child(helper, conn, body, fds)
        finally:
            os._exit(code)
    for fd in fds:
        os.close(fd)
    pidfd = os.pidfd_open(pid)
    with suppress(OSError):  # the caller is gone: the fork reads no "go", runs nothing, ends
        wire.send_frame(conn, {"op": "accept", "pid": pid}, [pidfd])
    helper.served += 1
    helper.children[pidfd] = Child(pid, pidfd, conn)
    poller.register(pidfd, select.POLLIN)
    poller.register(conn.fileno(), select.POLLRDHUP)


def _unlisten(helper: Helper, poller: select.poll) -> None:
    with suppress(KeyError, ValueError, OSError):
        poller.unregister(helper.listener.fileno())
    _unlink_own(helper)
    helper.listener.close()


def _unlink_own(helper: Helper) -> None:
    with suppress(OSError):
        if os.stat(helper.path).st_ino == helper.bound_inode:
            os.unlink(helper.path)


def _reap(helper: Helper, poller: select.poll, child: Child) -> None:
    try:
        _pid, status, usage = os.wait4(child.pid, 0)
    except ChildProcessError:
        status, usage = 0, None
    if usage is not None:
        helper.child_cpu_s += usage.ru_utime + usage.ru_stime
    with suppress(OSError):
        if os.WIFSIGNALED(status):
            wire.send_frame(child.conn, {"op": "signal", "signal": os.WTERMSIG(status)})
        else:
            wire.send_frame(child.conn, {"op": "exit", "code": os.waitstatus_to_exitcode(status)})
    for fd in (child.pidfd, child.conn.fileno()):
        with suppress(KeyError, ValueError):
            poller.unregister(fd)
    del helper.children[child.pidfd]
    os.close(child.pidfd)
    child.conn.close()
    helper.last_busy = time.monotonic()


def _child(helper: Helper, conn: socket.socket, body: dict[str, Any], fds: list[int]) -> int:
    """In the fork: become the caller's process, wait for its go, run sbx's main."""
    signal.set_wakeup_fd(-1)
    os.setpgid(0, 0)
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGQUIT):
        signal.signal(signum, signal.SIG_DFL)
    for child in helper.children.values():
        with suppress(OSError):
            os.close(child.pidfd)
        with suppress(OSError):
            child.conn.close()
    for fd in helper.extra_fds:
        with suppress(OSError):
            os.close(fd)
    conn.settimeout(GO_TIMEOUT_S)
    try:
        go = wire.recv_frame(conn)
    except (OSError, wire.WireError, ValueError):
        go = None
    if go is None or go[0].get("op") != "go":
        return 0
    conn.settimeout(None)
    try:
        _become_caller(body, fds)
    except Exception as error:  # nothing of the command ran: the caller runs it itself
        with suppress(OSError):
            wire.send_frame(conn, {"op": "decline", "why": f"the fork could not take it: "
                                                           f"{error}"})
        return 0
    code = _run_main()
    with suppress(OSError):
        wire.send_frame(conn, {"op": "exit", "code": code})
    return code


def _become_caller(body: dict[str, Any], fds: list[int]) -> None:
    """The caller's descriptors, directory, umask, environment, module path and argv."""
    std: list[int] = body["std"]
    for target in (0, 1, 2):
        if target in std:
            os.dup2(fds[std.index(target)], target)
        else:
            with suppress(OSError):
                os.close(target)
    os.fchdir(fds[-1])
    for fd in fds:
        if fd > 2:
            os.close(fd)
    facts = body["facts"]
    os.umask(int(facts.get("umask", 0o022)))
    os.environ.clear()
    os.environ.update(body["env"])
    time.tzset()
    path = body.get("path")
    if isinstance(path, list) and all(isinstance(p, str) for p in path):
        sys.path[:] = path
    sys.argv = [str(body.get("argv0") or "sbx"), *body["argv"]]
    _streams(std, body.get("streams"))


def _streams(std: list[int], shapes: Any) -> None:
    """sys.stdin/stdout/stderr on the caller's descriptors, as the interpreter makes them."""
    made: list[Any] = []
    for fd, mode in ((0, "r"), (1, "w"), (2, "w")):
        shape = shapes[fd] if isinstance(shapes, list) and len(shapes) == 3 else None
        if fd not in std or not isinstance(shape, dict):
            made.append(None)
            continue
        interactive = os.isatty(fd)
        raw: Any = io.FileIO(fd, mode, closefd=False)
        buffered = io.BufferedReader(raw) if mode == "r" else io.BufferedWriter(raw)
        made.append(io.TextIOWrapper(
            buffered, encoding=str(shape.get("encoding") or "utf-8"),
            errors=str(shape.get("errors") or "strict"),
            line_buffering=mode == "w" and (interactive or fd == 2),
            write_through=fd == 2))
    sys.stdin, sys.stdout, sys.stderr = made
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = made  # type: ignore[misc]


def _run_main() -> int:
    """sbx's main as the process's own: the exit handlers are the command's (the helper's are
    dropped; the command's run at its end, as at an interpreter's exit: connections closed, an
    ssh tunnel ended)."""
    atexit._clear()
    try:
        entry.main()
        code: object = 0
    except SystemExit as done:
        code = done.code
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with suppress(Exception):
            if stream is not None:
                stream.flush()
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    with suppress(Exception):
        if sys.stderr is not None:
            sys.stderr.write(f"{code}\n")
            sys.stderr.flush()
    return 1


def _bind(path: Path) -> socket.socket:
    """The listening socket at ``path``, 0600 from its creation; a stale one is replaced."""
    with suppress(FileNotFoundError):
        os.unlink(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        listener.bind(str(path))
    finally:
        os.umask(old)
    listener.listen(MAX_WAITING)
    listener.setblocking(False)
    return listener


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        sys.stderr.write("usage: python -P -m sbx.resident SOCKET IDLE_SECONDS\n")
        return 2
    path, idle_s = Path(args[0]), float(args[1])
    uid = os.getuid()
    if not wire.private_dir(path.parent, uid):
        sys.stderr.write(f"{path.parent} is not a directory of uid {uid} closed to others\n")
        return 1
    if path.name != f"resident-{wire.helper_key(os.environ, sys.path)}.sock":
        sys.stderr.write(f"{path.name} is not the socket of this interpreter and module path\n")
        return 1
    lock_fd = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        sys.stderr.write("another resident helper serves this socket\n")
        return 1
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    search_path = list(sys.path)
    read = preload()
    code = codeprint.code_fingerprint()
    try:
        listener = _bind(path)
    except OSError as exc:
        sys.stderr.write(f"cannot listen on {path}: {exc.strerror or exc}\n")
        return 1
    wake_read, wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    helper = Helper(listener=listener, path=path, idle_s=idle_s, env=dict(os.environ),
                    read=read, facts=wire.process_facts(), code=code, search_path=search_path,
                    bound_inode=os.stat(path).st_ino, wakeup_fd=wake_read,
                    extra_fds=[lock_fd, wake_read, wake_write])

    def on_term(_signum: int, _frame: object) -> None:
        helper.stopping = True
        helper.idle_s = 0.0

    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGTERM, on_term)
    sys.stdout.write(RESIDENT.ready_line(os.getpid()))
    sys.stdout.flush()
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)
    try:
        serve(helper)
    finally:
        _unlink_own(helper)
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["Helper", "RecordingEnviron", "main", "preload"]
