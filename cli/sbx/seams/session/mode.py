"""Whether a run forwards stdin and whether it gets a TTY, decided once from flags and facts.

Precedence (first match wins), as ``docker run`` users expect and as Docker's own sbx attaches:

1. ``-t/--tty`` allocates a TTY; ``--no-tty`` never does; otherwise a TTY is allocated when
   sbx's stdin and stdout are both terminals and the output is not captured (``--json``).
2. ``-i/--interactive`` forwards stdin (refused when sbx has none, or when a TTY is allocated
   but stdin is not a terminal, as ``docker run -it`` refuses); otherwise stdin is forwarded
   when it is a pipe or a file (``printf … | sbx run``), or when a TTY session runs on a
   terminal. A terminal stdin without a TTY is not read unless ``-i`` asks for it.
3. The host terminal goes to raw mode only for a TTY session whose stdin is a terminal.
"""

from __future__ import annotations

from dataclasses import dataclass

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason


@dataclass(frozen=True)
class HostStreams:
    """Facts about sbx's own standard streams."""

    stdin_fd: int | None  # None: no usable stdin (closed, or not a real file)
    stdin_is_terminal: bool
    stdout_is_terminal: bool
    stdout_fd: int | None = None
    stderr_is_terminal: bool = False

    def size_fd(self) -> int | None:
        """The terminal a TTY session takes its window size from: stdout's, as docker does,
        else stdin's (``-t`` with output redirected); None without either."""
        if self.stdout_is_terminal:
            return self.stdout_fd
        return self.stdin_fd if self.stdin_is_terminal else None


@dataclass(frozen=True)
class SessionMode:
    stdin: bool  # forward sbx's stdin to the workload
    tty: bool  # allocate a pseudo-terminal in the sandbox
    raw: bool  # put the host terminal in raw mode for the session

    def as_dict(self) -> dict[str, bool]:
        return {"stdin": self.stdin, "tty": self.tty}


def decide_mode(*, interactive: bool | None, tty: bool | None, capture: bool,
                host: HostStreams) -> SessionMode:
    if tty is None:
        tty = host.stdin_is_terminal and host.stdout_is_terminal and not capture
    stdin_available = host.stdin_fd is not None
    if interactive:
        if not stdin_available:
            raise SbxError(Reason.INVALID_ARGUMENT,
                           "-i/--interactive was given but sbx has no standard input",
                           hint="Run sbx with a stdin (a terminal, a pipe or a file), or drop -i.")
        if tty and not host.stdin_is_terminal:
            raise SbxError(Reason.INVALID_ARGUMENT,
                           "-i with a TTY needs a terminal on stdin, and stdin is not one",
                           hint="Drop -t (or pass --no-tty) to pipe input into the workload.")
        stdin = True
    elif interactive is None:
        stdin = stdin_available and (host.stdin_is_terminal if tty
                                     else not host.stdin_is_terminal)
    else:
        stdin = False
    return SessionMode(stdin=stdin, tty=tty, raw=tty and stdin and host.stdin_is_terminal)


__all__ = ["HostStreams", "SessionMode", "decide_mode"]
