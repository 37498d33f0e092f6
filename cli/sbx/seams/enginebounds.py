"""Bounds on every answer the engine gives: a total time, an idle time, a size, and for progress
streams the length of one message, so no engine (slow, broken or hostile) can hang sbx or fill
its memory.

Both transports read the engine through :class:`BoundedSocket`. A call states its bound with
:func:`bounded` around the request; the socket then arms each read with what is left of the
bound and counts what arrives, and ends the answer with :class:`AnswerExceeded`, which the
driver reports with a reason. A hijacked attach or exec stream carries the workload's own output
after its head: its socket is :meth:`BoundedSocket.release`-d and never cut.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final

from sbx.base.errors import EngineUnavailable

ENGINE_TIMEOUT_ENV: Final = "SBX_ENGINE_TIMEOUT"  # seconds an engine call may take in total
DEFAULT_TIMEOUT_S: Final = 60.0
MAX_ANSWER_BYTES: Final = 16 * 1024 * 1024  # /info, inspect, lists, create: a few KiB to MiB
MAX_HEAD_BYTES: Final = 64 * 1024  # status line and headers
MAX_LINE_BYTES: Final = 1024 * 1024  # one JSON message of a progress stream
STREAM_IDLE_S: Final = 1800.0  # a build step may run silently for a long time


@dataclass(frozen=True)
class AnswerBound:
    """What one answer may take. ``total_s`` None: long by nature (a pull, a build), bounded
    by ``idle_s`` between bytes instead. ``max_line``: no run of more bytes than this without
    a newline (chunk framing included), for streams of JSON lines."""

    total_s: float | None
    idle_s: float
    max_bytes: int | None = MAX_ANSWER_BYTES
    max_line: int | None = None


class AnswerExceeded(Exception):
    """An engine answer went past its bound; ``slow`` tells time from size."""

    def __init__(self, what: str, *, slow: bool) -> None:
        super().__init__(what)
        self.slow = slow


def quick(env: Mapping[str, str]) -> AnswerBound:
    """The bound of a call that should answer at once (info, inspect, create, remove, list)."""
    seconds = timeout_s(env)
    return AnswerBound(seconds, seconds)


def stream(env: Mapping[str, str]) -> AnswerBound:
    """The bound of a progress stream (pull, push, build): idle time and message size."""
    return AnswerBound(None, max(STREAM_IDLE_S, timeout_s(env)), None, MAX_LINE_BYTES)


def transfer(env: Mapping[str, str]) -> AnswerBound:
    """The bound of a bulk transfer the engine produces as it reads (an export's tar): never
    silent for long, any length."""
    seconds = timeout_s(env)
    return AnswerBound(None, seconds, None)


def waiting(seconds: float) -> AnswerBound:
    """A wait for a container's exit: the caller's own time, a small answer."""
    seconds = max(seconds, 0.001)
    return AnswerBound(seconds, seconds)


def timeout_s(env: Mapping[str, str]) -> float:
    """``SBX_ENGINE_TIMEOUT`` when it is a positive number of seconds, else 60."""
    raw = env.get(ENGINE_TIMEOUT_ENV, "")
    try:
        value = float(raw)
    except ValueError:
        return DEFAULT_TIMEOUT_S
    return value if 0 < value < 1e7 else DEFAULT_TIMEOUT_S


class _Budget:
    """What is left of one answer's bound, counted across every read of the call."""

    def __init__(self, bound: AnswerBound) -> None:
        self.bound = bound
        self.deadline = None if bound.total_s is None else time.monotonic() + bound.total_s
        self.received = 0
        self.limit = bound.max_bytes
        self.run = 0  # bytes since the last newline

    def timeout(self) -> float:
        if self.deadline is None:
            return self.bound.idle_s
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise self.overdue()
        return min(left, self.bound.idle_s)

    def overdue(self) -> AnswerExceeded:
        if self.deadline is not None and time.monotonic() >= self.deadline - 0.001:
            return AnswerExceeded(f"took longer than {_seconds(self.bound.total_s)} in total",
                                  slow=True)
        return AnswerExceeded(f"sent nothing for {_seconds(self.bound.idle_s)}", slow=True)

    def count(self, data: bytes | memoryview) -> None:
        size = len(data)
        self.received += size
        if self.limit is not None and self.received > self.limit:
            raise AnswerExceeded(f"is larger than {_size(self.limit)}", slow=False)
        if self.bound.max_line is not None and size:
            newline = bytes(data).rfind(b"\n")
            self.run = size - newline - 1 if newline >= 0 else self.run + size
            if self.run > self.bound.max_line:
                raise AnswerExceeded(f"sent a message longer than {_size(self.bound.max_line)}",
                                     slow=False)

    def cap_body(self, limit: int) -> None:
        """From here on at most ``limit`` more bytes (a stream that turned out not to be one)."""
        cap = self.received + limit
        self.limit = cap if self.limit is None else min(self.limit, cap)


_state = threading.local()


def _current() -> _Budget | None:
    budget: _Budget | None = getattr(_state, "budget", None)
    return budget


@contextmanager
def bounded(bound: AnswerBound | None) -> Iterator[None]:
    """Every engine read of this thread inside is held to ``bound`` (None: not bounded, for a
    stream of the workload's output)."""
    previous = _current()
    _state.budget = _Budget(bound) if bound is not None else None
    try:
        yield
    finally:
        _state.budget = previous


def cap_body(limit: int = MAX_ANSWER_BYTES) -> None:
    """The answer being read is a plain body, not a stream: bound its size from here."""
    budget = _current()
    if budget is not None:
        budget.cap_body(limit)


class BoundedSocket(socket.socket):
    """A socket whose reads keep to the calling thread's :func:`bounded` answer bound."""

    __slots__ = ("_released", "_wanted")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._released = False
        self._wanted = self.gettimeout()  # the owner's own timeout, between bounded reads

    def settimeout(self, value: float | None) -> None:
        self._wanted = value
        super().settimeout(value)

    def release(self) -> None:
        """From now on the workload's stream: never bounded again (set blocking)."""
        self._released = True
        self.settimeout(None)

    def _budget(self) -> _Budget | None:
        return None if self._released else _current()

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        budget = self._budget()
        if budget is None:
            return super().recv(bufsize, flags)
        with self._held_to(budget):
            data = super().recv(bufsize, flags)
            if not flags & socket.MSG_PEEK:
                budget.count(data)
        return data

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        budget = self._budget()
        if budget is None:
            return super().recv_into(buffer, nbytes, flags)
        with self._held_to(budget):
            count = super().recv_into(buffer, nbytes, flags)
            if not flags & socket.MSG_PEEK:
                budget.count(memoryview(buffer)[:count])
        return count

    @contextmanager
    def _held_to(self, budget: _Budget) -> Iterator[None]:
        """One read armed with what is left of ``budget``; past it the connection is closed
        (nothing more of that answer will be read, and no pool may hand it out again)."""
        try:
            super().settimeout(budget.timeout())
            try:
                yield
            except TimeoutError:
                raise budget.overdue() from None
            finally:
                if self.fileno() >= 0:
                    super().settimeout(self._wanted)
        except AnswerExceeded:
            self.close()
            raise


def exceeded(action: str, exc: AnswerExceeded, env: Mapping[str, str]) -> EngineUnavailable:
    """The reason-coded failure of an answer past its bound."""
    if exc.slow:
        hint = (f"Check that the engine answers (`docker version`); if it is only slow, raise "
                f"{ENGINE_TIMEOUT_ENV} (seconds, now {timeout_s(env):g}).")
    else:
        hint = ("sbx reads no more of an engine answer than any of its calls needs; check "
                "that DOCKER_HOST names a Docker engine.")
    return EngineUnavailable(f"{action}: the engine's answer {exc}; sbx stopped reading",
                             hint=hint)


def json_lines(chunks: Iterable[bytes | str], max_line: int = MAX_LINE_BYTES) -> Iterator[Any]:
    """The JSON values of a stream of newline-separated JSON (the engine's progress), each
    line at most ``max_line`` bytes however the stream is cut; ValueError otherwise."""
    pending = bytearray()
    for chunk in chunks:
        pending += chunk.encode("utf-8") if isinstance(chunk, str) else chunk
        start = 0
        while (end := pending.find(b"\n", start)) >= 0:
            line = bytes(pending[start:end])
            start = end + 1
            if line.strip():
                yield _decode(line)
        del pending[:start]
        if len(pending) > max_line:
            raise AnswerExceeded(f"sent a message longer than {_size(max_line)}", slow=False)
    if bytes(pending).strip():
        yield _decode(bytes(pending))


def _decode(line: bytes) -> Any:
    try:
        return json.loads(line)
    except ValueError as exc:
        raise ValueError(f"the engine's progress is not JSON: {line[:80]!r}") from exc


def _seconds(value: float | None) -> str:
    return f"{value:g}s" if value is not None else "ever"


def _size(value: int) -> str:
    return f"{value // (1024 * 1024)} MiB" if value >= 1024 * 1024 else f"{value} bytes"


__all__ = ["DEFAULT_TIMEOUT_S", "ENGINE_TIMEOUT_ENV", "MAX_ANSWER_BYTES", "MAX_HEAD_BYTES",
           "MAX_LINE_BYTES", "STREAM_IDLE_S", "AnswerBound", "AnswerExceeded", "BoundedSocket",
           "bounded", "cap_body", "exceeded", "json_lines", "quick", "stream", "timeout_s",
           "transfer", "waiting"]
