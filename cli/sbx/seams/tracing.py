"""`-v` tracing of engine calls: a driver wrapper that reports each call and its duration.

Installed by the context only when ``-v`` is given, so it costs nothing otherwise (STYLE item 18).
Arguments are summarised (never dumped): a container spec could carry environment values.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from sbx.base.errors import SbxError

_SUMMARY_LIMIT = 80


def _summary(value: Any) -> str:
    if isinstance(value, bytes):
        return f"<{len(value)} bytes>"
    if isinstance(value, str):
        return value if len(value) <= _SUMMARY_LIMIT else value[:_SUMMARY_LIMIT - 3] + "..."
    if isinstance(value, (int, float, bool)) or value is None:
        return repr(value)
    image = getattr(value, "image", None)
    if isinstance(image, str):  # a ContainerSpec: name the image, not the environment
        return f"<spec image={image[:19]}>"
    return f"<{type(value).__name__}>"


class TracingDriver:
    """Wraps any Driver; every public method call is reported through ``trace``."""

    def __init__(self, inner: Any, trace: Callable[[str], None]) -> None:
        self._inner = inner
        self._trace = trace

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._inner, name)
        if name.startswith("_") or not callable(target):
            return target

        def traced(*args: Any, **kwargs: Any) -> Any:
            shown = ", ".join([_summary(a) for a in args]
                              + [f"{k}={_summary(v)}" for k, v in kwargs.items()])
            started = time.perf_counter()
            try:
                result = target(*args, **kwargs)
            except SbxError as error:
                self._report(name, shown, started, f"failed ({error.reason.value})")
                raise
            if isinstance(result, Iterator):
                self._report(name, shown, started, "streaming")
                return result
            self._report(name, shown, started, _summary(result))
            return result

        return traced

    def _report(self, name: str, shown: str, started: float, outcome: str) -> None:
        elapsed = (time.perf_counter() - started) * 1000
        self._trace(f"engine: {name}({shown}) -> {outcome} [{elapsed:.1f} ms]")


__all__ = ["TracingDriver"]
