"""Output of the explain commands."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

from sbx.base.deferred import deferred
from sbx.base.reasons import ExitStatus, Reason
from sbx.base.render import Envelope, Renderer, escape
from sbx.domain.kits import surface
from sbx.views.values import setting

if TYPE_CHECKING:
    from sbx.domain.egress import fixes
    from sbx.domain.egress import policy as egress_policy
else:  # deferred: the policy's matcher; `sbx explain REASON` and `--help` load none
    egress_policy = deferred("sbx.domain.egress.policy")
    fixes = deferred("sbx.domain.egress.fixes")

if TYPE_CHECKING:
    from sbx.usecases.explainplan import NamedAnswer
    from sbx.usecases.explainrequest import RequestExplanation, RunRefusal
    from sbx.usecases.explainrun import RunExplanation
    from sbx.usecases.explainsandbox import SandboxExplanation
    from sbx.usecases.kitgate import PermissionState


def explain_request(renderer: Renderer, result: RequestExplanation) -> None:
    """Allowed/denied, every matched rule, the deciding one, the destination checks, the
    reason and the fix (the command the 403 body prints), and what run would refuse."""
    decision = result.decision
    allowed = result.allowed
    status = 0 if allowed else int(ExitStatus.DENIED)
    blocked = result.destination.blocked if result.destination is not None else None
    reason_text = blocked.reason if blocked is not None else decision.reason
    if renderer.as_json:
        renderer.envelope(Envelope(
            command="explain", status="ok" if allowed else "denied",
            exit_code=status, data=result.as_dict(),
            reason=None if allowed else Reason.EGRESS_DENIED.value,
            message=reason_text,
            hint=None if allowed else (result.fix.command if result.fix is not None
                                       and result.fix.command else decision.suggestion)))
        return
    request = decision.request
    verdict = "allowed" if allowed else "denied"
    what = request.method or "connection"
    where = f"{decision.host or request.host}:{request.port}"
    path = f" {decision.path or request.path}" if request.method and request.path else ""
    style = "green" if allowed else "red"
    scope = f", sandbox {result.sandbox}" if result.sandbox else ""
    text = f"{verdict}: {what} {where}{path} ({request.phase} phase{scope}, {result.code})"
    rest = escape(text[len(verdict) + 2:])
    renderer.line(renderer.out_file, f"[bold {style}]{verdict}[/]: {rest}", text)
    if result.target.method_defaulted:
        renderer.plain("  (a URL without METHOD is judged as GET)")
    if decision.matched:
        renderer.plain("  matched rules:")
        for match in decision.matched:
            rule = match.rule
            mark = " <- decides" if rule == decision.deciding else ""
            where = egress_policy.rule_where(rule)
            renderer.plain(f"    {match.effect:<12} {where}: {_rule_text(rule)}{mark}")
    else:
        renderer.plain("  matched rules: none")
    for rule in decision.superseded:
        renderer.plain(f"  superseded: {rule.kit} capabilities[{rule.index}]: "
                    f"{_rule_text(rule)} (another rule grants the host outright)")
    if result.user_rules:
        renderer.plain(f"  user policy rules in force: {', '.join(result.user_rules)} "
                       "(sbx policy ls)")
    if decision.allowed and blocked is not None:
        renderer.plain(f"  policy: {decision.reason}")
    _destination(renderer, result)
    renderer.plain(f"  reason: {reason_text}")
    if not allowed:
        for line in fixes.body_lines(result.fix, decision.suggestion if blocked is None
                                     else blocked.suggestion) or [f"fix: {decision.suggestion}"]:
            renderer.plain(f"  {line}")
    for rule in result.pending:
        renderer.plain(f"  note: {rule.kit} capabilities[{rule.index}] {rule.phase}.{rule.action} "
                    f"{_rule_text(rule)} holds a ${{{{ kit.env.* }}}} reference, known only "
                    "once the image is built; it was judged literally (matching nothing), "
                    "so `sbx run` may decide otherwise")
    if result.run_refusal is not None:
        _run_refusal(renderer, result.run_refusal)


def _destination(renderer: Renderer, result: RequestExplanation) -> None:
    destination = result.destination
    if destination is None:
        return
    blocked = destination.blocked
    if blocked is not None:
        renderer.plain(f"  destination: refused ({blocked.why})")
    elif destination.resolution == "upstream":
        renderer.plain("  destination: names are resolved by the upstream proxy ([network] "
                       "upstream_proxy); internal-only names are refused here, none is")
    elif destination.resolution == "unresolved":
        renderer.plain("  destination: depends on resolution — the proxy refuses it if the "
                       "name resolves to a loopback, private, link-local or other internal "
                       "address (not in /etc/hosts; --resolve checks it now)")
    elif destination.addresses:
        renderer.plain(f"  destination: {', '.join(destination.addresses)}, public: the proxy "
                       "connects there")


def _run_refusal(renderer: Renderer, refusal: RunRefusal) -> None:
    renderer.plain(f"sbx run would refuse to start: {refusal.message} ({refusal.reason})")
    if refusal.hint:
        renderer.plain(f"  fix: {refusal.hint}")
    renderer.plain("  (the answer above comes from the kits, the config and the user policy "
                   "alone)")


def explain_named(renderer: Renderer, result: NamedAnswer) -> None:
    """A named sandbox: its kits and the rules its proxy runs with, or one request."""
    if result.request is not None:
        explain_request(renderer, result.request)
        for note in result.notes:
            renderer.plain(f"  note: {note}")
        return
    if renderer.as_json:
        renderer.envelope(Envelope(command="explain", status="ok", exit_code=0,
                                   data=result.as_dict()))
        return
    renderer.plain(f"sandbox {result.name}: {', '.join(result.kits)}")
    if result.stopped is not None:
        when = datetime.fromtimestamp(result.stopped.at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        renderer.plain(f"state: stopped ({result.stopped.reason.value}): idle for "
                       f"{result.stopped.idle_s:g} s (no client, no egress request, almost no "
                       f"CPU), stopped by its keeper at {when}")
        renderer.plain(f"  fix: sbx start {result.name}  (sbx explain "
                       f"{result.stopped.reason.value} says more)")
    if result.network is None:
        renderer.plain("network: none (its kits declare no network-policy)")
    else:
        for phase, items in result.network.items():
            renderer.plain(f"network, {phase} phase (as its proxy enforces it now):"
                           + ("" if items else " nothing allowed"))
            for item in items:
                renderer.plain(f"  {item.value:<5} {item.name}")
    renderer.plain("ports (as `sbx ports` shows them):" + ("" if result.ports else " none"))
    for row in result.ports:
        renderer.plain(f"  {row.container}/tcp  {row.where()}  ({row.source})")
    for note in result.notes:
        renderer.plain(f"note: {note}")
    renderer.plain(f"judge a request: sbx explain {result.name} [METHOD] URL|HOST[:PORT]")


def explain_sandbox(renderer: Renderer, result: SandboxExplanation, *,
                    command: str = "explain", run_refusal: RunRefusal | None = None) -> None:
    """The effective sandbox: kits, capabilities, hardening, network, credentials."""
    if renderer.as_json:
        data = result.as_dict()
        if command == "explain":
            data["run_refusal"] = None if run_refusal is None else run_refusal.as_dict()
        renderer.envelope(Envelope(command=command, status="ok", exit_code=0, data=data))
        return
    renderer.plain("kits (composition order):")
    for item in result.kits:
        renderer.plain(f"  {item.name}  {item.extra.get('kind')} "
                    f"{item.extra.get('version')}  ({item.extra.get('descriptor')})")
    renderer.plain("capabilities selected:")
    for item in result.selected or ():
        renderer.plain(f"  {item.name}  {item.value}")
    if result.skipped:
        renderer.plain("capabilities skipped:")
        for item in result.skipped:
            renderer.plain(f"  {item.name}  {item.value}: {item.extra.get('reason')}")
    renderer.plain("hardening (value, source; change with):")
    for item in result.hardening:
        renderer.plain(f"  {item.name} = {setting(item)}  ({item.source}; {item.change})")
    for phase, items in result.network.items():
        renderer.plain(f"network, {phase} phase:" + ("" if items else " nothing allowed"))
        for item in items:
            renderer.plain(f"  {item.value:<5} {item.name}")
    renderer.plain("credentials:" + ("" if result.credentials else " none"))
    for item in result.credentials:
        renderer.plain(f"  {item.name} ({item.extra.get('phase')}): {item.value}, from "
                    f"{item.source}; change: {item.change}")
    for item in result.storage:
        renderer.plain(f"storage: {item.name} ({item.value}) from {item.source}")
    for state in result.permissions:
        _permissions(renderer, state)
    for rule in result.pending:
        renderer.plain(f"note: {rule.kit} capabilities[{rule.index}] {_rule_text(rule)} holds a "
                    "${{ kit.env.* }} reference, resolved only once the image is built")
    renderer.plain(f"judge a request: {result.explain} [METHOD] URL|HOST[:PORT]")
    if run_refusal is not None:
        _run_refusal(renderer, run_refusal)


_STATUS: Final = {
    "first-run": "not recorded yet: its first run records what it asks for",
    "approved": "as approved at its last run",
    "narrower": "within what was approved at its last run (the next run records the narrower "
                "surface)",
    "widened": "asks for more than at its last approved run: the next run asks on a terminal, "
               "or needs --accept",
    "locked": "as approved by `sbx pull`",
    "not locked": "not in the kit lock",
}


def _permissions(renderer: Renderer, state: PermissionState) -> None:
    where = f"{state.record}" + (f", {state.approved}" if state.approved else "")
    renderer.plain(f"permissions of {state.reference}: {_STATUS.get(state.status, state.status)}"
                   f" ({where})")
    if state.widenings:
        renderer.plain(surface.format_widenings(state.widenings))
    elif not state.permissions.is_empty():
        renderer.plain(surface.format_surface(state.permissions))


def explain_run(renderer: Renderer, result: RunExplanation) -> None:
    """The refusals recorded for one run, each with its rule and fix."""
    if renderer.as_json:
        renderer.envelope(Envelope(command="explain", status="ok", exit_code=0,
                               data=result.as_dict()))
        return
    if result.skipped_lines:
        renderer.warn(f"{result.audit_log}: skipped {result.skipped_lines} line(s) that are not "
                  "well-formed audit events (damaged or foreign)")
    if result.run_id is None:
        renderer.plain(f"no runs recorded in {result.audit_log}")
        return
    head = f"run {result.run_id}" + (f" ({result.workload})" if result.workload else "")
    if not result.refusals:
        renderer.plain(f"{head}: no refusals recorded")
        return
    renderer.plain(f"{head}: {len(result.refusals)} refusal(s)")
    for refusal in result.refusals:
        renderer.plain(f"  {refusal.timestamp} {refusal.event}: {refusal.blocked}")
        renderer.plain(f"    rule: {refusal.rule}  code: {refusal.code}")
        for line in refusal.fix_lines or (f"fix:  {refusal.fix}",):
            renderer.plain(f"    {line}")
        renderer.plain(f"    explain: {refusal.explain}")


def _rule_text(rule: Any) -> str:
    text = str(rule.host)
    if rule.bounded:
        text += " " + (",".join(rule.methods) or "ANY")
        if rule.paths:
            text += " " + ",".join(rule.paths)
    return text


__all__ = ["explain_named", "explain_request", "explain_run", "explain_sandbox"]
