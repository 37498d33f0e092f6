"""The resident helper's wire and its client: a per-user Unix socket that only its own user can
open, over which a command line is handed, with its standard streams and working directory as
descriptors, to a process that has sbx already imported (sbx.resident).

Imported by the launcher before anything else of sbx, so it loads only what a bare interpreter
has nearly loaded already (``_socket``, not ``socket``; no pathlib, typing or hashlib). Every
failure before the helper accepts a command means "not served": the caller runs the command
itself, as if no helper existed.
"""

from __future__ import annotations

import _socket
import contextlib
import json
import os
import resource
import signal
import stat
import sys
import zlib
from collections.abc import Iterator, Mapping, Sequence

TYPE_CHECKING = False  # typing itself is not loaded on this path (mypy knows the name)

if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any, Final

MAX_FRAME: Final = 1 << 20  # a request carries argv and the environment: far below this
MAX_FDS: Final = 8
DECLINED: Final = -1  # Served.wait: the fork gave the command back before running any of it
REPLY_TIMEOUT_S: Final = 5.0  # the helper answers at once; a stopped or hung one is given up
# What the interpreter and C libraries read while starting or loading (Python code's reads at
# import are recorded by the helper itself): a caller whose values differ is not served.
READ_AT_START: Final = frozenset({"LANG", "LANGUAGE", "TZ", "OPENSSL_CONF", "OPENSSL_MODULES",
                                  "OPENSSL_ENGINES", "LD_LIBRARY_PATH", "LD_PRELOAD",
                                  "MALLOC_ARENA_MAX", "HOME"})
READ_PREFIXES: Final = ("PYTHON", "LC_")
FORWARDED: Final = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT,
                    signal.SIGWINCH, signal.SIGUSR1, signal.SIGUSR2)
# Commands never handed over: managing the helper itself, and the long-lived servers (their own
# process is what their users expect to see and signal).
NOT_SERVED: Final = frozenset({"resident", "mcp"})
_NAMESPACES: Final = ("cgroup", "ipc", "mnt", "net", "pid", "time", "user", "uts")
_STATUS_FIELDS: Final = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs",
                         "Seccomp")
_LIMITS: Final = ("RLIMIT_AS", "RLIMIT_CORE", "RLIMIT_CPU", "RLIMIT_DATA", "RLIMIT_FSIZE",
                  "RLIMIT_MEMLOCK", "RLIMIT_NOFILE", "RLIMIT_NPROC", "RLIMIT_RSS",
                  "RLIMIT_STACK", "RLIMIT_MSGQUEUE", "RLIMIT_NICE", "RLIMIT_RTPRIO",
                  "RLIMIT_SIGPENDING", "RLIMIT_LOCKS", "RLIMIT_RTTIME")


class WireError(Exception):
    """A frame that is not one: too long, cut short, not JSON, or with too many descriptors."""


# -- where the socket is ------------------------------------------------------------------------


def socket_dir(env: Mapping[str, str], uid: int) -> str:
    """``$XDG_RUNTIME_DIR/sbx`` (the user's own runtime directory) or ``/tmp/sbx-resident-UID``."""
    runtime = env.get("XDG_RUNTIME_DIR", "")
    if runtime.startswith("/") and "\0" not in runtime:
        return os.path.join(runtime, "sbx")
    return f"/tmp/sbx-resident-{uid}"  # noqa: S108 - checked as the user's own, 0700


def private_dir(path: str | Path, uid: int) -> bool:
    """Whether ``path`` is a real directory (not a link) of ``uid`` that no one else can enter."""
    try:
        info = os.lstat(path)
    except (OSError, ValueError):
        return False
    return (stat.S_ISDIR(info.st_mode) and info.st_uid == uid
            and stat.S_IMODE(info.st_mode) & 0o077 == 0)


def helper_key(env: Mapping[str, str], search_path: Sequence[str]) -> str:
    """Which helper may serve a process: the same interpreter, sbx installation and module
    search path (a console script's own directory, ``sys.path[0]``, left out: the helper runs
    with ``-P``), and the same interpreter variables (PYTHON*). A checksum, not a digest: the
    helper compares all of these again for every command, so a collision only declines."""
    parts = [interpreter(), package_dir(), *search_path,
             *(f"{name}={env[name]}" for name in sorted(env) if name.startswith("PYTHON"))]
    data = "\0".join(parts).encode("utf-8", "surrogateescape")
    return f"{zlib.crc32(data):08x}{zlib.adler32(data):08x}"


def interpreter() -> str:
    """The interpreter's real file: a venv's ``python`` and ``python3`` are one interpreter
    (which venv it runs in is the module path's to say, and that is compared too)."""
    return os.path.realpath(sys.executable)


def package_dir() -> str:
    return os.path.dirname(os.path.dirname(os.path.realpath(__file__)))


def socket_path(env: Mapping[str, str], search_path: Sequence[str],
                uid: int | None = None) -> str:
    owner = os.getuid() if uid is None else uid
    return os.path.join(socket_dir(env, owner), f"resident-{helper_key(env, search_path)}.sock")


def env_differs(helper: Mapping[str, str], caller: Mapping[str, str],
                read: frozenset[str] | None) -> str | None:
    """The first variable read at start or import (``read``; None: all of them) whose value
    differs between the helper's environment and the caller's; None when none does."""
    names = set(helper) | set(caller)
    for name in sorted(names):
        consulted = (read is None or name in read or name in READ_AT_START
                     or name.startswith(READ_PREFIXES))
        if consulted and helper.get(name) != caller.get(name):
            return name
    return None


# -- frames: a 4-byte length, JSON, and descriptors beside them -----------------------------------


def send_frame(sock: _socket.socket, body: Mapping[str, Any], fds: Sequence[int] = ()) -> None:
    data = json.dumps(body, separators=(",", ":")).encode()
    payload = len(data).to_bytes(4, "big") + data
    packed = b"".join(fd.to_bytes(4, sys.byteorder, signed=True) for fd in fds)
    ancillary = [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, packed)] if fds else []
    sent = sock.sendmsg([payload], ancillary)
    if sent < len(payload):
        sock.sendall(payload[sent:])


def recv_frame(sock: _socket.socket) -> tuple[dict[str, Any], list[int]] | None:
    """One frame and the descriptors that came with it; None at a clean end of stream."""
    fds: list[int] = []
    head = b""
    try:
        while len(head) < 4:
            chunk, ancillary, _flags, _addr = sock.recvmsg(
                4 - len(head), _socket.CMSG_SPACE(MAX_FDS * 4))
            fds.extend(_descriptors(ancillary))
            _bounded(fds)
            if not chunk:
                if head:
                    raise WireError("the frame's length was cut short")
                return None
            head += chunk
        length = int.from_bytes(head, "big")
        if length > MAX_FRAME:
            raise WireError(f"a frame of {length} bytes is over the {MAX_FRAME} allowed")
        data = b""
        while len(data) < length:
            chunk, ancillary, _flags, _addr = sock.recvmsg(
                length - len(data), _socket.CMSG_SPACE(MAX_FDS * 4))
            fds.extend(_descriptors(ancillary))
            _bounded(fds)
            if not chunk:
                raise WireError("the frame was cut short")
            data += chunk
        body = json.loads(data)
        if not isinstance(body, dict) or len(fds) > MAX_FDS:
            raise WireError("a frame must be one JSON object with few descriptors")
        return body, fds
    except BaseException:
        for fd in fds:
            _close(fd)
        raise


def _bounded(fds: Sequence[int]) -> None:
    if len(fds) > MAX_FDS:
        raise WireError(f"more than {MAX_FDS} descriptors came with one frame")


def _close(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)


def _descriptors(ancillary: Sequence[tuple[int, int, bytes]]) -> Iterator[int]:
    for level, kind, data in ancillary:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            for start in range(0, len(data) - 3, 4):
                yield int.from_bytes(data[start:start + 4], sys.byteorder, signed=True)


def peer_uid(sock: _socket.socket) -> int:
    """The uid of the process at the other end (``struct ucred``: pid, uid, gid)."""
    creds = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)
    return int.from_bytes(creds[4:8], sys.byteorder, signed=True)


# -- what a process runs as: a command is served only by a helper that runs as the same ---------


def process_facts() -> dict[str, Any]:
    """Everything a forked helper inherits from the helper instead of from the caller: ids and
    groups, limits, namespaces, cgroup, capabilities and seccomp. The helper serves a caller
    whose facts equal its own, so what runs is what the caller itself would have run as."""
    umask = os.umask(0o077)
    os.umask(umask)
    limits = {name: list(resource.getrlimit(getattr(resource, name)))
              for name in _LIMITS if hasattr(resource, name)}
    namespaces = {}
    for name in _NAMESPACES:
        try:
            namespaces[name] = os.readlink(f"/proc/self/ns/{name}")
        except OSError:
            namespaces[name] = ""
    return {"uid": os.getuid(), "euid": os.geteuid(), "gid": os.getgid(),
            "egid": os.getegid(), "groups": sorted(os.getgroups()), "umask": umask,
            "limits": limits, "namespaces": namespaces, "cgroup": _read("/proc/self/cgroup"),
            "status": _status_fields(), "nice": os.getpriority(os.PRIO_PROCESS, 0),
            "root": _root_id()}


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read(65536)
    except OSError:
        return ""


def _status_fields() -> dict[str, str]:
    fields = {}
    for line in _read("/proc/self/status").splitlines():
        name, _, value = line.partition(":")
        if name in _STATUS_FIELDS:
            fields[name] = value.strip()
    return fields


def _root_id() -> list[int]:
    """The process's root directory (a chroot is inherited, not handed over)."""
    try:
        info = os.stat("/proc/self/root/")
    except OSError:
        return []
    return [info.st_dev, info.st_ino]


def facts_differ(helper: Mapping[str, Any], caller: Mapping[str, Any]) -> str | None:
    """The first fact (a key of :func:`process_facts`) in which a caller differs from the
    helper, except the umask (handed over); None when the helper may serve it."""
    for name in sorted(set(helper) | set(caller)):
        if name != "umask" and helper.get(name) != caller.get(name):
            return name
    return None


# -- the client: hand a command line over, or say it was not served ----------------------------


def stream_shapes() -> list[dict[str, Any] | None]:
    """Each standard stream's encoding and errors (None when the stream is closed)."""
    shapes: list[dict[str, Any] | None] = []
    for stream in (sys.stdin, sys.stdout, sys.stderr):
        if stream is None:
            shapes.append(None)
            continue
        shapes.append({"encoding": getattr(stream, "encoding", None) or "utf-8",
                       "errors": getattr(stream, "errors", None) or "strict"})
    return shapes


def _open_std() -> list[int]:
    """Which of 0, 1, 2 are open, as indexes into the descriptors sent."""
    open_fds = []
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            continue
        open_fds.append(fd)
    return open_fds


class Served:
    """A command the helper accepted: forwards signals to it and waits for its exit status."""

    def __init__(self, sock: _socket.socket, pidfd: int) -> None:
        self.sock = sock
        self.pidfd = pidfd
        self._previous: dict[int, Any] = {}

    def _forward(self, signum: int, _frame: object) -> None:
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(self.pidfd, signum)

    def _continue(self, _signum: int, _frame: object) -> None:
        """SIGCONT: a job sent to the background (``bg``) whose stdin is a terminal stops as a
        background reader of a terminal does (SIGTTIN); the fork, outside the terminal's
        session, would not be stopped by it. In the foreground the fork continues too."""
        if in_background(0):
            os.kill(os.getpid(), signal.SIGTTIN)
            return
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(self.pidfd, signal.SIGCONT)

    def _stop(self, _signum: int, _frame: object) -> None:
        """Ctrl-Z: stop the command, then this process, as a shell's job stops together."""
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(self.pidfd, signal.SIGSTOP)
        signal.signal(signal.SIGTSTP, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTSTP)
        signal.signal(signal.SIGTSTP, self._stop)

    def wait(self) -> int | None:
        """The command's exit status (128 + N for a signal N); :data:`DECLINED` when the fork
        gave it back untouched; None when the helper and the command both went away without
        a status."""
        for signum in FORWARDED:
            self._previous[signum] = signal.signal(signum, self._forward)
        self._previous[signal.SIGCONT] = signal.signal(signal.SIGCONT, self._continue)
        self._previous[signal.SIGTTIN] = signal.signal(signal.SIGTTIN, signal.SIG_DFL)
        self._previous[signal.SIGTSTP] = signal.signal(signal.SIGTSTP, self._stop)
        try:
            self.sock.settimeout(None)
            while True:
                try:
                    frame = recv_frame(self.sock)
                except (OSError, WireError, ValueError):
                    frame = None
                if frame is None:
                    return None
                body, fds = frame
                for fd in fds:
                    _close(fd)
                if body.get("op") == "decline":  # the fork took nothing of the command
                    return DECLINED
                if body.get("op") == "exit" and isinstance(body.get("code"), int):
                    return int(body["code"]) & 0xFF
                if body.get("op") == "signal" and isinstance(body.get("signal"), int):
                    return 128 + int(body["signal"])
        finally:
            for number, handler in self._previous.items():
                signal.signal(number, handler)
            os.close(self.pidfd)
            self.sock.close()


def hand_over(argv: Sequence[str], env: Mapping[str, str],
              search_path: Sequence[str]) -> Served | None:
    """Give ``argv`` to this user's helper, if one that may serve it listens; None otherwise.
    A background job on a terminal runs itself: the terminal's job control (SIGTTIN, SIGTTOU)
    applies to it and would not to the fork."""
    if verb(argv) in NOT_SERVED or any(in_background(fd) for fd in (0, 1, 2)):
        return None
    uid = os.getuid()
    directory = socket_dir(env, uid)
    if not private_dir(directory, uid):
        return None
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.settimeout(REPLY_TIMEOUT_S)
        sock.connect(os.path.join(directory, f"resident-{helper_key(env, search_path)}.sock"))
        if peer_uid(sock) != uid:
            sock.close()
            return None
        cwd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except (OSError, ValueError):
        sock.close()
        return None
    try:
        std = _open_std()
        send_frame(sock, {"op": "run", "argv": list(argv), "env": dict(env),
                          "argv0": sys.argv[0] if sys.argv else "sbx",
                          "std": std, "streams": stream_shapes(), "facts": process_facts(),
                          "path": list(sys.path), "executable": interpreter()},
                   [*std, cwd])
        reply = recv_frame(sock)
        if reply is None:
            sock.close()
            return None
        body, fds = reply
        if body.get("op") != "accept" or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            sock.close()
            return None
        send_frame(sock, {"op": "go"})
        return Served(sock, fds[0])
    except (OSError, WireError, ValueError):
        sock.close()
        return None
    finally:
        os.close(cwd)


def in_background(fd: int) -> bool:
    """Whether ``fd`` is a terminal whose foreground process group is not this process's."""
    try:
        return os.isatty(fd) and os.tcgetpgrp(fd) != os.getpgrp()
    except OSError:
        return False


def verb(argv: Sequence[str]) -> str | None:
    """The command word: the first that is not an option."""
    return next((word for word in argv if not word.startswith("-")), None)


def ask(path: str, op: str) -> dict[str, Any] | None:
    """The answer of the helper at ``path`` to ``status`` or ``stop``; None when none answers."""
    uid = os.getuid()
    if not private_dir(os.path.dirname(path), uid):
        return None
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.settimeout(REPLY_TIMEOUT_S)
        sock.connect(path)
        if peer_uid(sock) != uid:
            return None
        send_frame(sock, {"op": op})
        reply = recv_frame(sock)
    except (OSError, WireError, ValueError):
        return None
    finally:
        sock.close()
    if reply is None:
        return None
    body, fds = reply
    for fd in fds:
        os.close(fd)
    return body


__all__ = ["DECLINED", "FORWARDED", "MAX_FRAME", "Served", "WireError", "ask", "env_differs",
           "facts_differ", "hand_over", "helper_key", "in_background", "interpreter",
           "package_dir", "peer_uid", "private_dir", "process_facts", "recv_frame", "send_frame",
           "socket_dir", "socket_path", "stream_shapes", "verb"]
