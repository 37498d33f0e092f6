"""Interrupting signals: the first one interrupts, later ones cannot cut a cleanup short, and a
swallowed one is still seen at the next checkpoint."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator

import pytest

from sbx.seams import signals


@pytest.fixture(autouse=True)
def _restore_handlers() -> Iterator[None]:
    saved = {s: signal.getsignal(s) for s in signals.INTERRUPTING_SIGNALS}
    received = list(signals._received)  # private: the module's one piece of process state
    try:
        yield
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)
        signals._received[:] = received


def test_a_signal_inside_a_deferred_block_is_raised_after_it() -> None:
    for signum in signals.INTERRUPTING_SIGNALS:
        signal.signal(signum, signals.interrupt)
    steps: list[str] = []
    with pytest.raises(KeyboardInterrupt, match="SIGTERM"), signals.deferred_interrupts():
        os.kill(os.getpid(), signal.SIGTERM)
        steps.append("after the signal")  # the block runs to its end
    assert steps == ["after the signal"]
    assert signal.getsignal(signal.SIGTERM) is signals.interrupt  # restored


def test_the_first_signal_interrupts_and_later_ones_are_ignored() -> None:
    signals._received.clear()
    for signum in signals.INTERRUPTING_SIGNALS:
        signal.signal(signum, signals.interrupt)
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGHUP)
    assert signals.interrupted() == signal.SIGHUP
    os.kill(os.getpid(), signal.SIGHUP)  # ignored now: no second KeyboardInterrupt
    os.kill(os.getpid(), signal.SIGTERM)
    assert all(signal.getsignal(s) == signal.SIG_IGN for s in signals.INTERRUPTING_SIGNALS)


def test_a_swallowed_interrupt_is_raised_again_at_a_checkpoint() -> None:
    signals._received.clear()
    signal.signal(signal.SIGINT, signals.interrupt)
    with contextlib.suppress(KeyboardInterrupt):  # what a library's bare except does
        os.kill(os.getpid(), signal.SIGINT)
    with pytest.raises(KeyboardInterrupt, match="SIGINT"):
        signals.raise_if_interrupted()


def test_no_checkpoint_fires_without_a_signal() -> None:
    signals._received.clear()
    signals.raise_if_interrupted()
    assert signals.interrupted() is None
