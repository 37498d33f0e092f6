"""Signals that end sbx (SIGINT, SIGTERM, SIGHUP, SIGQUIT) and the critical sections that must
not be cut short by one: the removal of what a run created."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, Final

INTERRUPTING_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)

# The first interrupting signal this process received, kept even when the KeyboardInterrupt it
# raised was swallowed (a library's bare ``except:`` during an import): the run's checkpoints
# (:func:`raise_if_interrupted`) and the CLI's exit still see it.
_received: list[int] = []


def interrupt(signum: int, _frame: FrameType | None = None) -> None:
    """The handler sbx installs for every interrupting signal: remember it, ignore the ones
    that follow (a closing terminal sends SIGHUP twice; a second one must not cut a cleanup
    short), and raise KeyboardInterrupt so the finally blocks run."""
    if not _received:
        _received.append(signum)
    for other in INTERRUPTING_SIGNALS:
        signal.signal(other, signal.SIG_IGN)
    raise KeyboardInterrupt(signal.Signals(signum).name)


def interrupted() -> int | None:
    """The signal number that interrupted this process, if one did."""
    return _received[0] if _received else None


def raise_if_interrupted() -> None:
    """A checkpoint: raise KeyboardInterrupt again if a signal arrived and was swallowed."""
    if _received:
        raise KeyboardInterrupt(signal.Signals(_received[0]).name)


@contextmanager
def deferred_interrupts() -> Iterator[None]:
    """Hold interrupting signals back while inside; the first one that arrived is raised as
    KeyboardInterrupt on the way out, so a cleanup runs to its end and the exit still says it
    was interrupted. Outside the main thread (where no handler can be set) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []

    def record(signum: int, _frame: FrameType | None) -> None:
        if not arrived:
            arrived.append(signum)

    previous: dict[signal.Signals, Any] = {}
    for interrupting in INTERRUPTING_SIGNALS:
        previous[interrupting] = signal.signal(interrupting, record)
    try:
        yield
    finally:
        for interrupting, handler in previous.items():
            signal.signal(interrupting, handler)
    if arrived:
        raise KeyboardInterrupt(signal.Signals(arrived[0]).name)


__all__ = ["INTERRUPTING_SIGNALS", "deferred_interrupts", "interrupt", "interrupted",
           "raise_if_interrupted"]
