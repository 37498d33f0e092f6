"""Runtime composition of capability declarations (KIT-SPEC-V3 §4.2, §3.4).

The selected, flattened capability entries of every resolved kit are folded, in dependency order
(``Resolution.topological``), into one :class:`Composition`: the effective request the enforcement
code applies and ``sbx explain`` shows. Every merged part keeps its provenance (kit reference,
capability index, declaration path) because a merged entry can stand for several kits and the
user must be able to see which kit asked for what.

Merge rules (the runtime never picks one of two incompatible requests or blends their settings):

- network policy: allow and deny union per phase; the output is ``@2`` if any input was; a host
  one kit grants unbounded stays unbounded (a bounded allow for it is superseded);
- credentials: split per listed phase; one (service, phase), one owner;
- ssh-agent: per phase, unrestricted if any asker is, else the union of ``sign``/``authenticate``;
- lifecycle: install, startup and files concatenate in dependency order; one file path, one
  author; one ``interactive`` tail;
- resources, agent-sessions, agent-interactive-sessions: one author (identical restatement ok);
- volume: same cleaned path merges when the storage configuration is equivalent, else error;
- host-mount: one owner per path, even for identical requests, and never shared with a volume;
- port: deduplicated on (container, transport); usb-device: on the exact entry;
- agent-skills: union, the same path takes the widest mode; agent-skill: one source per name;
- config-less and unknown types: presence union (unknown ones deduplicated on type + config);
- ``optional``: a merged entry is required if any contributor requires it.

Groups must be selected and flattened before composition; a group item left in is an error.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any, Final, Literal, NoReturn

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.kits.resolve import Resolution
from sbx.domain.kits.types import (
    ACP,
    AGENT_CONTEXT,
    AGENT_SESSIONS,
    AGENT_SKILL,
    AGENT_SKILLS,
    CREDENTIAL,
    GIT_IDENTITY,
    HOST_MOUNT,
    KIT_REGISTRY,
    LIFECYCLE,
    LONG_RUNNING,
    PORT,
    PRIVILEGED,
    RESOURCES,
    SBX,
    SSH_AGENT,
    USB_DEVICE,
    VOLUME,
)
from sbx.domain.kits.types import INTERACTIVE_SESSIONS as AGENT_INTERACTIVE_SESSIONS
from sbx.domain.kits.types import NETWORK_V1 as NETWORK_POLICY_V1
from sbx.domain.kits.types import NETWORK_V2 as NETWORK_POLICY_V2
from sbx.domain.kits.versions import normalize_name

CONFIGLESS_TYPES: Final = frozenset({PRIVILEGED, KIT_REGISTRY, SBX, LONG_RUNNING, GIT_IDENTITY})
SOLE_AUTHOR_TYPES: Final = {RESOURCES: "resources", AGENT_SESSIONS: "agent-sessions",
                            AGENT_INTERACTIVE_SESSIONS: "agent-interactive-sessions"}
Phase = Literal["install", "runtime"]
Action = Literal["allow", "deny"]
Stage = Literal["install", "startup"]

PHASES: Final[tuple[Phase, Phase]] = ("install", "runtime")
ACTIONS: Final[tuple[Action, Action]] = ("allow", "deny")
METHOD_ANY: Final = "ANY"
COMPOSE_MESSAGE: Final = "the kit set does not compose"


@dataclass(frozen=True)
class Contribution:
    """One kit's selected capability entries, in the order the kit declared them.

    ``paths`` names each entry's declaration path when selection flattened groups (e.g.
    ``capabilities[2].group.capabilities[0]``); by default entry ``i`` is ``capabilities[i]``.
    """

    reference: str
    capabilities: Sequence[Mapping[str, Any]]
    paths: Sequence[str] | None = None

    def path(self, index: int) -> str:
        if self.paths is not None and index < len(self.paths):
            return self.paths[index]
        return f"capabilities[{index}]"


@dataclass(frozen=True)
class Origin:
    """Where a merged request came from: kit reference, entry index, declaration path."""

    kit: str
    index: int
    path: str

    def __str__(self) -> str:
        return f"{self.kit} {self.path}"


@dataclass(frozen=True)
class Rule:
    """One host of one network entry. ``methods``/``paths`` empty = unbounded (the connection).
    ``user_rule``: the id of the user policy rule this is (``sbx policy``), empty for a kit's."""

    host: str
    methods: tuple[str, ...]
    paths: tuple[str, ...]
    action: Action
    kit: str
    index: int
    phase: Phase
    declared_at: str = ""
    user_rule: str = ""

    @property
    def bounded(self) -> bool:
        return bool(self.methods or self.paths)

    @property
    def effective_methods(self) -> tuple[str, ...]:
        """Methods as enforcement reads them: ``ANY`` when none were named."""
        if not self.methods or METHOD_ANY in self.methods:
            return (METHOD_ANY,)
        return self.methods

    @property
    def effective_paths(self) -> tuple[str, ...]:
        return self.paths or ("/**",)

    def entry(self) -> str | dict[str, Any]:
        """This rule as a network-policy@2 entry (a bare string when unbounded)."""
        if not self.bounded:
            return self.host
        entry: dict[str, Any] = {"hosts": [self.host], "methods": list(self.methods)}
        if self.paths:
            entry["paths"] = list(self.paths)
        return entry


@dataclass(frozen=True)
class NetworkPhase:
    """One phase's merged rules; ``superseded``: bounded allows another rule grants outright."""

    allow: tuple[Rule, ...] = ()
    deny: tuple[Rule, ...] = ()
    superseded: tuple[Rule, ...] = ()

    def config(self, version: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, rules in (("allow", self.allow), ("deny", self.deny)):
            entries = _dedupe(rule.host if version == 1 else rule.entry() for rule in rules)
            if entries:
                out[key] = entries
        return out


@dataclass(frozen=True)
class Network:
    version: int
    install: NetworkPhase
    runtime: NetworkPhase
    optional: bool
    origins: tuple[Origin, ...]

    def phase(self, name: Phase) -> NetworkPhase:
        return self.install if name == "install" else self.runtime

    @property
    def type(self) -> str:
        return NETWORK_POLICY_V2 if self.version == 2 else NETWORK_POLICY_V1

    def config(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in PHASES:
            rules = self.phase(name).config(self.version)
            if rules:
                out[name] = rules
        return out


@dataclass(frozen=True)
class Credential:
    """One (service, phase) credential request; ``config`` has ``phase`` narrowed to this one."""

    service: str
    phase: Phase
    config: Mapping[str, Any]
    optional: bool
    kit: str
    index: int
    declared_at: str = ""


@dataclass(frozen=True)
class SSHAgentGrant:
    phase: Phase
    unrestricted: bool
    sign: tuple[str, ...]
    authenticate: tuple[str, ...]
    optional: bool
    origins: tuple[Origin, ...]

    def config(self) -> dict[str, Any]:
        if self.unrestricted:
            return {"phase": self.phase}
        out: dict[str, Any] = {"phase": self.phase, "unrestricted": False}
        if self.sign:
            out["sign"] = list(self.sign)
        if self.authenticate:
            out["authenticate"] = list(self.authenticate)
        return out


@dataclass(frozen=True)
class Hook:
    """One install or startup hook; ``position`` is its index in that kit's list."""

    stage: Stage
    command: str | tuple[str, ...]
    user: str | None
    env: tuple[str, ...]
    background: bool
    description: str | None
    config: Mapping[str, Any]
    kit: str
    index: int
    position: int
    declared_at: str = ""


@dataclass(frozen=True)
class FileWrite:
    path: str
    content: str
    mode: str | None
    overwrite: bool
    description: str | None
    config: Mapping[str, Any]
    kit: str
    index: int
    position: int
    declared_at: str = ""


@dataclass(frozen=True)
class Lifecycle:
    install: tuple[Hook, ...]
    startup: tuple[Hook, ...]
    files: tuple[FileWrite, ...]
    interactive: tuple[str, ...] | None
    interactive_origin: Origin | None
    optional: bool
    origins: tuple[Origin, ...]

    def config(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, items in (("install", self.install), ("startup", self.startup),
                           ("files", self.files)):
            if items:
                out[key] = [dict(item.config) for item in items]
        if self.interactive is not None:
            out["interactive"] = list(self.interactive)
        return out


@dataclass(frozen=True)
class Volume:
    path: str  # cleaned
    size: str | None
    tmpfs: bool
    mode: str | None
    config: Mapping[str, Any]
    optional: bool
    origins: tuple[Origin, ...]


@dataclass(frozen=True)
class HostMount:
    path: str  # cleaned
    mode: str | None
    config: Mapping[str, Any]
    optional: bool
    origin: Origin


@dataclass(frozen=True)
class Port:
    container: int
    transport: str
    name: str | None
    optional: bool
    origins: tuple[Origin, ...]

    @property
    def key(self) -> str:
        return f"{self.container}/{self.transport}"

    def config(self) -> dict[str, Any]:
        out: dict[str, Any] = {"container": self.container, "transport": self.transport}
        if self.name:
            out["name"] = self.name
        return out


@dataclass(frozen=True)
class MergedRequest:
    """Any other merged request: its type, config (``None`` when config-less) and askers."""

    type: str
    config: Mapping[str, Any] | None
    optional: bool
    origins: tuple[Origin, ...]


@dataclass(frozen=True)
class Composition:
    """The effective composition of a kit set, in dependency order, with provenance."""

    kits: tuple[str, ...]
    network: Network | None = None
    credentials: tuple[Credential, ...] = ()
    ssh_agent: tuple[SSHAgentGrant, ...] = ()
    lifecycle: Lifecycle | None = None
    volumes: tuple[Volume, ...] = ()
    host_mounts: tuple[HostMount, ...] = ()
    ports: tuple[Port, ...] = ()
    usb: tuple[MergedRequest, ...] = ()
    skills: tuple[MergedRequest, ...] = ()
    bundled_skills: tuple[MergedRequest, ...] = ()
    contexts: tuple[MergedRequest, ...] = ()
    acp: tuple[MergedRequest, ...] = ()
    resources: MergedRequest | None = None
    agent_sessions: MergedRequest | None = None
    agent_interactive_sessions: MergedRequest | None = None
    others: tuple[MergedRequest, ...] = field(default=())

    def credentials_for(self, phase: Phase) -> tuple[Credential, ...]:
        return tuple(c for c in self.credentials if c.phase == phase)

    def capabilities(self) -> tuple[dict[str, Any], ...]:
        """The effective capability list, one entry per merged request, as a descriptor holds it."""
        out: list[dict[str, Any]] = []

        def add(ctype: str, config: Mapping[str, Any] | None, optional: bool) -> None:
            entry: dict[str, Any] = {"type": ctype}
            if optional:
                entry["optional"] = True
            if config is not None:
                entry["config"] = dict(config)
            out.append(entry)

        if self.network is not None:
            add(self.network.type, self.network.config(), self.network.optional)
        for credential in self.credentials:
            add(CREDENTIAL, credential.config, credential.optional)
        for grant in self.ssh_agent:
            add(SSH_AGENT, grant.config(), grant.optional)
        for volume in self.volumes:
            add(VOLUME, volume.config, volume.optional)
        for mount in self.host_mounts:
            add(HOST_MOUNT, mount.config, mount.optional)
        for port in self.ports:
            add(PORT, port.config(), port.optional)
        for entry in (*self.usb, *self.skills, *self.bundled_skills, *self.acp, *self.others):
            add(entry.type, entry.config, entry.optional)
        for sole in (self.resources, self.agent_sessions, self.agent_interactive_sessions):
            if sole is not None:
                add(sole.type, sole.config, sole.optional)
        if self.lifecycle is not None:
            add(LIFECYCLE, self.lifecycle.config(), self.lifecycle.optional)
        for context in self.contexts:
            add(context.type, context.config, context.optional)
        return tuple(out)

    def descriptor(self, kind: str = "workload") -> dict[str, Any]:
        """An effective descriptor holding :meth:`capabilities` (what the surface projects)."""
        return {"schemaVersion": "3", "kind": kind, "capabilities": list(self.capabilities())}


def contributions_of(resolution: Resolution,
                     selected: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
                     paths: Mapping[str, Sequence[str]] | None = None,
                     ) -> tuple[Contribution, ...]:
    """One contribution per resolved kit, in topological (declaration) order.

    ``selected`` maps a reference to the entries selection kept (groups flattened); a kit not in
    it contributes its descriptor's own ``capabilities``.
    """
    out: list[Contribution] = []
    for kit in resolution.topological:
        if selected is not None and kit.reference in selected:
            entries: Sequence[Mapping[str, Any]] = selected[kit.reference]
        else:
            entries = [c for c in kit.descriptor.get("capabilities") or []
                       if isinstance(c, Mapping)]
        out.append(Contribution(kit.reference, tuple(entries),
                                None if paths is None else paths.get(kit.reference)))
    return tuple(out)


def compose(source: Resolution | Sequence[Contribution]) -> Composition:
    """Fold the contributions (dependency order) into one composition, or raise ``KIT_INCOHERENT``.

    A :class:`Resolution` composes its kits' own descriptor capabilities in topological order; pass
    :func:`contributions_of` output to compose what selection kept instead.
    """
    contributions = contributions_of(source) if isinstance(source, Resolution) else source
    merge = _Merge()
    for contribution in contributions:
        for index, item in enumerate(contribution.capabilities):
            origin = Origin(contribution.reference, index, contribution.path(index))
            merge.add(origin, item)
    return merge.finish(tuple(c.reference for c in contributions))


# --- the merge --------------------------------------------------------------------------------


@dataclass
class _Keyed:
    origin: Origin
    item: Mapping[str, Any]
    optional: bool
    origins: list[Origin]


class _Merge:
    """Accumulates asks per rule; :meth:`finish` reports every problem at once."""

    def __init__(self) -> None:
        self.problems: list[str] = []
        self.network: list[tuple[Origin, bool, Mapping[str, Any], bool]] = []
        self.credentials: dict[tuple[str, str], Credential] = {}
        self.ssh: dict[str, list[tuple[Origin, Mapping[str, Any], bool]]] = {}
        self.lifecycle: list[tuple[Origin, Mapping[str, Any], bool]] = []
        self.sole: dict[str, _Keyed] = {}
        self.storage: dict[str, _Keyed] = {}
        self.ports: dict[str, _Keyed] = {}
        self.skills: dict[str, _Keyed] = {}
        self.bundled: dict[str, _Keyed] = {}
        self.acp: dict[str, _Keyed] = {}
        self.usb: dict[str, _Keyed] = {}
        self.others: dict[str, _Keyed] = {}
        self.contexts: list[_Keyed] = []

    def problem(self, text: str) -> None:
        self.problems.append(text)

    def add(self, origin: Origin, item: Mapping[str, Any]) -> None:
        if "group" in item:
            self.problem(f"{origin}: select groups before composition")
            return
        ctype = str(item.get("type", ""))
        optional = item.get("optional") is True
        config = item.get("config")
        cfg: Mapping[str, Any] = config if isinstance(config, Mapping) else {}
        if ctype in (NETWORK_POLICY_V1, NETWORK_POLICY_V2):
            self.network.append((origin, ctype == NETWORK_POLICY_V2, cfg, optional))
        elif ctype == CREDENTIAL:
            self._credential(origin, cfg, optional)
        elif ctype == SSH_AGENT:
            for phase in _phases(cfg.get("phase")):
                self.ssh.setdefault(phase, []).append((origin, cfg, optional))
        elif ctype == LIFECYCLE:
            self.lifecycle.append((origin, cfg, optional))
        elif ctype in SOLE_AUTHOR_TYPES:
            self._sole(origin, ctype, item, optional)
        elif ctype in (VOLUME, HOST_MOUNT):
            self._storage(origin, ctype, item, cfg, optional)
        elif ctype == PORT:
            key = _port_key(cfg)
            self._collapse(self.ports, key, origin, item, optional)
        elif ctype == AGENT_SKILLS:
            self._skills(origin, item, cfg, optional)
        elif ctype == AGENT_SKILL:
            self._bundled(origin, item, cfg, optional)
        elif ctype == ACP:
            self._acp(origin, item, cfg, optional)
        elif ctype == USB_DEVICE:
            self._collapse(self.usb, _canonical(config), origin, item, optional)
        elif ctype == AGENT_CONTEXT:
            self.contexts.append(_Keyed(origin, item, optional, [origin]))
        else:
            # Config-less types key on the type alone (presence union); unknown types on the
            # whole request, so an exact duplicate collapses and anything else is a second ask.
            key = ctype if ctype in CONFIGLESS_TYPES else ctype + "\0" + _canonical(config)
            self._collapse(self.others, key, origin, item, optional)

    # -- per-type asks ---------------------------------------------------------------------

    def _credential(self, origin: Origin, cfg: Mapping[str, Any], optional: bool) -> None:
        service = str(cfg.get("service", ""))
        for phase in _phases(cfg.get("phase")):
            held = self.credentials.get((service, phase))
            if held is not None:
                self.problem(f"{_where(held.kit, held.declared_at)} and {origin} both declare "
                             f"credential ({service}, {phase}); one credential has one owner")
                continue
            self.credentials[(service, phase)] = Credential(
                service, phase, {**cfg, "phase": phase}, optional,
                origin.kit, origin.index, origin.path)

    def _sole(self, origin: Origin, ctype: str, item: Mapping[str, Any], optional: bool) -> None:
        held = self.sole.get(ctype)
        if held is None:
            self.sole[ctype] = _Keyed(origin, item, optional, [origin])
            return
        if _canonical(held.item.get("config")) != _canonical(item.get("config")):
            self.problem(f"{held.origin} and {origin} both declare {SOLE_AUTHOR_TYPES[ctype]} "
                         "with different settings; it describes the whole sandbox, so it has "
                         "one author")
            return
        _restated(held, origin, optional)

    def _storage(self, origin: Origin, ctype: str, item: Mapping[str, Any],
                 cfg: Mapping[str, Any], optional: bool) -> None:
        path = clean_path(str(cfg.get("path", "")))
        held = self.storage.get(path)
        if held is None:
            self.storage[path] = _Keyed(origin, item, optional, [origin])
            return
        if HOST_MOUNT in (ctype, held.item.get("type")):
            # Shared host storage has one declaring kit; collapsing even identical requests
            # would silently choose whose data the other kit receives.
            self.problem(f"{held.origin} and {origin} both declare storage at {path}; a host "
                         "mount has one owner")
            return
        held_cfg = held.item.get("config")
        before = _volume_identity(held_cfg if isinstance(held_cfg, Mapping) else {})
        after = _volume_identity(cfg)
        if before != after:
            self.problem(f"{held.origin} and {origin} both declare volume@1 at {path} with "
                         f"different storage settings ({_volume_text(before)} vs "
                         f"{_volume_text(after)}); one of them has to change")
            return
        _restated(held, origin, optional)

    def _collapse(self, table: dict[str, _Keyed], key: str, origin: Origin,
                  item: Mapping[str, Any], optional: bool) -> None:
        held = table.get(key)
        if held is None:
            table[key] = _Keyed(origin, item, optional, [origin])
        else:
            _restated(held, origin, optional)

    def _skills(self, origin: Origin, item: Mapping[str, Any], cfg: Mapping[str, Any],
                optional: bool) -> None:
        path = str(cfg.get("path", ""))
        held = self.skills.get(path)
        if held is None:
            self.skills[path] = _Keyed(origin, item, optional, [origin])
            return
        held_cfg = held.item.get("config")
        if _skills_mode(cfg) == "readwrite" and _skills_mode(
                held_cfg if isinstance(held_cfg, Mapping) else {}) != "readwrite":
            # The widest declared mode wins; the host setting still bounds it at mount time.
            held.item = {**held.item, "config": {**cfg}}
        _restated(held, origin, optional)

    def _bundled(self, origin: Origin, item: Mapping[str, Any], cfg: Mapping[str, Any],
                 optional: bool) -> None:
        source = str(cfg.get("path", ""))
        name = skill_name(cfg)
        held = self.bundled.get(name)
        if held is None:
            self.bundled[name] = _Keyed(origin, item, optional, [origin])
            return
        held_cfg = held.item.get("config")
        held_source = str(held_cfg.get("path", "")) if isinstance(held_cfg, Mapping) else ""
        if held_source != source:
            self.problem(f"{held.origin} and {origin} both bundle a skill named {name!r} from "
                         f"different sources ({held_source} vs {source}); rename one of them")
            return
        _restated(held, origin, optional)

    def _acp(self, origin: Origin, item: Mapping[str, Any], cfg: Mapping[str, Any],
             optional: bool) -> None:
        agent = normalize_name(str(cfg.get("agent", "")))
        held = self.acp.get(agent)
        if held is None:
            self.acp[agent] = _Keyed(origin, item, optional, [origin])
            return
        if _canonical(held.item.get("config")) != _canonical(item.get("config")):
            self.problem(f"{held.origin} and {origin} both declare an acp@1 adapter for agent "
                         f"{cfg.get('agent')!r} with different settings; one agent has one "
                         "adapter")
            return
        _restated(held, origin, optional)

    # -- finishing ---------------------------------------------------------------------------

    def finish(self, kits: tuple[str, ...]) -> Composition:
        network = self._network()
        ssh = self._ssh()
        lifecycle = self._lifecycle()
        self._check_interactive_agreement(lifecycle)
        contexts = self._contexts()
        if self.problems:
            _fail(self.problems)
        volumes: list[Volume] = []
        mounts: list[HostMount] = []
        for path, keyed in self.storage.items():
            cfg = _config(keyed.item)
            if keyed.item.get("type") == HOST_MOUNT:
                mounts.append(HostMount(path, _opt_str(cfg.get("mode")), cfg, keyed.optional,
                                        keyed.origin))
            else:
                volumes.append(Volume(path, _opt_str(cfg.get("size")), cfg.get("tmpfs") is True,
                                      _opt_str(cfg.get("mode")), cfg, keyed.optional,
                                      tuple(keyed.origins)))
        ports = []
        for keyed in self.ports.values():
            cfg = _config(keyed.item)
            container, transport = _port_parts(cfg)
            ports.append(Port(container, transport, _opt_str(cfg.get("name")), keyed.optional,
                              tuple(keyed.origins)))
        sole = {ctype: _entry(keyed) for ctype, keyed in self.sole.items()}
        return Composition(
            kits=kits,
            network=network,
            credentials=tuple(self.credentials.values()),
            ssh_agent=ssh,
            lifecycle=lifecycle,
            volumes=tuple(volumes),
            host_mounts=tuple(mounts),
            ports=tuple(ports),
            usb=tuple(_entry(k) for k in self.usb.values()),
            skills=tuple(_entry(k) for k in self.skills.values()),
            bundled_skills=tuple(_entry(k) for k in self.bundled.values()),
            contexts=contexts,
            acp=tuple(_entry(k) for k in self.acp.values()),
            resources=sole.get(RESOURCES),
            agent_sessions=sole.get(AGENT_SESSIONS),
            agent_interactive_sessions=sole.get(AGENT_INTERACTIVE_SESSIONS),
            others=tuple(_entry(k) for k in self.others.values()),
        )

    def _network(self) -> Network | None:
        if not self.network:
            return None
        rules: dict[tuple[str, str], list[Rule]] = {}
        for origin, _v2, cfg, _optional in self.network:
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
            version=2 if any(v2 for _, v2, _, _ in self.network) else 1,
            install=phases["install"],
            runtime=phases["runtime"],
            optional=all(optional for *_, optional in self.network),
            origins=tuple(origin for origin, *_ in self.network),
        )

    def _ssh(self) -> tuple[SSHAgentGrant, ...]:
        out: list[SSHAgentGrant] = []
        for phase in PHASES:
            asks = self.ssh.get(phase)
            if not asks:
                continue
            # One socket per phase serves every kit that asked, so it signs what any may sign.
            unrestricted = any(cfg.get("unrestricted", True) is not False for _, cfg, _ in asks)
            sign: set[str] = set()
            authenticate: set[str] = set()
            if not unrestricted:
                for _, cfg, _ in asks:
                    sign.update(_str_list(cfg.get("sign")))
                    authenticate.update(_str_list(cfg.get("authenticate")))
            out.append(SSHAgentGrant(
                phase, unrestricted, tuple(sorted(sign)), tuple(sorted(authenticate)),
                all(optional for *_, optional in asks), tuple(o for o, _, _ in asks)))
        return tuple(out)

    def _lifecycle(self) -> Lifecycle | None:
        if not self.lifecycle:
            return None
        install: list[Hook] = []
        startup: list[Hook] = []
        files: list[FileWrite] = []
        written: dict[str, Origin] = {}
        interactive: tuple[str, ...] | None = None
        interactive_origin: Origin | None = None
        for origin, cfg, _optional in self.lifecycle:
            install.extend(_hooks("install", cfg, origin))
            startup.extend(_hooks("startup", cfg, origin))
            for position, spec in enumerate(_mappings(cfg.get("files"))):
                path = clean_path(str(spec.get("path", "")))
                if path in written:
                    self.problem(f"{written[path]} and {origin} both write {path}; one file has "
                                 "one author")
                    continue
                written[path] = origin
                files.append(FileWrite(
                    path, str(spec.get("content", "")), _opt_str(spec.get("mode")),
                    spec.get("overwrite", True) is not False, _opt_str(spec.get("description")),
                    dict(spec), origin.kit, origin.index, position, origin.path))
            tail = cfg.get("interactive")
            if isinstance(tail, list) and tail:  # an empty tail states nothing and is dropped
                if interactive_origin is not None:
                    self.problem(f"{interactive_origin} and {origin} both declare a lifecycle "
                                 "interactive tail; it replaces the launch command's arguments, "
                                 "so it has one author")
                    continue
                interactive = tuple(str(arg) for arg in tail)
                interactive_origin = origin
        return Lifecycle(tuple(install), tuple(startup), tuple(files), interactive,
                         interactive_origin, all(o for *_, o in self.lifecycle),
                         tuple(origin for origin, *_ in self.lifecycle))

    def _check_interactive_agreement(self, lifecycle: Lifecycle | None) -> None:
        held = self.sole.get(AGENT_INTERACTIVE_SESSIONS)
        if held is None or lifecycle is None or lifecycle.interactive is None:
            return
        new_session = _config(held.item).get("newSession")
        if isinstance(new_session, list) and tuple(map(str, new_session)) != lifecycle.interactive:
            self.problem(f"{held.origin} and {lifecycle.interactive_origin}: newSession "
                         f"{new_session!r} disagrees with lifecycle interactive "
                         f"{list(lifecycle.interactive)!r}; they name the same launch")

    def _contexts(self) -> tuple[MergedRequest, ...]:
        # Explicit profiles (directory + filename) are all kept; a legacy profile filename
        # belongs to the kit that owns the environment, so two different ones cannot both win.
        legacy: _Keyed | None = None
        for keyed in self.contexts:
            cfg = _config(keyed.item)
            filename = cfg.get("filename")
            if not filename or cfg.get("directory"):
                continue
            if legacy is not None and _config(legacy.item).get("filename") != filename:
                self.problem(f"{legacy.origin} and {keyed.origin} declare different "
                             "agent-context filenames; the profile belongs to the kit that owns "
                             "the environment")
            legacy = legacy or keyed
        return tuple(_entry(keyed) for keyed in self.contexts)


# --- helpers ----------------------------------------------------------------------------------


def _fail(problems: Sequence[str]) -> NoReturn:
    raise SbxError(
        Reason.KIT_INCOHERENT,
        COMPOSE_MESSAGE,
        body="\n".join(f"  - {problem}" for problem in problems),
        details={"problems": list(problems)},
    )


def _where(kit: str, path: str) -> str:
    return f"{kit} {path}"


def _restated(held: _Keyed, origin: Origin, optional: bool) -> None:
    held.origins.append(origin)
    # Optional says the asker degrades without it; one asker that does not degrade decides.
    held.optional = held.optional and optional


def _entry(keyed: _Keyed) -> MergedRequest:
    config = keyed.item.get("config")
    plain = dict(config) if isinstance(config, Mapping) and config else None
    return MergedRequest(str(keyed.item.get("type", "")), plain, keyed.optional,
                         tuple(keyed.origins))


def _config(item: Mapping[str, Any]) -> dict[str, Any]:
    config = item.get("config")
    return dict(config) if isinstance(config, Mapping) else {}


def _rules_of(entry: Any, action: Action, phase: Phase, origin: Origin) -> list[Rule]:
    if isinstance(entry, str):
        return [Rule(entry, (), (), action, origin.kit, origin.index, phase, origin.path)]
    if not isinstance(entry, Mapping):
        return []
    methods = tuple(_str_list(entry.get("methods")))
    paths = tuple(_str_list(entry.get("paths")))
    return [Rule(host, methods, paths, action, origin.kit, origin.index, phase, origin.path)
            for host in _str_list(entry.get("hosts"))]


def _hooks(stage: Stage, cfg: Mapping[str, Any], origin: Origin) -> list[Hook]:
    hooks: list[Hook] = []
    for position, hook in enumerate(_mappings(cfg.get(stage))):
        command = hook.get("command")
        cmd: str | tuple[str, ...] = (tuple(str(a) for a in command)
                                      if isinstance(command, list) else str(command or ""))
        hooks.append(Hook(stage, cmd, _opt_str(hook.get("user")),
                          tuple(_str_list(hook.get("env"))), hook.get("background") is True,
                          _opt_str(hook.get("description")), dict(hook), origin.kit,
                          origin.index, position, origin.path))
    return hooks


def _phases(value: Any) -> list[Phase]:
    """A ``phase`` field (one phase or a list) as the distinct phases it names."""
    raw = [value] if isinstance(value, str) else _str_list(value)
    return [phase for phase in PHASES if phase in raw]


def _port_parts(cfg: Mapping[str, Any]) -> tuple[int, str]:
    container = cfg.get("container")
    transport = cfg.get("transport") or "tcp"
    return (container if isinstance(container, int) else 0), str(transport)


def _port_key(cfg: Mapping[str, Any]) -> str:
    container, transport = _port_parts(cfg)
    return f"{container}/{transport}"


def _skills_mode(cfg: Mapping[str, Any]) -> str:
    return str(cfg.get("mode") or "readonly")


def skill_name(cfg: Mapping[str, Any]) -> str:
    """An ``agent-skill@1`` bundle's effective name: ``name``, else the source directory's name."""
    name = cfg.get("name")
    if isinstance(name, str) and name:
        return name
    return posixpath.basename(str(cfg.get("path", "")).rstrip("/"))


def clean_path(path: str) -> str:
    """Lexically clean an absolute in-container path (``/a/./b//c/`` → ``/a/b/c``)."""
    if not path:
        return path
    cleaned = posixpath.normpath(path)
    # normpath keeps a leading "//" (POSIX allows it to mean something); paths here never do.
    return "/" + cleaned.lstrip("/") if cleaned.startswith("/") else cleaned


_SIZE: Final = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([kmgtpe]?)(i?)(b?)\s*$", re.IGNORECASE)
_UNITS: Final = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5, "e": 6}


def size_bytes(size: str) -> int | None:
    """``512m``/``2g``/``1gib`` → bytes (powers of 1024); ``None`` when it is not a size."""
    match = _SIZE.match(size)
    if match is None:
        return None
    try:
        number = Decimal(match.group(1))
    except InvalidOperation:  # pragma: no cover - the pattern admits only decimal numbers
        return None
    return int(number * (1024 ** _UNITS[match.group(2).lower()]))


def _volume_identity(cfg: Mapping[str, Any]) -> tuple[Any, ...]:
    # Equivalence per volume@1: size by byte value, mode by octal value, omitted tmpfs = false;
    # an omitted size or mode stays unspecified and differs from any explicit value.
    size = cfg.get("size")
    mode = cfg.get("mode")
    size_key: Any = None
    if size is not None and size != "":
        size_key = size_bytes(str(size)) if size_bytes(str(size)) is not None else str(size)
    mode_key: Any = None
    if mode is not None and mode != "":
        text = str(mode)
        mode_key = int(text, 8) if re.fullmatch(r"[0-7]{1,4}", text) else text
    return (size_key, cfg.get("tmpfs") is True, mode_key)


def _volume_text(identity: tuple[Any, ...]) -> str:
    size, tmpfs, mode = identity
    size_text = ("unspecified" if size is None
                 else f"{size} bytes" if isinstance(size, int) else str(size))
    mode_text = ("unspecified" if mode is None
                 else f"{mode:04o}" if isinstance(mode, int) else str(mode))
    return f"size {size_text}, {'tmpfs' if tmpfs else 'block'}, mode {mode_text}"


def _canonical(config: Any) -> str:
    # An omitted config and {} are the same request: config-less types have exactly those two
    # spellings, and keying on the encoding alone would keep both.
    if config is None or config == {}:
        return ""
    return json.dumps(config, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      default=str)


def _dedupe(items: Iterable[Any]) -> list[Any]:
    seen: set[str] = set()
    out: list[Any] = []
    for item in items:
        key = _canonical(item) if not isinstance(item, str) else "s:" + item
        if key not in seen:
            seen.add(key)
            out.append(item)
    return out


def _mappings(value: Any) -> list[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def _str_list(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list | tuple) else []


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


__all__ = [
    "Contribution",
    "Origin",
    "Rule",
    "NetworkPhase",
    "Network",
    "Credential",
    "SSHAgentGrant",
    "Hook",
    "FileWrite",
    "Lifecycle",
    "Volume",
    "HostMount",
    "Port",
    "MergedRequest",
    "Composition",
    "compose",
    "contributions_of",
    "clean_path",
    "size_bytes",
    "skill_name",
    "COMPOSE_MESSAGE",
    "CONFIGLESS_TYPES",
    "SOLE_AUTHOR_TYPES",
    "PHASES",
    "ACTIONS",
    "Phase",
    "Action",
    "Stage",
    "METHOD_ANY",
    "NETWORK_POLICY_V1",
    "NETWORK_POLICY_V2",
    "CREDENTIAL",
    "SSH_AGENT",
    "VOLUME",
    "HOST_MOUNT",
    "PORT",
    "USB_DEVICE",
    "RESOURCES",
    "PRIVILEGED",
    "LONG_RUNNING",
    "LIFECYCLE",
    "AGENT_CONTEXT",
    "AGENT_SESSIONS",
    "AGENT_INTERACTIVE_SESSIONS",
    "AGENT_SKILLS",
    "AGENT_SKILL",
    "GIT_IDENTITY",
    "KIT_REGISTRY",
    "SBX",
    "ACP",
]
