"""`sbx run`'s one core call: a one-shot run (sbx.usecases.run.start), or a named sandbox
created, started or attached (sbx.usecases.named)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.sandbox.records import check_name
from sbx.usecases import fleet
from sbx.usecases.context import AppContext
from sbx.usecases.named.start import run_named, run_verb_named
from sbx.usecases.run.kept import kept_request
from sbx.usecases.run.request import OutputSink, ProgressFactory, RunRequest
from sbx.usecases.run.result import RunResult
from sbx.usecases.run.start import run_new
from sbx.usecases.sandboxstore import SandboxStore

if TYPE_CHECKING:
    from sbx.usecases.kitgate import Confirm as ConfirmKits


def run(ctx: AppContext, request: RunRequest, *, on_output: OutputSink,
        progress: ProgressFactory,
        on_warning: Callable[[str], None] = lambda _text: None,
        on_notice: Callable[[str], None] = lambda _text: None,
        confirm_kits: ConfirmKits | None = None,
        confirm_follow: Callable[[str, Sequence[Any]], bool] | None = None) -> RunResult:
    """``confirm_kits``: the question about a local kit's widenings (sbx.usecases.kitgate);
    ``confirm_follow``: about a named sandbox's kits asking for more at its start
    (sbx.usecases.namedkits). A kept run (sbx.usecases.run.kept) goes as a named one."""
    if request.clone:
        return _run_clone(ctx, request, on_output=on_output, progress=progress,
                          on_warning=on_warning, on_notice=on_notice, confirm_kits=confirm_kits,
                          confirm_follow=confirm_follow)
    request = kept_request(ctx, request, on_notice)
    ctx = fleet.for_new(ctx, request)  # the engine it goes to, of [engines] when configured
    if request.detach and request.name is None:
        raise SbxError(Reason.INVALID_ARGUMENT, "-d/--detach needs --name: a one-shot sandbox "
                       "ends with its session", hint="Give it a name: sbx run --name NAME -d ...")
    if request.template is not None and request.name is None:
        raise SbxError(Reason.INVALID_ARGUMENT, "--template makes a kept or named sandbox: a "
                       "one-shot sandbox has no HOME to start from the template's",
                       hint=f"Give it a name: sbx run --template {request.template} --name NAME")
    if request.template is not None and request.recreate:
        raise SbxError(Reason.INVALID_ARGUMENT, "--recreate makes the container again from "
                       "the kits; it does not take --template",
                       hint="`sbx rm NAME`, then create it again from the template.")
    if request.recreate and request.name is None:
        raise SbxError(Reason.INVALID_ARGUMENT, "--recreate needs --name: it makes a named "
                       "sandbox's container again", hint="sbx run --name NAME --recreate ...")
    if request.session is not None and request.name is None \
            and request.session.verb == "prompt" and request.tty is None:
        request = dataclasses.replace(request, tty=False)  # headless: the bytes as written
    if request.session is not None and request.session.verb == "acp":
        request = acp_request(request)
    if request.name is not None:
        if request.session is not None:  # the verb as a process of the sandbox
            return _session_named(ctx, request, run_verb_named(
                ctx, request, on_output=on_output, progress=progress, on_warning=on_warning,
                on_notice=on_notice, confirm_kits=confirm_kits, confirm_follow=confirm_follow))
        return run_named(ctx, request, on_output=on_output, progress=progress,
                         on_warning=on_warning, on_notice=on_notice,
                         confirm_kits=confirm_kits, confirm_follow=confirm_follow)
    return run_new(ctx, request, on_output=on_output, progress=progress,
                   on_warning=on_warning, on_notice=on_notice, confirm_kits=confirm_kits)


def acp_request(request: RunRequest) -> RunRequest:
    """An ACP adapter speaks JSON-RPC on stdio: no terminal, and the caller's stdin open."""
    if request.tty:
        raise SbxError(Reason.INVALID_ARGUMENT, "--acp speaks the protocol on stdio, which a "
                       "terminal (-t) would rewrite", hint=f"Drop -t: sbx run {request.workload} "
                       ". --acp")
    if request.detach:
        raise SbxError(Reason.INVALID_ARGUMENT, "--acp serves the client on sbx's stdio, which "
                       "-d would close", hint=f"Drop -d: sbx run {request.workload} . --acp")
    return dataclasses.replace(request, tty=False, interactive=(
        request.interactive if request.interactive is not None
        else request.host.stdin_fd is not None))


def _session_named(ctx: AppContext, request: RunRequest, code: int) -> RunResult:
    record = SandboxStore(ctx.state_home).load(check_name(request.name or ""))
    return RunResult(record.run_id if record is not None else "", code, 0.0, None,
                     name=request.name)


def create(ctx: AppContext, request: RunRequest, *, on_output: OutputSink,
           progress: ProgressFactory,
           on_warning: Callable[[str], None] = lambda _text: None,
           on_notice: Callable[[str], None] = lambda _text: None,
           confirm_kits: ConfirmKits | None = None) -> RunResult:
    """`sbx create`: a kept (or named) sandbox created and left running; an existing one is
    refused (`sbx run` re-enters it)."""
    if request.name is None and request.workspace is None:
        raise SbxError(Reason.INVALID_ARGUMENT, "sbx create needs a WORKSPACE or --name: a "
                       "kept sandbox is one per workspace",
                       hint=f"sbx create {request.workload} .  (or sbx create --name NAME "
                            f"{request.workload})")
    clone_of: tuple[str, str] | None = None
    if request.clone:
        if request.workspace is None:
            raise SbxError(Reason.INVALID_ARGUMENT, "--clone needs a WORKSPACE: the "
                           "repository to clone", hint=f"sbx create --clone {request.workload} .")
        from sbx.usecases.named import clone  # git and bundles: only for a --clone

        clone_of = clone.host_repository(ctx, request.workspace)
        # never mounted: the checkout goes into a volume of its own, kept across a stop
        request = dataclasses.replace(request, access="none", clone=False, clone_volume=True)
    request = dataclasses.replace(request, keep=True if request.name is None else None,
                                  detach=True)
    request = kept_request(ctx, request, lambda _text: None)
    ctx = fleet.for_new(ctx, request)
    name = check_name(request.name or "")
    if SandboxStore(ctx.state_home).load(name) is not None:
        raise SbxError(Reason.INVALID_ARGUMENT, f"{name} exists already",
                       hint=f"Enter it with `sbx run --name {name}`, or `sbx rm {name}` first.")
    on_notice(f"kept as {name}; `sbx rm {name}` removes it")
    result = run(ctx, request, on_output=on_output, progress=progress, on_warning=on_warning,
                 on_notice=on_notice, confirm_kits=confirm_kits)
    result.name = name
    if clone_of is not None:
        try:
            clone.seed(ctx, name, *clone_of)
        except SbxError:
            from sbx.usecases.named.removal import remove  # a sandbox without its clone goes

            remove(ctx, [name], on_warning)
            raise
    return result


def _run_clone(ctx: AppContext, request: RunRequest, *, on_output: OutputSink,
               progress: ProgressFactory, on_warning: Callable[[str], None],
               on_notice: Callable[[str], None], confirm_kits: ConfirmKits | None,
               confirm_follow: Callable[[str, Sequence[Any]], bool] | None) -> RunResult:
    """`sbx run --clone`: created as `sbx create --clone` does (the clone is made before
    anyone attaches), then entered like any named sandbox."""
    if request.name is None and request.keep is False:
        raise SbxError(Reason.INVALID_ARGUMENT, "--clone makes a kept or named sandbox: its "
                       "branch is fetched after the run", hint="Drop --rm, or give --name NAME.")
    created = create(ctx, dataclasses.replace(request, keep=None), on_output=on_output,
                     progress=progress, on_warning=on_warning, on_notice=on_notice,
                     confirm_kits=confirm_kits)
    if request.detach:
        on_notice(f"{created.name} is running; `sbx attach {created.name}` to use it")
        return created
    entering = RunRequest(workload=request.workload, name=created.name, host=request.host,
                          interactive=request.interactive,
                          terminal_passthrough=request.terminal_passthrough)
    return run(ctx, entering, on_output=on_output, progress=progress, on_warning=on_warning,
               on_notice=on_notice, confirm_kits=confirm_kits, confirm_follow=confirm_follow)


def template_kits(ctx: AppContext, template: str | None, workload: str | None,
                  kits: tuple[str, ...]) -> tuple[str | None, tuple[str, ...]]:
    """With --template, the WORKLOAD and --kit to load: the template's own when none are
    given (sbx.domain.sandbox.templates.kits_for); without it, as given."""
    if template is None:
        return workload, kits
    from sbx.usecases import templates  # only a run from a template reads its labels

    return templates.kits_of(ctx, template, workload, kits)


def workload_of(ctx: AppContext, workload: str | None, name: str | None) -> str:
    """The workload as given; without one, `sbx run --name N` re-enters N with the workload it
    was created with."""
    if workload is not None:
        return workload
    if name is None:
        raise SbxError(Reason.INVALID_ARGUMENT, "sbx run needs a WORKLOAD: a kit directory, a "
                       "kit pinned by `sbx pull`, or an agent's short name",
                       hint="e.g. sbx run claude .  (`sbx kit ls` lists the short names)")
    record = SandboxStore(ctx.state_home).load(check_name(name))
    if record is None:
        raise SbxError(Reason.INVALID_ARGUMENT, f"no sandbox named {name} to re-enter",
                       hint=f"Create it with its workload: sbx run --name {name} WORKLOAD "
                            "[WORKSPACE]")
    return record.workload


__all__ = ["create", "run", "template_kits", "workload_of"]
