"""Imports deferred into functions are for start-up speed only (`sbx --help`, the cached run):
few, and each says why on its line or the line above (scripts/lazy_imports.py counts them)."""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
# Deferred imports counted by scripts/lazy_imports.py (inside functions, and the modules
# declared with sbx.base.deferred). Each keeps a heavy module (the engine client, config or kit
# decoding, a use case) off a path that never uses it: `sbx --help`, a command's `--help`, the
# cached run. None holds an import circle together (test_import_cycles.py finds any); a light
# module, or a shared piece that can move lower down, is imported at the top instead.
BUDGET = 65


@functools.cache
def _found() -> list[Any]:
    """The deferred imports, counted once for both tests (it parses the whole package)."""
    found: list[Any] = _counter().lazy_imports()
    return found


def _counter() -> ModuleType:
    spec = importlib.util.spec_from_file_location("lazy_imports",
                                                  ROOT / "scripts" / "lazy_imports.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("lazy_imports", module)  # its dataclass looks itself up there
    spec.loader.exec_module(module)
    return module


def test_deferred_imports_stay_within_the_budget() -> None:
    found = _found()
    assert len(found) <= BUDGET, f"{len(found)} deferred imports (budget {BUDGET}); " \
                                 "`python3 scripts/lazy_imports.py --list` lists them"


def test_each_deferred_import_says_why() -> None:
    silent = [f"{i.path.relative_to(ROOT)}:{i.line}" for i in _found()
              if not i.reason]
    assert not silent, f"say why each is deferred (a comment on its line or above): {silent}"
