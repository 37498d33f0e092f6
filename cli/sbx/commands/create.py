"""`sbx create [--name N] WORKLOAD [WORKSPACE]`: a kept sandbox made and left running, not
attached; what `sbx run` then re-enters (sbx.usecases.run.entry.create)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from sbx.base.deferred import deferred
from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.commands import engine_option, limit_options, publish_option
from sbx.commands.run import TemplateOption, WorkspaceModeOption
from sbx.domain.sandbox import durations, limitflags

# light, and imported already by sbx.commands.run (the options shared with `sbx run`)
from sbx.usecases.run import request as run_request
from sbx.views import kit as kit_view

if TYPE_CHECKING:
    from sbx.usecases.run import entry
else:  # imported on first use: `sbx --help` loads no use case
    entry = deferred("sbx.usecases.run.entry")


def create(
    ctx: typer.Context,
    workload: Annotated[str | None, typer.Argument(
        help="The workload kit: a kit directory, a pinned kit, or an agent's short name "
             "(with --template: the template's when left out).")] = None,
    workspace: Annotated[str | None, typer.Argument(
        help="Host directory to use as the workspace (needed without --name: the sandbox is "
             "kept per workspace).")] = None,
    name: Annotated[str | None, typer.Option(
        "--name", metavar="NAME",
        help="Its name (default: the kept name, KIT-<workspace directory>).")] = None,
    kit: Annotated[list[str] | None, typer.Option(
        "--kit", "-k", metavar="MIXIN", help="A mixin kit to compose on it (repeatable).")] = None,
    arg: Annotated[list[str] | None, typer.Option(
        "--arg", metavar="NAME=VALUE", help="A value for a kit arg (repeatable).")] = None,
    access: Annotated[str | None, typer.Option(
        "--access", metavar="none|ro|rw", help="How it sees WORKSPACE (default rw).")] = None,
    workspace_mode: WorkspaceModeOption = "bind",
    engine: engine_option.EngineOption = None,
    accept: Annotated[bool, typer.Option(
        "--accept", help="Approve what the kits ask for beyond their last approved run "
                         "without asking.")] = False,
    clone: Annotated[bool, typer.Option(
        "--clone", help="Give it its own git checkout of WORKSPACE's repository on branch "
                        "sbx/NAME from HEAD, never mounting the host's (`sbx diff`, `sbx "
                        "fetch`).")] = False,
    memory: limit_options.MemoryOption = None,
    cpus: limit_options.CpusOption = None,
    pids: limit_options.PidsOption = None,
    idle_stop: limit_options.IdleStopOption = None,
    publish: publish_option.PublishOption = None,
    template: TemplateOption = None,
) -> int:
    """Create a kept sandbox and leave it running, without attaching; prints its name.

    `sbx run` with the same workload and workspace (or `sbx run --name NAME`, `sbx attach`)
    enters it later. An existing sandbox of that name is refused.
    """
    app = ctx.obj
    limits = limitflags.parse_flags(memory, cpus, pids)
    given, kits = entry.template_kits(app, template, workload, tuple(kit or ()))
    if given is None:
        raise SbxError(Reason.INVALID_ARGUMENT, "sbx create needs a WORKLOAD: a kit "
                       "directory, a pinned kit, an agent's short name (or --template TAG)",
                       hint="e.g. sbx create --name my-agent claude")
    request = run_request.RunRequest(
        workload=given, workspace=workspace, access=access, kits=kits,
        args=tuple(arg or ()), name=name, accept=accept, memory_bytes=limits.memory_bytes,
        cpu_millis=limits.cpu_millis, pids=limits.pids, host=app.streams,
        workspace_mode=workspace_mode, publish=publish_option.publish_words(publish),
        clone=clone, template=template, engine=engine,
        idle_stop_s=durations.parse_duration(idle_stop, flag="--idle-stop")
        if idle_stop is not None else None)
    renderer = app.renderer
    result = entry.create(app, request, on_output=renderer.workload_output,
                          progress=renderer.progress, on_warning=renderer.warn,
                          on_notice=renderer.note,
                          confirm_kits=kit_view.kit_confirmation(renderer))
    renderer.message(result.name or "")
    return result.exit_code


__all__ = ["create"]
