"""A kit descriptor's YAML document: parsed as YAML 1.2 by ruamel (``yes``/``on`` stay strings,
as in Go's yaml.v3) with duplicate keys rejected, and refused before it costs anything when it
is hostile (too large, too deep, too many nodes, an anchor, alias or merge key)."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any, Final

from sbx.domain.kits.diagnostics import (
    Diagnostic,
    fail,
    line_at,
)

MAX_DESCRIPTOR_BYTES: Final = 512 * 1024  # KIT-SPEC-V3 §1.9 size budget
# Structure budgets, far above any real kit (the largest in the corpus has ~240 nodes and
# nests 12 deep) and low enough that decoding and validating any accepted document stays well
# under a second: a descriptor is attacker-controlled input (a pulled or shared kit).
MAX_DEPTH: Final = 32  # nested mappings/lists/scalars, counting the document itself
MAX_NODES: Final = 5_000  # YAML nodes: every scalar, key, mapping and list


def load_document(text: str, file: str) -> Any:
    """Parse YAML 1.2 (duplicate keys rejected) into ruamel's position-carrying mapping.

    Hostile documents are refused before they cost anything: more than
    :data:`MAX_DESCRIPTOR_BYTES`, nesting deeper than :data:`MAX_DEPTH`, more than
    :data:`MAX_NODES` nodes, and any anchor, alias or merge key (see :func:`_strict_composer`).
    """
    from ruamel.yaml import YAML
    from ruamel.yaml.error import MarkedYAMLError, YAMLError

    size = len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_DESCRIPTOR_BYTES:
        fail([too_large(file, size)])
    lines = text.splitlines()
    yaml = YAML(typ="rt")
    yaml.allow_duplicate_keys = False
    yaml.Composer = _strict_composer()
    try:
        document = yaml.load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = (mark.line + 1) if mark else 0
        col = (mark.column + 1) if mark else 0
        problem = " ".join(str(exc.problem or exc.context or "invalid YAML").split())
        if "duplicate key" in str(exc).lower():
            problem = f"duplicate key: {problem}"
        fail([Diagnostic("", problem, file, max(line, 1), max(col, 1),
                          line_at(lines, line))])
    except (YAMLError, ValueError, TypeError, RecursionError) as exc:
        # ruamel raises plain ValueError/TypeError for a few malformed inputs (bad escapes,
        # unhashable keys); they are still the document's fault, not sbx's.
        fail([Diagnostic("", f"invalid YAML: {' '.join(str(exc).split())[:200]}", file, 1, 1,
                          line_at(lines, 1))])
    if not isinstance(document, Mapping):
        fail([Diagnostic("", "a descriptor must be a mapping of fields", file, 1, 1,
                          line_at(lines, 1))])
    return document


def too_large(file: str, size: int | None) -> Diagnostic:
    limit = f"{MAX_DESCRIPTOR_BYTES // 1024} KiB ({MAX_DESCRIPTOR_BYTES} bytes)"
    got = f"{size} bytes" if size is not None else "larger"
    return Diagnostic("", f"the descriptor is {got}, over the {limit} limit for a kit "
                          "descriptor (KIT-SPEC-V3 §1.9)", file, 1, 1)


@cache
def _strict_composer() -> Any:
    """ruamel's composer, refusing what a kit never needs and an attacker would use.

    - **Anchors and aliases** (``&a`` / ``*a``, and with them ``<<`` merge keys) are refused
      outright rather than expanded under a budget: nothing in KIT-SPEC-V3 needs them; an
      alias lets one line of text stand for a whole subtree (a few hundred bytes of
      "billion laughs" expand to gigabytes in every pass that walks plain data); and a
      reviewer reading a kit's permissions should see each one where it applies.
    - **Depth** beyond :data:`MAX_DEPTH` and more than :data:`MAX_NODES` nodes: parsing stops
      at the first node over the budget, so the cost of a refused document is bounded too.
    """
    from ruamel.yaml.composer import Composer, ComposerError
    from ruamel.yaml.events import AliasEvent, ScalarEvent
    from ruamel.yaml.nodes import MappingNode

    class StrictComposer(Composer):
        nodes = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            event = self.parser.peek_event()
            if isinstance(event, AliasEvent):
                raise ComposerError(None, None, f"YAML aliases (*{event.anchor}) are not "
                                    "allowed in a kit descriptor: write the value out where "
                                    "it applies", event.start_mark)
            if getattr(event, "anchor", None) is not None:
                raise ComposerError(None, None, f"YAML anchors (&{event.anchor}) are not "
                                    "allowed in a kit descriptor", event.start_mark)
            if isinstance(event, ScalarEvent) and isinstance(parent, MappingNode) \
                    and index is None and event.value == "<<" and event.style is None:
                raise ComposerError(None, None, "YAML merge keys (<<) are not allowed in a "
                                    "kit descriptor", event.start_mark)
            self.nodes += 1
            if self.nodes > MAX_NODES:
                raise ComposerError(None, None, f"the descriptor has more than {MAX_NODES} "
                                    "YAML nodes (values, keys, lists and mappings), the limit "
                                    "for a kit descriptor", event.start_mark)
            if self.depth >= MAX_DEPTH:
                raise ComposerError(None, None, f"the descriptor nests deeper than "
                                    f"{MAX_DEPTH} levels, the limit for a kit descriptor",
                                    event.start_mark)
            return super().compose_node(parent, index)

    return StrictComposer
