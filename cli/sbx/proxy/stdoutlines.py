"""The proxy's records, audit events and phase as tagged lines on its stdout
(:mod:`sbx.domain.egress.proxystream`), for a proxy in a container whose owner reads them
over the engine's attach stream and keeps them in its state home."""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import Any

from sbx.domain.egress import proxystream


class StdoutLines:
    """Whole lines only, one writer at a time (the event loop and the resolver's threads)."""

    def __init__(self, fd: int = 1) -> None:
        self._fd = fd
        self._lock = threading.Lock()

    def emit(self, tag: str, value: object) -> None:
        view = memoryview(proxystream.encode(tag, value))
        with self._lock:
            while view:
                view = view[os.write(self._fd, view):]


class LineSink:
    """A request log sink (:class:`sbx.proxy.recorder.RecordSink`) onto :class:`StdoutLines`."""

    def __init__(self, lines: StdoutLines) -> None:
        self._lines = lines

    def write(self, record: Mapping[str, Any]) -> None:
        self._lines.emit(proxystream.RECORD, dict(record))

    def close(self) -> None:
        return


__all__ = ["LineSink", "StdoutLines"]
