"""The capability types, one module each, and the registry the rest of sbx drives them from.

Each module holds one :class:`~sbx.domain.kits.captypes.base.Handler`: its type's rules, arity
keys, merge, surface projection and widening, and what it plans for the sandbox. The rules pass,
the composer, the surface and the capability planner look a type up here and never switch on
type names; a type that is not here is unknown (refused by name when required). Adding a type
means adding its module and naming it in :data:`MODULES` and the orders below (and its config
schema under ``schema/capabilities/``).

A handler's module is imported when its type is first looked up (:func:`handler`), and the
tables of handlers (``HANDLERS``, the orders, the sets) when one is first read: a pull of a kit
that asks for the network alone loads that type's module and no other.

Several outputs are ordered, and the order is observable (diagnostics, the effective capability
list, the gate's widenings), so the orders are stated here rather than derived.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from sbx.domain.kits import types as t

if TYPE_CHECKING:
    from sbx.domain.kits.captypes.base import Handler

# Which module (of this package) owns each type: the handler() lookup imports only that one.
MODULES: Final[dict[str, str]] = {
    t.NETWORK_V1: "network_policy", t.NETWORK_V2: "network_policy",
    t.CREDENTIAL: "credential", t.SSH_AGENT: "ssh_agent", t.VOLUME: "volume",
    t.HOST_MOUNT: "host_mount", t.PORT: "port", t.USB_DEVICE: "usb_device",
    t.AGENT_SKILLS: "agent_skills", t.AGENT_SKILL: "agent_skill", t.ACP: "acp",
    t.RESOURCES: "resources", t.AGENT_SESSIONS: "agent_sessions", t.LIFECYCLE: "lifecycle",
    t.INTERACTIVE_SESSIONS: "agent_interactive_sessions", t.AGENT_CONTEXT: "agent_context",
    t.PRIVILEGED: "privileged", t.LONG_RUNNING: "long_running",
    t.GIT_IDENTITY: "git_identity", t.KIT_REGISTRY: "kit_registry", t.SBX: "sbx_platform",
}
_UNKNOWN: Final = "unknown"

# Composition order: each handler folds its asks in this order (lifecycle before the
# interactive sessions, which must agree with its tail; agent-context last).
_HANDLERS: Final = (
    "network_policy", "credential", "ssh_agent", "volume", "host_mount", "port", "usb_device",
    "agent_skills", "agent_skill", "acp", "resources", "agent_sessions", "lifecycle",
    "agent_interactive_sessions", "agent_context", "privileged", "long_running",
    "git_identity", "kit_registry", "sbx_platform")
# The effective capability list (Composition.capabilities): the presence table (config-less and
# unknown requests) comes after the instance-shaped ones and before the sandbox-wide ones.
_EFFECTIVE_ORDER: Final = (
    "network_policy", "credential", "ssh_agent", "volume", "host_mount", "port", "usb_device",
    "agent_skills", "agent_skill", "acp", _UNKNOWN, "resources", "agent_sessions",
    "agent_interactive_sessions", "lifecycle", "agent_context")
# The gate's categories, in the order a prompt lists them.
_WIDENING_ORDER: Final = (
    "network_policy", "credential", "ssh_agent", "volume", "host_mount", "agent_skills", "port",
    "usb_device", "privileged", _UNKNOWN)
# Cross-entry rules within one declaration block, in the order they report.
_BLOCK_ORDER: Final = ("network_policy", "agent_interactive_sessions", "credential")
# What the sandbox planner asks of each type, in order (resources first: the volumes' tmpfs
# budget is what is left of its memory; the lifecycle's files before the profiles).
_PLAN_FIRST: Final = ("resources", "privileged", "volume", "lifecycle", "agent_context", "port")
_PLAN_ORDER: Final = (*_PLAN_FIRST, *(m for m in _HANDLERS if m not in _PLAN_FIRST))


def _of(module: str) -> Handler:
    # a capability type's handler is imported when a kit declares that type
    found: Handler = importlib.import_module(f"{__name__}.{module}").HANDLER
    return found


def handler(ctype: str) -> Handler:
    """The handler of a type; the unknown-type handler for any type sbx does not know."""
    return _of(MODULES.get(ctype, _UNKNOWN))


def _build(name: str) -> Any:
    """One of the tables below, from the handlers (all imported: the table names them all)."""
    orders = {"HANDLERS": _HANDLERS, "EFFECTIVE_ORDER": _EFFECTIVE_ORDER,
              "WIDENING_ORDER": _WIDENING_ORDER, "BLOCK_ORDER": _BLOCK_ORDER,
              "PLAN_ORDER": _PLAN_ORDER}
    if name in orders:
        return tuple(_of(m) for m in orders[name])
    handlers = tuple(_of(m) for m in _HANDLERS)
    if name == "UNKNOWN":
        return _of(_UNKNOWN)
    if name == "BY_TYPE":
        return {ctype: h for h in handlers for ctype in h.types}
    sets: dict[str, Callable[[Handler], bool]] = {
        "SUPPORTED": lambda h: h.implemented, "SINGLETONS": lambda h: h.singleton,
            "CONFIGLESS": lambda h: h.configless, "NOT_SURFACE": lambda h: not h.on_surface}
    if name in sets:
        return frozenset(ctype for h in handlers if sets[name](h) for ctype in h.types)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __getattr__(name: str) -> Any:
    # A table is built on its first read and then kept as a module attribute.
    if name.startswith("__"):
        raise AttributeError(name)
    value = _build(name)
    globals()[name] = value
    return value


if TYPE_CHECKING:
    HANDLERS: tuple[Handler, ...]
    UNKNOWN: Handler
    BY_TYPE: dict[str, Handler]
    EFFECTIVE_ORDER: tuple[Handler, ...]
    WIDENING_ORDER: tuple[Handler, ...]
    BLOCK_ORDER: tuple[Handler, ...]
    PLAN_ORDER: tuple[Handler, ...]
    SUPPORTED: frozenset[str]
    SINGLETONS: frozenset[str]
    CONFIGLESS: frozenset[str]
    NOT_SURFACE: frozenset[str]

__all__ = ["BLOCK_ORDER", "BY_TYPE", "CONFIGLESS", "EFFECTIVE_ORDER", "HANDLERS", "MODULES",
           "NOT_SURFACE", "PLAN_ORDER", "SINGLETONS", "SUPPORTED", "UNKNOWN", "WIDENING_ORDER",
           "handler"]
