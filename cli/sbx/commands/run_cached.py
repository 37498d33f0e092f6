"""`sbx run` from a cached plan: the same request as last time, without the CLI parser (a
named sandbox's start: the same request, run by the same entry as the parsed one).

:func:`sbx.usecases.plancache.lookup` finds the plan of exactly these words, this directory and
this environment; the request (as typer parsed it the first time) comes with it. What the
result looks like is :func:`finish`'s, shared with :mod:`sbx.commands.run`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from sbx.base.deferred import deferred
from sbx.base.render import Envelope
from sbx.domain.sandbox import runargs
from sbx.seams.host import lookup
from sbx.usecases import plancache
from sbx.views import kit as kit_view

if TYPE_CHECKING:
    from sbx.usecases.run import entry, start
else:  # deferred: the run itself (the engine client); a miss, and `sbx run --help`, load none
    start = deferred("sbx.usecases.run.start")
    entry = deferred("sbx.usecases.run.entry")

if TYPE_CHECKING:
    from sbx.base.render import Renderer
    from sbx.seams.session.mode import HostStreams
    from sbx.usecases.run.result import RunResult


class Launch(Protocol):
    """What the entry point (sbx.__main__.Launch) hands over before any parsing: the words,
    the environment and the streams, and how to build the invocation's context."""

    @property
    def env(self) -> Mapping[str, str]: ...
    @property
    def cwd(self) -> Path: ...
    @property
    def argv(self) -> tuple[str, ...]: ...
    @property
    def passthrough(self) -> tuple[str, ...] | None: ...
    @property
    def streams(self) -> HostStreams: ...

    def context(self, *, verbose: int, traceback: bool) -> Any: ...


def run_from_cache(launch: Launch) -> int | None:
    """The exit status of a run from the cached plan; None when there is none (a miss)."""
    hit = plancache.lookup(launch.env, launch.cwd, launch.argv, launch.passthrough,
                           launch.streams)
    if hit is None:
        return None
    app = launch.context(verbose=hit.verbose, traceback=hit.traceback)
    request = hit.request
    runargs.check_workspace_word(request.workload, request.workspace, app.passthrough,
                                 is_directory=lambda word: lookup.is_directory(app.cwd / word))
    renderer = app.renderer
    if hit.recipe is None:  # a named sandbox's start: the run's own entry, as typer calls it
        result = entry.run(app, request, on_output=renderer.workload_output,
                           progress=renderer.progress, on_warning=renderer.warn,
                           on_notice=renderer.note,
                           confirm_kits=kit_view.kit_confirmation(renderer),
                           confirm_follow=kit_view.named_confirmation(renderer))
    else:
        result = start.run_cached(app, request, hit.recipe, on_output=renderer.workload_output,
                                  progress=renderer.progress, on_warning=renderer.warn,
                                  on_notice=renderer.note,
                                  confirm_kits=kit_view.kit_confirmation(renderer))
    return finish(renderer, result, as_json=request.capture_output)


def finish(renderer: Renderer, result: RunResult, *, as_json: bool) -> int:
    """The run's envelope (under --json) and what its cleanup could not remove."""
    if as_json:
        renderer.envelope(Envelope(
            command="run", status="ok" if result.exit_code == 0 else "workload_exit",
            exit_code=result.exit_code, data=result.as_dict()))
    for problem in result.cleanup_errors:
        renderer.note(f"cleanup: {problem}")
    return result.exit_code


__all__ = ["finish", "run_from_cache"]
