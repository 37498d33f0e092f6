"""`sbx gc` over every engine sandboxes live on ([engines], sbx.usecases.fleet): each engine's
objects in a pass of its own, this machine's part once, judged by what every engine keeps.

An engine that does not answer is a failure of its own (named, ``docker_unreachable``) and
the others are still cleaned; but no run directory, staging point or firewall rule is removed
then, since the runs that engine still holds cannot be known."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from sbx.usecases.context import AppContext
from sbx.usecases.gc.collector import Collector, EngineFound
from sbx.usecases.gc.result import GcFailure, GcResult


def run_everywhere(engines: Sequence[tuple[str | None, AppContext]],
                   collector: Callable[[AppContext], Collector]) -> GcResult:
    passes = [(name, collector(on)) for name, on in engines]
    found = [(name, pass_, pass_.engine_pass()) for name, pass_ in passes]
    reached = [(pass_, f) for _name, pass_, f in found if f is not None]
    if reached and len(reached) == len(found):
        merged = reached[0][1]
        for _pass, other in reached[1:]:
            merged = merged.merge(other)
        if reached[0][0].host_pass(merged):
            for pass_, _found in reached:
                pass_.cached_images()
    else:
        for pass_, _found in reached:
            pass_.cached_images()
    return _merged(found)


def _merged(found: Sequence[tuple[str | None, Collector, EngineFound | None]]) -> GcResult:
    first = found[0][1].result
    result = GcResult(first.outcome, first.dry_run, first.grace_s)
    kept_dirs: set[str] = set()
    for name, pass_, _found in found:
        part = pass_.result
        where = f"engine {name}" if name else "the environment's engine"
        result.removed.extend(part.removed)
        for item in part.kept:  # each pass keeps every run directory when its listing fails
            if item.kind == "run_dir":
                if item.id in kept_dirs:
                    continue
                kept_dirs.add(item.id)
            result.kept.append(item)
        # an unreachable engine's own error names its entry already (seams.engine.named_entry)
        result.failed.extend(dataclasses.replace(f, message=f"{where}: {f.message}")
                             if not f.message.startswith(f"{where}: ") else f
                             for f in part.failed)
        result.deferred += part.deferred
        result.workspace_warnings.extend(part.workspace_warnings)
        result.note = result.note or part.note
    return result


__all__ = ["GcFailure", "run_everywhere"]
