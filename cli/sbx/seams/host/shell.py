"""Shell commands the user wrote (a secret's ``--from-command``), run by ``/bin/sh -c`` on the
host as one command of :mod:`sbx.seams.host.processes`: a session of its own, ended whole when
it exits, times out or prints too much."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from sbx.seams.host import processes
from sbx.seams.host.processes import CommandTimeout

SHELL: Final = "/bin/sh"


def run_shell(command: str, *, env: Mapping[str, str], timeout: float,
              max_output: int) -> processes.Finished:
    """Run ``command`` with empty stdin and stderr discarded (a helper may print anything
    there); raises :class:`CommandTimeout` and OSError."""
    return processes.run([SHELL, "-c", command], timeout=timeout, env=env,
                         max_output=max_output, keep_stderr=False)


__all__ = ["SHELL", "CommandTimeout", "run_shell"]
