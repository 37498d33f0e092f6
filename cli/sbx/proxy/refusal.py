"""What the proxy will not carry, as one value (:class:`EgressRefusal`): apart from
:mod:`sbx.proxy.refusals`, which answers the client and audits it, so the request log's
recorder can read one without importing that."""

from __future__ import annotations

from dataclasses import dataclass

from sbx.base.reasons import Reason
from sbx.domain.egress import fixes
from sbx.domain.egress.destination import Blocked
from sbx.domain.kits.composed import Rule


@dataclass(eq=False)
class EgressRefusal(Exception):
    """A request or connection the proxy will not carry, and how to tell the client."""

    status: int
    code: str
    reason: str
    host: str
    port: int
    method: str | None = None
    path: str | None = None
    scheme: str = "https"
    rule: str = "default-deny"  # the X-Sbx-Rule value
    rule_text: str = "no allow rule (deny by default)"
    suggestion: str | None = None
    sbx_reason: str = Reason.EGRESS_DENIED
    audited: bool = True
    client: str | None = None  # the client's address, on refusals of the client itself
    explain: str | None = None  # the explain command, when not the request's decision
    deciding: Rule | None = None  # the policy rule the refusal rests on, if one does
    destination: Blocked | None = None  # destination_blocked: what was refused and why
    fix: fixes.Fix | None = None  # the fix to paste (made by the Refuser, which knows the run)
    failed: bool = False  # not a decision: the proxy could not carry it (a 5xx, a 4xx)

    def __str__(self) -> str:
        return f"{self.status} {self.code}: {self.reason}"


__all__ = ["EgressRefusal"]
