"""The rules a published kit descriptor meets beyond an authored one (KIT-SPEC-V3 §1.9),
checked by `sbx pull` on a descriptor it has not seen before and by `sbx kit push`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sbx.domain.kits.args import declarations
from sbx.domain.kits.placeholders import referenced_args
from sbx.domain.kits.versions import VersionError, parse_provide


def published_form_problems(data: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The rules a published descriptor meets beyond an authored one (KIT-SPEC-V3 §1.9):
    never `kind: set`, no build-phase arg reference left, and every provide versioned."""
    problems: list[tuple[str, str]] = []
    if data.get("kind") == "set":
        problems.append(("kind", "a published kit is never `kind: set` (sets are merged at "
                                 "build time)"))
    build_phase = {d.name for d in declarations(data).values() if d.build_arg}

    def walk(node: Any, path: str) -> None:
        if isinstance(node, str):
            left = sorted(set(referenced_args(node)) & build_phase)
            if left:
                problems.append((path or "(root)", "still references build-phase arg(s) "
                                 + ", ".join(left)))
        elif isinstance(node, Mapping):
            for key, value in node.items():
                if key != "args":
                    walk(value, f"{path}.{key}" if path else str(key))
        elif isinstance(node, list):
            for index, value in enumerate(node):
                walk(value, f"{path}[{index}]")

    walk(data, "")
    fallback = data.get("version")
    for index, text in enumerate(data.get("provides") or []):
        try:
            provide = parse_provide(str(text))
        except VersionError:
            continue  # reported by the grammar check already
        if provide.version is None and not fallback:
            problems.append((f"provides[{index}]", f"{text!r} has no version (neither "
                             "`@version` nor the descriptor's `version:`)"))
    return problems


__all__ = ["published_form_problems"]
