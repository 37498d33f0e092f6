"""Refusals: what the proxy will not carry, the answer the client gets (HTTP 403/407/502 with
``X-Sbx-Reason``, ``X-Sbx-Rule`` and a text body naming the exact ``sbx explain`` command) and
the audit record. Every code comes from :mod:`sbx.base.reasons`: the ``X-Sbx-Reason`` value is a
:class:`~sbx.base.reasons.Reason`, the detail code an :class:`~sbx.base.reasons.EgressCode` (or the
policy's own decision code)."""

from __future__ import annotations

import asyncio
import contextlib
import shlex
from typing import Any, Final

from sbx.base.reasons import DETAILS, EgressCode, Reason
from sbx.domain.egress import fixes, proxyauth, proxystream
from sbx.domain.egress.policy import Decision, describe_rule, rule_where
from sbx.proxy.context import ProxyContext
from sbx.proxy.refusal import EgressRefusal
from sbx.proxy.streams import Stream, flush
from sbx.seams import audit

SBX_REASON: Final = "X-Sbx-Reason"
SBX_RULE: Final = "X-Sbx-Rule"
CLIENT_AUDIT_LIMIT: Final = 1000  # client refusals recorded per proxy (outsiders may flood)
_DEFAULT_DENY: Final = "default_deny"  # the policy's code (sbx.domain.egress.policy.Code)


def refusal_for(decision: Decision, *, host: str, port: int, scheme: str) -> EgressRefusal:
    """The refusal of a request the policy denied."""
    rule = decision.deciding
    if rule is not None and rule.user_rule:
        rule_id = describe_rule(rule)
        text = f"{rule_where(rule)}: {rule.host}"
    elif rule is not None:
        rule_id = describe_rule(rule)
        text = (f"{rule_id} (kit {rule.kit}, capability {rule.index}, phase {rule.phase}, "
                f"{rule.action})")
    elif decision.code == _DEFAULT_DENY:
        rule_id, text = "default-deny", "no allow rule (deny by default)"
    else:
        rule_id, text = decision.code.replace("_", "-"), f"no rule decided ({decision.code})"
    return EgressRefusal(403, decision.code, decision.reason, decision.host or host, port,
                         decision.request.method, decision.request.path, scheme, rule_id, text,
                         decision.suggestion, deciding=rule)


def proxy_refusal(code: str, reason: str, *, host: str, port: int, method: str | None = None,
                  path: str | None = None, scheme: str = "https", suggestion: str | None = None,
                  status: int = 403) -> EgressRefusal:
    """A refusal decided by the proxy itself (destination safety, SNI, Host, protocol)."""
    rule = code.replace("_", "-")
    return EgressRefusal(status, code, reason, host, port, method, path, scheme, rule,
                         f"none: refused by the proxy ({code})", suggestion)


def kit_registry_refusal(*, host: str, port: int, method: str | None = None,
                         path: str | None = None, scheme: str = "https") -> EgressRefusal:
    """The kit registry's name from a sandbox without the grant: refused at the boundary."""
    return proxy_refusal(
        EgressCode.KIT_REGISTRY_NOT_GRANTED, f"{host} is sbx's kit registry, and no kit of this "
        "sandbox declares com.docker.sandbox/kit-registry@1", host=host, port=port,
        method=method, path=path, scheme=scheme,
        suggestion="declare com.docker.sandbox/kit-registry@1 in the kit's capabilities")


def client_refusal(code: str, *, client: str, host: str = "-", port: int = 0,
                         method: str | None = None, path: str | None = None,
                         scheme: str = "https") -> EgressRefusal:
    """The refusal of a client that is not the run's sandbox (407 credentials, 403 peer)."""
    if code == proxyauth.PEER:
        status, reason = 403, (f"the client {client} is not inside the sandbox's network; only "
                                     "the sandbox may use its egress proxy")
    else:
        status = 407
        reason = ("the request carries no Proxy-Authorization with this run's proxy "
                  "credentials" if code == proxyauth.MISSING else
                  "the Proxy-Authorization does not hold this run's proxy credentials")
    return EgressRefusal(status, code, reason, host, port, method, path, scheme,
                         code.replace("_", "-"), "none: refused by the proxy (its client)",
                         "use the proxy URL of HTTP_PROXY/HTTPS_PROXY as given inside the sandbox "
                         "(it carries the run's credentials); nothing else may use this proxy",
                         Reason.PROXY_CLIENT_REFUSED, client=client,
                         explain=f"sbx explain {Reason.PROXY_CLIENT_REFUSED}")


def failure(status: int, code: str, reason: str, *, host: str = "-", port: int = 0,
            method: str | None = None, path: str | None = None, scheme: str = "https",
            sbx_reason: str = Reason.PROXY_FAILED) -> EgressRefusal:
    """Not a policy decision: the proxy could not carry the request (never a bypass). The
    5xx ones (DNS, connect, TLS, the upstream) are audited as ``egress_failed``; a 4xx is the
    client's malformed request, possibly before it was admitted, and is only logged."""
    return EgressRefusal(status, code, reason, host, port, method, path, scheme,
                         code.replace("_", "-"),
                         f"none: the proxy could not carry it ({code})", None, sbx_reason,
                         audited=status >= 500, explain=f"sbx explain {code}", failed=True)


def _url(scheme: str, host: str, port: int, path: str | None) -> str:
    shown = f"[{host}]" if ":" in host else host
    default = {"https": 443, "http": 80}.get(scheme)
    authority = shown if port == default else f"{shown}:{port}"
    return f"{scheme}://{authority}{path or '/'}"


def explain_line(command: str, refusal: EgressRefusal) -> str:
    """The exact ``sbx explain`` command that shows this decision."""
    if refusal.explain is not None:
        return refusal.explain
    if refusal.method is None or refusal.method == "CONNECT":
        shown = f"[{refusal.host}]" if ":" in refusal.host else refusal.host
        return f"{command} {shlex.quote(f'{shown}:{refusal.port}')}"
    url = _url(refusal.scheme, refusal.host, refusal.port, refusal.path)
    return f"{command} {refusal.method} {shlex.quote(url)}"


def clean(text: str, limit: int = 2000) -> str:
    """One line of printable text: refusal bodies and headers never carry raw client bytes."""
    out = "".join(c if c.isprintable() else "?" for c in text)
    return out if len(out) <= limit else out[:limit] + "..."


_WHAT: Final[dict[str, str]] = {
    Reason.EGRESS_DENIED: "blocked by sbx egress policy",
    Reason.PROXY_CLIENT_REFUSED: "refused by the sbx egress proxy: only its sandbox may use it",
    Reason.CREDENTIAL_NOT_ISSUED: "refused by the sbx egress proxy: a credential sbx did not "
                                  "issue",
}


def refusal_body(refusal: EgressRefusal, explain_command: str) -> str:
    what = _WHAT.get(refusal.sbx_reason, "not carried by the sbx egress proxy")
    lines = [
        f"{what} ({refusal.status}, {refusal.sbx_reason}: {refusal.code})",
        f"host: {refusal.host}:{refusal.port}",
        f"method: {refusal.method or 'CONNECT'}",
        f"path: {refusal.path or '-'}",
        f"rule: {refusal.rule_text}",
        f"reason: {refusal.reason}",
    ]
    fix_lines = fixes.body_lines(refusal.fix, refusal.suggestion)
    if not fix_lines and refusal.code in DETAILS:
        fix_lines = [f"fix: {DETAILS[refusal.code].fix}"]
    lines.extend(fix_lines)
    lines.append(f"explain: {explain_line(explain_command, refusal)}")
    return "\n".join(clean(line) for line in lines) + "\n"


_STATUS_TEXT: Final = {400: "Bad Request", 403: "Forbidden", 407: "Proxy Authentication Required",
                             413: "Content Too Large", 414: "URI Too Long",
                             431: "Request Header Fields Too Large", 502: "Bad Gateway",
                             503: "Service Unavailable", 504: "Gateway Timeout"}


def refusal_response(refusal: EgressRefusal, explain_command: str) -> bytes:
    """The complete HTTP/1.1 response for a refusal (the connection is closed after it)."""
    body = refusal_body(refusal, explain_command).encode("utf-8")
    rule = clean(refusal.rule, 500).encode("ascii", "replace")
    head = (f"HTTP/1.1 {refusal.status} {_STATUS_TEXT.get(refusal.status, 'Error')}\r\n"
            f"Content-Type: text/plain; charset=utf-8\r\n"
            f"{SBX_REASON}: {refusal.sbx_reason}\r\n").encode("ascii")
    head += SBX_RULE.encode("ascii") + b": " + rule + b"\r\n"
    if refusal.status == 407:
        head += b'Proxy-Authenticate: Basic realm="sbx egress proxy"\r\n'
    head += (f"Content-Length: {len(body)}\r\nConnection: close\r\n"
             "Cache-Control: no-store\r\n\r\n").encode("ascii")
    return head + body


class Refuser:
    """Answers refusals to the client and audits them, within the audit budgets: the
    sandbox's refusals (``limits.max_audit_records``) and those of outsiders (their own, so
    they cannot crowd out the sandbox's)."""

    def __init__(self, ctx: ProxyContext) -> None:
        self.ctx = ctx
        self._audited = 0
        self._client_audited = 0

    async def refuse(self, stream: Stream, refusal: EgressRefusal) -> None:
        self.audit(refusal)  # makes its fix too, for the body
        with contextlib.suppress(Exception):
            async with asyncio.timeout(5):
                await stream.write(refusal_response(refusal, self.ctx.explain_command))
                await flush(stream)

    def fix(self, refusal: EgressRefusal) -> fixes.Fix | None:
        """The narrowest fix of a refusal, for this run's sandbox and phase."""
        config = self.ctx.config
        return fixes.for_refusal(
            code=str(refusal.code), host=refusal.host, port=refusal.port,
            scheme=refusal.scheme, method=refusal.method, path=refusal.path,
            phase=self.ctx.phase, sandbox=config.sandbox, deciding=refusal.deciding,
            destination=refusal.destination, network=self.ctx.network,
            kit_files=config.kit_files)

    def audit(self, refusal: EgressRefusal) -> None:
        """Log the refusal (the request log) and audit it (the audit log), within budgets."""
        if refusal.client is not None and refusal.code == proxyauth.PEER \
                and self._client_audited >= CLIENT_AUDIT_LIMIT:
            return  # an outsider flooding: neither log nor audit keeps more of it
        if refusal.fix is None and refusal.client is None:
            refusal.fix = self.fix(refusal)
        self.ctx.recorder.refusal(refusal)
        if not refusal.audited:
            return
        if refusal.client is not None:
            if self._client_audited >= CLIENT_AUDIT_LIMIT:
                return
            self._client_audited += 1
            last = self._client_audited == CLIENT_AUDIT_LIMIT
        else:
            if self._audited >= self.ctx.limits.max_audit_records:
                return
            self._audited += 1
            last = self._audited == self.ctx.limits.max_audit_records
        details: dict[str, Any] = {
            "host": refusal.host, "port": refusal.port, "method": refusal.method or "CONNECT",
            "path": refusal.path, "scheme": refusal.scheme, "rule": refusal.rule,
            "code": refusal.code, "phase": self.ctx.phase, "status": refusal.status}
        if refusal.client is not None:
            details["client"] = refusal.client
        if config_sandbox := self.ctx.config.sandbox:
            details["sandbox"] = config_sandbox
        if refusal.fix is not None:
            details["fix"] = refusal.fix.as_dict()
        if refusal.suggestion:
            details["suggestion"] = refusal.suggestion
        if last:
            details["last"] = "audit limit reached: later refusals are not recorded"
        config = self.ctx.config
        event = audit.EGRESS_FAILED if refusal.failed else audit.EGRESS_DENIED
        redacted = self.ctx.recorder.redact(details)
        if self.ctx.lines is not None:
            self.ctx.lines.emit(proxystream.AUDIT, audit.entry(
                event, run_id=config.run_id, severity="warning", details=redacted))
            return
        try:
            audit.record_at(config.audit_log, event, run_id=config.run_id,
                            severity="warning", details=redacted)
        except OSError as error:
            self.ctx.stderr(f"cannot write the audit log: {error.strerror}")


__all__ = ["CLIENT_AUDIT_LIMIT", "SBX_REASON", "SBX_RULE", "EgressRefusal", "Refuser", "clean",
           "client_refusal", "explain_line", "failure", "proxy_refusal", "refusal_body",
           "refusal_for", "refusal_response"]
