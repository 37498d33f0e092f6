"""The capability types, one module each, and the registry the rest of sbx drives them from.

Each module holds one :class:`~sbx.domain.kits.captypes.base.Handler`: its type's rules, arity
keys, merge, surface projection and widening, and what it plans for the sandbox. The rules pass,
the composer, the surface and the capability planner look a type up here and never switch on
type names; a type that is not here is unknown (refused by name when required). Adding a type
means adding its module and listing its handler below (and its config schema under
``schema/capabilities/``).

Several outputs are ordered, and the order is observable (diagnostics, the effective capability
list, the gate's widenings), so the orders are stated here rather than derived.
"""

from __future__ import annotations

from typing import Final

from sbx.domain.kits.captypes import (
    acp,
    agent_context,
    agent_interactive_sessions,
    agent_sessions,
    agent_skill,
    agent_skills,
    credential,
    git_identity,
    host_mount,
    kit_registry,
    lifecycle,
    long_running,
    network_policy,
    port,
    privileged,
    resources,
    sbx_platform,
    ssh_agent,
    unknown,
    usb_device,
    volume,
)
from sbx.domain.kits.captypes.base import Handler

# Composition order: each handler folds its asks in this order (lifecycle before the
# interactive sessions, which must agree with its tail; agent-context last).
HANDLERS: Final[tuple[Handler, ...]] = (
    network_policy.HANDLER,
    credential.HANDLER,
    ssh_agent.HANDLER,
    volume.HANDLER,
    host_mount.HANDLER,
    port.HANDLER,
    usb_device.HANDLER,
    agent_skills.HANDLER,
    agent_skill.HANDLER,
    acp.HANDLER,
    resources.HANDLER,
    agent_sessions.HANDLER,
    lifecycle.HANDLER,
    agent_interactive_sessions.HANDLER,
    agent_context.HANDLER,
    privileged.HANDLER,
    long_running.HANDLER,
    git_identity.HANDLER,
    kit_registry.HANDLER,
    sbx_platform.HANDLER,
)
UNKNOWN: Final[Handler] = unknown.HANDLER
BY_TYPE: Final[dict[str, Handler]] = {t: h for h in HANDLERS for t in h.types}

# The effective capability list (Composition.capabilities): the presence table (config-less and
# unknown requests) comes after the instance-shaped ones and before the sandbox-wide ones.
EFFECTIVE_ORDER: Final[tuple[Handler, ...]] = (
    network_policy.HANDLER, credential.HANDLER, ssh_agent.HANDLER, volume.HANDLER,
    host_mount.HANDLER, port.HANDLER, usb_device.HANDLER, agent_skills.HANDLER,
    agent_skill.HANDLER, acp.HANDLER, UNKNOWN, resources.HANDLER, agent_sessions.HANDLER,
    agent_interactive_sessions.HANDLER, lifecycle.HANDLER, agent_context.HANDLER)
# The gate's categories, in the order a prompt lists them.
WIDENING_ORDER: Final[tuple[Handler, ...]] = (
    network_policy.HANDLER, credential.HANDLER, ssh_agent.HANDLER, volume.HANDLER,
    host_mount.HANDLER, agent_skills.HANDLER, port.HANDLER, usb_device.HANDLER,
    privileged.HANDLER, UNKNOWN)
# Cross-entry rules within one declaration block, in the order they report.
BLOCK_ORDER: Final[tuple[Handler, ...]] = (
    network_policy.HANDLER, agent_interactive_sessions.HANDLER, credential.HANDLER)
# What the sandbox planner asks of each type, in order (resources first: the volumes' tmpfs
# budget is what is left of its memory; the lifecycle's files before the profiles).
_PLAN_FIRST: Final[tuple[Handler, ...]] = (
    resources.HANDLER, privileged.HANDLER, volume.HANDLER, lifecycle.HANDLER,
    agent_context.HANDLER, port.HANDLER)
PLAN_ORDER: Final[tuple[Handler, ...]] = (
    *_PLAN_FIRST, *(h for h in HANDLERS if h not in _PLAN_FIRST))

SUPPORTED: Final = frozenset(t for h in HANDLERS if h.implemented for t in h.types)
SINGLETONS: Final = frozenset(t for h in HANDLERS if h.singleton for t in h.types)
CONFIGLESS: Final = frozenset(t for h in HANDLERS if h.configless for t in h.types)
NOT_SURFACE: Final = frozenset(t for h in HANDLERS if not h.on_surface for t in h.types)


def handler(ctype: str) -> Handler:
    """The handler of a type; the unknown-type handler for any type sbx does not know."""
    return BY_TYPE.get(ctype, UNKNOWN)


__all__ = ["BLOCK_ORDER", "BY_TYPE", "CONFIGLESS", "EFFECTIVE_ORDER", "HANDLERS",
           "NOT_SURFACE", "PLAN_ORDER", "SINGLETONS", "SUPPORTED", "UNKNOWN", "WIDENING_ORDER",
           "Handler", "handler"]
