"""Kit descriptors for tests: the fragments egress and run tests kept writing by hand.

Each capability builder returns one YAML list entry (``- type: ...``); :func:`capabilities`
joins entries (these, or hand-written ones at any indentation) into a top-level
``capabilities:`` list, and :func:`write_kit` writes a kit directory. Configs are written as
JSON flow mappings, which YAML reads as they are, so a test states the values it cares about
as Python data.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

NS: Final = "com.docker.sandbox/"
HEADER: Final = '# syntax=docker/sandbox-kit:3\nschemaVersion: "3"\n'


def capability(type_: str, config: Mapping[str, Any] | None = None, *,
               optional: bool = False) -> str:
    """One ``capabilities`` entry: ``type_`` is ``name@version`` (under :data:`NS`) or a full
    type."""
    full = type_ if "/" in type_ else NS + type_
    lines = [f"- type: {full}"]
    if optional:
        lines.append("  optional: true")
    if config is not None:
        lines.append(f"  config: {json.dumps(config)}")
    return "\n".join(lines) + "\n"


def capabilities(*entries: str) -> str:
    """A ``capabilities:`` list of the YAML items ``entries`` (each ``- type: ...``)."""
    return "capabilities:\n" + "".join(
        textwrap.indent(textwrap.dedent(e).strip("\n"), "  ") + "\n" for e in entries)


def network_policy(*, runtime: Sequence[Any] | None = None,
                   install: Sequence[Any] | None = None,
                   deny: Sequence[Any] | None = None, version: int = 1,
                   optional: bool = False) -> str:
    """``network-policy@<version>``: hosts (or @2 rule objects) allowed per phase, and the
    runtime phase's deny rules (@2)."""
    config: dict[str, Any] = {}
    if install is not None:
        config["install"] = {"allow": list(install)}
    if runtime is not None or deny is not None:
        config["runtime"] = {"allow": list(runtime or ())}
        if deny is not None:
            config["runtime"]["deny"] = list(deny)
    return capability(f"network-policy@{version}", config, optional=optional)


def rule(hosts: Sequence[str], *, methods: Sequence[str] | None = None,
         paths: Sequence[str] | None = None) -> dict[str, Any]:
    """A network-policy@2 rule object."""
    found: dict[str, Any] = {"hosts": list(hosts)}
    if methods is not None:
        found["methods"] = list(methods)
    if paths is not None:
        found["paths"] = list(paths)
    return found


def api_key_credential(service: str, name: str, domain: str, *,
                       phase: str | Sequence[str] = "runtime",
                       header: str = "Authorization", value_format: str = "Bearer %s",
                       optional: bool = False) -> str:
    """``credential@1`` with a proxy-managed API key: the sandbox sees a sentinel in ``name``
    and the proxy puts the real value into ``header`` for ``domain``."""
    return capability("credential@1", {
        "service": service, "phase": phase if isinstance(phase, str) else list(phase),
        "apiKey": {"name": name, "proxyManaged": True,
                   "inject": [{"domain": domain, "header": header, "format": value_format}]},
    }, optional=optional)


def volume(path: str, **config: Any) -> str:
    """``volume@1`` at ``path`` (``mode``, ``size``... as keyword arguments)."""
    return capability("volume@1", {"path": path, **config})


def port(container: int, **config: Any) -> str:
    """``port@1`` publishing the sandbox's ``container`` port."""
    return capability("port@1", {"container": container, **config})


def write_kit(root: Path, name: str, descriptor: str = "", recipe: str | None = None, *,
              kind: str = "workload", files: Mapping[str, str] | None = None) -> Path:
    """``root/name/`` with ``name.yaml`` (the header, ``kind`` and ``descriptor``, dedented),
    ``name.dockerfile`` when a ``recipe`` is given, and any other ``files``."""
    kit = root / name
    kit.mkdir(parents=True)
    (kit / f"{name}.yaml").write_text(
        f"{HEADER}kind: {kind}\n" + textwrap.dedent(descriptor), encoding="utf-8")
    if recipe is not None:
        (kit / f"{name}.dockerfile").write_text(textwrap.dedent(recipe), encoding="utf-8")
    for relative, text in (files or {}).items():
        (kit / relative).write_text(text, encoding="utf-8")
    return kit


__all__ = ["HEADER", "NS", "api_key_credential", "capabilities", "capability",
           "network_policy", "port", "rule", "volume", "write_kit"]
