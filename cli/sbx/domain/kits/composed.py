"""The value model of a composition: the merged requests a kit set composes into, each with the
provenance of every kit that asked (:mod:`sbx.domain.kits.compose` does the merging). It imports
nothing of the kits package, so the capability handlers build these values without loading the
composer."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from sbx.domain.kits.types import NETWORK_V1 as NETWORK_POLICY_V1
from sbx.domain.kits.types import NETWORK_V2 as NETWORK_POLICY_V2

Phase = Literal["install", "runtime"]
Action = Literal["allow", "deny"]
Stage = Literal["install", "startup"]

PHASES: Final[tuple[Phase, Phase]] = ("install", "runtime")
ACTIONS: Final[tuple[Action, Action]] = ("allow", "deny")
METHOD_ANY: Final = "ANY"


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
            entries = dedupe(rule.host if version == 1 else rule.entry() for rule in rules)
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


def canonical_config(config: Any) -> str:
    """The composer's key of a config. An omitted config and {} are the same request:
    config-less types have exactly those two spellings."""
    if config is None or config == {}:
        return ""
    return json.dumps(config, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      default=str)


def dedupe(items: Iterable[Any]) -> list[Any]:
    seen: set[str] = set()
    out: list[Any] = []
    for item in items:
        key = canonical_config(item) if not isinstance(item, str) else "s:" + item
        if key not in seen:
            seen.add(key)
            out.append(item)
    return out


@dataclass(frozen=True)
class ComposedParts:
    """The merged parts of a composition, one field per kind of request: what the capability
    handlers read (:class:`sbx.domain.kits.compose.Composition` adds the effective list)."""

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
