"""The user policy: network rules a person adds with ``sbx policy allow|deny`` on top of the kits'.

A rule is ``HOST[:PORT][PATH]`` with optional methods, for one phase, for every sandbox or for
one named sandbox, for ever or until an expiry. :func:`overlay` turns the rules that apply to a
sandbox into :class:`~sbx.domain.kits.compose.Rule` s (``user_rule`` = the rule's id) appended
to the kits' composed network, so :func:`sbx.domain.egress.policy.decide` judges them exactly as
it judges kits' rules: deny wins, whoever wrote the deny; a user allow never overrides a kit's
deny. A sandbox without a network policy has no network (and no proxy): user rules cannot give
it one.

The file (``<state>/policy/rules.json``, :class:`sbx.domain.egress.policystore.PolicyStore`)
is ``{"format": 1, "rules": [...]}``; the egress proxy is handed its path and re-reads it when it
changes, so a rule applies to running sandboxes at once. Parsing is here, pure, for both.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, cast

from sbx.domain.egress.hosts import normalize_host, valid_host_pattern
from sbx.domain.egress.paths import valid_path_pattern
from sbx.domain.kits.compose import (
    METHOD_ANY,
    PHASES,
    Action,
    Network,
    NetworkPhase,
    Phase,
    Rule,
)
from sbx.domain.kits.surface import diff_widenings, surface

FORMAT: Final = 1
POLICY_DIR: Final = "policy"
RULES_FILE: Final = "rules.json"
USER_POLICY: Final = "user policy"  # the ``kit`` of a user rule as the evaluator sees it
MAX_RULES: Final = 10_000
ID_BYTES: Final = 4
_ID: Final = re.compile(r"[0-9a-f]{8}")
_TOKEN: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
Scope = Literal["global", "sandbox"]


class PolicyFileError(ValueError):
    """The rules file is not one sbx wrote (the message says what is wrong)."""


@dataclass(frozen=True)
class UserRule:
    id: str
    action: Action
    host: str  # a host pattern, with :port when one was given
    path: str | None  # a path glob, or None: every path
    methods: tuple[str, ...]  # empty: every method
    phase: Phase
    sandbox: str | None  # None: every sandbox
    created: float
    expires: float | None = None

    @property
    def bounded(self) -> bool:
        return bool(self.methods or self.path)

    @property
    def target(self) -> str:
        return self.host + (self.path or "")

    def applies(self, sandbox: str | None, now: float) -> bool:
        """Whether it is in force for ``sandbox`` (None: a one-shot run) at ``now``."""
        if self.expires is not None and self.expires <= now:
            return False
        return self.sandbox is None or self.sandbox == sandbox

    def as_rule(self) -> Rule:
        return Rule(self.host, self.methods, (self.path,) if self.path else (), self.action,
                    USER_POLICY, -1, self.phase, f"rule {self.id}", user_rule=self.id)

    def describe(self) -> str:
        methods = ",".join(self.methods) if self.methods else METHOD_ANY
        scope = f"sandbox {self.sandbox}" if self.sandbox else "every sandbox"
        return f"{self.action} {self.target} {methods} ({self.phase}, {scope})"

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "action": self.action, "host": self.host, "path": self.path,
                "methods": list(self.methods), "phase": self.phase, "sandbox": self.sandbox,
                "created": self.created, "expires": self.expires}

    @classmethod
    def from_dict(cls, data: Any) -> UserRule:
        if not isinstance(data, Mapping):
            raise PolicyFileError("a rule is not an object")
        unknown = set(data) - {"id", "action", "host", "path", "methods", "phase", "sandbox",
                               "created", "expires"}
        if unknown:
            raise PolicyFileError(f"a rule has the unknown key {sorted(unknown)[0]!r}")
        rule_id, action, host = data.get("id"), data.get("action"), data.get("host")
        if not isinstance(rule_id, str) or not _ID.fullmatch(rule_id):
            raise PolicyFileError(f"the rule id {rule_id!r} is not 8 hex digits")
        if action not in ("allow", "deny"):
            raise PolicyFileError(f"rule {rule_id}: action {action!r}")
        if not isinstance(host, str) or not valid_host_pattern(host):
            raise PolicyFileError(f"rule {rule_id}: host {host!r} is not a host pattern")
        path = data.get("path")
        if path is not None and (not isinstance(path, str) or not valid_path_pattern(path)):
            raise PolicyFileError(f"rule {rule_id}: path {path!r} is not a path pattern")
        methods = data.get("methods", [])
        if not isinstance(methods, list) or not all(
                isinstance(m, str) and _TOKEN.fullmatch(m) for m in methods):
            raise PolicyFileError(f"rule {rule_id}: methods must be a list of HTTP methods")
        phase = data.get("phase")
        if phase not in PHASES:
            raise PolicyFileError(f"rule {rule_id}: phase {phase!r}")
        sandbox = data.get("sandbox")
        if sandbox is not None and not isinstance(sandbox, str):
            raise PolicyFileError(f"rule {rule_id}: sandbox must be a name or null")
        created, expires = data.get("created"), data.get("expires")
        if not isinstance(created, int | float) or isinstance(created, bool) or (
                expires is not None and not _number(expires)):
            raise PolicyFileError(f"rule {rule_id}: created/expires must be times")
        return cls(rule_id, cast(Action, action), host, path, tuple(m.upper() for m in methods),
                   cast(Phase, phase), sandbox, float(created),
                   None if expires is None else float(expires))


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


# -- the command line's target ---------------------------------------------------------------------


def parse_target(text: str, path: str | None = None) -> tuple[str, str | None]:
    """``HOST[:PORT][PATH]`` (and an optional separate PATH) → (host pattern, path glob).

    A URL's scheme is dropped (a host without ``:PORT`` is every port, as in kits); IPv6 is
    written ``[ADDR]`` or ``[ADDR]:PORT``. Raises ``ValueError`` naming what is wrong."""
    rest = text.strip()
    scheme = re.match(r"(?i)(https?)://", rest)
    if scheme is not None:
        rest = rest[scheme.end():]
    if not rest:
        raise ValueError("no host given")
    if rest.startswith("["):
        end = rest.find("]")
        if end < 0:
            raise ValueError(f"{text!r}: unclosed [")
        cut = rest.find("/", end)
    else:
        cut = rest.find("/")
    host, embedded = (rest, None) if cut < 0 else (rest[:cut], rest[cut:])
    if embedded is not None and path is not None:
        raise ValueError(f"{text!r} already has a path; give the path once")
    glob = embedded if embedded is not None else path
    if "?" in host or "#" in host or "@" in host:
        raise ValueError(f"{host!r} is not HOST[:PORT]")
    if not host or not valid_host_pattern(host):
        raise ValueError(f"{host!r} is not a host pattern (host, host:port, *.domain, "
                         "**.domain, an IP address, [IPv6]:port)")
    if glob is not None:
        glob = glob.split("?", 1)[0].split("#", 1)[0]
        if not valid_path_pattern(glob):
            raise ValueError(f"{glob!r} is not a path pattern (it starts with /; * is one "
                             "segment, ** any number)")
    name, port = _split_port(host)
    canonical = normalize_host(name) if "*" not in name else name.lower()
    shown = canonical if canonical is not None else name.lower()
    if ":" in shown and not shown.startswith("["):
        shown = f"[{shown}]"
    return shown + (f":{port}" if port else ""), glob


def _split_port(host: str) -> tuple[str, str | None]:
    if host.startswith("["):
        end = host.index("]")
        rest = host[end + 1:]
        return host[1:end], (rest[1:] if rest.startswith(":") else None)
    if host.count(":") == 1:
        name, _, port = host.partition(":")
        return name, port
    return host, None


def parse_methods(methods: Iterable[str]) -> tuple[str, ...]:
    out: list[str] = []
    for given in methods:
        for method in (m.strip() for m in given.split(",")):
            if not method:
                continue
            if not _TOKEN.fullmatch(method):
                raise ValueError(f"{method!r} is not an HTTP method")
            out.append(method.upper())
    if METHOD_ANY in out:
        return ()
    return tuple(dict.fromkeys(out))


def new_id(taken: Iterable[str]) -> str:
    used = set(taken)
    while True:
        candidate = secrets.token_hex(ID_BYTES)
        if candidate not in used:
            return candidate


# -- the file --------------------------------------------------------------------------------------


def load_text(text: str) -> tuple[UserRule, ...]:
    """The rules of a rules file's text; raises :class:`PolicyFileError`."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as error:
        raise PolicyFileError(f"not JSON ({error})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise PolicyFileError(f"not a rules file of format {FORMAT}")
    raw = data.get("rules")
    if not isinstance(raw, list) or len(raw) > MAX_RULES:
        raise PolicyFileError(f"rules must be a list of at most {MAX_RULES}")
    rules = tuple(UserRule.from_dict(item) for item in raw)
    if len({r.id for r in rules}) != len(rules):
        raise PolicyFileError("two rules share an id")
    return rules


def dump_text(rules: Sequence[UserRule]) -> str:
    return json.dumps({"format": FORMAT, "rules": [r.as_dict() for r in rules]}, indent=1,
                      sort_keys=True) + "\n"


# -- what the evaluator sees -----------------------------------------------------------------------


def applicable(rules: Iterable[UserRule], sandbox: str | None, now: float,
               ) -> tuple[UserRule, ...]:
    return tuple(r for r in rules if r.applies(sandbox, now))


def overlay(network: Network | None, rules: Iterable[UserRule], *, sandbox: str | None,
            now: float) -> Network | None:
    """The kits' network with the user rules in force for ``sandbox`` appended (allows after
    the kits' allows, denies after their denies). None stays None: no network policy, no
    network."""
    if network is None:
        return None
    active = applicable(rules, sandbox, now)
    if not active:
        return network
    phases: dict[str, NetworkPhase] = {}
    for name in PHASES:
        part = network.phase(name)
        mine = [r for r in active if r.phase == name]
        phases[name] = NetworkPhase(
            (*part.allow, *(r.as_rule() for r in mine if r.action == "allow")),
            (*part.deny, *(r.as_rule() for r in mine if r.action == "deny")),
            part.superseded)
    version = 2 if network.version == 2 or any(r.bounded for r in active) else 1
    return Network(version, phases["install"], phases["runtime"], network.optional,
                   network.origins)


def next_expiry(rules: Iterable[UserRule], now: float) -> float | None:
    """When the next rule in force lapses (the proxy re-merges then), or None."""
    times = [r.expires for r in rules if r.expires is not None and r.expires > now]
    return min(times) if times else None


def widenings(base: Network | None, rule: UserRule) -> list[Any]:
    """How ``rule`` widens what ``base`` (the kits' network of the sandbox it is for; None:
    no kit declared anything, as for a rule for every sandbox) grants, as the pull gate shows
    widenings (:func:`sbx.domain.kits.surface.diff_widenings`). A deny never widens."""
    if rule.action == "deny":
        return []
    empty = Network(2, NetworkPhase(), NetworkPhase(), False, ())
    kits = base if base is not None else empty
    merged = overlay(kits, [rule], sandbox=rule.sandbox, now=rule.created)
    return diff_widenings(_surface(kits), _surface(merged or kits))


def _surface(network: Network) -> Any:
    return surface([{"type": network.type, "config": network.config()}])


def is_user_rule(rule: Rule) -> bool:
    return bool(rule.user_rule)


__all__ = ["FORMAT", "MAX_RULES", "POLICY_DIR", "RULES_FILE", "USER_POLICY", "PolicyFileError",
           "Scope", "UserRule", "applicable", "dump_text", "is_user_rule", "load_text",
           "new_id", "next_expiry", "overlay", "parse_methods", "parse_target", "widenings"]
