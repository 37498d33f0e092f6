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
# Deferred imports counted by scripts/lazy_imports.py (inside functions + deferred
# declarations), 66 before: +1 for `sbx kit ls` (commands/kit_ls.py defers the kit reference
# module, which loads the descriptor decoder), +1 for `sbx start` and exec-starts-stopped
# (commands/sandboxes.py defers named.start), +2 for the use cases of sbx cp and sbx df
# (commands/copy.py, df.py), deferred so `sbx --help` loads none of them, +1 for the --runtime
# flag's check against the config schema (domain/sandbox/runtimes.py: off the plan cache's
# path, which loads no config code),
# +1: a present-image pull loads neither the engine's process seam nor registry credentials,
# -2: the light capability registry needs no deferral in the surface and selection,
# +2 for sbx create (commands/create.py defers the run use case and its request, as sbx run
# does),
# +2: imports by name now count (scripts/lazy_imports.py): the command table's loader in
# sbx.app (`sbx --help` imports no command module, a command line only its own) and the
# capability handlers' (domain/kits/captypes, deferred before and uncounted till now).
# +1: only a run with --workspace-mode copy loads the copy-in (usecases/run/execute.py defers
# usecases/run/workspacecopy, whose archiver loads tarfile and tempfile).
# +1 for sbx ports (commands/sandboxes.py defers its use case, as for the other sandbox
# commands).
# +3 for --clone: commands/clone.py defers its use case; the run entry loads git and
# bundle code, and the removal of a sandbox whose clone failed, only for a --clone.
# -10: a command module is imported only for its own command (the command table), so the
# modules of one command (or of commands sharing one light use case) import it at the top:
# clone, completion, copy, kit push, kit ls, secret import, policy and its view. The heavy
# ones (run, create, gc, doctor, df, config, whose use cases load the engine or the pipeline)
# stay deferred so their `--help` stays as fast as `sbx --help`.
# +3 for templates: commands/template.py defers its use case (it loads the pipeline through
# the kits' fingerprint); only a run with --template reads one (usecases/run/fromkits.py, and
# the run entry for the template's kits).
# +1: a re-pull of a descriptor already checked loads no published-form rules (usecases/pull.py
# defers domain/kits/publishedform, which loads the arg and version grammar).
# +2 for a fleet of engines (commands/sandboxes.py defers the engine lookup of a named sandbox
# and the listing across engines, as for the other sandbox commands).
# +1: only a named sandbox's start in the run's execution loads its keeper (the keeper's
# proxy start brings the egress plan and the kit composition, which a cached run never needs).
BUDGET = 61


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
