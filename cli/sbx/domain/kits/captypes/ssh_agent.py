"""``ssh-agent@1``: the user's SSH agent, relayed into the sandbox per phase, keys kept outside.

In the sandbox: ``SSH_AUTH_SOCK`` names the relay's socket (sbx.proxy.sshrelay),
which forwards only list and sign requests allowed in the current phase (logins bounded by
``authenticate`` through a verified session binding, sbx.domain.egress.sshbind); no agent on
the host refuses a required grant (``ssh_agent_missing``) and skips an optional one (no
``SSH_AUTH_SOCK`` then).

Descriptor side: a bounded entry (``unrestricted: false``) needs ``sign`` or ``authenticate``
and an unrestricted one states neither; destinations are DNS names. One entry per phase in a
block; merged per phase (unrestricted if any asker is, else the union of the lists); on the
surface one atom per phase (unrestricted) or per namespace and destination.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final

from sbx.base.errors import SbxError
from sbx.base.reasons import REGISTRY, Reason
from sbx.domain.kits.captypes.base import (
    PHASES,
    CapabilityEntry,
    Handler,
    Keys,
    Merge,
    Out,
    items,
    literal_phases,
    merge_phases,
    phase_list,
    show,
    str_list,
)
from sbx.domain.kits.composed import SSHAgentGrant
from sbx.domain.kits.placeholders import contains_placeholder
from sbx.domain.kits.selectionrecord import SelectionRecord
from sbx.domain.kits.surfacetypes import Widening
from sbx.domain.kits.types import SSH_AGENT, SSH_AGENT_DIR, SSH_AGENT_SOCKET

if TYPE_CHECKING:
    from sbx.domain.kits.captypes.base import SandboxPlanner
    from sbx.domain.kits.composed import ComposedParts, Origin, SSHAgentGrant
    from sbx.domain.kits.surfacetypes import Surface, Widening

# The relay's directory inside the sandbox (sbx.domain.kits.types, for the light run path).
SANDBOX_DIR: Final = SSH_AGENT_DIR
SANDBOX_SOCKET: Final = SSH_AGENT_SOCKET


class SSHAgent(Handler):
    types = (SSH_AGENT,)
    implemented = True

    def plan(self, composition: ComposedParts, planner: SandboxPlanner) -> None:
        kept = list(composition.ssh_agent)
        if not kept:
            return
        missing = planner.ssh_agent_missing()
        if missing is None:
            planner.add_ssh_agent(tuple((g.phase, g.unrestricted, g.sign, g.authenticate)
                                        for g in kept))
            planner.add_env("SSH_AUTH_SOCK", SANDBOX_SOCKET)
            return
        required = [g for g in kept if not g.optional]
        for grant in kept if not required else ():
            origin = grant.origins[0]
            planner.skip(SelectionRecord(origin.kit, origin.path, SSH_AGENT,
                                         f"no SSH agent on the host: {missing}"))
        if required:
            origin = required[0].origins[0]
            raise SbxError(Reason.SSH_AGENT_MISSING,
                           f"refused: {origin.kit} {origin.path} ({SSH_AGENT}) needs the "
                           f"host's SSH agent: {missing}",
                           hint=REGISTRY[Reason.SSH_AGENT_MISSING].fix,
                           details={"kit": origin.kit, "path": origin.path})

    def check(self, entry: CapabilityEntry, config: Mapping[str, Any], kind: str | None,
              out: Out) -> None:
        unrestricted = config.get("unrestricted", True)
        stated = [k for k in ("sign", "authenticate") if k in config]
        if unrestricted is False and not stated:
            out.add(entry.at("config", "unrestricted"), "unrestricted: false needs sign, "
                                                        "authenticate, or both")
        if unrestricted is True and stated:
            for key in stated:
                out.add(entry.at("config", key), f"{key} bounds the agent, which needs "
                                                 "unrestricted: false (an unrestricted agent "
                                                 "signs anything)")
        for k, destination in enumerate(items(config.get("authenticate"))):
            if not isinstance(destination, str) or contains_placeholder(destination):
                continue
            host = destination.rsplit("@", 1)[-1]
            if host and not host.strip("0123456789."):
                out.add(entry.at("config", "authenticate", k), f"{destination!r} names an IP "
                                                               "address; name the server by "
                                                               "its DNS name")

    def claim(self, entry: CapabilityEntry, keys: Keys, out: Out) -> None:
        for phase in literal_phases(entry.config.get("phase")):
            previous = keys.claim("ssh-agent", phase, entry.path)
            if previous is not None:
                out.add(entry.at("config", "phase"), f"ssh-agent for phase {phase!r} already "
                                                     f"declared at {show(previous)}")

    # -- composition -------------------------------------------------------------------------

    def add(self, merge: Merge, origin: Origin, item: Mapping[str, Any],
            config: Mapping[str, Any], optional: bool) -> None:
        asks: dict[str, list[tuple[Origin, Mapping[str, Any], bool]]] = merge.state(
            "ssh-agent", dict)
        for phase in merge_phases(config.get("phase")):
            asks.setdefault(phase, []).append((origin, config, optional))

    def finish(self, merge: Merge, parts: dict[str, Any]) -> None:
        parts["ssh_agent"] = _grants(merge.state("ssh-agent", dict))

    def effective(self, composition: ComposedParts) -> Iterable[tuple[str, Any, bool]]:
        for grant in composition.ssh_agent:
            yield SSH_AGENT, grant.config(), grant.optional

    # -- surface -----------------------------------------------------------------------------

    def project(self, ctype: str, config: Any, lists: dict[str, list[str]],
                flags: dict[str, bool]) -> bool:
        if not isinstance(config, Mapping):
            return False
        atoms = surface_atoms(config)
        if atoms is None:
            return False
        lists["ssh_agent"].extend(atoms)
        return True

    def widenings(self, granted: Surface, candidate: Surface) -> Iterator[Widening]:
        # An unrestricted phase covers everything in that phase, and a destination without a
        # user covers every user at that host; so narrowing to a bounded grant is silent.
        have = set(granted.ssh_agent)
        unbounded = {atom for atom in granted.ssh_agent if " " not in atom}
        for atom in candidate.ssh_agent:
            phase, _, rest = atom.partition(" ")
            if atom in have or phase in unbounded:
                continue
            if rest.startswith("authenticate "):
                destination = rest.removeprefix("authenticate ")
                host = destination.rpartition("@")[2]
                if host != destination and f"{phase} authenticate {host}" in have:
                    continue
            yield Widening("ssh-agent", atom)


def _grants(asks: Mapping[str, list[tuple[Origin, Mapping[str, Any], bool]]],
            ) -> tuple[SSHAgentGrant, ...]:
    out: list[SSHAgentGrant] = []
    for phase in PHASES:
        phase_asks = asks.get(phase)
        if not phase_asks:
            continue
        # One socket per phase serves every kit that asked, so it signs what any may sign.
        unrestricted = any(cfg.get("unrestricted", True) is not False
                           for _, cfg, _ in phase_asks)
        sign: set[str] = set()
        authenticate: set[str] = set()
        if not unrestricted:
            for _, cfg, _ in phase_asks:
                sign.update(str_list(cfg.get("sign")))
                authenticate.update(str_list(cfg.get("authenticate")))
        out.append(SSHAgentGrant(
            phase, unrestricted, tuple(sorted(sign)),
            tuple(sorted(authenticate)), all(optional for *_, optional in phase_asks),
            tuple(o for o, _, _ in phase_asks)))
    return tuple(out)


def surface_atoms(config: Mapping[str, Any]) -> list[str] | None:
    phases = phase_list(config.get("phase"))
    unrestricted = config.get("unrestricted", True)
    sign, authenticate = config.get("sign") or [], config.get("authenticate") or []
    if (phases is None or not isinstance(unrestricted, bool)
            or not isinstance(sign, list) or not isinstance(authenticate, list)):
        return None
    atoms: list[str] = []
    for phase in phases:
        if unrestricted:
            atoms.append(phase)
            continue
        atoms.extend(f"{phase} sign {ns}" for ns in sign)
        atoms.extend(f"{phase} authenticate {dest}" for dest in authenticate)
    return atoms


HANDLER: Final = SSHAgent()

__all__ = ["HANDLER", "SANDBOX_DIR", "SANDBOX_SOCKET", "SSHAgent", "surface_atoms"]
