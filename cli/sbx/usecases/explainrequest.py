"""`sbx explain ... [METHOD] URL|HOST[:PORT]`: one request judged as the proxy would judge it.

Three steps, each the proxy's own function: the kits' network with the user policy in force for
the sandbox overlaid (:func:`sbx.domain.egress.userpolicy.overlay`), the policy decision
(:func:`sbx.domain.egress.policy.decide`), then — when the policy allows it — the destination
checks (:func:`sbx.domain.egress.destination.judge`) on what the name resolves to here:
``/etc/hosts`` (no query leaves the machine), or the system resolver with ``--resolve``; with
an upstream proxy names are left to it, as the proxy leaves them. A refusal comes with the fix
the 403 body prints (:func:`sbx.domain.egress.fixes.for_refusal`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sbx.domain.egress import fixes
from sbx.domain.egress.destination import DestinationVerdict, judge
from sbx.domain.egress.policy import Decision, Request, decide, rule_dict
from sbx.domain.egress.userpolicy import UserRule, overlay
from sbx.domain.kits.compose import Network, Phase, Rule

if TYPE_CHECKING:
    from sbx.base.errors import SbxError


@dataclass(frozen=True)
class Target:
    """A parsed ``[METHOD] URL|HOST[:PORT]``; ``method`` None is a connection (no HTTP seen)."""

    text: str
    host: str
    port: int
    scheme: str
    method: str | None
    path: str | None
    method_defaulted: bool = False

    def request(self, phase: Phase) -> Request:
        return Request(phase=phase, host=self.host, port=self.port, method=self.method,
                       path=self.path, scheme=self.scheme)


@dataclass(frozen=True)
class RunRefusal:
    """What ``sbx run`` would refuse the same request with (the reason run gives)."""

    reason: str
    message: str
    hint: str | None

    @classmethod
    def of(cls, error: SbxError) -> RunRefusal:
        return cls(error.reason.value, error.message, error.hint)

    def as_dict(self) -> dict[str, Any]:
        return {"reason": self.reason, "message": self.message, "hint": self.hint}


@dataclass(frozen=True)
class RequestExplanation:
    kits: tuple[str, ...]
    target: Target
    decision: Decision
    pending: tuple[Rule, ...] = ()
    destination: DestinationVerdict | None = None
    fix: fixes.Fix | None = None
    run_refusal: RunRefusal | None = None
    sandbox: str | None = None
    user_rules: tuple[str, ...] = ()  # ids of the user policy rules in force for it

    @property
    def allowed(self) -> bool:
        blocked = self.destination is not None and self.destination.blocked is not None
        return self.decision.allowed and not blocked

    @property
    def code(self) -> str:
        if self.decision.allowed and self.destination is not None \
                and self.destination.blocked is not None:
            return "destination_blocked"
        return self.decision.code

    def as_dict(self) -> dict[str, Any]:
        destination = self.destination
        return {
            "kits": list(self.kits),
            "sandbox": self.sandbox,
            "target": self.target.text,
            "method_defaulted": self.target.method_defaulted,
            "allowed": self.allowed,
            "code": self.code,
            "decision": self.decision.as_dict(),
            "destination": None if destination is None else {
                "resolution": destination.resolution, "addresses": list(destination.addresses),
                "blocked": None if destination.blocked is None else {
                    "address": destination.blocked.address, "why": destination.blocked.why,
                    "reason": destination.blocked.reason}},
            "fix": None if self.fix is None else self.fix.as_dict(),
            "user_rules": list(self.user_rules),
            "run_refusal": None if self.run_refusal is None else self.run_refusal.as_dict(),
            "pending_env": [rule_dict(r) for r in self.pending],
        }


def judge_request(network: Network | None, kits: Sequence[str], target: Target, phase: Phase,
                  *, user_rules: Sequence[UserRule] = (), sandbox: str | None = None,
                  upstream: bool = False, answers: Sequence[str] | None = None,
                  kit_files: Mapping[str, str] | None = None, pending: tuple[Rule, ...] = (),
                  run_refusal: RunRefusal | None = None) -> RequestExplanation:
    """The proxy's verdict on ``target`` for a sandbox whose kits compose ``network``
    (``answers``: what the host resolves to here, None when unknown)."""
    now = time.time()
    merged = overlay(network, user_rules, sandbox=sandbox, now=now)
    decision = decide(merged, target.request(phase))
    in_force = tuple(r.id for r in user_rules if r.applies(sandbox, now)) \
        if merged is not None else ()
    destination: DestinationVerdict | None = None
    if decision.allowed:
        destination = judge(merged, phase, decision.host or target.host, target.port,
                            upstream=upstream, answers=answers)
    code: str = decision.code
    blocked = destination.blocked if destination is not None else None
    if blocked is not None:
        code = "destination_blocked"
    fix = None if decision.allowed and blocked is None else fixes.for_refusal(
        code=code, host=decision.host or target.host, port=target.port, scheme=target.scheme,
        method=target.method, path=decision.path or target.path, phase=phase, sandbox=sandbox,
        deciding=decision.deciding, destination=blocked, network=merged, kit_files=kit_files)
    return RequestExplanation(tuple(kits), target, decision, pending, destination, fix,
                              run_refusal, sandbox, in_force)


__all__ = ["RequestExplanation", "RunRefusal", "Target", "judge_request"]
