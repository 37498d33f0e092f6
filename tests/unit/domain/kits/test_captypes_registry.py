"""The capability registry built lazily from its name table (sbx.domain.kits.captypes) holds the
same handlers in the same orders and sets as the registry built by importing every handler
module first; and projecting a surface imports only the handler modules of the types it names."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from types import ModuleType

import pytest

from sbx.domain.kits import captypes
from sbx.domain.kits.types import KNOWN_TYPES, NETWORK_V1

PREFIX = "sbx.domain.kits.captypes."


def _mod(name: str) -> ModuleType:
    return importlib.import_module(PREFIX + name)


def _eager() -> dict[str, object]:
    """The registry as it was written before it became lazy: every module imported, each table
    spelled out handler by handler."""
    (acp, context, interactive, sessions, skill, skills, credential, git, mount, registry,
     lifecycle, long_running, network, port, privileged, resources, platform, ssh, unknown, usb,
     volume) = (_mod(n).HANDLER for n in (
         "acp", "agent_context", "agent_interactive_sessions", "agent_sessions", "agent_skill",
         "agent_skills", "credential", "git_identity", "host_mount", "kit_registry", "lifecycle",
         "long_running", "network_policy", "port", "privileged", "resources", "sbx_platform",
         "ssh_agent", "unknown", "usb_device", "volume"))
    handlers = (network, credential, ssh, volume, mount, port, usb, skills, skill, acp,
                resources, sessions, lifecycle, interactive, context, privileged, long_running,
                git, registry, platform)
    first = (resources, privileged, volume, lifecycle, context, port)
    return {
        "HANDLERS": handlers,
        "UNKNOWN": unknown,
        "BY_TYPE": {t: h for h in handlers for t in h.types},
        "EFFECTIVE_ORDER": (network, credential, ssh, volume, mount, port, usb, skills, skill,
                            acp, unknown, resources, sessions, interactive, lifecycle, context),
        "WIDENING_ORDER": (network, credential, ssh, volume, mount, skills, port, usb,
                           privileged, unknown),
        "BLOCK_ORDER": (network, interactive, credential),
        "PLAN_ORDER": (*first, *(h for h in handlers if h not in first)),
        "SUPPORTED": frozenset(t for h in handlers if h.implemented for t in h.types),
        "SINGLETONS": frozenset(t for h in handlers if h.singleton for t in h.types),
        "CONFIGLESS": frozenset(t for h in handlers if h.configless for t in h.types),
        "NOT_SURFACE": frozenset(t for h in handlers if not h.on_surface for t in h.types),
    }


def test_the_lazy_tables_are_the_eager_ones() -> None:
    for name, eager in _eager().items():
        lazy = getattr(captypes, name)
        assert lazy == eager, name
        if isinstance(eager, tuple):
            assert [type(h) for h in lazy] == [type(h) for h in eager], name


def test_the_name_table_names_each_types_own_module() -> None:
    assert set(captypes.MODULES) == set(KNOWN_TYPES)
    for ctype, module in captypes.MODULES.items():
        assert ctype in _mod(module).HANDLER.types
        assert captypes.handler(ctype) is _mod(module).HANDLER
    assert captypes.handler("example.com/unheard-of@1") is _mod("unknown").HANDLER


def test_an_unknown_attribute_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="NO_SUCH_TABLE"):
        _ = captypes.NO_SUCH_TABLE
    assert not hasattr(captypes, "__wrapped__")


PROBE = """
import json, sys
from sbx.domain.kits.surface import surface
found = surface({"capabilities": [{"type": sys.argv[1],
                                   "config": {"runtime": {"allow": ["a.b"]}}}]})
print(json.dumps({"hosts": list(found.network_runtime_allow),
                  "loaded": sorted(m for m in sys.modules if m.startswith(sys.argv[2]))}))
"""


@pytest.mark.slow
def test_a_network_surface_loads_only_the_base_and_the_network_handler() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE, NETWORK_V1, PREFIX], capture_output=True,
                          text=True, timeout=120, check=True)
    result = json.loads(done.stdout)
    assert result["hosts"] == ["a.b"]
    assert result["loaded"] == [PREFIX + "base", PREFIX + "network_policy"]
