"""The terminal side of a session with a sandbox, the same for `sbx run`, `sbx attach` and
`sbx exec`: the output filtered where it reaches a terminal, the window size followed, the
host terminal raw while the session lasts, the detach keys watched."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from types import TracebackType
from typing import Final

from sbx.base.errors import SbxError
from sbx.seams.session.escape import parse_detach_keys
from sbx.seams.session.mode import HostStreams
from sbx.seams.session.pump import Session
from sbx.seams.session.sanitize import for_terminal
from sbx.seams.session.stream import AttachedStream
from sbx.seams.session.terminal import raw_mode, window_size
from sbx.usecases.run.request import OutputSink

Resize = Callable[[int, int], None]  # (rows, columns) to the sandbox's terminal
OUTPUT_DRAIN_S: Final = 5.0  # what a stopped workload still writes is read this long


class TerminalOutput:
    """``on_output`` with the sequences that act outside the screen dropped on the streams
    that reach a terminal (sbx.seams.session.sanitize), unless ``passthrough``; captured or
    piped output stays byte for byte. Ending it (or leaving its ``with``) flushes it."""

    def __init__(self, on_output: OutputSink, host: HostStreams, env: Mapping[str, str], *,
                 passthrough: bool) -> None:
        self.sink, self._end = for_terminal(on_output, host, env, passthrough=passthrough)

    def end(self) -> None:
        with contextlib.suppress(OSError):  # a closed reader must not stop what follows
            self._end()

    def __enter__(self) -> TerminalOutput:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.end()


class Terminal:
    """The host terminal a session uses: the one its window size is taken from (a TTY
    session's), the one set raw (``raw``), and how the sandbox's size is set."""

    def __init__(self, host: HostStreams, *, tty: bool, raw: bool, resize_to: Resize) -> None:
        self.host = host
        self.tty = tty
        self.size_fd = host.size_fd() if tty else None
        self.terminal_fd = host.stdin_fd if raw else None
        self._resize_to = resize_to

    def resize(self) -> None:
        """The sandbox's terminal to the host terminal's size (a no-op without one)."""
        if self.size_fd is None:
            return
        size = window_size(self.size_fd)
        if size is not None:
            with contextlib.suppress(SbxError):  # gone already: nothing left to resize
                self._resize_to(size[0], size[1])

    def session(self, stream: AttachedStream, *, stdin: bool, sink: OutputSink,
                detach_keys: str) -> Session:
        return Session(stream, tty=self.tty, stdin_fd=self.host.stdin_fd if stdin else None,
                       sink=sink, escape=parse_detach_keys(detach_keys),
                       on_resize=self.resize if self.size_fd is not None else None)

    @contextlib.contextmanager
    def live(self, session: Session) -> Iterator[Session]:
        """The session pumping, resized on SIGWINCH, the host terminal raw if asked."""
        with session, session.resize_on_sigwinch(), \
                (raw_mode(self.terminal_fd) if self.terminal_fd is not None
                 else contextlib.nullcontext()):
            yield session


__all__ = ["OUTPUT_DRAIN_S", "Resize", "Terminal", "TerminalOutput"]
