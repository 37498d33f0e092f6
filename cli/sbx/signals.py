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


__all__ = ["INTERRUPTING_SIGNALS", "deferred_interrupts"]
