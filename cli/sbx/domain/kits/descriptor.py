"""Strict decoding of kit descriptors (KIT-SPEC-V3 §1) with positioned diagnostics (§11).

YAML is parsed as YAML 1.2 by ruamel (``yes``/``on`` stay strings, as in Go's yaml.v3) with
duplicate keys rejected. The document is checked in two passes whose findings are reported
together: sbx's own JSON Schema (``schema/kit.schema.json`` plus one config schema per well-known
capability type under ``schema/capabilities/``), then the cross-entry rules a schema cannot state
(:mod:`sbx.domain.kits.rules`: arity, dedup keys, versions and names, group rules,
inject-within-allow,
...). Every violation becomes a :class:`Diagnostic` carrying the dotted path
(``capabilities[2].config.runtime.allow[0]``) and ``file:line:col`` with the source line and a
caret. All independent problems are collected and reported together, in a deterministic order.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
import os
import posixpath
import stat
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Final, cast

from sbx.base.errors import KitError
from sbx.domain.kits.diagnostics import (
    Diagnostic,
    format_path,
    key_position,
    line_at,
    position,
    to_plain,
    value_position,
)
from sbx.seams import owned

SYNTAX_LINE: Final = "# syntax=docker/sandbox-kit:3"
MAX_DESCRIPTOR_BYTES: Final = 512 * 1024  # KIT-SPEC-V3 §1.9 size budget
# Structure budgets, far above any real kit (the largest in the corpus has ~240 nodes and
# nests 12 deep) and low enough that decoding and validating any accepted document stays well
# under a second: a descriptor is attacker-controlled input (a pulled or shared kit).
MAX_DEPTH: Final = 32  # nested mappings/lists/scalars, counting the document itself
MAX_NODES: Final = 5_000  # YAML nodes: every scalar, key, mapping and list
# How much of the document is shown: every problem is counted and kept in `details`, but the
# human message lists the first ones, each with at most a window of its source line.
MAX_SHOWN_DIAGNOSTICS: Final = 50
MAX_KEPT_DIAGNOSTICS: Final = 1000








@dataclass(frozen=True)
class Descriptor:
    """A decoded, grammar-valid descriptor as plain Python data."""

    data: Mapping[str, Any]
    file: str

    @property
    def kind(self) -> str:
        # `sandbox` is the pre-rename spelling of `workload` (KIT-SPEC-V3 §1.3).
        kind = str(self.data["kind"])
        return "workload" if kind == "sandbox" else kind

    @property
    def capabilities(self) -> list[Mapping[str, Any]]:
        return list(self.data.get("capabilities") or [])






_SCHEMA_DIR: Final = "schema"
_SCHEMA_BASE: Final = "https://sbx.dev/schema/"
# Sources whose text decides whether a descriptor is valid: hashed into the validation cache key,
# so editing a schema or a rule can never serve a stale "valid" verdict.
# Names inside this package (sbx.domain.kits); tests/unit/test_descriptor.py checks each exists.
# Every capability type's handler (captypes/) is hashed too: its rules decide validity.
_RULE_MODULES: Final = ("descriptor.py", "diagnostics.py", "rules.py", "versions.py", "args.py",
                        "placeholders.py", "patterns.py")


def _schema_files() -> list[tuple[str, str]]:
    """(relative name, text) of kit.schema.json and every capability config schema."""
    root = resources.files("sbx").joinpath(_SCHEMA_DIR)
    out = [("kit.schema.json", root.joinpath("kit.schema.json").read_text(encoding="utf-8"))]
    capabilities = root.joinpath("capabilities")
    for entry in sorted(capabilities.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".json"):
            out.append((f"capabilities/{entry.name}", entry.read_text(encoding="utf-8")))
    return out


@cache
def _schema_text() -> str:
    parts = [f"{name}\0{text}" for name, text in _schema_files()]
    package = resources.files(__package__ or "sbx.domain.kits")
    handlers = package.joinpath("captypes")
    modules = [*_RULE_MODULES, *sorted(f"captypes/{entry.name}" for entry in handlers.iterdir()
                                       if entry.name.endswith(".py"))]
    for module in modules:
        try:
            text = package.joinpath(*module.split("/")).read_text(encoding="utf-8")
            parts.append(f"{module}\0{text}")
        except OSError:  # pragma: no cover - a zipped install without sources
            parts.append(module)
    return "\0".join(parts)


@cache
def validation_fingerprint() -> str:
    """A digest of everything validation depends on (schemas and rule sources): a cached
    "valid" is only ever reused under the exact same rules."""
    return hashlib.sha256(_schema_text().encode("utf-8", "surrogatepass")).hexdigest()


@cache
def _schema_roots() -> dict[str, Any]:
    """Each schema file's parsed contents, by relative name: the very objects the validator
    walks, so a subschema in an error can be traced back to its file (:func:`_owner`)."""
    return {name: json.loads(text) for name, text in _schema_files()}


@cache
def _schema() -> dict[str, Any]:
    loaded: dict[str, Any] = _schema_roots()["kit.schema.json"]
    return loaded


@cache
def _owners() -> dict[int, str]:
    """id() of every mapping inside a schema file → that file's name."""
    owners: dict[int, str] = {}

    def walk(node: Any, name: str) -> None:
        if isinstance(node, dict):
            owners[id(node)] = name
            for value in node.values():
                walk(value, name)
        elif isinstance(node, list):
            for value in node:
                walk(value, name)

    for name, root in _schema_roots().items():
        walk(root, name)
    return owners


def _deref(schema: Any, owner: str, depth: int = 0) -> tuple[Any, str]:
    """Follow ``$ref`` (``#/...`` within ``owner``, or another schema file) to the subschema
    it names; unresolvable references come back unchanged."""
    ref = schema.get("$ref") if isinstance(schema, Mapping) else None
    if not isinstance(ref, str) or depth > 8:
        return schema, owner
    target, _, pointer = ref.partition("#")
    if target.startswith(_SCHEMA_BASE):
        owner = target.removeprefix(_SCHEMA_BASE)
    elif target:  # relative to the referring file
        owner = posixpath.normpath(posixpath.join(posixpath.dirname(owner), target))
    roots = _schema_roots()
    node: Any = roots.get(owner)
    for part in filter(None, pointer.split("/")):
        node = node.get(part) if isinstance(node, Mapping) else None
    if node is None:
        return schema, owner
    return _deref(node, owner, depth + 1)


def nested_suggestions(key: str, schema: Mapping[str, Any]) -> list[str]:
    """Where ``key``, unknown at the level ``schema`` describes, is a field one level down:
    ``config.allow`` of a network policy → ``runtime.allow`` (then ``install.allow``), in the
    schema's order; close spellings (``alow``) count too."""
    owner = _owners().get(id(schema), "kit.schema.json")
    exact: list[str] = []
    close: list[str] = []
    for name, sub in (schema.get("properties") or {}).items():
        resolved, _ = _deref(sub, owner)
        fields = list((resolved.get("properties") or {}).keys()) \
            if isinstance(resolved, Mapping) else []
        if key in fields:
            exact.append(f"{name}.{key}")
        else:
            close.extend(f"{name}.{m}" for m in difflib.get_close_matches(key, fields, n=1))
    return exact or close


def _did_you_mean(candidates: Sequence[str]) -> str:
    quoted = [repr(c) for c in candidates]
    if not quoted:
        return ""
    if len(quoted) == 1:
        return f"; did you mean {quoted[0]}?"
    return f"; did you mean {', '.join(quoted[:-1])} or {quoted[-1]}?"


@cache
def _validator() -> Any:
    from jsonschema import Draft202012Validator
    from referencing import Registry, Resource

    resources_: list[tuple[str, Resource[Any]]] = []
    for name, contents in _schema_roots().items():
        resources_.append((f"{_SCHEMA_BASE}{name}", Resource.from_contents(contents)))
    registry: Registry[Any] = Registry().with_resources(resources_)
    from jsonschema.validators import extend

    # jsonschema compares unhashable items pairwise (quadratic: a list of a few thousand
    # mappings takes minutes); the same verdict in linear time from canonical keys.
    validator_class = cast(Any, extend)(Draft202012Validator, {"uniqueItems": _unique_items})
    return validator_class(_schema(), registry=registry)


def _unique_items(validator: Any, wanted: Any, instance: Any, _schema: Any) -> Iterator[Any]:
    from jsonschema.exceptions import ValidationError

    if not wanted or not validator.is_type(instance, "array"):
        return
    seen: set[Any] = set()
    for item in instance:
        key = _canonical(item)
        if key in seen:
            yield ValidationError("has non-unique elements")
            return
        seen.add(key)


def _canonical(value: Any) -> Any:
    """A hashable key equal for exactly the values JSON Schema calls equal (1 == 1.0, but
    true != 1; mappings regardless of key order)."""
    if isinstance(value, bool) or value is None:
        return ("literal", value)
    if isinstance(value, int | float):
        number = int(value) if isinstance(value, float) and value.is_integer() else value
        return ("number", "nan" if math.isnan(number) else number)
    if isinstance(value, str):
        return ("string", value)
    if isinstance(value, Mapping):
        return ("object", frozenset((str(k), _canonical(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return ("array", tuple(_canonical(v) for v in value))
    return ("other", repr(value))


def parse_descriptor_text(text: str, file: str, *, authored: bool = True) -> Descriptor:
    """Decode and validate one descriptor; raise :class:`KitError` listing every problem.

    ``authored`` applies the rules that only bind what an author writes (``deb/``/``apk/``
    provides are publisher-derived); pass False for a descriptor read from a published kit.
    """
    lines = text.splitlines()
    document = load_document(text, file)
    diagnostics = check_document(document, file, lines, authored=authored)
    if diagnostics:
        _fail(diagnostics)
    return Descriptor(data=to_plain(document), file=file)


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
        _fail([_too_large(file, size)])
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
        _fail([Diagnostic("", problem, file, max(line, 1), max(col, 1),
                          line_at(lines, line))])
    except (YAMLError, ValueError, TypeError, RecursionError) as exc:
        # ruamel raises plain ValueError/TypeError for a few malformed inputs (bad escapes,
        # unhashable keys); they are still the document's fault, not sbx's.
        _fail([Diagnostic("", f"invalid YAML: {' '.join(str(exc).split())[:200]}", file, 1, 1,
                          line_at(lines, 1))])
    if not isinstance(document, Mapping):
        _fail([Diagnostic("", "a descriptor must be a mapping of fields", file, 1, 1,
                          line_at(lines, 1))])
    return document


def _too_large(file: str, size: int | None) -> Diagnostic:
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


def check_document(document: Any, file: str, lines: Sequence[str], *, authored: bool = True,
                   effective: bool = False, positions: Any = None) -> list[Diagnostic]:
    """Schema and rules together: every independent problem, deduplicated and sorted.

    ``effective`` is the strict pass over an expanded descriptor: no ``${{ kit.args.* }}`` or
    ``${{ kit.env.* }}`` reference may remain. ``positions`` is the ruamel document to take
    line and column from when ``document`` itself is plain data (an expanded copy).
    """
    from sbx.domain.kits.rules import findings

    where = document if positions is None else positions
    plain = to_plain(document)
    found = validate_document(plain, file, lines, positions=where)
    found.extend(position(findings(plain, authored=authored, effective=effective),
                          where, file, lines))
    return sort_diagnostics(found)


def sort_diagnostics(diagnostics: Iterable[Diagnostic]) -> list[Diagnostic]:
    unique: dict[tuple[str, str], Diagnostic] = {}
    for diagnostic in diagnostics:
        unique.setdefault((diagnostic.path, diagnostic.message), diagnostic)
    return sorted(unique.values(), key=lambda d: (d.line, d.col, d.path, d.message))


def validate_document(document: Any, file: str, lines: Sequence[str], *,
                      positions: Any = None) -> list[Diagnostic]:
    """The schema pass alone; positions come from ``positions`` (default: ``document``)."""
    plain = to_plain(document)
    where = document if positions is None else positions
    found: dict[tuple[str, str], Diagnostic] = {}
    for error in _validator().iter_errors(plain):
        for diagnostic in _diagnostics_for(error, where, file, lines):
            found.setdefault((diagnostic.path, diagnostic.message), diagnostic)
    return sort_diagnostics(found.values())






def _diagnostics_for(error: Any, document: Any, file: str,
                     lines: Sequence[str]) -> list[Diagnostic]:
    # if/then/else wraps the real error; descend to the leaves so messages name the field.
    if error.validator in ("if", "then", "else", "$ref", "allOf") and error.context:
        out: list[Diagnostic] = []
        for sub in error.context:
            out.extend(_diagnostics_for(sub, document, file, lines))
        return out
    parts = list(error.absolute_path)
    if error.validator == "additionalProperties":
        known = sorted((error.schema.get("properties") or {}).keys())
        out = []
        for key in _unexpected_keys(error):
            line, col = key_position(document, parts, key)
            hint = difflib.get_close_matches(key, known, n=1)
            suffix = _did_you_mean(hint or nested_suggestions(key, error.schema))
            out.append(Diagnostic(format_path([*parts, key]), f"unknown field {key!r}{suffix}",
                                  file, line, col, line_at(lines, line)))
        return out
    if error.validator in ("anyOf", "oneOf") and error.context \
            and error.validator not in _custom_messages(error):
        from jsonschema.exceptions import best_match

        return _diagnostics_for(best_match(error.context), document, file, lines)
    if "propertyNames" in list(error.schema_path)[-2:] and isinstance(error.instance, str):
        # A bad key: point at the key itself and name it in the path.
        line, col = key_position(document, parts, error.instance)
        return [Diagnostic(format_path([*parts, error.instance]), _message(error), file, line,
                           col, line_at(lines, line))]
    line, col = value_position(document, parts)
    return [Diagnostic(format_path(parts), _message(error), file, line, col,
                       line_at(lines, line))]


def _custom_messages(error: Any) -> Mapping[str, str]:
    schema = error.schema if isinstance(error.schema, Mapping) else {}
    messages = schema.get("x-messages")
    return messages if isinstance(messages, Mapping) else {}


def _unexpected_keys(error: Any) -> list[str]:
    allowed = set((error.schema.get("properties") or {}).keys())
    instance = error.instance if isinstance(error.instance, Mapping) else {}
    return sorted(str(k) for k in instance if k not in allowed)


def _message(error: Any) -> str:
    validator = error.validator
    value = error.validator_value
    custom = _custom_messages(error).get(str(validator))
    if custom:
        return custom.replace("{value}", _show(error.instance)).replace(
            "{got}", _json_type(error.instance))
    if validator == "const":
        return f"must be {json.dumps(value)} (got {_show(error.instance)})"
    if validator == "enum":
        choices = ", ".join(json.dumps(v) for v in value)
        return f"must be one of {choices} (got {_show(error.instance)})"
    if validator == "type":
        return f"must be {_a(value)} (got {_json_type(error.instance)})"
    if validator == "required":
        missing = [k for k in value if k not in (error.instance or {})]
        return "missing required field " + ", ".join(repr(k) for k in missing)
    if validator == "pattern":
        return f"{_show(error.instance)} does not match {value}"
    if validator in ("minItems", "minLength", "minProperties"):
        return "must not be empty"
    if validator == "uniqueItems":
        return "must not list the same entry twice"
    if validator == "not":
        return "is not allowed here"
    return str(error.message)


def _a(type_name: Any) -> str:
    if isinstance(type_name, list):
        return " or ".join(_a(t) for t in type_name)
    names = {"object": "a mapping", "array": "a list", "string": "a string",
             "boolean": "true or false", "integer": "an integer", "number": "a number"}
    return names.get(str(type_name), str(type_name))


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "null"
    return type(value).__name__


def _show(value: Any) -> str:
    # Encoded lazily and cut at 60 characters: a problem about a huge value (or many problems
    # about one) must not serialise all of it each time.
    text = ""
    for chunk in json.JSONEncoder(default=str).iterencode(value):
        text += chunk
        if len(text) > 60:
            break
    return text if len(text) <= 60 else text[:57] + "..."














def _fail(diagnostics: Sequence[Diagnostic]) -> Any:
    count = len(diagnostics)
    file = diagnostics[0].file if diagnostics else "descriptor"
    head = f"{file} is not a valid kit descriptor ({count} problem{'s' if count != 1 else ''})"
    shown = diagnostics[:MAX_SHOWN_DIAGNOSTICS]
    body = "\n\n".join(d.render() for d in shown)
    if count > len(shown):
        body += f"\n\n... and {count - len(shown)} more problems (--json lists up to " \
                f"{MAX_KEPT_DIAGNOSTICS})"
    details: dict[str, Any] = {
        "diagnostics": [d.as_dict() for d in diagnostics[:MAX_KEPT_DIAGNOSTICS]]}
    if count > MAX_KEPT_DIAGNOSTICS:
        details["diagnostics_total"] = count
    raise KitError(head, body=body,
                   hint="Fix each field at the path and position shown.", details=details)


def parse_descriptor_file(path: Path, *, cache_dir: Path | None = None) -> Descriptor:
    """Parse and validate a descriptor file.

    With ``cache_dir``, a descriptor whose exact text already passed validation under this
    exact schema and rule set is read back from the cache instead of being parsed again:
    validation is a pure function of (schema, rules, text), and skipping the YAML parser and
    jsonschema saves tens of milliseconds on every run. Anything that fails is never cached.
    """
    text = read_descriptor_text(path)
    if cache_dir is None:
        return parse_descriptor_text(text, str(path))
    key = hashlib.sha256(
        f"sbx-descriptor-v3\0{validation_fingerprint()}\0{text}".encode("utf-8", "surrogatepass")
    ).hexdigest()
    entry = cache_dir / f"{key}.json"
    # Only this user's own entry is read (sbx.seams.owned); a damaged one is a miss.
    data = owned.read_cache(entry, max_bytes=MAX_DESCRIPTOR_BYTES * 4)
    if isinstance(data, dict):
        return Descriptor(data=data, file=str(path))
    descriptor = parse_descriptor_text(text, str(path))
    owned.write_cache(entry, descriptor.data)  # best effort: a miss only costs speed
    return descriptor


def read_descriptor_text(path: Path) -> str:
    """The text of a descriptor file, read no further than the size limit: a huge file, a
    FIFO or a device is refused (``invalid_kit``) without being read whole or blocking."""
    file = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except (OSError, ValueError) as exc:
        _fail([Diagnostic("", f"cannot read descriptor: {_os_reason(exc)}", file, 0, 0)])
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            _fail([Diagnostic("", "the descriptor is not a regular file", file, 0, 0)])
        if info.st_size > MAX_DESCRIPTOR_BYTES:
            _fail([_too_large(file, info.st_size)])
        with os.fdopen(fd, "rb", closefd=False) as handle:
            raw = handle.read(MAX_DESCRIPTOR_BYTES + 1)
    except OSError as exc:
        _fail([Diagnostic("", f"cannot read descriptor: {_os_reason(exc)}", file, 0, 0)])
    finally:
        os.close(fd)
    if len(raw) > MAX_DESCRIPTOR_BYTES:
        _fail([_too_large(file, None)])
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        _fail([Diagnostic("", f"the descriptor is not UTF-8 text (byte offset {exc.start})",
                          file, 0, 0)])
    raise AssertionError("unreachable")  # pragma: no cover - _fail always raises


def _os_reason(exc: Exception) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return " ".join(str(exc).split())[:200]


def raise_diagnostics(diagnostics: Sequence[Diagnostic]) -> None:
    if diagnostics:
        _fail(sort_diagnostics(diagnostics))


__all__ = ["MAX_DEPTH", "MAX_DESCRIPTOR_BYTES", "MAX_NODES", "SYNTAX_LINE", "Descriptor",
           "check_document", "load_document", "nested_suggestions", "parse_descriptor_file",
           "parse_descriptor_text", "raise_diagnostics", "read_descriptor_text",
           "sort_diagnostics", "validate_document", "validation_fingerprint"]
