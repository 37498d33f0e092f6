"""The host's SSH agent, as ``SSH_AUTH_SOCK`` names it: a socket that answers a connect.

Only its path is handed on (to the relay in the proxy process, which connects again for each
sandbox client); no key or answer of the agent is read here.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Final

CONNECT_TIMEOUT_S: Final = 2.0


def host_agent(env: Mapping[str, str]) -> tuple[Path | None, str]:
    """(the agent's socket, "") when one listens there; (None, why) otherwise."""
    value = env.get("SSH_AUTH_SOCK", "")
    if not value:
        return None, "SSH_AUTH_SOCK is not set"
    path = Path(value)
    if not path.is_absolute():
        return None, f"SSH_AUTH_SOCK={value} is not an absolute path"
    try:
        info = path.lstat()
    except OSError as error:
        return None, f"SSH_AUTH_SOCK={value}: {error.strerror}"
    if not stat.S_ISSOCK(info.st_mode):
        return None, f"SSH_AUTH_SOCK={value} is not a socket"
    try:
        dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as error:
        return None, f"SSH_AUTH_SOCK={value}: {error.strerror}"
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(CONNECT_TIMEOUT_S)
        probe.connect(f"/proc/self/fd/{dir_fd}/{path.name}")
    except OSError as error:
        return None, f"no agent answers at SSH_AUTH_SOCK={value} ({error.strerror or error})"
    finally:
        probe.close()
        with contextlib.suppress(OSError):
            os.close(dir_fd)
    return path, ""


__all__ = ["host_agent"]
