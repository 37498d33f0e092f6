"""A module named at the top of its user and imported when first used.

Commands and the programs' entry points name every sbx module they use at the top (typed, and
seen by import-linter and the cycle test under ``TYPE_CHECKING``), but the heavy ones (use
cases, the engine) are imported only when an attribute is first read: ``sbx --help`` parses
every command's signature and runs none of them. Nothing enters ``sys.modules`` before that.
"""

from __future__ import annotations

import importlib
from typing import Any


class _Deferred:
    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attribute: str) -> Any:
        # Looked up on each use (not cached), as a function-local import would be: what a test
        # patches on the real module is what the caller gets.
        return getattr(importlib.import_module(self._name), attribute)

    def __repr__(self) -> str:
        return f"<deferred module {self._name}>"


def deferred(name: str) -> Any:
    """The module ``name``, imported on its first attribute read (see the module's note)."""
    return _Deferred(name)


__all__ = ["deferred"]
