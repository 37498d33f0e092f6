"""A real OpenSSH server for tests: /usr/sbin/sshd on a loopback port with its own host key,
authorized_keys and config, in the foreground (``-D -e``), never the machine's sshd.

Its users (``git`` and ``other``, both root's uid so one bare repository serves them) exist
only in sshd's own mount namespace, where a copy of /etc/passwd with them is bound over the
machine's; nothing on the machine changes. Run as root (sshd needs it to switch users).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Self

SSHD = Path("/usr/sbin/sshd")
USERS = ("git", "other")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


class TestSSHD:
    """One sshd: ``host_key_line`` is its key as a known_hosts line's type and key, ``log``
    what it wrote; every user in :data:`USERS` may log in with ``authorized`` keys."""

    def __init__(self, directory: Path, authorized: str) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.host_key = directory / "host_ed25519"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "", "-f",
                        str(self.host_key)], check=True, timeout=30)
        (directory / "authorized_keys").write_text(authorized, encoding="utf-8")
        home = directory / "home"
        home.mkdir(exist_ok=True)
        passwd = Path("/etc/passwd").read_text(encoding="utf-8")
        passwd += "".join(f"{u}:x:0:0:{u}:{home}:/bin/sh\n" for u in USERS)
        (directory / "passwd").write_text(passwd, encoding="utf-8")
        self.port = _free_port()
        self.log = directory / "sshd.log"
        (directory / "sshd_config").write_text(f"""\
Port {self.port}
ListenAddress 127.0.0.1
HostKey {self.host_key}
PidFile {directory}/sshd.pid
AuthorizedKeysFile {directory}/authorized_keys
AllowUsers {' '.join(USERS)}
PermitRootLogin prohibit-password
StrictModes no
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
LogLevel VERBOSE
""", encoding="utf-8")
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def host_key_line(self) -> str:
        kind, key = Path(f"{self.host_key}.pub").read_text(encoding="utf-8").split()[:2]
        return f"{kind} {key}"

    def start(self) -> None:
        unshare = shutil.which("unshare")
        assert unshare is not None, "util-linux unshare is needed"
        script = (f"mount --bind {self.directory}/passwd /etc/passwd && "
                  f"exec {SSHD} -D -e -f {self.directory}/sshd_config")
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen([unshare, "--mount", "--propagation", "private",
                                          "sh", "-c", script], stdout=log,
                                         stderr=subprocess.STDOUT)
        for _ in range(200):  # bounded: sshd listens within milliseconds
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited: {self.log.read_text(errors='replace')}")
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.05)
        raise TimeoutError("sshd did not listen in 10 s")

    def text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


__all__ = ["USERS", "TestSSHD"]
