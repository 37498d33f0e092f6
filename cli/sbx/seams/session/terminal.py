"""The host terminal: raw mode for a TTY session, restored on every way out, and its size."""

from __future__ import annotations

import os
import termios
import tty
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Final

# Passed from the host into a TTY session so the workload draws and encodes as the user's
# terminal expects (TERM as `docker run -t` would otherwise hard-code to xterm).
PASSED_TERMINAL_VARIABLES: Final = ("TERM", "COLORTERM", "LANG", "LANGUAGE")
PASSED_TERMINAL_PREFIXES: Final = ("LC_",)


def is_terminal(fd: int | None) -> bool:
    if fd is None:
        return False
    try:
        return os.isatty(fd)
    except OSError:
        return False


def window_size(fd: int) -> tuple[int, int] | None:
    """(rows, columns) of the terminal on ``fd``; None when it has no size."""
    try:
        size = os.get_terminal_size(fd)
    except OSError:
        return None
    if size.lines <= 0 or size.columns <= 0:
        return None
    return size.lines, size.columns


@contextmanager
def raw_mode(fd: int) -> Iterator[None]:
    """Raw mode on the terminal at ``fd`` for the duration, the saved settings restored after.

    Raw means every keystroke (Ctrl-C and Ctrl-Z included) goes to the sandbox's own terminal,
    which does the line editing, echo and signals; output processing is the sandbox's too.
    The ``finally`` restores exactly what was there, on a normal end, an exception, or the
    KeyboardInterrupt that SIGTERM/SIGHUP become.
    """
    saved = termios.tcgetattr(fd)
    try:
        tty.setraw(fd, termios.TCSANOW)
        yield
    finally:
        restore(fd, saved)


def restore(fd: int, saved: list[Any]) -> None:
    try:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)
    except (termios.error, OSError):
        # The terminal went away (SIGHUP): there is nothing left to restore.
        return


def terminal_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The host's terminal and locale variables that a TTY session takes over."""
    return {name: value for name, value in env.items()
            if name in PASSED_TERMINAL_VARIABLES
            or name.startswith(PASSED_TERMINAL_PREFIXES)}


__all__ = ["PASSED_TERMINAL_PREFIXES", "PASSED_TERMINAL_VARIABLES", "is_terminal", "raw_mode",
           "restore", "terminal_environment", "window_size"]
