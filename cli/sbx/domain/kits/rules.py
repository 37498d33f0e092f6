"""Rules over a whole descriptor that its JSON Schema cannot state (KIT-SPEC-V3 §1.3-§1.7, §3).

Each rule reads the decoded document (plain data, any shape: the schema pass reports shape
errors, so every rule here skips what it cannot read rather than fail) and yields
:class:`~sbx.domain.kits.descriptor.Finding` values naming the dotted path of the offending element.

Values that still hold ``${{ kit.args.* }}`` or ``${{ kit.env.* }}`` are *deferred*: rules that
judge a value skip them at load time and judge the expanded value in the effective pass
(:func:`sbx.domain.kits.args.validate_effective`), where no reference may remain. Rules about which
fields are present never wait.

Arity is judged per declaration block: the top-level ordinary entries form one block and each
group's members form another (§1.7, §7.1.1). The credential inject-within-allow rule needs the
selected capabilities; with groups present it is left to :func:`check_selected`.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Final
from urllib.parse import urlsplit

from sbx.domain.kits import captypes
from sbx.domain.kits.captypes.base import (
    TYPE_PATTERN,
    Block,
    CapabilityEntry,
    Keys,
    canonical_json,
    deferred,
    walk_strings,
)
from sbx.domain.kits.captypes.base import Out as _Out
from sbx.domain.kits.captypes.base import items as _items
from sbx.domain.kits.captypes.base import mapping as _mapping
from sbx.domain.kits.captypes.base import string as _string
from sbx.domain.kits.captypes.base import strings as _strings
from sbx.domain.kits.captypes.credential import CREDENTIAL_PLACEHOLDERS
from sbx.domain.kits.captypes.network_policy import HTTP_METHODS, MAX_HTTP_GRANTS, METHOD_ANY
from sbx.domain.kits.diagnostics import Diagnostic, Finding, Parts, format_path, position, to_plain
from sbx.domain.kits.patterns import check_pattern, full_match
from sbx.domain.kits.placeholders import (
    ARG_REF,
    ENV_REF,
    contains_arg_ref,
    contains_env_ref,
    contains_placeholder,
    malformed_placeholders,
)
from sbx.domain.kits.types import (
    ACP,
    AGENT_CONTEXT,
    AGENT_SESSIONS,
    AGENT_SKILL,
    AGENT_SKILLS,
    CREDENTIAL,
    GIT_IDENTITY,
    HOST_MOUNT,
    INTERACTIVE_SESSIONS,
    KIT_REGISTRY,
    KNOWN_TYPES,
    LIFECYCLE,
    LONG_RUNNING,
    NETWORK_V1,
    NETWORK_V2,
    PORT,
    PRIVILEGED,
    RESOURCES,
    SBX,
    SSH_AGENT,
    USB_DEVICE,
    VOLUME,
)
from sbx.domain.kits.versions import (
    VersionError,
    check_name,
    is_derived,
    parse_provide,
    parse_requirement,
    parse_version,
)

# Policy-shaped types: at most one entry per declaration block (§1.7 arity); config-less ones.
SINGLETONS: Final = captypes.SINGLETONS
CONFIGLESS: Final = captypes.CONFIGLESS
# A registry reference: [host[:port]/]path[:tag][@sha256:digest], lowercase path components.
_PATH_COMPONENT: Final = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REFERENCE: Final = re.compile(
    rf"(?:[A-Za-z0-9.-]+(?::[0-9]+)?/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[0-9a-f]{64})?")


# -- the document walk --------------------------------------------------------------------------

def findings(document: Any, *, authored: bool = True, effective: bool = False) -> list[Finding]:
    """Every rule finding for a decoded document (plain data)."""
    doc = _mapping(document)
    out = _Out()
    _metadata(doc, out)
    _relations(doc, out, authored=authored)
    _args(doc, out)
    _placeholders(doc, out, effective=effective)
    _recipe(doc, out)
    _capabilities(doc, out)
    return out.found


def check(document: Any, file: str, lines: Sequence[str], *, authored: bool = True,
          effective: bool = False, positions: Any = None) -> list[Diagnostic]:
    """The rules pass as positioned diagnostics (positions from ``positions`` or ``document``).
    """
    where = document if positions is None else positions
    return position(findings(to_plain(document), authored=authored, effective=effective), where,
                    file, lines)


def check_selected(entries: Sequence[Mapping[str, Any]], file: str,
                   paths: Sequence[Parts] | None = None) -> list[Diagnostic]:
    """Block rules and inject-within-allow over the flattened, selected entries of one kit.

    Groups defer these checks until selection has decided which members apply; ``paths`` names
    each entry's place in the declared descriptor (default ``capabilities[i]``).
    """
    where = list(paths) if paths is not None else [("capabilities", i)
                                                   for i in range(len(entries))]
    block = [CapabilityEntry(p, _mapping(e)) for p, e in zip(where, entries, strict=True)]
    out = _Out()
    for part in _by_source(block):
        _block(part, out, inject=True)
    return position(out.found, {}, file, [])


def _by_source(entries: Sequence[CapabilityEntry]) -> list[list[CapabilityEntry]]:
    """One block per source kit: a republished descriptor carries several kits' declarations
    (``source.kit``), each judged on its own as it was when that kit was published; entries
    without a source are the descriptor's own block."""
    blocks: dict[str | None, list[CapabilityEntry]] = {}
    for entry in entries:
        blocks.setdefault(entry.source_kit, []).append(entry)
    return list(blocks.values())


def parse_path(path: str) -> Parts:
    """Invert :func:`~sbx.domain.kits.descriptor.format_path` for paths whose keys hold no '.' or
    '['."""
    parts: list[str | int] = []
    for token in re.finditer(r"([^.\[\]]+)|\[(\d+)\]", path):
        parts.append(int(token.group(2)) if token.group(2) is not None else token.group(1))
    return tuple(parts)


# -- top level ----------------------------------------------------------------------------------

def _metadata(doc: Mapping[str, Any], out: _Out) -> None:
    icon = _string(doc.get("iconUrl"))
    if icon:
        parsed = urlsplit(icon)
        if parsed.scheme != "https" or not parsed.netloc:
            out.add(("iconUrl",), "must be an absolute https:// URL (a consumer fetches and "
                                  "renders it, so other schemes are refused)")
    version = _string(doc.get("version"))
    if version and not contains_arg_ref(version):
        try:
            parse_version(version)
        except VersionError as exc:
            out.add(("version",), str(exc))


def _relations(doc: Mapping[str, Any], out: _Out, *, authored: bool) -> None:
    for i, text in enumerate(_items(doc.get("provides"))):
        if not isinstance(text, str) or contains_arg_ref(text):
            continue  # a build-phase reference is expanded at build, then judged
        try:
            provide = parse_provide(text)
        except VersionError as exc:
            out.add(("provides", i), f"provides entry {text!r}: {exc}")
            continue
        if authored and is_derived(provide.name):
            namespace = provide.name.split("/", 1)[0]
            out.add(("provides", i), f"provides entry {text!r} is in the {namespace}/ "
                                     "namespace, which publishing fills from the image's package "
                                     "database; do not author it")
    for field_name in ("requires", "integrates"):
        for i, text in enumerate(_items(doc.get(field_name))):
            if not isinstance(text, str):
                continue
            if contains_placeholder(text):
                out.add((field_name, i), f"{field_name} entries must be literal: kit "
                                         "references are not allowed here")
                continue
            try:
                parse_requirement(text)
            except VersionError as exc:
                out.add((field_name, i), f"{field_name} entry {text!r}: {exc}")
    for i, text in enumerate(_items(doc.get("conflicts"))):
        if not isinstance(text, str):
            continue
        if contains_placeholder(text):
            out.add(("conflicts", i), "conflicts entries must be literal: kit references are not "
                                      "allowed here")
        elif any(ch in text for ch in "@<>=,"):
            out.add(("conflicts", i), f"conflicts entry {text!r} must be a bare name, without a "
                                      "version or constraint")
        else:
            try:
                check_name(text.strip())
            except VersionError as exc:
                out.add(("conflicts", i), f"conflicts entry {text!r}: {exc}")


def _args(doc: Mapping[str, Any], out: _Out) -> None:
    args = _mapping(doc.get("args"))
    exported: dict[str, str] = {}
    for name in sorted(args, key=str):
        decl = _mapping(args[name])
        here = ("args", name)
        if decl.get("required") is True and "default" in decl:
            out.add(here, "required and default are mutually exclusive")
        if "enum" in decl and "pattern" in decl:
            out.add(here, "enum and pattern are mutually exclusive")
        if "env" in decl and "buildArg" in decl:
            out.add(here, "env and buildArg are mutually exclusive: an arg resolves in one "
                          "phase (create or build)")
        pattern = _string(decl.get("pattern"))
        usable = False
        if pattern:
            # RE2, the spec's dialect, compiled here so bad syntax is a finding at this field;
            # never Python's backtracking `re` (sbx.domain.kits.patterns).
            problem = check_pattern(pattern)
            if problem is not None:
                out.add((*here, "pattern"), problem)
            usable = problem is None
        default = _string(decl.get("default"))
        enum = _strings(decl.get("enum"))
        if default is not None and enum and default not in enum:
            out.add((*here, "default"), f"default {default!r} is not one of the enum values")
        if default is not None and pattern and usable and not full_match(pattern, default):
            out.add((*here, "default"), f"default {default!r} does not match the pattern")
        if default is not None and contains_placeholder(default):
            out.add((*here, "default"), "a default is a literal; it may not reference "
                                        "${{ kit.* }}")
        env = _string(decl.get("env"))
        if env:
            if env in exported:
                out.add((*here, "env"), f"{env} is already exported by arg {exported[env]!r}")
            else:
                exported[env] = str(name)


def _placeholders(doc: Mapping[str, Any], out: _Out, *, effective: bool) -> None:
    declared = set(_mapping(doc.get("args")))
    for parts, text, is_key in walk_strings(doc, ()):
        if "${{" not in text:
            continue
        if malformed_placeholders(text):
            out.add(parts, "malformed ${{ kit.* }} reference: expected ${{ kit.args.NAME }} or "
                           "${{ kit.env.NAME }}", on_key=is_key)
        names = list(dict.fromkeys(m.group(1) for m in ARG_REF.finditer(text)))
        if effective and names:
            out.add(parts, "still references kit args (" + ", ".join(names) + "); expansion did "
                           "not run or a value did not resolve", on_key=is_key)
            continue
        for name in names:
            if name not in declared:
                out.add(parts, f"references ${{{{ kit.args.{name} }}}}, but the kit declares no "
                               f"arg {name!r}", on_key=is_key)
    for entry in _all_entries(doc):
        for parts, text, is_key in walk_strings(entry.data.get("config"), entry.at("config")):
            if not contains_env_ref(text):
                continue
            if is_key:
                out.add(parts, "${{ kit.env.* }} references are not allowed in mapping keys",
                        on_key=True)
            elif effective:
                env_names = ", ".join(dict.fromkeys(m.group(1) for m in ENV_REF.finditer(text)))
                out.add(parts, f"still references kit.env ({env_names or 'malformed'}); expand the "
                               "final container environment first")


def _recipe(doc: Mapping[str, Any], out: _Out) -> None:
    has_kits = "kits" in doc
    if doc.get("kind") == "set" and not has_kits:
        out.add(("kind",), "kind: set needs kits: a set's content is the kits it lists")
    if "build" in doc and "dockerfile" in doc:
        out.add(("dockerfile",), "build and dockerfile are both declared; a kit's recipe lives "
                                 "in exactly one place")
    if has_kits:
        for field_name in ("build", "dockerfile"):
            if field_name in doc:
                out.add((field_name,), f"kits and {field_name} are both declared; a set's content "
                                       "is the kits it lists, so it declares no recipe")
    dockerfile = _string(doc.get("dockerfile"))
    if dockerfile and not contains_placeholder(dockerfile):
        cleaned = posixpath.normpath(dockerfile)
        if dockerfile.startswith("/") or cleaned == ".." or cleaned.startswith("../"):
            out.add(("dockerfile",), f"{dockerfile!r} must be a relative path inside the "
                                     "descriptor's directory")
    args = _mapping(doc.get("args"))
    seen: dict[str, int] = {}
    for i, kit in enumerate(_items(doc.get("kits"))):
        ref = _string(_mapping(kit).get("ref"))
        if not ref:
            continue
        here = ("kits", i, "ref")
        if contains_arg_ref(ref):
            for match in ARG_REF.finditer(ref):
                decl = _mapping(args.get(match.group(1)))
                if match.group(1) in args and not decl.get("buildArg"):
                    out.add(here, f"ref names kit arg {match.group(1)!r}, which resolves at "
                                  "create; a set's kits resolve at build, so declare it with "
                                  "buildArg or write the reference out")
        elif ref != ref.strip() or any(ch.isspace() for ch in ref):
            out.add(here, f"ref {ref!r} contains whitespace")
        elif ref.startswith("git+"):
            out.add(here, f"ref {ref!r} is a git reference; a set lists published kit images")
        elif ref.startswith((".", "/")):
            out.add(here, f"ref {ref!r} is a local path; a set lists published kit images")
        elif "://" in ref:
            out.add(here, f"ref {ref!r} is a URL; a set lists registry references such as "
                          "docker.io/org/kit:1.0.0")
        elif not _REFERENCE.fullmatch(ref):
            out.add(here, f"ref {ref!r} is not an image reference")
        if ref in seen:
            out.add(here, f"{ref!r} is already listed at kits[{seen[ref]}]")
        else:
            seen[ref] = i


# -- capabilities -------------------------------------------------------------------------------

def _all_entries(doc: Mapping[str, Any]) -> Iterator[CapabilityEntry]:
    """Every ordinary entry, top-level and group members alike."""
    for i, item in enumerate(_items(doc.get("capabilities"))):
        if not isinstance(item, Mapping):
            continue
        if "group" in item:
            for j, member in enumerate(_items(_mapping(item.get("group")).get("capabilities"))):
                if isinstance(member, Mapping) and "group" not in member:
                    yield CapabilityEntry(("capabilities", i, "group", "capabilities", j), member)
        else:
            yield CapabilityEntry(("capabilities", i), item)


def _capabilities(doc: Mapping[str, Any], out: _Out) -> None:
    items = _items(doc.get("capabilities"))
    kind = _string(doc.get("kind"))
    top: list[CapabilityEntry] = []
    groups: list[list[CapabilityEntry]] = []
    for i, item in enumerate(items):
        if not isinstance(item, Mapping):
            continue
        here: Parts = ("capabilities", i)
        if "group" not in item:
            top.append(CapabilityEntry(here, item))
            continue
        mixed = [k for k in ("type", "name", "description", "optional", "config") if k in item]
        if mixed:
            out.add(here, "an item is one ordinary entry or one group, not both: remove "
                          + ", ".join(mixed) + " beside group")
        members: list[CapabilityEntry] = []
        for j, member in enumerate(_items(_mapping(item.get("group")).get("capabilities"))):
            at: Parts = (*here, "group", "capabilities", j)
            if not isinstance(member, Mapping):
                continue
            if "group" in member:
                out.add(at, "nested groups are not permitted")
                continue
            if "optional" in member:
                out.add((*at, "optional"), "group members must not state optional (even false); "
                                           "the group's optional decides")
            members.append(CapabilityEntry(at, member))
        groups.append(members)
    for entry in [*top, *(m for g in groups for m in g)]:
        _entry(entry, kind, out)
    for part in _by_source(top):
        _block(part, out, inject=not groups)
    for members in groups:
        _block(members, out, inject=False)


def _entry(entry: CapabilityEntry, kind: str | None, out: _Out) -> None:
    ctype = entry.type
    if ctype is None:
        return
    handler = captypes.handler(ctype)
    handler.check_entry(entry, kind, out)
    config = entry.data.get("config")
    if isinstance(config, Mapping):
        handler.check(entry, config, kind, out)


# -- one declaration block ----------------------------------------------------------------------

def _show(parts: Parts) -> str:
    return format_path(parts)


def _block(entries: Sequence[CapabilityEntry], out: _Out, *, inject: bool) -> None:
    keys = Keys()
    duplicate_singleton: set[Parts] = set()
    for entry in entries:
        ctype = entry.type
        if ctype is None:
            continue
        handler = captypes.handler(ctype)
        if handler.singleton:
            previous = keys.claim("singleton", ctype, entry.path)
            if previous is not None:
                duplicate_singleton.add(entry.path)
                out.add(entry.at("type"), f"{ctype} is a singleton, already declared at "
                                          f"{_show(previous)}")
        exact = keys.claim("exact", ctype + "\0" + canonical_json(entry.data.get("config")),
                           entry.path)
        if exact is not None and entry.path not in duplicate_singleton:
            out.add(entry.path, f"identical to {_show(exact)}")
        if exact is None:
            handler.claim(entry, keys, out)
    block = Block(entries, keys, inject)
    for handler in captypes.BLOCK_ORDER:
        handler.check_block(block, out)


def describe(found: Iterable[Finding]) -> list[str]:
    """``path: message`` lines, for logs and tests."""
    return [f"{_show(f.parts)}: {f.message}" if f.parts else f.message for f in found]


__all__ = [
    "ACP", "AGENT_CONTEXT", "AGENT_SESSIONS", "AGENT_SKILL", "AGENT_SKILLS", "CONFIGLESS",
    "CREDENTIAL", "GIT_IDENTITY", "HOST_MOUNT", "HTTP_METHODS", "INTERACTIVE_SESSIONS",
    "KIT_REGISTRY", "KNOWN_TYPES", "LIFECYCLE", "LONG_RUNNING", "NETWORK_V1", "NETWORK_V2",
    "PORT", "PRIVILEGED", "RESOURCES", "SBX", "SINGLETONS", "SSH_AGENT", "USB_DEVICE", "VOLUME",
    "CREDENTIAL_PLACEHOLDERS", "MAX_HTTP_GRANTS", "METHOD_ANY", "TYPE_PATTERN", "CapabilityEntry",
    "check", "check_selected", "deferred", "describe", "findings", "parse_path",
]
