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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, NoReturn

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.kits import captypes
from sbx.domain.kits.captypes.agent_skill import skill_name
from sbx.domain.kits.captypes.base import Merge, clean_path, size_bytes
from sbx.domain.kits.composed import (
    ACTIONS,
    METHOD_ANY,
    PHASES,
    Action,
    ComposedParts,
    Credential,
    FileWrite,
    Hook,
    HostMount,
    Lifecycle,
    MergedRequest,
    Network,
    NetworkPhase,
    Origin,
    Phase,
    Port,
    Rule,
    SSHAgentGrant,
    Stage,
    Volume,
)
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

CONFIGLESS_TYPES: Final = captypes.CONFIGLESS
SOLE_AUTHOR_TYPES: Final = {RESOURCES: "resources", AGENT_SESSIONS: "agent-sessions",
                            AGENT_INTERACTIVE_SESSIONS: "agent-interactive-sessions"}
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
class Composition(ComposedParts):
    """The effective composition of a kit set, in dependency order, with provenance (its parts:
    :class:`~sbx.domain.kits.composed.ComposedParts`)."""

    def capabilities(self) -> tuple[dict[str, Any], ...]:
        """The effective capability list, one entry per merged request, as a descriptor holds it."""
        out: list[dict[str, Any]] = []
        for handler in captypes.EFFECTIVE_ORDER:
            for ctype, config, optional in handler.effective(self):
                entry: dict[str, Any] = {"type": ctype}
                if optional:
                    entry["optional"] = True
                if config is not None:
                    entry["config"] = dict(config)
                out.append(entry)
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
    :func:`contributions_of` output to compose what selection kept instead. Each entry goes to
    its type's handler (:mod:`sbx.domain.kits.captypes`), which merges it with the others'.
    """
    contributions = contributions_of(source) if isinstance(source, Resolution) else source
    merge = Merge()
    for contribution in contributions:
        for index, item in enumerate(contribution.capabilities):
            origin = Origin(contribution.reference, index, contribution.path(index))
            if "group" in item:
                merge.problem(f"{origin}: select groups before composition")
                continue
            config = item.get("config")
            captypes.handler(str(item.get("type", ""))).add(
                merge, origin, item, config if isinstance(config, Mapping) else {},
                item.get("optional") is True)
    parts: dict[str, Any] = {}
    for handler in (*captypes.HANDLERS, captypes.UNKNOWN):
        handler.finish(merge, parts)
    if merge.problems:
        _fail(merge.problems)
    return Composition(kits=tuple(c.reference for c in contributions), **parts)


def _fail(problems: Sequence[str]) -> NoReturn:
    raise SbxError(
        Reason.KIT_INCOHERENT,
        COMPOSE_MESSAGE,
        body="\n".join(f"  - {problem}" for problem in problems),
        details={"problems": list(problems)},
    )


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
