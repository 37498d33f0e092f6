"""`sbx policy allow|deny|ls|rm`: the user policy over the kits' network rules.

An allow that grants more than the kits of the sandbox it is for declare (for a rule for every
sandbox: anything at all, since it applies whatever the kits) is a widening, shown as the pull
gate shows one and approved on a terminal or with ``--yes`` — else refused
(``permission_widened``). A deny never widens, nor does removing a rule (what is left is at
most what the kits declare). Every change is audited. Running sandboxes' proxies re-read the
rules file, so a change applies to their next request.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.egress import userpolicy
from sbx.domain.egress.policystore import PolicyStore
from sbx.domain.egress.proxyconfig import ProxyConfig
from sbx.domain.egress.userpolicy import UserRule
from sbx.domain.kits.compose import Action, Network, Phase
from sbx.domain.kits.surface import format_widenings
from sbx.domain.sandbox import runrecord
from sbx.domain.sandbox.records import SandboxRecord, check_name
from sbx.seams import audit, state
from sbx.usecases.context import AppContext
from sbx.usecases.sandboxstore import SandboxStore

PROXY_CONFIG: Final = "proxy.json"
Confirm = Callable[[UserRule, Sequence[Any], str], bool]


@dataclass(frozen=True)
class RuleRequest:
    action: Action
    target: str
    path: str | None = None
    methods: tuple[str, ...] = ()
    sandbox: str | None = None
    phase: Phase = "runtime"
    for_s: float | None = None


@dataclass(frozen=True)
class Added:
    rule: UserRule
    widenings: tuple[Any, ...]
    via: str  # "not a widening" | "terminal" | "--yes"
    scope: str

    def as_dict(self) -> dict[str, Any]:
        return {"rule": self.rule.as_dict(), "widenings": [w.as_dict() for w in self.widenings],
                "via": self.via, "scope": self.scope}


@dataclass(frozen=True)
class NamedSandbox:
    record: SandboxRecord
    network: Network | None  # the kits' rules its proxy enforces (None: it has no network)
    proxy_config: Path | None


def named_sandbox(ctx: AppContext, name: str) -> NamedSandbox:
    """A named sandbox and the kits' network rules its proxy enforces (from the proxy's own
    config in its run directory: what it really runs with)."""
    record = SandboxStore(ctx.state_home).load(check_name(name))
    if record is None:
        raise SbxError(Reason.INVALID_ARGUMENT, f"no sandbox named {name}",
                       hint="`sbx ls` lists them; leave out --sandbox for a rule for every "
                            "sandbox.")
    if not record.request.get("proxy"):
        return NamedSandbox(record, None, None)
    path = runrecord.run_dir(ctx.state_home, record.run_id) / PROXY_CONFIG
    return NamedSandbox(record, ProxyConfig.load(path).network, path)


def scope_text(sandbox: str | None) -> str:
    return f"sandbox {sandbox}" if sandbox else "every sandbox"


def add(ctx: AppContext, request: RuleRequest, *, yes: bool, confirm: Confirm | None) -> Added:
    """Validate, show a widening for approval, store, audit."""
    try:
        host, path = userpolicy.parse_target(request.target, request.path)
        methods = userpolicy.parse_methods(request.methods)
    except ValueError as error:
        raise SbxError(Reason.INVALID_ARGUMENT, str(error),
                       hint="e.g. sbx policy allow api.example.com '/v1/**' --method POST") \
            from None
    base: Network | None = None
    if request.sandbox is not None:
        named = named_sandbox(ctx, request.sandbox)
        if named.network is None:
            raise SbxError(Reason.INVALID_ARGUMENT,
                           f"{request.sandbox} has no network: its kits declare no "
                           "network-policy, so it has no egress proxy and no rule can give it "
                           "one",
                           hint=f"Recreate it with a kit that declares a network-policy "
                                f"(`sbx rm {request.sandbox}`, then `sbx run --name "
                                f"{request.sandbox} ...`).")
        base = named.network
    now = time.time()
    expires = None if request.for_s is None else now + request.for_s
    draft = UserRule("00000000", request.action, host, path, methods, request.phase,
                     request.sandbox, now, expires)
    widenings = tuple(userpolicy.widenings(base, draft))
    scope = scope_text(request.sandbox)
    via = "not a widening"
    if widenings:
        if yes:
            via = "--yes"
        elif confirm is None:
            raise _widening_refused(draft, widenings, "there is no terminal to ask on")
        elif confirm(draft, widenings, scope):
            via = "terminal"
        else:
            raise _widening_refused(draft, widenings, "it was declined")
    store = PolicyStore(ctx.state_home)
    with store.editing() as rules:
        rule = UserRule(userpolicy.new_id(r.id for r in rules), draft.action, draft.host,
                        draft.path, draft.methods, draft.phase, draft.sandbox, draft.created,
                        draft.expires)
        if len(rules) >= userpolicy.MAX_RULES:
            raise SbxError(Reason.INVALID_ARGUMENT,
                           f"the user policy holds {len(rules)} rules, the most it may",
                           hint="Remove rules with `sbx policy rm ID` (`sbx policy ls`).")
        rules.append(rule)
    details: dict[str, Any] = {"rule": rule.as_dict()}
    if widenings:
        details.update(widenings=[str(w) for w in widenings], via=via)
    _audit(ctx, audit.POLICY_RULE_ADDED, details)
    return Added(rule, widenings, via, scope)


def _widening_refused(rule: UserRule, widenings: Sequence[Any], why: str) -> SbxError:
    return SbxError(
        Reason.PERMISSION_WIDENED,
        f"the rule {rule.action} {rule.target} for {scope_text(rule.sandbox)} widens what the "
        f"kits declare, and {why}; nothing was changed",
        body=format_widenings(widenings),
        hint="Review the widening, then run the command again on a terminal and confirm, or "
             "add --yes to it.",
        details={"widenings": [str(w) for w in widenings]})


def remove(ctx: AppContext, rule_id: str) -> UserRule:
    store = PolicyStore(ctx.state_home)
    with store.editing() as rules:
        found = next((r for r in rules if r.id == rule_id.strip().lower()), None)
        if found is None:
            known = ", ".join(r.id for r in rules[:20]) or "none"
            raise SbxError(Reason.INVALID_ARGUMENT, f"no user policy rule {rule_id!r} "
                           f"(rules in force: {known})",
                           hint="`sbx policy ls` lists the rules with their ids.")
        rules.remove(found)
    _audit(ctx, audit.POLICY_RULE_REMOVED, {"rule": found.as_dict()})
    return found


def rules(ctx: AppContext) -> list[UserRule]:
    """The rules in force now (a lapsed one is dropped at the next change)."""
    now = time.time()
    return [r for r in PolicyStore(ctx.state_home).load()
            if r.expires is None or r.expires > now]


def _audit(ctx: AppContext, event: str, details: dict[str, Any]) -> None:
    try:
        audit.record(ctx.state_home, event, run_id=None, severity="info", details=details)
    except OSError as error:
        raise state.unwritable(audit.audit_path(ctx.state_home), error,
                               action="audit the change in", home=ctx.state_home) from None


__all__ = ["Added", "NamedSandbox", "RuleRequest", "add", "named_sandbox", "remove", "rules",
           "scope_text"]
