"""`sbx policy log|allow|deny|ls|rm`: adapters to :mod:`sbx.usecases.policylog` and
:mod:`sbx.usecases.policyrules`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any

import typer

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.sandbox import durations
from sbx.usecases import policylog, policyrules
from sbx.views import policy as policy_view

if TYPE_CHECKING:
    from sbx.domain.egress.userpolicy import UserRule

TargetArgument = Annotated[str, typer.Argument(
    metavar="TARGET",
    help="HOST[:PORT][PATH]: a host (or *.domain, an IP, [IPv6]), optionally :PORT and a path "
         "glob (* one segment, ** any), e.g. api.example.com/v1/**.")]
PathArgument = Annotated[str | None, typer.Argument(
    metavar="[PATH]", help="The path glob, when not written after the host.")]
MethodOption = Annotated[list[str] | None, typer.Option(
    "--method", metavar="M", help="An HTTP method the rule covers (repeatable; default any).")]
SandboxOption = Annotated[str | None, typer.Option(
    "--sandbox", metavar="NAME", help="Only for this named sandbox (default: every sandbox).")]
PhaseOption = Annotated[str, typer.Option(
    "--phase", metavar="runtime|install",
    help="The phase it applies in: install hooks, or the workload.")]
ForOption = Annotated[str | None, typer.Option(
    "--for", metavar="DURATION", help="Lapse after this long (90s, 30m, 2h, 7d).")]
YesOption = Annotated[bool, typer.Option(
    "--yes", "-y", help="Approve a widening of what the kits declare without asking.")]


def log(
    ctx: typer.Context,
    subject: Annotated[str | None, typer.Argument(
        metavar="[NAME|RUN_ID]", help="A named sandbox or a run id (default: every log).")] = None,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print every record as a JSON line (the log's schema).")] = False,
    follow: Annotated[bool, typer.Option(
        "--follow", "-f", help="Keep printing new records as the proxy writes them.")] = False,
    since: Annotated[str | None, typer.Option(
        "--since", metavar="DURATION", help="Only records this recent (10m, 2h, 7d) or since "
                                            "an ISO time.")] = None,
    denied: Annotated[bool, typer.Option(
        "--denied", help="Only refused and failed requests.")] = False,
) -> int:
    """What the egress proxies decided: per destination by default, every record with --json.

    Each record is one decision (allowed, denied or failed) with its rule, bytes and time;
    never a header, cookie, query or secret. `-f` follows a running sandbox until its run
    ends (a named sandbox or every log: until interrupted).
    """
    app = ctx.obj
    renderer = app.renderer
    moment = policylog.parse_since(since)
    if follow:
        try:
            policylog.follow(app, subject, since=moment, denied=denied,
                             on_record=lambda r: policy_view.log_record(renderer, r,
                                                                        as_json=as_json))
        except KeyboardInterrupt:
            return 0
        return 0
    view = policylog.read(app, subject, since=moment, denied=denied)
    if as_json:
        for record in view.records:
            policy_view.log_record(renderer, record, as_json=True)
        return 0
    policy_view.log_summary(renderer, view, subject=subject)
    return 0


def _add(ctx: typer.Context, action: str, target: str, path: str | None,
         method: list[str] | None, sandbox: str | None, phase: str, for_: str | None,
         yes: bool) -> int:
    app = ctx.obj
    renderer = app.renderer
    if phase not in ("runtime", "install"):
        raise SbxError(Reason.INVALID_ARGUMENT, f"--phase {phase!r} is not runtime or install",
                       hint="Pass --phase runtime (the workload) or --phase install (hooks).")
    request = policyrules.RuleRequest(
        action="allow" if action == "allow" else "deny", target=target, path=path,
        methods=tuple(method or ()), sandbox=sandbox,
        phase="install" if phase == "install" else "runtime",
        for_s=durations.parse_duration(for_, flag="--for", days=True) if for_ is not None else None)

    def ask(rule: UserRule, widenings: Sequence[Any], scope: str) -> bool:
        return policy_view.confirm_widening(renderer, rule, widenings, scope)

    added = policyrules.add(app, request, yes=yes,
                            confirm=ask if renderer.interactive() else None)
    policy_view.rule_added(renderer, added)
    return 0


def allow(ctx: typer.Context, target: TargetArgument, path: PathArgument = None,
          method: MethodOption = None, sandbox: SandboxOption = None,
          phase: PhaseOption = "runtime",
          for_: ForOption = None,
          yes: YesOption = False,
          as_json: Annotated[bool, typer.Option("--json", help="Print a JSON envelope.")] = False,
          ) -> int:
    """Allow requests the kits do not: HOST[:PORT][PATH], for every sandbox or one.

    Judged with the kits' rules by the same evaluator: a deny (a kit's or yours) still wins.
    A widening of what the kits declare is shown and asked on a terminal; without one it
    needs --yes. Running sandboxes follow the change from their next request.

    Example: sbx policy allow api.example.com '/v1/**' --method POST --sandbox dev
    """
    return _add(ctx, "allow", target, path, method, sandbox, phase, for_, yes)


def deny(ctx: typer.Context, target: TargetArgument, path: PathArgument = None,
         method: MethodOption = None, sandbox: SandboxOption = None,
         phase: PhaseOption = "runtime",
         for_: ForOption = None,
         yes: YesOption = False,
         as_json: Annotated[bool, typer.Option("--json", help="Print a JSON envelope.")] = False,
         ) -> int:
    """Deny requests, whatever the kits allow: HOST[:PORT][PATH], for every sandbox or one.

    Deny wins over every allow. Running sandboxes follow the change from their next request.

    Example: sbx policy deny api.github.com '/repos/**' --method DELETE
    """
    return _add(ctx, "deny", target, path, method, sandbox, phase, for_, yes)


def ls(ctx: typer.Context,
       as_json: Annotated[bool, typer.Option("--json", help="Print a JSON envelope.")] = False,
       ) -> int:
    """List the user policy's rules in force, each with its id."""
    app = ctx.obj
    policy_view.rules_list(app.renderer, policyrules.rules(app))
    return 0


def rm(ctx: typer.Context,
       rule_id: Annotated[str, typer.Argument(metavar="ID", help="The rule's id (sbx policy ls).")],
       as_json: Annotated[bool, typer.Option("--json", help="Print a JSON envelope.")] = False,
       ) -> int:
    """Remove a user policy rule; running sandboxes follow from their next request."""
    app = ctx.obj
    policy_view.rule_removed(app.renderer, policyrules.remove(app, rule_id))
    return 0


__all__ = ["allow", "deny", "log", "ls", "rm"]
