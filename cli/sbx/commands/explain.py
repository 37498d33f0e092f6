"""`sbx explain ...`: the forms of SPEC §2.3, told apart by the first argument.

- ``REASON`` (a reason code or a detail code such as ``destination_blocked``) / ``--list``:
  cause and fix, from the one registry.
- ``RUN_ID`` (32 hex characters) / ``--last``: the refusals the audit log recorded for a run.
- ``WORKLOAD [--kit MIXIN]...``: the sandbox ``sbx run`` would start.
- ``WORKLOAD [--kit MIXIN]... [METHOD] URL|HOST[:PORT]``: the decision for one request, by the
  functions the egress proxy enforces with; exit 0 allowed, 1 denied.
- ``NAME [[METHOD] URL|HOST[:PORT]]``: a named sandbox by its name, with the rules its proxy
  runs with and the user policy in force for it.

The WORKLOAD forms plan with ``sbx run``'s own pipeline; when its engine stage cannot finish
(engine down, image missing, a credential without a secret) they answer from the kits, the
config and the user policy and say what ``sbx run`` would refuse, with run's reason
(:mod:`sbx.usecases.explainplan`). It creates no container. Printing is in the views.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from sbx.base.deferred import deferred
from sbx.base.errors import SbxError
from sbx.base.reasons import DETAILS, ExitStatus, Reason
from sbx.usecases.workload import WorkloadRequest
from sbx.views import explain as explain_view

if TYPE_CHECKING:
    from sbx.usecases import explain as core
    from sbx.usecases import explainplan, explainrun, namedkits
else:  # deferred: each answer loads its own (kits, policy, the engine); `--help` loads none
    core = deferred("sbx.usecases.explain")
    explainplan = deferred("sbx.usecases.explainplan")
    explainrun = deferred("sbx.usecases.explainrun")
    namedkits = deferred("sbx.usecases.namedkits")

if TYPE_CHECKING:
    from sbx.domain.kits.compose import Phase

_REASON_LIKE = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)*")


def explain(
    ctx: typer.Context,
    subject: Annotated[str | None, typer.Argument(
        metavar="[REASON]",
        help="A reason code (e.g. mount_blocked), a run id, or a workload kit directory.")] = None,
    rest: Annotated[list[str] | None, typer.Argument(
        metavar="[TARGET]...",
        help="After WORKLOAD: [METHOD] URL|HOST[:PORT], the request to judge.")] = None,
    kit: Annotated[list[str] | None, typer.Option(
        "--kit", "-k", metavar="MIXIN",
        help="A mixin kit composed on the workload, as for `sbx run` (repeatable).")] = None,
    arg: Annotated[list[str] | None, typer.Option(
        "--arg", metavar="NAME=VALUE",
        help="A value for a kit arg, as for `sbx run` (repeatable).")] = None,
    allow_privileged: Annotated[bool, typer.Option(
        "--allow-privileged",
        help="Plan as `sbx run --allow-privileged` would (consent to privileged@1).")] = False,
    phase: Annotated[str, typer.Option(
        "--phase", metavar="install|runtime",
        help="The phase whose network rules judge the request.")] = "runtime",
    resolve: Annotated[bool, typer.Option(
        "--resolve", help="Resolve the request's host with the system resolver to check its "
                          "addresses as the proxy does (default: /etc/hosts only).")] = False,
    last: Annotated[bool, typer.Option(
        "--last", help="Show the refusals recorded for the last run.")] = False,
    list_all: Annotated[bool, typer.Option("--list", help="List every reason code.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON envelope.")] = False,
) -> int:
    """Explain a reason code, a run's refusals, a sandbox, or one request's decision."""
    app = ctx.obj
    renderer = app.renderer
    extra = list(rest or ())
    if last or (subject is not None and core.is_run_id(subject) and not extra):
        if last and (subject is not None or extra):
            raise SbxError(Reason.INVALID_ARGUMENT, "--last takes no arguments",
                           hint="`sbx explain --last` or `sbx explain RUN_ID`.")
        explain_view.explain_run(renderer,
                                 explainrun.explain_run(app.state_home, None if last else subject))
        return 0
    if list_all or subject is None:
        renderer.reason_list(list(Reason))
        return 0
    reason = core.reason_of(subject)
    if reason is not None and not extra:
        renderer.reason(reason)
        return 0
    if core.detail_of(subject) and not extra and not _exists(app.cwd / subject):
        renderer.detail(subject)
        return 0
    by_name = not kit and not arg and not _exists(app.cwd / subject) \
        and explainplan.is_named(app, subject)
    if not extra and not by_name and _REASON_LIKE.fullmatch(subject) \
            and not _exists(app.cwd / subject):
        _not_a_reason(subject)
    if phase not in ("install", "runtime"):
        raise SbxError(Reason.INVALID_ARGUMENT, f"--phase {phase!r} is not install or runtime",
                       hint="Pass --phase install or --phase runtime.")
    method, target_text = core.split_request(extra)
    target = core.parse_target(target_text, method) if target_text is not None else None
    judged_phase: Phase = "install" if phase == "install" else "runtime"
    if by_name:
        named = explainplan.explain_named(app, subject, target, judged_phase, resolve=resolve,
                                          notes=lambda name: namedkits.pending_notes(app, name))
        explain_view.explain_named(renderer, named)
        return 0 if named.request is None or named.request.allowed else int(ExitStatus.DENIED)
    answer = explainplan.explain_workload(
        app, WorkloadRequest(workload=subject, kits=tuple(kit or ()),
                                      args=tuple(arg or ()), allow_privileged=allow_privileged),
        target, judged_phase, resolve=resolve, progress=renderer.progress)
    if answer.request is None:
        assert answer.sandbox is not None  # noqa: S101 - one of the two is given
        explain_view.explain_sandbox(renderer, answer.sandbox, run_refusal=answer.run_refusal)
        return 0
    explain_view.explain_request(renderer, answer.request)
    return 0 if answer.request.allowed else int(ExitStatus.DENIED)


def _exists(path: Path) -> bool:
    # A name too long to look up (or otherwise unusable) is no kit directory either.
    try:
        return os.path.lexists(path)
    except (OSError, ValueError):
        return False


def _not_a_reason(subject: str) -> None:
    import difflib

    known = [*(r.value for r in Reason), *(str(c) for c in DETAILS)]
    close = difflib.get_close_matches(subject, known, n=1)
    hint = f"Did you mean {close[0]!r}? " if close else ""
    raise SbxError(Reason.INVALID_ARGUMENT,
                   f"{subject!r} is not a reason code, a run id or a kit directory",
                   hint=f"{hint}`sbx explain --list` shows the reason codes.")


__all__ = ["explain"]
