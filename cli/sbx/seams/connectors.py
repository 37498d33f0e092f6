"""How a byte stream to an engine's HTTP endpoint is opened: one connector per kind of host.

Every connector hands back a kernel socket (:class:`BoundedSocket`), so the one HTTP/1.1 client
(:mod:`sbx.seams.enginesocket`), the SDK's requests adapter, the answer bounds, the hijacked
attach and exec streams (select, half-close) work the same on every transport: the local unix
socket, plain tcp, an ``ssh … docker system dial-stdio`` child whose stdin and stdout are the
other end of a socket pair, and tcp+TLS (:mod:`sbx.seams.tlsrelay`). A connector also names
its host and says, from what it saw, which step of reaching it failed.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import socket
import stat
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from sbx.base.deferred import deferred
from sbx.base.errors import EngineUnavailable, SbxError
from sbx.base.reasons import Reason
from sbx.seams.engine import EngineLocation, short_error
from sbx.seams.enginebounds import BoundedSocket
from sbx.seams.enginehost import SshTarget

if TYPE_CHECKING:
    from sbx.seams.host import processes
else:  # imported on first use: only an ssh engine runs a child (a local pull never does)
    processes = deferred("sbx.seams.host.processes")

SSH_CONNECT_TIMEOUT_S: Final = 30
SSH_SHARE_ENV: Final = "SBX_ENGINE_SSH_SHARE"  # "0": a login of its own for every connection
SSH_PERSIST_S: Final = 60  # a shared login outlives its last connection by this long
_STDERR_BYTES: Final = 8192
_MAX_SHARE_DIR: Final = 107 - 1 - 40 - 17  # sun_path, "/", %C, ssh's temporary suffix
_EXIT_WAIT_S: Final = 5.0


class Connector:
    """Opens connections to one engine; :meth:`connect` is the only way a transport reaches
    it."""

    location: EngineLocation

    def connect(self, timeout: float) -> BoundedSocket:
        """A fresh connection, its reads waiting at most ``timeout`` each. OSError when the
        engine cannot be reached."""
        raise NotImplementedError

    def unreachable(self, action: str, detail: str, *, reached: bool) -> SbxError | None:
        """This transport's own account of a failed call (the host, the step, a reason),
        or None to leave it to the generic one."""
        return None


class UnixConnector(Connector):
    def __init__(self, path: str) -> None:
        self._path = path
        self.location = EngineLocation(f"unix://{path}", local=True)

    def connect(self, timeout: float) -> BoundedSocket:
        sock = BoundedSocket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect(self._path)
        except BaseException:
            sock.close()
            raise
        return sock


class TcpConnector(Connector):
    """Plain tcp: only to this machine's loopback, or where the user allowed it by name
    (:mod:`sbx.seams.transports` decides)."""

    def __init__(self, host: str, port: int, *, local: bool) -> None:
        self._address = (host, port)
        self.location = EngineLocation(f"tcp://{host}:{port}", local=local)

    def connect(self, timeout: float) -> BoundedSocket:
        plain = socket.create_connection(self._address, timeout=timeout)
        sock = BoundedSocket(fileno=plain.detach())
        sock.settimeout(timeout)
        return sock


@dataclass
class _Child:
    process: processes.Popen[bytes]
    started: float


class SshConnector(Connector):
    """``ssh [-p PORT] [-l USER] -- HOST docker system dial-stdio``, one child per connection;
    with a ``share_dir`` the children share one login (ssh's ControlMaster, its socket in that
    private directory, kept ``SSH_PERSIST_S`` after the last use), so a call costs a channel,
    not a key exchange.

    The child's stdin and stdout are one end of a socket pair, so the stream is a kernel socket
    on sbx's side (a half-close ends the engine's stdin as it does locally). ssh runs with the
    user's own configuration and known hosts, never asks (``BatchMode``: a host key it does not
    know, or one that changed, is refused as ``ssh`` refuses it), and in a session of its own,
    so a Ctrl-C at the terminal reaches sbx, not the tunnel its cleanup still needs.
    """

    def __init__(self, target: SshTarget, *, share_dir: str | None = None) -> None:
        self._target = target
        self._share_dir = share_dir
        self._children: list[_Child] = []
        self._lock = threading.Lock()
        port = f":{target.port}" if target.port else ""
        self.location = EngineLocation(f"ssh://{target.login}{port}", local=False)
        atexit.register(self.close)

    def argv(self) -> list[str]:
        target = self._target
        ssh = shutil.which("ssh") or "ssh"
        share = ([] if self._share_dir is None else
                 ["-o", "ControlMaster=auto", "-o", f"ControlPath={self._share_dir}/%C",
                  "-o", f"ControlPersist={SSH_PERSIST_S}"])
        return [ssh, "-o", "BatchMode=yes", "-o", f"ConnectTimeout={SSH_CONNECT_TIMEOUT_S}",
                *share, "-T", *(["-p", str(target.port)] if target.port else []),
                *(["-l", target.user] if target.user else []),
                "--", target.host, "docker", "system", "dial-stdio"]

    def connect(self, timeout: float) -> BoundedSocket:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            process = processes.spawn_on_socket(self.argv(), theirs.fileno())
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        with self._lock:
            self._reap()
            self._children.append(_Child(process, time.monotonic()))
        sock = BoundedSocket(fileno=ours.detach())
        sock.settimeout(timeout)
        return sock

    def _reap(self) -> None:
        """Forget the children that have exited (their connection was closed)."""
        alive = []
        for child in self._children:
            if child.process.poll() is None:
                alive.append(child)
            elif child.process.stderr is not None:
                child.process.stderr.close()
        self._children = alive

    def close(self) -> None:
        """At exit: every tunnel's socket is closed by now, so each child is ending; wait a
        moment for it, then end it."""
        with self._lock:
            children, self._children = self._children, []
        deadline = time.monotonic() + 2.0
        for child in children:
            try:
                child.process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except processes.TimeoutExpired:
                with contextlib.suppress(OSError):
                    child.process.kill()
                with contextlib.suppress(processes.TimeoutExpired):
                    child.process.wait(timeout=2.0)
            if child.process.stderr is not None:
                child.process.stderr.close()

    def unreachable(self, action: str, detail: str, *, reached: bool) -> SbxError | None:
        with self._lock:
            latest = self._children[-1] if self._children else None
        if latest is None:
            return None
        process = latest.process
        with contextlib.suppress(processes.TimeoutExpired):
            process.wait(timeout=_EXIT_WAIT_S)
        said = _stderr_of(process)
        return ssh_failure(self._target, action, said, process.returncode, detail,
                           reached=reached)


def ssh_share_dir(env: Mapping[str, str]) -> str | None:
    """The private directory for shared ssh logins: ``$XDG_RUNTIME_DIR/sbx-ssh``, else
    ``/tmp/sbx-ssh-UID``; None (no sharing) when it cannot be made this user's alone, or
    ``SBX_ENGINE_SSH_SHARE=0``."""
    if env.get(SSH_SHARE_ENV) == "0":
        return None
    runtime = env.get("XDG_RUNTIME_DIR", "")
    uid = os.geteuid()
    path = os.path.join(runtime, "sbx-ssh") if os.path.isabs(runtime) else ""
    if not path or len(path) > _MAX_SHARE_DIR:  # ssh's socket name must fit a sockaddr_un
        path = f"/tmp/sbx-ssh-{uid}"  # noqa: S108 - checked to be ours alone below
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, 0o700)
        info = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != uid or info.st_mode & 0o077:
        return None  # someone else's, or open to others: a login there is not ours alone
    return path


def _stderr_of(process: processes.Popen[bytes]) -> str:
    """What the (exited) child wrote to stderr, at most a few KiB, never waiting."""
    pipe = process.stderr
    if pipe is None or process.returncode is None:
        return ""
    os.set_blocking(pipe.fileno(), False)
    try:
        data = pipe.read(_STDERR_BYTES) or b""
    except OSError:
        data = b""
    return data.decode("utf-8", "replace").strip()


# What ssh or the far side said → the step that failed. The engine's own messages come first:
# "permission denied while trying to connect to the Docker daemon socket" is not ssh's login.
_STEPS: Final = (
    (("cannot connect to the docker daemon", "docker daemon socket", "docker.sock",
      "is the docker daemon running"), "reaching the Docker engine on the host"),
    (("host key verification failed", "remote host identification has changed",
      "host key for", "no matching host key"), "verifying the host's key"),
    (("permission denied", "too many authentication failures",
      "no supported authentication"), "logging in"),
    (("could not resolve hostname", "connection refused", "connection timed out",
      "no route to host", "network is unreachable", "operation timed out",
      "kex_exchange_identification", "connection closed by", "connection reset"),
     "connecting"),
    (("command not found", "not found", "is not a docker command", "unknown command"),
     "starting `docker system dial-stdio`"),
)


def ssh_failure(target: SshTarget, action: str, said: str, status: int | None,
                detail: str, *, reached: bool) -> SbxError:
    """The reason-coded failure of an ``ssh://`` engine: its host, the step, a fix."""
    lowered = said.lower()
    step = next((name for fragments, name in _STEPS if any(f in lowered for f in fragments)),
                "starting `docker system dial-stdio`" if status == 127 else "")
    where = f"ssh://{target.login}" + (f":{target.port}" if target.port else "")
    told = short_error(said.splitlines()[-1] if said else detail)
    if step == "verifying the host's key":
        return SbxError(
            Reason.ENGINE_HOST_KEY,
            f"{action}: {where}: ssh refused the host's key ({told})",
            hint=f"Check the host key's fingerprint out of band and accept it once with "
                 f"`{target.command('true')}`; sbx never accepts a host key itself.")
    if not step:
        step = "talking to the engine" if reached else "connecting"
    fixes = {
        "reaching the Docker engine on the host":
            f"Check that the engine on the host answers: `{target.command('docker version')}`.",
        "logging in":
            f"sbx runs ssh without prompts: a key or an agent must log in "
            f"(`ssh-copy-id {target.login}`, `ssh-add`); check with `{target.command('true')}`.",
        "connecting": f"Check that the host is up and ssh reaches it: "
                      f"`{target.command('true')}`.",
        "starting `docker system dial-stdio`":
            f"The host needs the docker CLI 18.09 or later on its PATH: "
            f"`{target.command('docker version')}`.",
    }
    hint = fixes.get(step, f"Check the engine over ssh: `{target.command('docker version')}`.")
    lost = "lost the Docker engine" if reached else "cannot reach the Docker engine"
    return EngineUnavailable(f"{action}: {lost} at {where} ({step}): {told}", hint=hint)


__all__ = ["SSH_CONNECT_TIMEOUT_S", "SSH_PERSIST_S", "SSH_SHARE_ENV", "Connector",
           "SshConnector", "TcpConnector", "UnixConnector", "ssh_failure", "ssh_share_dir"]
