"""Kit args and environment references: create-phase expansion (KIT-SPEC-V3 §1.6, §6.1).

``${{ kit.args.NAME }}`` (whitespace inside the braces optional) is substituted *structurally*,
into every string value and every mapping key of the decoded document, never into its bytes:

- a string that is nothing but one reference adopts the type its value's spelling round-trips
  to (``8080`` → int, ``1.5`` → float, ``true``/``false`` → bool; ``1.0``, ``007``, ``1e5``,
  ``NaN``, ``Inf`` stay strings). Embedded references and references in keys are always text, as
  are fields the schema types as strings even when they look numeric (volume ``size``/``mode``,
  host-mount ``mode``, lifecycle file ``mode``).
- two keys that expand to the same key are an error.
- expansion may add at most :data:`MAX_EXPANSION` characters to a descriptor in all: a value
  used in many places multiplies, and a kit must not be able to build gigabytes from kilobytes.

Argument values, in order of precedence: a supplied ``--arg NAME=VALUE``, else the declared
``default``; a ``required`` arg with neither is an error, as are values failing ``enum`` or
``pattern`` (a whole-value match), supplied names the kit does not declare, and references to an
undeclared arg or to one without a value. ``buildArg`` args resolve at build: sbx builds kits
itself, so their values are returned as docker build args *and* expanded like the others.

``${{ kit.env.NAME }}`` names the final container environment (image ENV, then arg ``env:``
exports, then explicit runtime overrides, last wins: see :func:`final_environment`). It is
expanded only inside capability config string values (never keys), values stay strings, a
missing name or a value holding NUL or another ``${{ kit.* }}`` placeholder is an error, and
expansion is never recursive. Error messages name variables and args but never print a value.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from sbx.base.errors import KitError, SbxError
from sbx.base.reasons import Reason
from sbx.domain.kits.descriptor import Descriptor, check_document, raise_diagnostics
from sbx.domain.kits.diagnostics import Finding, Parts, position, to_plain
from sbx.domain.kits.document import MAX_DESCRIPTOR_BYTES, load_document
from sbx.domain.kits.patterns import PatternError, full_match
from sbx.domain.kits.placeholders import (
    ARG_NAME,
    ARG_REF,
    ENV_OPENER,
    ENV_REF,
    contains_env_ref,
    contains_placeholder,
    whole_arg_ref,
)
from sbx.seams.host import files

# Config fields the schema types as strings although their values often look numeric: a whole
# reference there keeps its spelling ("0755" or "755" must not become an int).
_TEXT_FIELDS: Final[Mapping[str, tuple[tuple[str | None, ...], ...]]] = {
    "com.docker.sandbox/volume@1": (("size",), ("mode",)),
    "com.docker.sandbox/host-mount@1": (("mode",),),
    "com.docker.sandbox/lifecycle@1": (("files", None, "mode"),),
}
_TOP_TEXT: Final = ("version", "displayName", "description", "author", "sourceUrl", "iconUrl")
_TOP_TEXT_LISTS: Final = ("provides", "requires", "integrates", "conflicts", "licenses")
_INT64: Final = 2**63
# Characters expansion may add to one descriptor, all substitutions together (twice the size
# a descriptor may have): see _Growth.
MAX_EXPANSION: Final = 2 * MAX_DESCRIPTOR_BYTES














@dataclass(frozen=True)
class ArgDecl:
    """One entry of a descriptor's ``args`` mapping."""

    name: str
    default: str | None = None
    required: bool = False
    description: str = ""
    enum: tuple[str, ...] = ()
    pattern: str | None = None
    env: str | None = None
    build_arg: str | None = None

    @property
    def phase(self) -> Literal["build", "create"]:
        return "build" if self.build_arg else "create"


def declarations(data: Mapping[str, Any]) -> dict[str, ArgDecl]:
    """The args a (grammar-valid) descriptor declares; malformed entries are skipped."""
    raw = data.get("args")
    out: dict[str, ArgDecl] = {}
    if not isinstance(raw, Mapping):
        return out
    for name, decl in raw.items():
        if not isinstance(decl, Mapping):
            continue
        default = decl.get("default")
        enum = decl.get("enum")
        out[str(name)] = ArgDecl(
            name=str(name),
            default=default if isinstance(default, str) else None,
            required=decl.get("required") is True,
            description=_text(decl.get("description")) or "",
            enum=tuple(v for v in enum if isinstance(v, str)) if isinstance(enum, list) else (),
            pattern=_text(decl.get("pattern")),
            env=_text(decl.get("env")),
            build_arg=_text(decl.get("buildArg")),
        )
    return out


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def parse_arg_assignment(text: str) -> tuple[str, str]:
    """``NAME=VALUE`` (as given to ``--arg``) → (name, value). The value may be empty."""
    name, equals, value = text.partition("=")
    if not equals or not ARG_NAME.fullmatch(name):
        raise SbxError(Reason.INVALID_ARGUMENT,
                       "--arg expects NAME=VALUE with NAME like [A-Za-z_][A-Za-z0-9_]*",
                       hint="For example: --arg version=1.2.3")
    return name, value


def parse_arg_assignments(items: Iterable[str]) -> dict[str, str]:
    """Several ``--arg`` values; naming one arg twice is an error rather than last-wins."""
    out: dict[str, str] = {}
    for item in items:
        name, value = parse_arg_assignment(item)
        if name in out:
            raise SbxError(Reason.INVALID_ARGUMENT, f"--arg {name} is given more than once")
        out[name] = value
    return out


def check_value(decl: ArgDecl, value: str, *, source: str = "value") -> str | None:
    """Why ``value`` is not acceptable for ``decl`` (never quoting it), or None."""
    if "\x00" in value:
        return f"the {source} of kit arg {decl.name!r} contains NUL"
    if contains_placeholder(value):
        return (f"the {source} of kit arg {decl.name!r} contains a ${{{{ kit.* }}}} "
                "placeholder; values are inserted literally and may not add references")
    if decl.enum and value not in decl.enum:
        return (f"the {source} of kit arg {decl.name!r} is not one of the declared values: "
                + ", ".join(decl.enum))
    if decl.pattern is not None:
        # RE2, linear in the value: a backtracking engine would let a kit's pattern hang sbx.
        try:
            matched = full_match(decl.pattern, value)
        except PatternError:
            return f"kit arg {decl.name!r} declares an invalid pattern"
        if not matched:
            return (f"the {source} of kit arg {decl.name!r} does not match its pattern "
                    f"{decl.pattern!r}")
    return None


def resolve_args(decls: Mapping[str, ArgDecl],
                 supplied: Mapping[str, str]) -> tuple[dict[str, str], list[Finding]]:
    """Effective arg values: supplied first, then defaults. Problems come back as findings."""
    problems: list[Finding] = []
    for name in sorted(supplied):
        if name not in decls:
            problems.append(Finding(("args",), f"kit arg {name!r} was supplied, but this kit "
                                               "declares no such arg"))
    values: dict[str, str] = {}
    for name in sorted(decls):
        decl = decls[name]
        if name in supplied:
            value, source = supplied[name], "supplied value"
        elif decl.required:
            problems.append(Finding(("args", name), f"kit arg {name!r} is required and no value "
                                                    f"was supplied (--arg {name}=VALUE)"))
            continue
        elif decl.default is not None:
            value, source = decl.default, "default"
        else:
            continue
        reason = check_value(decl, value, source=source)
        if reason:
            problems.append(Finding(("args", name), reason))
            continue
        values[name] = value
    return values, problems


def typed_scalar(text: str) -> str | int | float | bool:
    """The value a whole-reference adopts: the type whose spelling round-trips to ``text``."""
    if text in ("true", "false"):
        return text == "true"
    if re.fullmatch(r"-?(0|[1-9][0-9]*)", text) and text != "-0":
        number = int(text)
        if -_INT64 <= number < _INT64:
            return number
    if re.fullmatch(r"-?[0-9]+\.[0-9]+", text):
        value = float(text)
        if not (math.isnan(value) or math.isinf(value)) and _shortest(value) == text:
            return value
    return text


def _shortest(value: float) -> str:
    """The shortest plain-notation spelling of a float (no exponent, no trailing ``.0``)."""
    # Here, not at the top: only a float argument needs it, and a pull loads this module.
    from decimal import Decimal

    spelled = format(Decimal(repr(value)), "f")
    if "." in spelled:
        spelled = spelled.rstrip("0").rstrip(".")
    return spelled


@dataclass(frozen=True)
class ExpandedKit:
    """The effective descriptor data and everything create needs to reproduce it."""

    data: dict[str, Any]
    values: dict[str, str] = field(default_factory=dict)  # every resolved arg, to record
    build_args: dict[str, str] = field(default_factory=dict)  # buildArg name -> value
    env_exports: dict[str, str] = field(default_factory=dict)  # env name -> value


def final_environment(image_env: Mapping[str, str], env_exports: Mapping[str, str],
                      overrides: Mapping[str, str]) -> dict[str, str]:
    """The environment ``${{ kit.env.* }}`` reads, lowest precedence first:

    1. the image's ENV, 2. arg ``env:`` exports, 3. explicit runtime overrides (last wins).
    """
    return {**image_env, **env_exports, **overrides}


def expand(descriptor_data: Mapping[str, Any] | Descriptor, *, supplied: Mapping[str, str],
           env: Mapping[str, str] | None, file: str, text: str | None = None) -> ExpandedKit:
    """Create-phase expansion of one kit, or :class:`KitError` listing every problem.

    ``env`` is the final container environment for ``${{ kit.env.* }}``; None leaves those
    references in place (to be expanded once the environment is known). Diagnostics are
    positioned against ``text`` when given, else against ``file`` when it can be read.
    """
    source = descriptor_data.data if isinstance(descriptor_data, Descriptor) else descriptor_data
    data = to_plain(source)
    if not isinstance(data, dict):
        data = {}
    decls = declarations(data)
    values, problems = resolve_args(decls, supplied)
    growth = _Growth(problems)
    expanded = _Expander(decls, values, problems, growth).node(data, ())
    if env is not None:
        expanded = _expand_environment(expanded, env, problems, growth)
    if problems:
        _raise(problems, file, text)
    env_exports = {d.env: values[d.name] for d in decls.values()
                   if d.env and d.phase == "create" and d.name in values}
    build_args = {d.build_arg: values[d.name] for d in decls.values()
                  if d.build_arg and d.name in values}
    return ExpandedKit(data=expanded, values=values, build_args=build_args,
                       env_exports=env_exports)


def expand_build_phase(data: Mapping[str, Any], *, supplied: Mapping[str, str], file: str,
                       text: str | None = None) -> ExpandedKit:
    """Build-phase expansion, what a kit is published with (KIT-SPEC-V3 §1.6): references to
    ``buildArg`` args are replaced by their values (supplied, else default), create-phase
    references stay for the runtime to expand at create, and the ``args`` declarations stay
    (a consumer still validates create-phase values against them). ``supplied`` may only
    name build-phase args: a create-phase value is the consumer's to give, not the publisher's.
    """
    plain = to_plain(data)
    if not isinstance(plain, dict):
        plain = {}
    decls = declarations(plain)
    build = {name: decl for name, decl in decls.items() if decl.phase == "build"}
    problems: list[Finding] = [
        Finding(("args", name), f"kit arg {name!r} is create-phase (no buildArg); its value "
                                "is given when the kit is run, not when it is published")
        for name in sorted(supplied) if name in decls and name not in build]
    values, found = resolve_args(build, {k: v for k, v in supplied.items() if k not in decls
                                         or k in build})
    problems.extend(found)
    growth = _Growth(problems)
    expander = _Expander(decls, values, problems, growth, phase="build")
    expanded = expander.node(plain, ())
    # Fields the grammar types as text keep a whole reference's value as text: a version "2"
    # stays "2", never the number 2 (the published descriptor must still parse).
    for key in _TOP_TEXT:
        if isinstance(plain.get(key), str):
            expanded[key] = expander.text(plain[key], (key,))
    for key in _TOP_TEXT_LISTS:
        if isinstance(plain.get(key), list):
            expanded[key] = [expander.text(v, (key, i)) if isinstance(v, str) else v
                             for i, v in enumerate(plain[key])]
    if problems:
        _raise(problems, file, text)
    build_args = {d.build_arg: values[d.name] for d in build.values()
                  if d.build_arg and d.name in values}
    return ExpandedKit(data=expanded, values=values, build_args=build_args)


def validate_effective(data: Mapping[str, Any], file: str, *, text: str | None = None,
                       authored: bool = True) -> Descriptor:
    """Strict validation of an expanded descriptor: schema and rules with no leniency left.

    Any remaining ``${{ kit.args.* }}`` reference (anywhere) or ``${{ kit.env.* }}`` reference
    (in capability configs) is an error, so a placeholder can never become literal policy.
    """
    plain = to_plain(data)
    document = _source_document(file, text)
    lines = text.splitlines() if text is not None else _read_lines(file)
    raise_diagnostics(check_document(plain, file, lines, authored=authored, effective=True,
                                     positions=document if document is not None else plain))
    return Descriptor(data=plain, file=file)


class _Growth:
    """How many characters expansion has inserted, against :data:`MAX_EXPANSION`.

    A value used in many places multiplies: a 100 KB default referenced 25,000 times in a
    512 KiB descriptor would build gigabytes. Past the budget nothing more is substituted and
    one finding says why, so expansion costs at most the budget in time and memory.
    """

    def __init__(self, problems: list[Finding]) -> None:
        self.added = 0
        self.problems = problems
        self.exceeded = False

    def allow(self, replacement: str, parts: Parts) -> bool:
        if self.exceeded or self.added + len(replacement) > MAX_EXPANSION:
            if not self.exceeded:
                self.problems.append(Finding(parts, (
                    f"expanding kit args and ${{{{ kit.env.* }}}} references adds more than "
                    f"{MAX_EXPANSION // 1024} KiB to the descriptor, the limit: a value is too "
                    "long for the number of places that use it")))
            self.exceeded = True
            return False
        self.added += len(replacement)
        return True


class _Expander:
    def __init__(self, decls: Mapping[str, ArgDecl], values: Mapping[str, str],
                 problems: list[Finding], growth: _Growth | None = None, *,
                 phase: Literal["build"] | None = None) -> None:
        self.decls = decls
        self.values = values
        self.problems = problems
        self.growth = growth if growth is not None else _Growth(problems)
        # "build": only buildArg references are this pass's; create-phase ones stay for create.
        self.phase = phase

    def node(self, value: Any, parts: Parts, ctype: str | None = None,
             rel: tuple[str | int, ...] | None = None) -> Any:
        if isinstance(value, dict):
            return self.mapping(value, parts, ctype, rel)
        if isinstance(value, list):
            return [self.node(child, (*parts, i), ctype, None if rel is None else (*rel, i))
                    for i, child in enumerate(value)]
        if isinstance(value, str):
            return self.scalar(value, parts, keep_text=_keeps_text(ctype, rel))
        return value

    def mapping(self, value: dict[str, Any], parts: Parts, ctype: str | None,
                rel: tuple[str | int, ...] | None) -> dict[str, Any]:
        out: dict[str, Any] = {}
        own_type = value.get("type") if isinstance(value.get("type"), str) else None
        for key, child in value.items():
            new_key = self.text(key, (*parts, key), on_key=True)
            if new_key in out:
                self.problems.append(Finding((*parts, key), "expanding kit args turns two keys "
                                                            f"into {new_key!r}", on_key=True))
                continue
            if own_type is not None and key == "config":
                out[new_key] = self.node(child, (*parts, key), own_type, ())
            else:
                out[new_key] = self.node(child, (*parts, key), ctype,
                                         None if rel is None else (*rel, key))
        return out

    def scalar(self, value: str, parts: Parts, *, keep_text: bool) -> Any:
        name = whole_arg_ref(value)
        if name is None:
            return self.text(value, parts)
        resolved = self.value_of(name, parts)
        if resolved is None or not self.growth.allow(resolved, parts):
            return value
        return resolved if keep_text else typed_scalar(resolved)

    def text(self, value: str, parts: Parts, *, on_key: bool = False) -> str:
        if "${{" not in value:
            return value

        def substitute(match: re.Match[str]) -> str:
            resolved = self.value_of(match.group(1), parts, on_key=on_key)
            if resolved is None or not self.growth.allow(resolved, parts):
                return match.group(0)
            return resolved

        return ARG_REF.sub(substitute, value)

    def value_of(self, name: str, parts: Parts, *, on_key: bool = False) -> str | None:
        if self.phase == "build" and name in self.decls and self.decls[name].phase != "build":
            return None
        if name in self.values:
            return self.values[name]
        if name not in self.decls:
            message = f"references ${{{{ kit.args.{name} }}}}, but the kit declares no arg {name!r}"
        else:
            message = (f"kit arg {name!r} has no resolved value: it is optional, has no default "
                       f"and none was supplied (--arg {name}=VALUE)")
        finding = Finding(parts, message, on_key=on_key)
        if finding not in self.problems:
            self.problems.append(finding)
        return None


def _keeps_text(ctype: str | None, rel: tuple[str | int, ...] | None) -> bool:
    if ctype is None or rel is None:
        return False
    for pattern in _TEXT_FIELDS.get(ctype, ()):
        if len(pattern) == len(rel) and all(p is None or p == r for p, r in zip(pattern, rel,
                                                                                strict=True)):
            return True
    return False


def _expand_environment(data: dict[str, Any], env: Mapping[str, str],
                        problems: list[Finding], growth: _Growth) -> dict[str, Any]:
    """Substitute ``${{ kit.env.NAME }}`` in capability config values (groups included)."""
    items = data.get("capabilities")
    if not isinstance(items, list):
        return data
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            continue
        group = item.get("group")
        if isinstance(group, dict) and isinstance(group.get("capabilities"), list):
            for j, member in enumerate(group["capabilities"]):
                if isinstance(member, dict) and "config" in member:
                    path = ("capabilities", i, "group", "capabilities", j, "config")
                    member["config"] = _env_node(member["config"], path, env, problems,
                                                 growth)
        elif "config" in item:
            item["config"] = _env_node(item["config"], ("capabilities", i, "config"), env,
                                       problems, growth)
    return data


def _env_node(value: Any, parts: Parts, env: Mapping[str, str],
              problems: list[Finding], growth: _Growth) -> Any:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, child in value.items():
            if contains_env_ref(key):
                problems.append(Finding((*parts, key), "${{ kit.env.* }} references are not "
                                                       "allowed in mapping keys", on_key=True))
            out[key] = _env_node(child, (*parts, key), env, problems, growth)
        return out
    if isinstance(value, list):
        return [_env_node(child, (*parts, i), env, problems, growth)
                for i, child in enumerate(value)]
    if isinstance(value, str) and contains_env_ref(value):
        return _env_text(value, parts, env, problems, growth)
    return value


def _env_text(value: str, parts: Parts, env: Mapping[str, str],
              problems: list[Finding], growth: _Growth) -> str:
    # Scans by position (never re-slicing the rest): linear in the length of ``value``.
    out: list[str] = []
    at = 0
    while True:
        opener = ENV_OPENER.search(value, at)
        if opener is None:
            out.append(value[at:])
            return "".join(out)
        match = ENV_REF.match(value, opener.start())
        if match is None:
            problems.append(Finding(parts, "malformed ${{ kit.env.NAME }} reference"))
            return value
        name = match.group(1)
        if name not in env:
            problems.append(Finding(parts, f"the final container environment has no variable "
                                           f"{name!r} (referenced as ${{{{ kit.env.{name} }}}})"))
            return value
        replacement = env[name]
        if "\x00" in replacement or contains_placeholder(replacement):
            problems.append(Finding(parts, f"environment variable {name!r} holds NUL or a "
                                           "${{ kit.* }} placeholder, which a kit.env value "
                                           "may not"))
            return value
        if not growth.allow(replacement, parts):
            return value
        out.append(value[at:opener.start()])
        out.append(replacement)
        at = match.end()


def _source_document(file: str, text: str | None) -> Any:
    """The ruamel document of the descriptor as written, for positions; None if unavailable."""
    if text is None:
        try:
            text = files.file_text(Path(file))
        except (OSError, UnicodeDecodeError, ValueError):
            return None
    try:
        return load_document(text, file)
    except KitError:
        return None


def _read_lines(file: str) -> list[str]:
    try:
        return files.file_text(Path(file)).splitlines()
    except (OSError, UnicodeDecodeError, ValueError):
        return []


def _raise(problems: list[Finding], file: str, text: str | None) -> None:
    document = _source_document(file, text)
    lines = text.splitlines() if text is not None else _read_lines(file)
    raise_diagnostics(position(problems, document if document is not None else {}, file,
                               lines))


__all__ = ["MAX_EXPANSION", "ArgDecl", "ExpandedKit", "check_value", "declarations", "expand",
           "expand_build_phase", "final_environment", "parse_arg_assignment",
           "parse_arg_assignments", "resolve_args", "typed_scalar", "validate_effective"]
