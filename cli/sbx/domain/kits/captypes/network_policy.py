"""``network-policy@1`` and ``network-policy@2``: what the sandbox may reach, per phase.

Enforced at sbx's egress proxy (sbx.domain.egress reads ``Composition.network``); this module
owns the descriptor side. ``@2`` entries are a host string or ``{hosts, methods?, paths?}``; a
bounded allow names its hosts literally. Merging unions allow and deny per phase, states ``@2``
if any input did, and keeps a host one kit grants unbounded unbounded (a bounded allow for it is
superseded). On the surface, unbounded hosts are listed per phase and every grant is an HTTP
atom; a new allow or a removed deny widens.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final

from sbx.domain.kits.captypes.base import (
    PHASES,
    Block,
    CapabilityEntry,
    Handler,
    Merge,
    Out,
    items,
    mapping,
    missing,
    show,
    str_list,
    strings,
    strip_port,
)
from sbx.domain.kits.composed import Network, NetworkPhase, Rule
from sbx.domain.kits.diagnostics import Parts
from sbx.domain.kits.placeholders import contains_placeholder
from sbx.domain.kits.surface import (
    Widening,
    complete_http_grants,
    http_atoms,
    http_deny_removals,
    http_widenings,
)
from sbx.domain.kits.types import NETWORK_V1, NETWORK_V2

if TYPE_CHECKING:
    from sbx.domain.kits.composed import ComposedParts, Network, Origin, Rule
    from sbx.domain.kits.surfacetypes import Surface, Widening

HTTP_METHODS: Final = frozenset({"CONNECT", "DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST",
                                 "PUT", "TRACE"})
METHOD_ANY: Final = "ANY"
MAX_HTTP_GRANTS: Final = 10_000  # per network-policy@2 entry (hosts x methods x paths)
ACTIONS: Final = ("allow", "deny")


class NetworkPolicy(Handler):
    types = (NETWORK_V1, NETWORK_V2)
    singleton = True
    implemented = True

    # -- rules -------------------------------------------------------------------------------

    def check(self, entry: CapabilityEntry, config: Mapping[str, Any], kind: str | None,
              out: Out) -> None:
        if entry.type != NETWORK_V2:
            return
        grants = 0
        for phase in PHASES:
            rules = mapping(config.get(phase))
            for side in ACTIONS:
                for j, raw in enumerate(items(rules.get(side))):
                    if isinstance(raw, Mapping):
                        _check_rule(entry.at("config", phase, side, j), phase, side, raw, out)
                        grants += (len(items(raw.get("hosts"))) * max(len(items(raw.get(
                            "methods"))), 1) * max(len(items(raw.get("paths"))), 1))
        if grants > MAX_HTTP_GRANTS:
            # Each host x method x path is one grant in the permission surface a pull compares
            # (sbx.domain.kits.surface); a few hundred list items must not multiply into
            # millions.
            out.add(entry.at("config"), f"the policy combines {grants} host x method x path "
                                        f"grants, more than {MAX_HTTP_GRANTS}: split it by "
                                        "host, or drop methods or paths that add nothing")

    def check_block(self, block: Block, out: Out) -> None:
        v1 = block.keys.seen.get(("singleton", NETWORK_V1))
        v2 = block.keys.seen.get(("singleton", NETWORK_V2))
        if v1 is not None and v2 is not None:
            out.add((*v2, "type"), f"{NETWORK_V2} cannot be declared beside {NETWORK_V1} at "
                                   f"{show(v1)}; a descriptor states one network-policy "
                                   "version")

    # -- composition -------------------------------------------------------------------------

    def add(self, merge: Merge, origin: Origin, item: Mapping[str, Any],
            config: Mapping[str, Any], optional: bool) -> None:
        merge.asks("network").append((origin, item.get("type") == NETWORK_V2, config,
                                      optional))

    def finish(self, merge: Merge, parts: dict[str, Any]) -> None:
        parts["network"] = _merged(merge.asks("network"))

    def effective(self, composition: ComposedParts) -> Iterable[tuple[str, Any, bool]]:
        network = composition.network
        if network is not None:
            yield network.type, network.config(), network.optional

    # -- surface -----------------------------------------------------------------------------

    def project(self, ctype: str, config: Any, lists: dict[str, list[str]],
                flags: dict[str, bool]) -> bool:
        return _project(config, lists, v2=ctype == NETWORK_V2)

    def widenings(self, granted: Surface, candidate: Surface) -> Iterator[Widening]:
        g, c = granted, candidate
        yield from missing("network.install.allow", g.network_install_allow,
                           c.network_install_allow)
        yield from missing("network.runtime.allow", g.network_runtime_allow,
                           c.network_runtime_allow)
        yield from missing("network.install.deny-removed", c.network_install_deny,
                           g.network_install_deny)
        yield from missing("network.runtime.deny-removed", c.network_runtime_deny,
                           g.network_runtime_deny)
        for phase in PHASES:
            allow = getattr(g, f"network_{phase}_allow")
            for atom in http_widenings(
                    allow, getattr(c, f"network_{phase}_allow"),
                    complete_http_grants(allow, getattr(g, f"network_{phase}_http_allow")),
                    getattr(c, f"network_{phase}_http_allow")):
                yield Widening(f"network.{phase}.http.allow", atom)
        for phase in PHASES:
            for atom in http_deny_removals(
                    getattr(g, f"network_{phase}_deny"), getattr(c, f"network_{phase}_deny"),
                    getattr(g, f"network_{phase}_http_deny"),
                    getattr(c, f"network_{phase}_http_deny")):
                yield Widening(f"network.{phase}.http.deny-removed", atom)


def _check_rule(at: Parts, phase: str, side: str, raw: Mapping[str, Any], out: Out) -> None:
    methods = raw.get("methods")
    paths = raw.get("paths")
    method_list = items(methods)
    seen: set[str] = set()
    for k, method in enumerate(method_list):
        if not isinstance(method, str) or contains_placeholder(method):
            continue
        if method != METHOD_ANY and method not in HTTP_METHODS:
            out.add((*at, "methods", k), f"{phase} {side} entry method {method!r} is not an "
                                         f"uppercase HTTP method or {METHOD_ANY}")
        if method in seen:
            out.add((*at, "methods", k), f"{phase} {side} entry repeats method {method!r}")
        seen.add(method)
    if METHOD_ANY in seen and len(method_list) > 1:
        out.add((*at, "methods"), f"{METHOD_ANY} already covers every method; it must stand "
                                  "alone")
    if "paths" in raw and not method_list:
        out.add((*at, "paths"), "paths require methods: name the methods the paths bound, or "
                                f"write methods: [{METHOD_ANY}]")
    for k, path in enumerate(items(paths)):
        if isinstance(path, str) and not contains_placeholder(path) and not path.startswith("/"):
            out.add((*at, "paths", k), f'{phase} {side} entry path {path!r} must start with "/"')
    bounded = bool(method_list) or bool(items(paths))
    if side == "allow" and bounded:
        for k, host in enumerate(items(raw.get("hosts"))):
            if isinstance(host, str) and "*" in host and not contains_placeholder(host):
                out.add((*at, "hosts", k), f"{phase} allow entry bounds the pattern {host!r}; "
                                           "an entry with methods or paths names its hosts "
                                           "literally")


def allow_hosts(config: Mapping[str, Any], phase: str) -> set[str] | None:
    """Hosts (port stripped) a policy allows in a phase, bounded or not; None if unreadable."""
    hosts: set[str] = set()
    for raw in items(mapping(config.get(phase)).get("allow")):
        if isinstance(raw, str):
            hosts.add(strip_port(raw))
        elif isinstance(raw, Mapping):
            hosts.update(strip_port(h) for h in strings(raw.get("hosts")))
        else:
            return None
    return hosts


# -- the merge ------------------------------------------------------------------------------------

def _merged(asks: list[tuple[Origin, bool, Mapping[str, Any], bool]]) -> Network | None:
    if not asks:
        return None
    rules: dict[tuple[str, str], list[Rule]] = {}
    for origin, _v2, cfg, _optional in asks:
        for phase in PHASES:
            block = cfg.get(phase)
            if not isinstance(block, Mapping):
                continue  # an absent phase block grants nothing for that phase
            for action in ACTIONS:
                for entry in block.get(action) or []:
                    rules.setdefault((phase, action), []).extend(
                        _rules_of(entry, action, phase, origin))
    phases: dict[str, NetworkPhase] = {}
    for phase in PHASES:
        allow = rules.get((phase, "allow"), [])
        deny = rules.get((phase, "deny"), [])
        outright = {r.host for r in allow if not r.bounded}
        universal = bool(outright & {"*", "**"})
        # The union of a bounded and an unbounded grant over one host IS the unbounded grant;
        # keeping both would let the narrower one read as a restriction it is not.
        kept = [r for r in allow
                if not r.bounded or (r.host not in outright and not universal)]
        superseded = [r for r in allow if r not in kept]
        phases[phase] = NetworkPhase(tuple(kept), tuple(deny), tuple(superseded))
    return Network(
        version=2 if any(v2 for _, v2, _, _ in asks) else 1,
        install=phases["install"],
        runtime=phases["runtime"],
        optional=all(optional for *_, optional in asks),
        origins=tuple(origin for origin, *_ in asks),
    )


def _rules_of(entry: Any, action: Any, phase: Any, origin: Origin) -> list[Rule]:
    if isinstance(entry, str):
        return [Rule(entry, (), (), action, origin.kit, origin.index, phase, origin.path)]
    if not isinstance(entry, Mapping):
        return []
    methods = tuple(str_list(entry.get("methods")))
    paths = tuple(str_list(entry.get("paths")))
    return [Rule(host, methods, paths, action, origin.kit, origin.index, phase, origin.path)
            for host in str_list(entry.get("hosts"))]


# -- the surface ----------------------------------------------------------------------------------

def _project(config: Any, out: dict[str, list[str]], *, v2: bool) -> bool:
    if config is None:
        return True  # nothing requested in either phase
    if not isinstance(config, Mapping) or not set(config) <= set(PHASES):
        return False
    decoded: dict[tuple[str, str], list[tuple[list[str], list[str], list[str]]]] = {}
    for phase in PHASES:
        block = config.get(phase)
        if block is None:
            continue
        if not isinstance(block, Mapping) or not set(block) <= {"allow", "deny"}:
            return False
        for action in ACTIONS:
            entries = block.get(action) or []
            if not isinstance(entries, list):
                return False
            for entry in entries:
                parsed = _surface_entry(entry, v2=v2)
                if parsed is None:
                    return False
                decoded.setdefault((phase, action), []).append(parsed)
    # Only a fully decoded policy projects: a half-read one would under-state the request.
    for (phase_name, action_name), parsed_entries in decoded.items():
        for hosts, methods, paths in parsed_entries:
            if not methods and not paths:
                out[f"network_{phase_name}_{action_name}"].extend(hosts)
            out[f"network_{phase_name}_http_{action_name}"].extend(
                http_atoms(hosts, methods, paths))
    return True


def _surface_entry(entry: Any, *, v2: bool) -> tuple[list[str], list[str], list[str]] | None:
    if isinstance(entry, str):
        return [entry], [], []
    if not v2 or not isinstance(entry, Mapping) or not set(entry) <= {"hosts", "methods",
                                                                        "paths"}:
        return None
    lists: list[list[str]] = []
    for key in ("hosts", "methods", "paths"):
        value = entry.get(key)
        if value is None:
            value = []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            return None
        lists.append(list(value))
    hosts, methods, paths = lists
    return (hosts, methods, paths) if hosts else None


HANDLER: Final = NetworkPolicy()

__all__ = ["ACTIONS", "HANDLER", "HTTP_METHODS", "MAX_HTTP_GRANTS", "METHOD_ANY", "NETWORK_V1",
           "NETWORK_V2", "NetworkPolicy", "allow_hosts"]
