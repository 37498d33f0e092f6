"""The one egress decision (KIT-SPEC-V3 §3; SPEC §8).

:func:`decide` is what the egress proxy enforces and what ``sbx explain`` explains: one function,
so the two can never disagree. It is pure (no I/O, no environment) and cheap enough to run per
request; host and path patterns are compiled once and cached.

Semantics, all decided here and nowhere else:

- Deny by default. No network policy in the composition: everything is denied (the sandbox has
  no network at all). A phase without allow rules grants nothing in that phase, and a rule of
  one phase is never consulted for the other.
- Deny wins, across kits: a deny rule that applies refuses the request whatever any allow says.
  A bare (unbounded) deny refuses every connection to its hosts; a bounded deny (``methods`` /
  ``paths``) refuses the HTTP requests it matches.
- Host patterns: see :mod:`sbx.domain.egress.hosts`.
- ``network-policy@2`` bounded entries apply per request. A host granted only by bounded allows
  admits only the HTTP requests one of them matches (method, then path); anything else is
  refused, and so is any connection sbx cannot see into (a CONNECT tunnel it does not
  intercept, non-HTTP): ``needs_inspection``. A host some unbounded allow covers is granted
  outright whatever bounded allows say about it (compose already drops the bounded allows it
  supersedes; a wildcard unbounded allow covering a bounded host wins here too). A bounded deny
  covering a host means even an unbounded host must be inspected, because the deny can only be
  applied to requests sbx sees.
- Methods: the request's method is upper-cased (``delete`` is ``DELETE``); omitted methods and
  ``ANY`` mean every method. A connection sbx cannot see into has no method (``None``), which
  is not the ``CONNECT`` method: a bounded entry naming ``CONNECT`` never admits a tunnel.
- Paths: normalised and matched as :mod:`sbx.domain.egress.paths` says; an invalid path only
  matters when a rule with ``paths`` covers the host (to a host granted outright it is
  forwarded untouched). The proxy forwards the normalised path (``Decision.path``), so what
  was checked is what the origin receives.
- A request with a method but no path (an ``explain`` question without a URL path) is judged
  conservatively: an allow bounded by paths does not admit it, a deny bounded by paths refuses
  it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from sbx.domain.egress.hosts import host_pattern, is_ip, normalize_host, pattern_covers
from sbx.domain.egress.paths import normalize_path_or_problem, path_matches
from sbx.domain.kits.compose import METHOD_ANY, Network, NetworkPhase, Phase, Rule

Effect = Literal["allow", "deny", "bounded-miss"]
Code = Literal["allowed", "default_deny", "deny_rule", "method_not_allowed", "path_not_allowed",
               "needs_inspection", "invalid_target"]
Handling = Literal["denied", "unbounded", "bounded"]

CODES: Final[tuple[Code, ...]] = ("allowed", "default_deny", "deny_rule", "method_not_allowed",
                                  "path_not_allowed", "needs_inspection", "invalid_target")
DEFAULT_PORTS: Final = {"https": 443, "http": 80}


# --- the request and the decision ----------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    """One connection or HTTP request leaving the sandbox.

    ``method`` is ``None`` for a connection sbx cannot see into (a CONNECT tunnel it does not
    intercept, any non-HTTP traffic); ``path`` is the request-target's path as sent (origin
    form, query allowed), ignored when ``method`` is ``None``.
    """

    phase: Phase
    host: str
    port: int
    method: str | None = None
    path: str | None = None
    scheme: str = "https"

    def as_dict(self) -> dict[str, Any]:
        return {"phase": self.phase, "host": self.host, "port": self.port,
                "method": self.method, "path": self.path, "scheme": self.scheme}


@dataclass(frozen=True)
class Match:
    """A rule whose host pattern covers the request, and what it did.

    ``allow``/``deny``: the rule applies to this request. ``bounded-miss``: a bounded rule covers
    the host but not this request (another method or path, or a connection it cannot see into).
    """

    rule: Rule
    effect: Effect

    def as_dict(self) -> dict[str, Any]:
        return {"effect": self.effect, "rule": rule_dict(self.rule)}


@dataclass(frozen=True)
class Decision:
    """The verdict on one :class:`Request`, with everything ``explain`` shows.

    ``matched``: every rule whose host pattern covers the request, allows before denies, each in
    composition order. ``deciding``: the rule the verdict rests on (``None`` for default deny and
    invalid targets; the bounding rule for method/path misses and inspection refusals).
    ``suggestion``: when denied, the smallest change that would allow it (or, for a deny rule,
    which rule refuses it). ``host``/``path``: the normalised target that was judged.
    ``superseded``: bounded allows for this host that compose dropped because another rule grants
    the host outright.
    """

    allowed: bool
    request: Request
    matched: tuple[Match, ...]
    deciding: Rule | None
    reason: str
    code: Code
    suggestion: str | None
    host: str | None = None
    path: str | None = None
    superseded: tuple[Rule, ...] = field(default=())

    def as_dict(self) -> dict[str, Any]:
        return {
            "allowed": self.allowed,
            "code": self.code,
            "reason": self.reason,
            "suggestion": self.suggestion,
            "request": self.request.as_dict(),
            "host": self.host,
            "path": self.path,
            "deciding": None if self.deciding is None else rule_dict(self.deciding),
            "matched": [m.as_dict() for m in self.matched],
            "superseded": [rule_dict(r) for r in self.superseded],
        }


# --- helpers the proxy and explain share ---------------------------------------------------------


def rules_for(network: Network | None, phase: Phase) -> tuple[Rule, ...]:
    """A phase's effective rules: allows then denies, in composition order."""
    if network is None:
        return ()
    rules = network.phase(phase)
    return (*rules.allow, *rules.deny)


def rule_where(rule: Rule) -> str:
    """``<kit> capabilities[i] runtime.allow``: where a kit author edits this rule (``user
    policy, rule ID (runtime.allow)`` for a rule of ``sbx policy``)."""
    if rule.user_rule:
        return f"user policy, rule {rule.user_rule} ({rule.phase}.{rule.action})"
    declared = rule.declared_at or f"capabilities[{rule.index}]"
    return f"{rule.kit} {declared} {rule.phase}.{rule.action}"


def describe_rule(rule: Rule) -> str:
    """``<kit> capabilities[i] runtime.allow: api.github.com GET,POST /repos/**``."""
    text = f"{rule_where(rule)}: {rule.host}"
    if rule.bounded:
        text += " " + (",".join(rule.methods) or METHOD_ANY)
        if rule.paths:
            text += " " + ",".join(rule.paths)
    return text


def rule_dict(rule: Rule) -> dict[str, Any]:
    return {"host": rule.host, "methods": list(rule.methods), "paths": list(rule.paths),
            "action": rule.action, "phase": rule.phase, "kit": rule.kit, "index": rule.index,
            "declared_at": rule.declared_at, "bounded": rule.bounded,
            "source": "user" if rule.user_rule else "kit",
            "user_rule": rule.user_rule or None, "description": describe_rule(rule)}


def names_address(network: Network | None, phase: Phase, host: str, port: int) -> Rule | None:
    """The first allow rule of ``phase`` that names ``host`` literally (no wildcard), if any.

    The proxy refuses loopback, link-local, private and multicast destinations unless a rule
    names that address (or name) explicitly (SPEC §8); ``*`` never counts as naming it.
    """
    name = normalize_host(host)
    if network is None or name is None:
        return None
    for rule in network.phase(phase).allow:
        pattern = host_pattern(rule.host)
        if pattern.kind == "exact" and pattern_covers(pattern, name, port):
            return rule
    return None


def address_denied(network: Network | None, phase: Phase, address: str,
                   port: int) -> Rule | None:
    """The first bare deny rule of ``phase`` naming the IP ``address`` literally, if any.

    :func:`decide` judges the name the sandbox asked for; the proxy calls this with the address
    the name resolved to, so a deny written as an address is not defeated by a name for it.
    """
    name = normalize_host(address)
    if network is None or name is None or not is_ip(name):
        return None
    for rule in network.phase(phase).deny:
        pattern = host_pattern(rule.host)
        if not rule.bounded and pattern.kind == "exact" and pattern_covers(pattern, name, port):
            return rule
    return None


# --- the decision --------------------------------------------------------------------------------


_TOKEN: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


@dataclass(frozen=True)
class _Outcome:
    code: Code
    deciding: Rule | None
    matched: tuple[Match, ...]
    problem: str = ""  # invalid_target: what is wrong
    path_known: bool = False


def _method_applies(rule: Rule, method: str | None) -> bool:
    if method is None:
        return False
    methods = {m.upper() for m in rule.methods}
    return not methods or METHOD_ANY in methods or method in methods


def _applies(rule: Rule, method: str | None, path: str | None, *, known: bool,
             conservative: bool) -> bool:
    """Whether a host-matching rule applies to the request (a bounded one needs HTTP)."""
    if not rule.bounded:
        return True
    if not _method_applies(rule, method):
        return False
    if not rule.paths:
        return True
    if path is None:
        # Unknown path: a deny must assume it applies; an allow may not assume it does.
        return conservative and not known
    return any(path_matches(p, path, deny=rule.action == "deny") for p in rule.paths)


def _evaluate(rules: NetworkPhase, host: str, port: int, method: str | None,
              raw_path: str | None) -> tuple[_Outcome, str | None]:
    allows = [r for r in rules.allow if pattern_covers(host_pattern(r.host), host, port)]
    denies = [r for r in rules.deny if pattern_covers(host_pattern(r.host), host, port)]
    path: str | None = None
    problem = ""
    known = method is not None and raw_path is not None
    if known and raw_path is not None:
        path, problem = normalize_path_or_problem(raw_path)
    # An unreadable path leaves path-bounded rules unjudged: they are left out of the deny pass
    # and refuse the request below, as an invalid target.
    deny_hits = [r for r in denies if _applies(r, method, path, known=known, conservative=True)]
    allow_hits = [r for r in allows if _applies(r, method, path, known=known, conservative=False)]
    matched = (*(Match(r, "allow" if r in allow_hits else "bounded-miss") for r in allows),
               *(Match(r, "deny" if r in deny_hits else "bounded-miss") for r in denies))

    def outcome(code: Code, deciding: Rule | None = None) -> tuple[_Outcome, str | None]:
        return _Outcome(code, deciding, matched, problem, known and path is not None), path

    if deny_hits:
        return outcome("deny_rule", deny_hits[0])
    outright = [r for r in allows if not r.bounded]
    if known and path is None and any(
            r.paths and _method_applies(r, method)
            for r in (*denies, *(() if outright else allows))):
        return outcome("invalid_target")
    if not allows:
        return outcome("default_deny")
    bounded_denies = [r for r in denies if r.bounded]
    if method is None:
        if bounded_denies:
            return outcome("needs_inspection", bounded_denies[0])
        if outright:
            return outcome("allowed", outright[0])
        return outcome("needs_inspection", allows[0])
    if outright:
        return outcome("allowed", outright[0])
    if allow_hits:
        return outcome("allowed", allow_hits[0])
    method_ok = [r for r in allows if _method_applies(r, method)]
    path_ok = [r for r in allows if not r.paths or (path is not None and any(
        path_matches(p, path) for p in r.paths))]
    if method_ok and not path_ok:
        return outcome("path_not_allowed", method_ok[0])
    return outcome("method_not_allowed", (path_ok or allows)[0])


def classify(network: Network | None, phase: Phase, host: str, port: int) -> Handling:
    """What a CONNECT to ``host:port`` needs: refuse it, tunnel it, or intercept TLS.

    ``bounded`` means some bounded rule (an allow that bounds the host, or a deny that could
    refuse some of its requests) must see each request, so the proxy terminates TLS and calls
    :func:`decide` per request. Agrees with :func:`decide` for a request without a method:
    ``unbounded`` exactly when that is allowed, ``bounded`` exactly when it needs inspection.
    """
    name = normalize_host(host)
    if network is None or name is None or not 0 < port < 65536:
        return "denied"
    result, _ = _evaluate(network.phase(phase), name, port, None, None)
    if result.code == "allowed":
        return "unbounded"
    return "bounded" if result.code == "needs_inspection" else "denied"


def decide(network: Network | None, request: Request) -> Decision:
    """Judge one request against the composed network policy (see the module docstring)."""
    target = _target(normalize_host(request.host) or request.host, request.port, request.scheme)
    if network is None:
        return Decision(
            False, request, (), None,
            "no network-policy capability is composed, so the sandbox has no network "
            "(everything is denied)",
            "default_deny",
            f"declare a network-policy capability with `{target}` in {request.phase}.allow",
        )
    host = normalize_host(request.host)
    if host is None:
        return _invalid(request, f"the host {request.host!r} is not a valid host name or address")
    if not 0 < request.port < 65536:
        return _invalid(request, f"the port {request.port} is not between 1 and 65535", host)
    method: str | None = None
    if request.method is not None:
        if not _TOKEN.fullmatch(request.method):
            return _invalid(request, f"the method {request.method!r} is not an HTTP method", host)
        method = request.method.upper()
    rules = network.phase(request.phase)
    result, path = _evaluate(rules, host, request.port, method, request.path)
    superseded = tuple(r for r in rules.superseded
                       if pattern_covers(host_pattern(r.host), host, request.port))
    target = _target(host, request.port, request.scheme)
    what = _what(method, path, request.path, result.path_known)
    reason, suggestion = _explain(network, request, result, host, target, method, what, path)
    return Decision(result.code == "allowed", request, result.matched, result.deciding, reason,
                    result.code, suggestion, host, path, superseded)


def _invalid(request: Request, problem: str, host: str | None = None) -> Decision:
    return Decision(False, request, (), None, f"{problem}; an unreadable target is refused",
                    "invalid_target", "send a well-formed host, port and method", host)


def _target(host: str, port: int, scheme: str) -> str:
    """The smallest host pattern naming this target: the host alone on its scheme's port."""
    shown = f"[{host}]" if ":" in host else host
    if DEFAULT_PORTS.get(scheme.lower()) == port:
        return shown
    return f"{shown}:{port}"


def _what(method: str | None, path: str | None, raw: str | None, known: bool) -> str:
    if method is None:
        return "a connection sbx cannot inspect"
    if known and path is not None:
        return f"{method} {path}"
    if raw is not None:
        return f"{method} {raw!r}"
    return f"{method} (no path given)"


def _grants(rules: Sequence[Rule]) -> str:
    parts: list[str] = []
    for rule in rules:
        methods = ", ".join(rule.methods) if rule.methods and METHOD_ANY not in rule.methods \
            else "any method"
        paths = ", ".join(rule.paths) if rule.paths else "any path"
        parts.append(f"{methods} on {paths}")
    return "; ".join(dict.fromkeys(parts))


def _explain(network: Network, request: Request, result: _Outcome, host: str, target: str,
             method: str | None, what: str, path: str | None) -> tuple[str, str | None]:
    phase = request.phase
    rule = result.deciding
    applied = [m.rule for m in result.matched if m.effect == "allow"]
    bounded = [m.rule for m in result.matched if m.rule.action == "allow" and m.rule.bounded]
    code = result.code
    if code == "allowed" and rule is not None:
        reason = f"allowed by rule {describe_rule(rule)}"
        if rule.bounded:
            reason += f": {what} matches it"
        spared = [m.rule for m in result.matched if m.rule.action == "deny"]
        if spared:
            reason += (f"; {len(spared)} bounded deny rule{'s' if len(spared) > 1 else ''} "
                       f"cover{'' if len(spared) > 1 else 's'} {host} but not {what}")
        return reason, None
    if code == "deny_rule" and rule is not None:
        denies = [m.rule for m in result.matched if m.effect == "deny"]
        over = f"; it overrides {describe_rule(applied[0])}" if applied else ""
        maybe = ("; no path was given, so it may apply"
                 if rule.paths and method is not None and not result.path_known else "")
        where = "; ".join(rule_where(r) for r in denies)
        kits = ", ".join(dict.fromkeys(r.kit for r in denies))
        one = len(denies) == 1
        return (f"denied by rule {describe_rule(rule)} (deny wins{over}){maybe}",
                f"{'a deny rule at' if one else 'deny rules at'} {where} "
                f"{'refuses' if one else 'refuse'} it; deny wins, so remove "
                f"{'that rule' if one else 'those rules'} or do not compose {kits}")
    if code == "invalid_target":
        return (f"the path {request.path!r} cannot be judged safely: {result.problem}; a rule "
                f"bounded by paths covers {host}, so the request is refused",
                "send the request with a plain path (no encoded `/`, no `..` above the root, "
                "no control characters)")
    if code == "default_deny":
        reason = f"no allow rule in the {phase} phase matches {target} (deny by default)"
        other: Phase = "runtime" if phase == "install" else "install"
        if any(pattern_covers(host_pattern(r.host), host, request.port)
               for r in network.phase(other).allow):
            reason += (f"; the {other} phase allows it, but {other} rules do not apply in the "
                       f"{phase} phase")
        return reason, f"add `{target}` to network-policy {phase}.allow"
    if code == "needs_inspection" and rule is not None:
        if rule.action == "deny":
            return (f"a bounded deny rule {describe_rule(rule)} covers {host}, and {what} "
                    "cannot be checked against it, so it is refused (fail closed)",
                    f"send it as HTTP(S) through the proxy so sbx can check method and path; no "
                    f"allow rule tunnels {host} while the deny rule at {rule_where(rule)} stands")
        return (f"{host} is bounded (allowed only for {_grants(bounded)} in the {phase} phase), "
                f"so {what} is refused (fail closed)",
                f"send it as HTTP(S) through the proxy so sbx can check method and path, or add "
                f"`{target}` as a bare host (no methods or paths) to network-policy "
                f"{phase}.allow")
    if rule is None or method is None:  # pragma: no cover - every other code has a rule
        return "denied", f"add `{target}` to network-policy {phase}.allow"
    reason = (f"{host} is only allowed for {_grants(bounded)} in the {phase} phase; {what} is "
              "not among them")
    if code == "path_not_allowed":
        if path is None or not result.path_known:
            return (reason + " (no path was given)",
                    "give the request's path to judge it against the rule at "
                    f"{rule_where(rule)} (hosts: {rule.host})")
        return reason, (f"add `{path}` to the paths of the rule at {rule_where(rule)} "
                        f"(hosts: {rule.host})")
    if not rule.paths or (path is not None and any(path_matches(p, path) for p in rule.paths)):
        return reason, (f"add {method} to the methods of the rule at {rule_where(rule)} "
                        f"(hosts: {rule.host})")
    entry = f"{{hosts: [{host}], methods: [{method}]" + (f", paths: [{path}]}}" if path else "}")
    return reason, f"add the entry `{entry}` to network-policy {phase}.allow"


__all__ = [
    "Request",
    "Decision",
    "Match",
    "Effect",
    "Code",
    "Handling",
    "CODES",
    "decide",
    "classify",
    "rules_for",
    "rule_where",
    "describe_rule",
    "rule_dict",
    "names_address",
    "address_denied",
]
