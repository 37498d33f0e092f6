"""The host's global git identity (``user.name``/``user.email``), read by the host's git.

Only the global scope is asked (``git config --global``): a repository's config, the
workspace's included, never decides who the sandbox commits as. Includes are off in that scope,
so no conditional include can pull a repository's file in either, and git runs from ``/``,
never inside the workspace.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Final

from sbx.seams.host.processes import CommandTimeout, Finished, SubprocessError, run

GIT_TIMEOUT_S: Final = 5.0
# The variables that would point git at a repository or add command-line scope settings.
_REPOSITORY_ENV: Final = ("GIT_DIR", "GIT_WORK_TREE", "GIT_CONFIG", "GIT_CONFIG_PARAMETERS",
                          "GIT_CONFIG_COUNT", "GIT_CEILING_DIRECTORIES", "GIT_NAMESPACE")


def global_identity(env: Mapping[str, str]) -> tuple[str, str] | None:
    """(name, email) from the host's global git config; None when either is unset, empty or
    unreadable, or git is missing."""
    clean = {k: v for k, v in env.items() if k not in _REPOSITORY_ENV
             and not k.startswith("GIT_CONFIG_KEY_") and not k.startswith("GIT_CONFIG_VALUE_")}
    values: list[str] = []
    for key in ("user.name", "user.email"):
        try:
            finished = run(["git", "-C", "/", "config", "--global", "--get", key],
                           timeout=GIT_TIMEOUT_S, env=clean, max_output=4096,
                           keep_stderr=False)
        except (OSError, SubprocessError):
            return None
        value = finished.stdout.decode("utf-8", "replace").rstrip("\n")
        if finished.returncode != 0 or finished.overflow or not value.strip():
            return None
        values.append(value)
    return values[0], values[1]


def host_git(argv: Sequence[str], *, timeout: float) -> Finished:
    """The host's git, never prompting (no terminal question can hang a command); raises
    OSError when git cannot start and :class:`CommandTimeout` past ``timeout``."""
    return run(argv, timeout=timeout, env={**os.environ, "GIT_TERMINAL_PROMPT": "0"})


__all__ = ["CommandTimeout", "global_identity", "host_git"]
