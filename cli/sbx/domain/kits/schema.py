"""The schema pass over a kit descriptor: sbx's own JSON Schema (``schema/kit.schema.json`` plus
one config schema per well-known capability type under ``schema/capabilities/``), each error a
positioned :class:`~sbx.domain.kits.diagnostics.Diagnostic` with a message that names the field,
and the fingerprint of everything validation depends on."""

from __future__ import annotations

import hashlib
import json
import math
import posixpath
from collections.abc import Iterable, Iterator, Mapping, Sequence
from functools import cache
from importlib import resources
from typing import Any, Final, cast

from sbx.domain.kits.diagnostics import (
    Diagnostic,
    format_path,
    key_position,
    line_at,
    sort_diagnostics,
    to_plain,
    value_position,
)
from sbx.seams.host import lookup

_SCHEMA_DIR: Final = "schema"
_SCHEMA_BASE: Final = "https://sbx.dev/schema/"
# Sources whose text decides whether a descriptor is valid: hashed into the validation cache key,
# so editing a schema or a rule can never serve a stale "valid" verdict.
# Names inside this package (sbx.domain.kits); tests/unit/domain/kits/test_rules.py checks each
# exists.
# Every capability type's handler (captypes/) is hashed too: its rules decide validity.
_RULE_MODULES: Final = ("descriptor.py", "document.py", "schema.py", "diagnostics.py", "rules.py",
                        "versions.py", "args.py",
                        "placeholders.py", "patterns.py")


def _schema_files() -> list[tuple[str, str]]:
    """(relative name, text) of kit.schema.json and every capability config schema."""
    root = resources.files("sbx").joinpath(_SCHEMA_DIR)
    out = [("kit.schema.json", lookup.resource_text(root.joinpath("kit.schema.json")))]
    capabilities = root.joinpath("capabilities")
    for entry in sorted(lookup.resource_entries(capabilities), key=lambda e: e.name):
        if entry.name.endswith(".json"):
            out.append((f"capabilities/{entry.name}", lookup.resource_text(entry)))
    return out


@cache
def _schema_text() -> str:
    parts = [f"{name}\0{text}" for name, text in _schema_files()]
    package = resources.files(__package__ or "sbx.domain.kits")
    handlers = package.joinpath("captypes")
    modules = [*_RULE_MODULES, *sorted(f"captypes/{entry.name}"
                                       for entry in lookup.resource_entries(handlers)
                                       if entry.name.endswith(".py"))]
    for module in modules:
        try:
            text = lookup.resource_text(package.joinpath(*module.split("/")))
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
            close.extend(f"{name}.{m}" for m in _close_matches(key, fields, n=1))
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
            hint = _close_matches(key, known, n=1)
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


def _close_matches(word: str, candidates: Iterable[str], n: int) -> list[str]:
    """difflib's close matches, imported only when a descriptor has a misspelt key."""
    import difflib

    return difflib.get_close_matches(word, list(candidates), n=n)
