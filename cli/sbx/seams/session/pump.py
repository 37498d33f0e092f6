"""Moves bytes between sbx's own streams and the sandbox's attach stream until the session ends.

The output side runs in the calling (main) thread: it waits on the attach socket and a wake-up
pipe at once, with the run's deadline as the timeout, so SIGWINCH, a detach from the stdin side
and the deadline are all handled between reads and a signal (SIGTERM, SIGHUP) interrupts it
like any other blocking call. stdin is forwarded by a helper thread with blocking writes, so a
workload that stops reading its stdin never stops sbx from draining its output (no deadlock),
and output is written with blocking writes, so a slow reader slows the workload down instead
of losing bytes.
"""

from __future__ import annotations

import contextlib
import enum
import os
import select
import selectors
import signal
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Final

from sbx.seams.session.escape import EscapeDetector
from sbx.seams.session.frames import FrameDecoder
from sbx.seams.session.stream import AttachedStream

READ_BYTES: Final = 256 * 1024
STDIN_READ_BYTES: Final = 64 * 1024
MAX_WAIT_S: Final = 3600.0
_WAKE_RESIZE: Final = b"w"
_WAKE_DETACH: Final = b"d"

OutputSink = Callable[[str, memoryview], None]


class SessionEnd(enum.Enum):
    EOF = "eof"  # the workload closed its output (it exited, or closed both streams)
    DEADLINE = "deadline"  # the run's time limit passed first
    DETACHED = "detached"  # the user typed the detach keys
    OUTPUT_CLOSED = "output_closed"  # whoever reads sbx's stdout/stderr went away


class Session:
    """One attach stream, pumped. Use as a context manager: leaving it stops the stdin thread
    and closes the stream."""

    def __init__(self, stream: AttachedStream, *, tty: bool, stdin_fd: int | None,
                 sink: OutputSink, escape: bytes | None = None,
                 on_resize: Callable[[], None] | None = None) -> None:
        self._stream = stream
        self._tty = tty
        self._stdin_fd = stdin_fd
        self._sink = sink
        self._detector = EscapeDetector(escape) if (escape and tty) else None
        self._on_resize = on_resize
        self._decoder = None if tty else FrameDecoder()
        self._buffer = bytearray(READ_BYTES)
        self._wake_r, self._wake_w = os.pipe()
        self._stop_r, self._stop_w = os.pipe()
        for fd in (self._wake_r, self._wake_w, self._stop_w):
            os.set_blocking(fd, False)
        self._stdin_thread: threading.Thread | None = None
        self.output_bytes = 0
        self.stdin_bytes = 0

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> Session:
        if self._stdin_fd is not None:
            self._stdin_thread = threading.Thread(target=self._forward_stdin,
                                                  name="sbx-stdin", daemon=True)
            self._stdin_thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._signal(self._stop_w, b"x")
        if self._stdin_thread is not None:
            # A thread blocked writing to a workload that stopped reading is freed by closing
            # the stream below; one waiting for input wakes on the stop pipe.
            self._stream.close()
            self._stdin_thread.join(1.0)
        self._stream.close()
        for fd in (self._wake_r, self._wake_w, self._stop_r, self._stop_w):
            with contextlib.suppress(OSError):
                os.close(fd)

    @contextlib.contextmanager
    def resize_on_sigwinch(self) -> Iterator[None]:
        """Forward terminal size changes while inside (main thread only)."""
        if self._on_resize is None or threading.current_thread() is not threading.main_thread():
            yield
            return

        def handler(_signum: int, _frame: FrameType | None) -> None:
            self._signal(self._wake_w, _WAKE_RESIZE)

        previous = signal.signal(signal.SIGWINCH, handler)
        try:
            yield
        finally:
            signal.signal(signal.SIGWINCH, previous)

    # -- output ------------------------------------------------------------------------------

    def pump(self, deadline: float) -> SessionEnd:
        """Copy the workload's output to the sink until one of :class:`SessionEnd` happens.

        ``deadline`` is a :func:`time.monotonic` value.
        """
        with selectors.DefaultSelector() as selector:
            selector.register(self._stream.fileno(), selectors.EVENT_READ, "stream")
            selector.register(self._wake_r, selectors.EVENT_READ, "wake")
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return SessionEnd.DEADLINE
                # Waits are capped (epoll takes at most ~24 days); the loop just waits again.
                for key, _events in selector.select(timeout=min(remaining, MAX_WAIT_S)):
                    if key.data == "wake":
                        end = self._woken()
                        if end is not None:
                            return end
                        continue
                    end = self._read_once()
                    if end is not None:
                        return end

    def close_stream(self) -> None:
        """Hang up on the engine: no more output is read and no more input is sent."""
        self._stream.close()

    def drain(self, seconds: float) -> None:
        """After the workload was stopped: deliver what is still in flight, bounded in time."""
        deadline = time.monotonic() + seconds
        with contextlib.suppress(OSError):
            while (remaining := deadline - time.monotonic()) > 0:
                ready, _, _ = select.select([self._stream.fileno()], [], [], remaining)
                if not ready or self._read_once() is not None:
                    return

    def _read_once(self) -> SessionEnd | None:
        try:
            count = self._stream.recv_into(self._buffer)
        except ConnectionResetError:
            return SessionEnd.EOF
        if count == 0:
            return SessionEnd.EOF
        self.output_bytes += count
        view = memoryview(self._buffer)[:count]
        try:
            if self._decoder is None:
                self._sink("stdout", view)
            else:
                for stream, payload in self._decoder.feed(view):
                    self._sink(stream, payload)
        except BrokenPipeError:
            return SessionEnd.OUTPUT_CLOSED
        return None

    def _woken(self) -> SessionEnd | None:
        try:
            data = os.read(self._wake_r, 64)
        except BlockingIOError:
            return None
        if _WAKE_DETACH in data:
            return SessionEnd.DETACHED
        if _WAKE_RESIZE in data and self._on_resize is not None:
            self._on_resize()
        return None

    # -- input -------------------------------------------------------------------------------

    def _forward_stdin(self) -> None:
        assert self._stdin_fd is not None  # noqa: S101 - only started with a stdin
        fd = self._stdin_fd
        try:
            while True:
                ready, _, _ = select.select([fd, self._stop_r], [], [])
                if self._stop_r in ready:
                    return
                data = os.read(fd, STDIN_READ_BYTES)
                if not data:
                    break
                detached = False
                if self._detector is not None:
                    data, detached = self._detector.feed(data)
                if data:
                    self._stream.sendall(data)
                    self.stdin_bytes += len(data)
                if detached:
                    self._signal(self._wake_w, _WAKE_DETACH)
                    return
        except (OSError, ValueError):
            # The terminal hung up (EIO), or the stream was closed under us at the end.
            return
        if not self._tty:
            # EOF reaches the workload. With a TTY the engine would end the session's output
            # at once on a half-close, so a TTY session's stdin is simply no longer read.
            self._stream.close_write()

    @staticmethod
    def _signal(fd: int, byte: bytes) -> None:
        with contextlib.suppress(OSError):
            os.write(fd, byte)


__all__ = ["OutputSink", "Session", "SessionEnd"]
