"""The ACP adapter a run starts (acp@1): the composed adapters, and the one ``--acp`` picks.

An adapter is a complete stdio command (not a tail of the workload's launch argv) with its own
variables; it serves an agent only when that agent is among the composed ``provides``. The
workload's own agent comes first; otherwise the one adapter whose agent is composed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.kits.versions import display_name, normalize_name


@dataclass(frozen=True)
class Adapter:
    agent: str  # normalized (namespace-qualified), unversioned
    command: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    protocol_version: int = 1

    def as_dict(self) -> dict[str, Any]:
        return {"agent": self.agent, "command": list(self.command), "env": dict(self.env),
                "protocolVersion": self.protocol_version}


def adapter_of(config: Mapping[str, Any]) -> Adapter | None:
    """One acp@1 config as an adapter (None when it is not one a run could start)."""
    agent, command = config.get("agent"), config.get("command")
    if isinstance(command, str):  # the schema's shell string: the kit's own text, by sh -c
        command = ["sh", "-c", command] if command.strip() else []
    if not isinstance(agent, str) or not agent or not isinstance(command, list) or not command \
            or not all(isinstance(a, str) for a in command) or not command[0].strip():
        return None
    env = config.get("env") or {}
    if not isinstance(env, Mapping) or not all(isinstance(k, str) and isinstance(v, str)
                                               for k, v in env.items()):
        return None
    version = config.get("protocolVersion", config.get("protocol_version", 1))
    return Adapter(normalize_name(agent), tuple(command), dict(env),
                   version if isinstance(version, int) and not isinstance(version, bool) else 1)


def adapters_of(configs: Iterable[Mapping[str, Any] | None]) -> tuple[Adapter, ...]:
    return tuple(a for a in (adapter_of(c or {}) for c in configs) if a is not None)


def choose_adapter(adapters: Sequence[Adapter], provided: Sequence[str],
                   workload_provides: Sequence[str], *, workload: str) -> Adapter:
    """The adapter ``--acp`` starts, or refused (``acp_unavailable``) with what there is."""
    composed = {normalize_name(p) for p in provided}
    serving = [a for a in adapters if a.agent in composed]
    own = {normalize_name(p) for p in workload_provides}
    mine = [a for a in serving if a.agent in own]
    if len(mine) == 1:
        return mine[0]
    if len(serving) == 1:
        return serving[0]
    if not serving:
        declared = ", ".join(sorted(display_name(a.agent) for a in adapters))
        detail = (f"the composition declares adapters only for agents it does not provide "
                  f"({declared})" if adapters else "no kit of the composition declares "
                  "com.docker.sandbox/acp@1")
        raise SbxError(Reason.ACP_UNAVAILABLE, f"--acp needs an ACP adapter for an agent of "
                       f"{workload}'s kit set, and {detail}",
                       hint=f"Add an adapter mixin for the agent: sbx run {workload} . "
                            "--kit ADAPTER_KIT --acp")
    names = ", ".join(sorted(display_name(a.agent) for a in serving))
    raise SbxError(Reason.ACP_UNAVAILABLE, f"--acp: the composition has adapters for several "
                   f"agents ({names}) and none is the workload's own",
                   hint=f"Compose only the adapter you want: sbx run {workload} . "
                        "--kit ADAPTER_KIT --acp")


__all__ = ["Adapter", "adapter_of", "adapters_of", "choose_adapter"]
