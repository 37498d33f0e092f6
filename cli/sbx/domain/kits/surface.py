"""The permission surface and the upgrade gate (KIT-SPEC-V3 §5; reference ``spec/surface.go``).

The surface is what the host must grant for a composition, projected from the **selected, merged,
effective** declarations and normalized (every list sorted and deduplicated) so two surfaces
compare structurally. The lock stores it; :func:`diff_widenings` reports every way a candidate
exceeds what was granted, and a widening must stop for approval. Narrowings are never reported.

HTTP grants are atoms ``"<METHOD> <host><path>"``: an unbounded network entry projects as ``ANY``
on ``/**`` (what it grants), and ``ANY`` is never expanded into a method list, because it also
admits extension methods no list names.

Surface fields beyond the reference: ``hostMountPaths`` lists ``host-mount@1`` paths apart from
``storagePaths`` (the host-mount page requires it), and the gate reports them under the category
``host-mount``; ``credentialDestinations`` lists where each credential is presented
(:mod:`sbx.domain.kits.destinations`), so moving a secret to another host is the widening
``credentials.destinations``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import fields
from typing import Any, Final, Protocol

from sbx.domain.kits import captypes
from sbx.domain.kits.surfacetypes import (
    CATEGORIES,
    JSON_FIELDS,
    Surface,
    Widening,
    format_widenings,
)

# compose's (a unit test holds them equal), here so that the lock and the gate — a pull, a
# run of a locked kit — do not import the composer (~15 ms of dataclasses).
PHASES: Final = ("install", "runtime")
METHOD_ANY: Final = "ANY"

# Declarations that grant nothing across the boundary the gate guards: they constrain the kit
# (resources), run on the entrypoint's own trust plane (hooks, files, session verbs, launch
# mode), or expose content the image already carries (context, bundled skills, ACP adapters).
# Each type's handler says so (sbx.domain.kits.captypes); listed here for the lock's readers.
NOT_SURFACE: Final = frozenset({
    "com.docker.sandbox/resources@1", "com.docker.sandbox/long-running@1",
    "com.docker.sandbox/agent-skill@1", "com.docker.sandbox/agent-sessions@1",
    "com.docker.sandbox/agent-interactive-sessions@1", "com.docker.sandbox/lifecycle@1",
    "com.docker.sandbox/agent-context@1", "com.docker.sandbox/sbx@1",
    "com.docker.sandbox/acp@1"})

PRIVILEGED_DETAIL: Final = "requests privileged execution"  # captypes.privileged's
_UNIVERSAL_HOSTS: Final = frozenset({"*", "**"})


class Projectable(Protocol):
    """What the projection reads of a composition (sbx.domain.kits.compose.Composition): its
    effective capability list. Named by shape, so this module does not import the composer."""

    def capabilities(self) -> tuple[dict[str, Any], ...]: ...


# --- projection -------------------------------------------------------------------------------


def surface(source: Projectable | Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> Surface:
    """Project a composition, an effective descriptor, or a capability list onto its surface.

    Supply the selected, merged declarations for enforcement. On an unselected descriptor, group
    members are all inventoried, which over-states rather than under-states the request.
    """
    entries: Iterable[Any]
    if isinstance(source, Mapping):
        capabilities = source.get("capabilities")
        entries = capabilities if isinstance(capabilities, list | tuple) else ()
    elif isinstance(source, Sequence):
        entries = source
    else:  # a Composition (not imported here: see PHASES)
        entries = source.capabilities()
    handler_of = captypes.handler
    lists: dict[str, list[str]] = {f.name: [] for f in fields(Surface) if f.name != "privileged"}
    flags = {"privileged": False}
    for item in _flatten(entries):
        ctype = str(item.get("type", ""))
        config = item.get("config")
        handler = handler_of(ctype)
        if not handler.on_surface:
            continue
        if not handler.project(ctype, config, lists, flags):
            # A well-known entry whose config does not decode still cannot escape the surface.
            lists["services"].append(service_entry(ctype, config))
    return Surface(privileged=flags["privileged"], **{k: tuple(v) for k, v in lists.items()})


def _flatten(entries: Iterable[Any]) -> Iterator[Mapping[str, Any]]:
    for item in entries:
        if not isinstance(item, Mapping):
            continue
        group = item.get("group")
        if isinstance(group, Mapping):
            members = group.get("capabilities")
            yield from (m for m in members or [] if isinstance(m, Mapping))
        else:
            yield item


def http_atoms(hosts: Iterable[str], methods: Sequence[str], paths: Sequence[str]) -> list[str]:
    """One ``"<METHOD> <host><path>"`` atom per method x host x path of one entry.

    Omitted methods mean ``ANY``, omitted paths ``/**``; ``ANY`` stays one atom.
    """
    effective_methods = [METHOD_ANY] if not methods or METHOD_ANY in methods else list(methods)
    effective_paths = list(paths) or ["/**"]
    return [f"{m} {h}{p}" for h in hosts for m in effective_methods for p in effective_paths]


def service_entry(ctype: str, config: Any) -> str:
    """``type``, or ``type+<first 12 hex of sha256(canonical JSON config)>`` when it has config.

    The digest is over Go ``json.Marshal`` bytes (sorted keys, no spaces, ``<>&`` and U+2028/9
    escaped) so a surface computed here matches one the reference computed.
    """
    if config is None or (isinstance(config, Mapping | list) and len(config) == 0):
        return ctype
    try:
        encoded = json.dumps(config, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                             allow_nan=False)
    except (TypeError, ValueError):
        return ctype + "+unencodable-config"
    for raw, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                         ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        encoded = encoded.replace(raw, escaped)
    return ctype + "+" + hashlib.sha256(encoded.encode()).hexdigest()[:12]


# --- the gate ---------------------------------------------------------------------------------


def diff_widenings(granted: Surface, candidate: Surface) -> list[Widening]:
    """Every way ``candidate`` exceeds ``granted``, in category order; narrowings are silent.

    A removed deny widens (the deny was part of what made the grant acceptable).
    """
    return [w for handler in captypes.WIDENING_ORDER
            for w in handler.widenings(granted, candidate)]


def format_surface(granted: Surface, indent: str = "  ") -> str:
    """Render a surface as it is recorded: one ``<field>: <entries>`` line per field."""
    return "\n".join(f"{indent}{key}: {'yes' if value is True else ', '.join(value)}"
                     for key, value in granted.to_json().items())


def _missing(granted: Iterable[str], candidate: Iterable[str]) -> list[str]:
    have = set(granted)
    return [entry for entry in candidate if entry not in have]


def _strip_port(host: str) -> str:
    return host.split(":", 1)[0]


def _parse_atom(atom: str) -> tuple[str, str, str]:
    method, _, rest = atom.partition(" ")
    host, slash, path = rest.partition("/")
    return method, host, ("/" + path) if slash else "/"


def _host_covers(granting: str, candidate: str) -> bool:
    # host:port is a single-port grant; a bare host covers every port. Only the universal
    # patterns are expanded: whether *.example.com covers api.example.com is the enforcement
    # matcher's call, and an uncovered candidate errs toward prompting.
    if granting in _UNIVERSAL_HOSTS:
        return True
    g_name, _, g_port = granting.partition(":")
    c_name, _, c_port = candidate.partition(":")
    return g_name == c_name and (not g_port or g_port == c_port)


def _path_covers(granted: str, candidate: str) -> bool:
    if granted == candidate:
        return True
    if granted.endswith("/**"):
        prefix = granted[:-2]
        return candidate.startswith(prefix) or candidate + "/" == prefix
    return False


def _atom_covers(granting: tuple[str, str, str], candidate: tuple[str, str, str]) -> bool:
    g_method, g_host, g_path = granting
    c_method, c_host, c_path = candidate
    return (_host_covers(g_host, c_host)
            and g_method in (c_method, METHOD_ANY)
            and _path_covers(g_path, c_path))


def complete_http_grants(hosts: Iterable[str], grants: Iterable[str]) -> tuple[str, ...]:
    """Add the ``ANY host/**`` grants a legacy lock's unbounded hosts implied.

    Locks written before the HTTP fields carry hosts only, yet each allowed host granted all of
    HTTP; without this an unchanged kit would report one false widening per host. A host counts
    as bounded by name (any port), matching how the projection writes atoms.
    """
    grants = tuple(grants)
    bounded = {_strip_port(_parse_atom(atom)[1]) for atom in grants}
    implied = [atom for host in hosts if _strip_port(host) not in bounded
               for atom in http_atoms([host], [], [])]
    return tuple(sorted({*grants, *implied}))


def http_widenings(granted_hosts: Sequence[str], candidate_hosts: Sequence[str],
                    granted_http: Sequence[str], candidate_http: Sequence[str]) -> list[str]:
    fresh = set(_missing(granted_hosts, candidate_hosts))

    def suppressed(entry_host: str) -> bool:
        # A newly allowed host was just reported by the host list; its atoms are not an extra
        # grant. Ports matter: a fresh :8443 must not hide a widening on the granted :443.
        name, colon, _ = entry_host.partition(":")
        if colon:
            return entry_host in fresh or name in fresh
        same_name = [h for h in candidate_hosts if _strip_port(h) == name]
        return bool(same_name) and all(h in fresh for h in same_name)

    granted = [_parse_atom(atom) for atom in granted_http]
    out: list[str] = []
    for atom in candidate_http:
        parsed = _parse_atom(atom)
        if any(_atom_covers(g, parsed) for g in granted) or suppressed(parsed[1]):
            continue
        out.append(atom)
    return out


def http_deny_removals(granted_hosts: Sequence[str], candidate_hosts: Sequence[str],
                        granted_deny: Sequence[str], candidate_deny: Sequence[str]) -> list[str]:
    # A bare deny projects twice (host list and ANY host/**); dropping it is one loss, already
    # reported by the host list. Coverage runs the other way round from allows: a candidate
    # deny that still contains a granted deny keeps it.
    dropped = set(_missing(candidate_hosts, granted_hosts))
    candidates = [_parse_atom(atom) for atom in candidate_deny]
    out: list[str] = []
    for atom in granted_deny:
        parsed = _parse_atom(atom)
        if parsed[1] in dropped:
            continue
        if not any(_atom_covers(c, parsed) for c in candidates):
            out.append(atom)
    return out


__all__ = [
    "Surface",
    "Widening",
    "surface",
    "diff_widenings",
    "format_surface",
    "format_widenings",
    "complete_http_grants",
    "http_atoms",
    "http_deny_removals",
    "http_widenings",
    "service_entry",
    "CATEGORIES",
    "JSON_FIELDS",
    "NOT_SURFACE",
    "PRIVILEGED_DETAIL",
]
