"""`sbx run WORKLOAD [WORKSPACE] [-- ARGS...]`: adapter from flags to
:func:`sbx.usecases.run.entry.run`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from sbx.base.deferred import deferred
from sbx.commands import engine_option, limit_options, publish_option, run_cached
from sbx.domain.sandbox import durations, limitflags, runargs
from sbx.seams.host import lookup
from sbx.usecases import plancache
from sbx.usecases.run import request as run_request
from sbx.views import kit as kit_view

if TYPE_CHECKING:
    from sbx.usecases.run import entry
else:  # deferred: the run loads the engine client, config and kits; `--help` loads none
    entry = deferred("sbx.usecases.run.entry")


WorkspaceModeOption = Annotated[str, typer.Option(
    "--workspace-mode", metavar="bind|copy",
    help="bind (default): mount WORKSPACE from this disk; copy: copy it into a volume of the "
         "sandbox at creation (an engine on another host; nothing is written back, `sbx cp` "
         "brings results out).")]


TemplateOption = Annotated[str | None, typer.Option(
    "--template", metavar="TAG",
    help="Start the new sandbox from a template `sbx save` made: its image and HOME, under "
         "the kits it was saved from (WORKLOAD and --kit may be left out).")]


def run(
    ctx: typer.Context,
    workload: Annotated[str | None, typer.Argument(
        help="The workload kit: a local kit directory, a kit pinned by `sbx pull`, or a "
             "bundled agent's short name (claude, codex, gemini; `sbx kit ls`). Not needed "
             "to re-enter an existing --name sandbox.")] = None,
    workspace: Annotated[str | None, typer.Argument(
        help="Host directory to use as the workspace (default: a private tmpfs).")] = None,
    kit: Annotated[list[str] | None, typer.Option(
        "--kit", "-k", metavar="MIXIN",
        help="A mixin kit to compose on the workload (repeatable; order comes from the kits' "
             "requirements, never from the flags).")] = None,
    arg: Annotated[list[str] | None, typer.Option(
        "--arg", metavar="NAME=VALUE",
        help="A value for a kit arg, given to every kit that declares NAME (repeatable).")] = None,
    allow_privileged: Annotated[bool, typer.Option(
        "--allow-privileged",
        help="Consent to run privileged when a kit requires privileged@1.")] = False,
    access: Annotated[str | None, typer.Option(
        "--access", metavar="none|ro|rw",
        help="How the sandbox sees WORKSPACE (default rw when given).")] = None,
    workspace_mode: WorkspaceModeOption = "bind",
    engine: engine_option.EngineOption = None,
    mount: Annotated[list[str] | None, typer.Option(
        "--mount", metavar="SRC:DST[:ro|rw]",
        help="Extra host mount, checked by the mount policy (repeatable).")] = None,
    timeout: Annotated[str | None, typer.Option(
        "--timeout", metavar="DURATION",
        help="Kill the workload after this long: 90, 90s, 30m or 2h (exit 124).")] = None,
    interactive: Annotated[bool | None, typer.Option(
        "--interactive", "-i",
        help="Forward stdin to the workload (default: when stdin is a pipe or a file, or in a "
             "TTY session).")] = None,
    tty: Annotated[bool | None, typer.Option(
        "--tty/--no-tty", "-t",
        help="Allocate a terminal in the sandbox (default: when stdin and stdout are both "
             "terminals).")] = None,
    env: Annotated[list[str] | None, typer.Option(
        "--env", "-e", metavar="NAME[=VALUE]",
        help="Set a variable in the sandbox; NAME alone takes the host's value (repeatable).",
    )] = None,
    env_file: Annotated[list[str] | None, typer.Option(
        "--env-file", metavar="FILE",
        help="Read NAME=VALUE lines from FILE (repeatable).")] = None,
    user: Annotated[str | None, typer.Option(
        "--user", metavar="UID[:GID]",
        help="Run as this uid:gid (default: the workspace's owner, else the image's user).",
    )] = None,
    runtime: Annotated[str | None, typer.Option(
        "--runtime", metavar="NAME",
        help="The engine's OCI runtime for the sandbox's containers, e.g. runsc or crun "
             "(default: [sandbox] runtime, else the engine's); refused if the engine lacks it.",
    )] = None,
    detach_keys: Annotated[str | None, typer.Option(
        "--detach-keys", metavar="KEYS",
        help="Keys that end a TTY session from the host (default ctrl-p,ctrl-q).")] = None,
    name: Annotated[str | None, typer.Option(
        "--name", metavar="NAME",
        help="A named sandbox: created if missing, else started/attached as it was created.",
    )] = None,
    detach: Annotated[bool, typer.Option(
        "--detach", "-d", help="Start the named sandbox and return (no attach).")] = False,
    accept: Annotated[bool, typer.Option(
        "--accept",
        help="Approve what the kits ask for beyond their last approved run, or beyond what "
             "the named sandbox runs with (new hosts, credential destinations...) without "
             "asking.")] = False,
    recreate: Annotated[bool, typer.Option(
        "--recreate",
        help="Make the named sandbox's container again from its kits as they are now, keeping "
             "HOME and its volumes.")] = False,
    keep: Annotated[bool | None, typer.Option(
        "--keep/--rm",
        help="--keep: the sandbox of this kit and WORKSPACE is kept and re-entered by the next "
             "run (HOME, logins, sessions survive; `sbx rm NAME` removes it); --rm: a one-shot "
             "sandbox. Default [sandbox] keep: agent short names kept, kit paths one-shot.",
    )] = None,
    clone: Annotated[bool, typer.Option(
        "--clone",
        help="Give a kept or named sandbox its own git checkout of WORKSPACE's repository on "
             "branch sbx/NAME from HEAD, never mounting the host's (`sbx diff`, `sbx fetch`).",
    )] = False,
    trust_workspace: Annotated[bool, typer.Option(
        "--trust-workspace",
        help="Let the sandbox change what git runs in the workspace and read-write mounts "
             "(config, hooks, repositories; by default pinned read-only, and what the run "
             "planted is quarantined after it). Still reported.")] = False,
    terminal_passthrough: Annotated[bool, typer.Option(
        "--terminal-passthrough",
        help="Let the sandbox's clipboard, title, hyperlink and notification sequences reach "
             "this terminal (dropped by default).")] = False,
    prompt: Annotated[str | None, typer.Option(
        "--prompt", metavar="TEXT",
        help="Run one prompt headlessly through the workload's agent-sessions@1 prompt verb "
             "(the text is one argv element, never through a shell).")] = None,
    resume: Annotated[str | None, typer.Option(
        "--resume", metavar="ID",
        help="Reopen the agent's session ID (`sbx sessions NAME` lists them).")] = None,
    continue_: Annotated[bool, typer.Option(
        "--continue", help="Reopen the agent's most recent session.")] = False,
    acp: Annotated[bool, typer.Option(
        "--acp", help="Run the agent's ACP adapter (acp@1) instead of the agent, speaking the "
                      "Agent Client Protocol on stdio for an editor (no terminal).")] = False,
    memory: limit_options.MemoryOption = None,
    cpus: limit_options.CpusOption = None,
    pids: limit_options.PidsOption = None,
    idle_stop: limit_options.IdleStopOption = None,
    publish: publish_option.PublishOption = None,
    template: TemplateOption = None,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Capture the workload's output and print one JSON envelope.")] = False,
) -> int:
    """Run a workload kit (plus mixins) in a hardened sandbox.

    `sbx run claude .` runs the bundled Claude Code kit in this directory. A kit reference
    resolves in one order: an existing path, a kit pinned by `sbx pull`, a short name.
    Arguments after `--` replace the image's CMD.
    """
    app = ctx.obj
    workload_given = workload is not None  # else the record names it: read on every start
    workload, kits = entry.template_kits(app, template, workload, tuple(kit or ()))
    workload = entry.workload_of(app, workload, name)
    runargs.check_workspace_word(workload, workspace, app.passthrough,
                                 is_directory=lambda word: lookup.is_directory(app.cwd / word))
    limits = limitflags.parse_flags(memory, cpus, pids)
    session = run_request.session_ask(prompt, resume, continue_=continue_, acp=acp)
    request = run_request.RunRequest(
        workload=workload,
        workspace=workspace,
        access=access,
        mounts=tuple(mount or ()),
        timeout_s=durations.parse_duration(timeout) if timeout is not None else None,
        command=app.passthrough,
        capture_output=as_json,
        kits=kits,
        args=tuple(arg or ()),
        allow_privileged=allow_privileged,
        interactive=interactive,
        tty=tty,
        env=tuple(env or ()),
        env_files=tuple(env_file or ()),
        user=user,
        runtime=runtime,
        detach_keys=detach_keys,
        trust_workspace=trust_workspace,
        name=name,
        detach=detach,
        accept=accept,
        terminal_passthrough=terminal_passthrough,
        recreate=recreate,
        keep=keep,
        clone=clone,
        memory_bytes=limits.memory_bytes,
        cpu_millis=limits.cpu_millis,
        pids=limits.pids,
        publish=publish_option.publish_words(publish),
        host=app.streams,
        session=session,
        workspace_mode=workspace_mode,
        idle_stop_s=durations.parse_duration(idle_stop, flag="--idle-stop")
        if idle_stop is not None else None,
        template=template,
        engine=engine,
    )
    renderer = app.renderer
    result = entry.run(app, request, on_output=renderer.workload_output,
                       progress=renderer.progress, on_warning=renderer.warn,
                       on_notice=renderer.note, confirm_kits=kit_view.kit_confirmation(renderer),
                       confirm_follow=kit_view.named_confirmation(renderer))
    if workload_given and template is None and not clone and not recreate \
            and result.plan is None and result.name is not None:
        plancache.remember_start(app, request)  # an existing sandbox: only the parse to keep
    return run_cached.finish(renderer, result, as_json=as_json)


__all__ = ["TemplateOption", "WorkspaceModeOption", "run"]
