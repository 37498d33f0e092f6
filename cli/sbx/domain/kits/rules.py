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

import json
import posixpath
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import urlsplit

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
    normalize_name,
    parse_provide,
    parse_requirement,
    parse_version,
)

# Policy-shaped types: at most one entry per declaration block (§1.7 arity).
SINGLETONS: Final = frozenset({
    NETWORK_V1, NETWORK_V2, RESOURCES, PRIVILEGED, KIT_REGISTRY, AGENT_SESSIONS,
    INTERACTIVE_SESSIONS, LIFECYCLE, SBX, LONG_RUNNING, GIT_IDENTITY})
CONFIGLESS: Final = frozenset({PRIVILEGED, KIT_REGISTRY, SBX, LONG_RUNNING, GIT_IDENTITY})
HTTP_METHODS: Final = frozenset({"CONNECT", "DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST",
                                 "PUT", "TRACE"})
METHOD_ANY: Final = "ANY"
MAX_HTTP_GRANTS: Final = 10_000  # per network-policy@2 entry (hosts x methods x paths)
PHASES: Final = ("install", "runtime")
PROMPT: Final = "{{.Prompt}}"
SESSION_ID: Final = "{{.SessionID}}"
CREDENTIAL_PLACEHOLDERS: Final = frozenset({"AccessToken", "RefreshToken", "ExpiresAt", "Scopes",
                                            "PrimaryApiKey"})

TYPE_PATTERN: Final = re.compile(
    r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?/[a-z0-9]([a-z0-9-]*[a-z0-9])?@[1-9][0-9]*")
_SKILL_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,254}")
_FILE_NAME_FORBIDDEN: Final = re.compile(r"[/\\\x00]")
_TEMPLATE: Final = re.compile(r"\{\{\s*\.([A-Za-z0-9_]+)\s*\}\}")
# A registry reference: [host[:port]/]path[:tag][@sha256:digest], lowercase path components.
_PATH_COMPONENT: Final = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REFERENCE: Final = re.compile(
    rf"(?:[A-Za-z0-9.-]+(?::[0-9]+)?/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[0-9a-f]{64})?")


# -- small readers that never fail on a malformed document --------------------------------------

def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _items(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _string(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def deferred(value: Any) -> bool:
    """Whether a value (anywhere inside it) still carries a kit placeholder."""
    if isinstance(value, str):
        return contains_placeholder(value)
    if isinstance(value, Mapping):
        return any(deferred(k) or deferred(v) for k, v in value.items())
    if isinstance(value, list):
        return any(deferred(v) for v in value)
    return False


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def _phases(value: Any) -> list[str]:
    """The literal phases of a credential/ssh-agent ``phase`` (scalar or list)."""
    raw = value if isinstance(value, list) else [value]
    return list(dict.fromkeys(p for p in raw if isinstance(p, str) and p in PHASES))


def _strip_port(host: str) -> str:
    return host.split(":", 1)[0]


def _strings(value: Any) -> list[str]:
    return [v for v in _items(value) if isinstance(v, str)]


# -- the document walk --------------------------------------------------------------------------

@dataclass(frozen=True)
class CapabilityEntry:
    """One ordinary capability entry and where it sits."""

    path: Parts
    data: Mapping[str, Any]

    @property
    def type(self) -> str | None:
        ctype = _string(self.data.get("type"))
        return ctype if ctype is not None and TYPE_PATTERN.fullmatch(ctype) else None

    @property
    def config(self) -> Mapping[str, Any]:
        return _mapping(self.data.get("config"))

    def at(self, *parts: str | int) -> Parts:
        return (*self.path, *parts)


@dataclass
class _Out:
    found: list[Finding] = field(default_factory=list)

    def add(self, parts: Parts, message: str, *, on_key: bool = False) -> None:
        self.found.append(Finding(tuple(parts), message, on_key))


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
    _block(block, out, inject=True)
    return position(out.found, {}, file, [])


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


def _walk_strings(value: Any, parts: Parts) -> Iterator[tuple[Parts, str, bool]]:
    """(path, text, is_key) for every string value and mapping key in a document."""
    if isinstance(value, str):
        yield parts, value, False
    elif isinstance(value, Mapping):
        for key, child in value.items():
            if isinstance(key, str):
                yield (*parts, key), key, True
            yield from _walk_strings(child, (*parts, key))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            yield from _walk_strings(child, (*parts, i))


def _placeholders(doc: Mapping[str, Any], out: _Out, *, effective: bool) -> None:
    declared = set(_mapping(doc.get("args")))
    for parts, text, is_key in _walk_strings(doc, ()):
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
        for parts, text, is_key in _walk_strings(entry.data.get("config"), entry.at("config")):
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
    _block(top, out, inject=not groups)
    for members in groups:
        _block(members, out, inject=False)


def _entry(entry: CapabilityEntry, kind: str | None, out: _Out) -> None:
    ctype = entry.type
    if ctype is None:
        return
    if ctype == SBX and kind == "mixin":
        out.add(entry.at("type"), f"{SBX} is workload-only: a mixin's image config never becomes "
                                  "the composed image's")
    config = entry.data.get("config")
    if not isinstance(config, Mapping):
        return
    rule = _PER_TYPE.get(ctype)
    if rule is not None:
        rule(entry, config, kind, out)


def _network_v2(entry: CapabilityEntry, config: Mapping[str, Any], kind: str | None,
                out: _Out) -> None:
    grants = 0
    for phase in PHASES:
        rules = _mapping(config.get(phase))
        for side in ("allow", "deny"):
            for j, raw in enumerate(_items(rules.get(side))):
                if isinstance(raw, Mapping):
                    _network_entry(entry.at("config", phase, side, j), phase, side, raw, out)
                    grants += (len(_items(raw.get("hosts"))) * max(len(_items(raw.get(
                        "methods"))), 1) * max(len(_items(raw.get("paths"))), 1))
    if grants > MAX_HTTP_GRANTS:
        # Each host x method x path is one grant in the permission surface a pull compares
        # (sbx.domain.kits.surface); a few hundred list items must not multiply into millions.
        out.add(entry.at("config"), f"the policy combines {grants} host x method x path grants, "
                                    f"more than {MAX_HTTP_GRANTS}: split it by host, or drop "
                                    "methods or paths that add nothing")


def _network_entry(at: Parts, phase: str, side: str, raw: Mapping[str, Any], out: _Out) -> None:
    methods = raw.get("methods")
    paths = raw.get("paths")
    method_list = _items(methods)
    seen: set[str] = set()
    for k, method in enumerate(method_list):
        if not isinstance(method, str) or contains_placeholder(method):
            continue
        if method != METHOD_ANY and method not in HTTP_METHODS:
            out.add((*at, "methods", k), f"{phase} {side} entry method {method!r} is not an "
                                         f"uppercase HTTP method or {METHOD_ANY}")
        if method in seen:
            out.add((*at, "methods", k), f"{phase} {side} entry repeats method {method!r}")
        seen.add(method)
    if METHOD_ANY in seen and len(method_list) > 1:
        out.add((*at, "methods"), f"{METHOD_ANY} already covers every method; it must stand "
                                  "alone")
    if "paths" in raw and not method_list:
        out.add((*at, "paths"), "paths require methods: name the methods the paths bound, or "
                                f"write methods: [{METHOD_ANY}]")
    for k, path in enumerate(_items(paths)):
        if isinstance(path, str) and not contains_placeholder(path) and not path.startswith("/"):
            out.add((*at, "paths", k), f'{phase} {side} entry path {path!r} must start with "/"')
    bounded = bool(method_list) or bool(_items(paths))
    if side == "allow" and bounded:
        for k, host in enumerate(_items(raw.get("hosts"))):
            if isinstance(host, str) and "*" in host and not contains_placeholder(host):
                out.add((*at, "hosts", k), f"{phase} allow entry bounds the pattern {host!r}; "
                                           "an entry with methods or paths names its hosts "
                                           "literally")


def _credential(entry: CapabilityEntry, config: Mapping[str, Any], kind: str | None,
                out: _Out) -> None:
    api_key = config.get("apiKey")
    if isinstance(api_key, Mapping):
        name = api_key.get("name")
        inject = _items(api_key.get("inject"))
        if not (isinstance(name, str) and name) and not inject:
            out.add(entry.at("config", "apiKey"), "apiKey needs a name, inject rules, or both")
    credential_file = _mapping(_mapping(config.get("oauth")).get("credentialFile"))
    structure = credential_file.get("structure")
    at = entry.at("config", "oauth", "credentialFile", "structure")
    # An omitted structure is valid (sbx writes an empty document); only a stated one can hold
    # nulls TOML cannot represent.
    if credential_file.get("format") == "toml" and "structure" in credential_file:
        for parts in _nulls(structure, at):
            out.add(parts, "is null, which TOML cannot represent")
    for parts, text, is_key in _walk_strings(structure, at):
        if is_key:
            continue
        for match in _TEMPLATE.finditer(text):
            if match.group(1) not in CREDENTIAL_PLACEHOLDERS:
                known = ", ".join(f"{{{{.{p}}}}}" for p in sorted(CREDENTIAL_PLACEHOLDERS))
                out.add(parts, f"unknown placeholder {match.group(0)}; known: {known}")


def _nulls(value: Any, parts: Parts) -> Iterator[Parts]:
    if value is None:
        yield parts
    elif isinstance(value, Mapping):
        for key, child in value.items():
            yield from _nulls(child, (*parts, key))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            yield from _nulls(child, (*parts, i))


def _ssh_agent(entry: CapabilityEntry, config: Mapping[str, Any], kind: str | None,
               out: _Out) -> None:
    unrestricted = config.get("unrestricted", True)
    stated = [k for k in ("sign", "authenticate") if k in config]
    if unrestricted is False and not stated:
        out.add(entry.at("config", "unrestricted"), "unrestricted: false needs sign, "
                                                    "authenticate, or both")
    if unrestricted is True and stated:
        for key in stated:
            out.add(entry.at("config", key), f"{key} bounds the agent, which needs "
                                             "unrestricted: false (an unrestricted agent signs "
                                             "anything)")
    for k, destination in enumerate(_items(config.get("authenticate"))):
        if not isinstance(destination, str) or contains_placeholder(destination):
            continue
        host = destination.rsplit("@", 1)[-1]
        if host and not host.strip("0123456789."):
            out.add(entry.at("config", "authenticate", k), f"{destination!r} names an IP "
                                                           "address; name the server by its "
                                                           "DNS name")


def _usb_device(entry: CapabilityEntry, config: Mapping[str, Any], kind: str | None,
                out: _Out) -> None:
    vendor, product = "vendorId" in config, "productId" in config
    if (vendor or product) == ("class" in config):
        out.add(entry.at("config"), "declare either vendorId with productId, or class: not both "
                                    "and not neither")
    elif vendor != product:
        out.add(entry.at("config"), "vendorId and productId go together")


def _lifecycle(entry: CapabilityEntry, config: Mapping[str, Any], kind: str | None,
               out: _Out) -> None:
    if not any(_items(config.get(k)) for k in ("install", "startup", "files", "interactive")):
        out.add(entry.at("config"), "lifecycle declares no hooks, no files and no interactive "
                                    "tail; drop the entry instead")
    for hook_kind in ("install", "startup"):
        for j, hook in enumerate(_items(config.get(hook_kind))):
            command = _mapping(hook).get("command")
            if _blank_command(command):
                out.add(entry.at("config", hook_kind, j, "command"), "must name a command")


def _blank_command(command: Any) -> bool:
    if isinstance(command, list) and command:
        first = command[0]
        return isinstance(first, str) and not first.strip()
    return False


def _agent_context(entry: CapabilityEntry, config: Mapping[str, Any], kind: str | None,
                   out: _Out) -> None:
    if "content" in config and "contentFile" in config:
        out.add(entry.at("config"), "contentFile and content are mutually exclusive")
    filename = config.get("filename")
    if "directory" in config:
        if not (isinstance(filename, str) and filename):
            out.add(entry.at("config", "filename"), "directory requires filename in the same "
                                                    "entry")
        elif not contains_placeholder(filename) and (
                filename in (".", "..") or _FILE_NAME_FORBIDDEN.search(filename)):
            out.add(entry.at("config", "filename"), "must be a single file name when directory "
                                                    "is stated")
    elif isinstance(filename, str) and filename and kind == "mixin":
        out.add(entry.at("config", "filename"), "filename without directory is for workload "
                                                "kits; a mixin states an explicit directory")


def _argv_has(argv: Any, needle: str) -> bool:
    return any(isinstance(a, str) and needle in a for a in _items(argv))


def _sessions(entry: CapabilityEntry, config: Mapping[str, Any], kind: str | None,
              out: _Out) -> None:
    interactive = entry.type == INTERACTIVE_SESSIONS
    if interactive:
        verbs = any(k in config for k in ("prompt", "resume", "continue", "newSession",
                                          "sessionPicker"))
        listed = "list" in config and not _empty_command(config.get("list"))
    else:
        verbs = any(_items(config.get(k)) for k in ("prompt", "resume", "continue"))
        listed = not _empty_command(config.get("list"))
    if not verbs and not listed:
        out.add(entry.at("config"), "declares no verbs; drop the entry instead")
    for key, needle in (("prompt", PROMPT), ("resume", SESSION_ID)):
        argv = config.get(key)
        if _items(argv) and not deferred(argv) and not _argv_has(argv, needle):
            out.add(entry.at("config", key), f"{key} must reference {needle}")
    if interactive and "list" in config and _empty_command(config.get("list")):
        out.add(entry.at("config", "list"), "list must name a command")


def _empty_command(command: Any) -> bool:
    if command is None:
        return True
    if isinstance(command, str):
        return not command.strip()
    if isinstance(command, list):
        return not command or _blank_command(command)
    return False


def _agent_skill(entry: CapabilityEntry, config: Mapping[str, Any], kind: str | None,
                 out: _Out) -> None:
    path = config.get("path")
    if "name" in config or not isinstance(path, str) or contains_placeholder(path):
        return
    base = posixpath.basename(path)
    if base and not _SKILL_NAME.fullmatch(base):
        out.add(entry.at("config", "path"), f"the skill name defaults to the directory name "
                                            f"{base!r}, which is not a valid skill name; set "
                                            "name")


def _acp(entry: CapabilityEntry, config: Mapping[str, Any], kind: str | None, out: _Out) -> None:
    agent = config.get("agent")
    if isinstance(agent, str) and agent and not contains_placeholder(agent):
        if "@" in agent:
            out.add(entry.at("config", "agent"), "agent must be an unversioned provides name")
        else:
            try:
                check_name(agent)
            except VersionError as exc:
                out.add(entry.at("config", "agent"), str(exc))
    if _blank_command(config.get("command")):
        out.add(entry.at("config", "command"), "must name a command")


_PER_TYPE: Final = {
    NETWORK_V2: _network_v2,
    CREDENTIAL: _credential,
    SSH_AGENT: _ssh_agent,
    USB_DEVICE: _usb_device,
    LIFECYCLE: _lifecycle,
    AGENT_CONTEXT: _agent_context,
    AGENT_SESSIONS: _sessions,
    INTERACTIVE_SESSIONS: _sessions,
    AGENT_SKILL: _agent_skill,
    ACP: _acp,
}


# -- one declaration block ----------------------------------------------------------------------

def _show(parts: Parts) -> str:
    return format_path(parts)


class _Keys:
    """First declaration of each dedup key within a block."""

    def __init__(self) -> None:
        self.seen: dict[tuple[str, str], Parts] = {}

    def claim(self, space: str, key: str, path: Parts) -> Parts | None:
        previous = self.seen.get((space, key))
        if previous is None:
            self.seen[(space, key)] = path
        return previous


def _block(entries: Sequence[CapabilityEntry], out: _Out, *, inject: bool) -> None:
    keys = _Keys()
    duplicate_singleton: set[Parts] = set()
    for entry in entries:
        ctype = entry.type
        if ctype is None:
            continue
        if ctype in SINGLETONS:
            previous = keys.claim("singleton", ctype, entry.path)
            if previous is not None:
                duplicate_singleton.add(entry.path)
                out.add(entry.at("type"), f"{ctype} is a singleton, already declared at "
                                          f"{_show(previous)}")
        exact = keys.claim("exact", ctype + "\0" + _canonical(entry.data.get("config")),
                           entry.path)
        if exact is not None and entry.path not in duplicate_singleton:
            out.add(entry.path, f"identical to {_show(exact)}")
        if exact is None:
            _instance_keys(entry, ctype, keys, out)
    v1 = keys.seen.get(("singleton", NETWORK_V1))
    v2 = keys.seen.get(("singleton", NETWORK_V2))
    if v1 is not None and v2 is not None:
        out.add((*v2, "type"), f"{NETWORK_V2} cannot be declared beside {NETWORK_V1} at "
                               f"{_show(v1)}; a descriptor states one network-policy version")
    _agreement(entries, out)
    if inject and (v1 is None or v2 is None):
        _inject_within_allow(entries, out)


def _instance_keys(entry: CapabilityEntry, ctype: str, keys: _Keys, out: _Out) -> None:
    config = entry.config
    if ctype == CREDENTIAL:
        service = _string(config.get("service"))
        if service and not contains_placeholder(service):
            for phase in _phases(config.get("phase")):
                previous = keys.claim("credential", f"{service}\0{phase}", entry.path)
                if previous is not None:
                    out.add(entry.at("config", "service"), f"credential for service "
                                                           f"{service!r} phase {phase!r} already "
                                                           f"declared at {_show(previous)}")
    elif ctype == SSH_AGENT:
        for phase in _phases(config.get("phase")):
            previous = keys.claim("ssh-agent", phase, entry.path)
            if previous is not None:
                out.add(entry.at("config", "phase"), f"ssh-agent for phase {phase!r} already "
                                                     f"declared at {_show(previous)}")
    elif ctype in (VOLUME, HOST_MOUNT):
        path = _string(config.get("path"))
        if path and not contains_placeholder(path):
            label = "volume" if ctype == VOLUME else "host mount"
            previous = keys.claim("storage", posixpath.normpath(path), entry.path)
            if previous is not None:
                out.add(entry.at("config", "path"), f"{label} path {path!r} is already claimed "
                                                    f"at {_show(previous)} (volume and host-mount "
                                                    "share one path key)")
    elif ctype == AGENT_SKILLS:
        path = _string(config.get("path"))
        if path and not contains_placeholder(path):
            previous = keys.claim("skills", path, entry.path)
            if previous is not None:
                out.add(entry.at("config", "path"), f"skills for {path!r} already declared at "
                                                    f"{_show(previous)}")
    elif ctype == AGENT_SKILL:
        name = _string(config.get("name"))
        path = _string(config.get("path"))
        effective = name if name else (posixpath.basename(path) if path else None)
        if effective and not contains_placeholder(effective):
            previous = keys.claim("skill", effective, entry.path)
            if previous is not None:
                out.add(entry.at("config"), f"skill {effective!r} already declared at "
                                            f"{_show(previous)}")
    elif ctype == PORT:
        container = config.get("container")
        transport = config.get("transport", "tcp")
        if isinstance(container, int) and not isinstance(container, bool) \
                and isinstance(transport, str) and not contains_placeholder(transport):
            previous = keys.claim("port", f"{container}/{transport}", entry.path)
            if previous is not None:
                out.add(entry.at("config", "container"), f"port {container}/{transport} already "
                                                         f"declared at {_show(previous)}")
    elif ctype == ACP:
        agent = _string(config.get("agent"))
        if agent and not contains_placeholder(agent):
            previous = keys.claim("acp", normalize_name(agent), entry.path)
            if previous is not None:
                out.add(entry.at("config", "agent"), f"ACP for agent {agent!r} already declared "
                                                     f"at {_show(previous)}")
    elif ctype == AGENT_CONTEXT:
        _context_arity(entry, config, keys, out)


def _context_arity(entry: CapabilityEntry, config: Mapping[str, Any], keys: _Keys,
                   out: _Out) -> None:
    if "directory" not in config:
        previous = keys.claim("context", "undirected", entry.path)
        if previous is not None:
            out.add(entry.at("type"), f"agent-context without a directory already declared at "
                                      f"{_show(previous)}; only explicit profiles may repeat")
    if "content" in config or "contentFile" in config:
        previous = keys.claim("context", "body", entry.path)
        if previous is not None:
            out.add(entry.at("config"), f"agent-context body already declared at "
                                        f"{_show(previous)}; a kit contributes one body")
    directory, filename = _string(config.get("directory")), _string(config.get("filename"))
    if directory and filename and not contains_placeholder(directory + filename):
        previous = keys.claim("context-profile", posixpath.join(directory, filename), entry.path)
        if previous is not None:
            out.add(entry.at("config", "directory"), f"agent-context profile "
                                                     f"{posixpath.join(directory, filename)} "
                                                     f"already declared at {_show(previous)}")


def _literal_argv(value: Any) -> list[str] | None:
    if isinstance(value, str):
        return None if contains_placeholder(value) else ["sh", "-c", value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value) and not deferred(value):
        return list(value)
    return None


def _agreement(entries: Sequence[CapabilityEntry], out: _Out) -> None:
    """lifecycle.interactive == interactive-sessions.newSession; the two `list`s agree."""
    by_type: dict[str, CapabilityEntry] = {}
    for entry in entries:
        if entry.type is not None:
            by_type.setdefault(entry.type, entry)
    life, inter, head = (by_type.get(LIFECYCLE), by_type.get(INTERACTIVE_SESSIONS),
                         by_type.get(AGENT_SESSIONS))
    if life is not None and inter is not None and "interactive" in life.config \
            and "newSession" in inter.config:
        tail, new = (_literal_argv(life.config.get("interactive")),
                     _literal_argv(inter.config.get("newSession")))
        if tail is not None and new is not None and tail != new:
            out.add(inter.at("config", "newSession"), f"newSession {new} disagrees with "
                                                      f"lifecycle interactive {tail} at "
                                                      f"{_show(life.path)}; they name the same "
                                                      "launch")
    if head is not None and inter is not None:
        a, b = _literal_argv(head.config.get("list")), _literal_argv(inter.config.get("list"))
        if a and b and a != b:
            out.add(inter.at("config", "list"), f"list differs from the agent-sessions list at "
                                                f"{_show(head.path)}; both enumerate the same "
                                                "sessions, so they name one command")


def _allow_hosts(config: Mapping[str, Any], phase: str) -> set[str] | None:
    """Hosts (port stripped) a policy allows in a phase, bounded or not; None if unreadable."""
    hosts: set[str] = set()
    for raw in _items(_mapping(config.get(phase)).get("allow")):
        if isinstance(raw, str):
            hosts.add(_strip_port(raw))
        elif isinstance(raw, Mapping):
            hosts.update(_strip_port(h) for h in _strings(raw.get("hosts")))
        else:
            return None
    return hosts


def _inject_within_allow(entries: Sequence[CapabilityEntry], out: _Out) -> None:
    policies = [e for e in entries if e.type in (NETWORK_V1, NETWORK_V2)]
    if len(policies) > 1 or any(deferred(p.data.get("config")) for p in policies):
        return  # ambiguous or parameterized: judged on the effective descriptor
    policy = policies[0].config if policies else {}
    for entry in entries:
        if entry.type != CREDENTIAL or deferred(entry.data.get("config")):
            continue
        injects = _items(_mapping(entry.config.get("apiKey")).get("inject"))
        service = entry.config.get("service")
        for phase in _phases(entry.config.get("phase")):
            allowed = _allow_hosts(policy, phase)
            if allowed is None or "*" in allowed or "**" in allowed:
                continue
            for j, inject in enumerate(injects):
                domain = _string(_mapping(inject).get("domain"))
                if domain and _strip_port(domain) not in allowed:
                    out.add(entry.at("config", "apiKey", "inject", j, "domain"),
                            f"credential {service!r}: inject domain {domain!r} is not in the "
                            f"network policy's {phase} allow list")


def describe(found: Iterable[Finding]) -> list[str]:
    """``path: message`` lines, for logs and tests."""
    return [f"{_show(f.parts)}: {f.message}" if f.parts else f.message for f in found]


__all__ = [
    "ACP", "AGENT_CONTEXT", "AGENT_SESSIONS", "AGENT_SKILL", "AGENT_SKILLS", "CONFIGLESS",
    "CREDENTIAL", "GIT_IDENTITY", "HOST_MOUNT", "HTTP_METHODS", "INTERACTIVE_SESSIONS",
    "KIT_REGISTRY", "KNOWN_TYPES", "LIFECYCLE", "LONG_RUNNING", "NETWORK_V1", "NETWORK_V2",
    "PORT", "PRIVILEGED", "RESOURCES", "SBX", "SINGLETONS", "SSH_AGENT", "USB_DEVICE", "VOLUME",
    "CapabilityEntry", "check", "check_selected", "deferred", "describe", "findings", "parse_path",
]
