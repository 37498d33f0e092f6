"""Kit-to-kit names, versions and constraints (KIT-SPEC-V3 §1.4, §1.5).

Pure functions, no I/O: the descriptor rules and the resolver both import them.

- A *version* is ``[0-9]+(\\.[0-9A-Za-z-]+)*`` with no ``v`` prefix. Versions compare segment by
  segment: two all-digit segments compare numerically, anything else lexically; a missing segment
  sorts first (``1`` < ``1.0`` < ``1.0.1``).
- A *name* is bare (``gh``) or qualified by a reverse-DNS namespace (``com.example/gh``). Bare
  names normalize to ``com.docker.kit/``; ``deb/`` and ``apk/`` are single-label namespaces the
  spec reserves for provides derived from an image's package database.
- A *requirement* is ``name`` or ``name <op> version[, <op> version ...]`` with ``op`` in
  ``>= > <= < =``; the constraints are ANDed and a set no version can meet is rejected at parse.
- ``satisfies``: an unversioned provide satisfies only an unconstrained requirement.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final, Literal

DEFAULT_NAMESPACE: Final = "com.docker.kit"
DERIVED_NAMESPACES: Final = frozenset({"deb", "apk"})
OPERATORS: Final = (">=", "<=", ">", "<", "=")  # longest first, for prefix matching

Operator = Literal[">=", ">", "<=", "<", "="]

_VERSION: Final = re.compile(r"[0-9]+(\.[0-9A-Za-z-]+)*")
_BASE_NAME: Final = re.compile(r"[a-z0-9]([a-z0-9+.-]{0,62}[a-z0-9+])?")
_NAMESPACE_CHARS: Final = re.compile(r"[a-z0-9.-]+")
_LABEL: Final = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
_MAX_NAMESPACE: Final = 253
# The smallest segment the grammar can spell: "x" + ".-" has nothing between it and "x", which
# lets an exclusive lower bound be reasoned about as an inclusive one.
_SUCCESSOR: Final = ".-"


class VersionError(ValueError):
    """A version, name or constraint that does not follow the grammar; the message says why."""


@dataclass(frozen=True)
class Constraint:
    op: Operator
    version: str

    def holds(self, version: str) -> bool:
        cmp = compare_versions(version, self.version)
        return {">=": cmp >= 0, ">": cmp > 0, "<=": cmp <= 0, "<": cmp < 0,
                "=": cmp == 0}[self.op]

    def __str__(self) -> str:
        return f"{self.op} {self.version}"


@dataclass(frozen=True)
class Requirement:
    """A parsed ``requires``/``integrates`` entry; ``name`` is normalized."""

    name: str
    constraints: tuple[Constraint, ...] = ()

    def is_satisfied_by(self, provide: Provide) -> bool:
        return provide.name == self.name and satisfies(provide.version, self.constraints)

    def __str__(self) -> str:
        if not self.constraints:
            return display_name(self.name)
        return f"{display_name(self.name)} " + ", ".join(str(c) for c in self.constraints)


@dataclass(frozen=True)
class Provide:
    """A parsed ``provides`` entry; ``name`` is normalized, ``version`` None when unversioned."""

    name: str
    version: str | None = None

    def __str__(self) -> str:
        shown = display_name(self.name)
        return f"{shown}@{self.version}" if self.version is not None else shown


def is_version(text: str) -> bool:
    return _VERSION.fullmatch(text) is not None


def parse_version(text: str) -> str:
    """Return the version (surrounding whitespace removed) or raise :class:`VersionError`."""
    version = text.strip()
    if not is_version(version):
        hint = " (no 'v' prefix in descriptors)" if version[:1] in ("v", "V") else ""
        raise VersionError(f"{text!r} is not a version: expected digits with dot-separated "
                           f"segments such as 1.2.3{hint}")
    return version


def _segments(version: str) -> list[str]:
    version = version.strip()
    return version.split(".") if version else []


def _digits(segment: str) -> bool:
    return segment.isascii() and segment.isdigit()


def compare_versions(a: str, b: str) -> int:
    """-1, 0 or 1. All-digit segments compare by value (any length), others lexically."""
    left, right = _segments(a), _segments(b)
    for index in range(max(len(left), len(right))):
        x = left[index] if index < len(left) else ""
        y = right[index] if index < len(right) else ""
        if _digits(x) and _digits(y):
            x, y = x.lstrip("0"), y.lstrip("0")
            if len(x) != len(y):
                return -1 if len(x) < len(y) else 1
        if x != y:
            return -1 if x < y else 1
    return 0


def tag_version(tag: str) -> str | None:
    """The version an OCI tag or git ref names (a leading ``v`` tolerated), else None."""
    candidate = tag[1:] if tag.startswith("v") else tag
    return candidate if is_version(candidate) else None


def normalize_name(name: str) -> str:
    """``gh`` → ``com.docker.kit/gh``; qualified names pass through unchanged."""
    return name if "/" in name else f"{DEFAULT_NAMESPACE}/{name}"


def display_name(name: str) -> str:
    """The inverse for humans: the default namespace is implied."""
    prefix = f"{DEFAULT_NAMESPACE}/"
    return name[len(prefix):] if name.startswith(prefix) else name


def is_derived(name: str) -> bool:
    """Whether a (normalized) name sits in a namespace publishing fills from package databases."""
    namespace, slash, _ = name.partition("/")
    return bool(slash) and namespace in DERIVED_NAMESPACES


def check_name(name: str) -> None:
    """Raise :class:`VersionError` unless ``name`` is a capability name (§1.4)."""
    namespace, slash, base = name.partition("/")
    if not slash:
        if not _BASE_NAME.fullmatch(name):
            raise VersionError(f"{name!r} is not a capability name: lowercase letters, digits, "
                               "'-', '.' and '+', starting with a letter or digit")
        return
    if not namespace or not _NAMESPACE_CHARS.fullmatch(namespace) \
            or not _BASE_NAME.fullmatch(base):
        raise VersionError(f"{name!r} is not a capability name: expected <name> or "
                           "<reverse-dns namespace>/<name> in lowercase")
    if len(namespace) > _MAX_NAMESPACE:
        raise VersionError(f"the namespace of {base!r} is {len(namespace)} characters; no domain "
                           f"is longer than {_MAX_NAMESPACE}")
    labels = namespace.split(".")
    for label in labels:
        if not _LABEL.fullmatch(label):
            raise VersionError(f"namespace {namespace!r} in {name!r} is not reverse-DNS: "
                               f"{label!r} is not a DNS label")
    if namespace in DERIVED_NAMESPACES:
        return
    if len(labels) < 2:
        raise VersionError(f"namespace {namespace!r} in {name!r} is a single label, which the "
                           f"spec reserves; use a reverse-DNS namespace such as "
                           f"com.example/{base}")


def parse_provide(text: str) -> Provide:
    """``name`` or ``name@version``."""
    name, at, version = text.strip().partition("@")
    check_name(name)
    if not at:
        return Provide(normalize_name(name), None)
    return Provide(normalize_name(name), parse_version(version))


def parse_requirement(text: str) -> Requirement:
    """``name`` or ``name <op> version[, <op> version ...]`` (constraints ANDed)."""
    stripped = text.strip()
    cut = next((i for i, ch in enumerate(stripped) if ch in "<>="), len(stripped))
    name = stripped[:cut].strip()
    if not name:
        raise VersionError(f"{text!r} names no capability before its constraint")
    check_name(name)
    rest = stripped[cut:].strip()
    if not rest:
        return Requirement(normalize_name(name))
    return Requirement(normalize_name(name), parse_constraints(rest))


def parse_constraints(text: str) -> tuple[Constraint, ...]:
    """``>= 1.0, < 2`` → constraints; raises on bad syntax or an unsatisfiable set."""
    out: list[Constraint] = []
    parts = text.split(",")
    for index, raw in enumerate(parts):
        part = raw.strip()
        if not part:
            where = "a trailing comma" if index == len(parts) - 1 else "an empty constraint"
            raise VersionError(f"constraints {text.strip()!r} have {where}")
        op = next((o for o in OPERATORS if part.startswith(o)), None)
        if op is None:
            raise VersionError(f"expected one of >=, >, <=, <, = before {part!r}")
        version = part[len(op):].strip()
        if not version:
            raise VersionError(f"constraint {op!r} has no version")
        out.append(Constraint(_operator(op), parse_version(version)))
    check_satisfiable(out)
    return tuple(out)


def _operator(text: str) -> Operator:
    for op in (">=", ">", "<=", "<", "="):
        if text == op:
            return op
    raise VersionError(f"unknown operator {text!r}")  # pragma: no cover - OPERATORS is closed


def check_satisfiable(constraints: Sequence[Constraint]) -> None:
    """Reject sets no version meets: conflicting pins, a pin outside a bound, inverted bounds."""
    pins = [c for c in constraints if c.op == "="]
    if pins:
        pin = pins[0].version
        for c in constraints:
            if not c.holds(pin):
                raise VersionError(f"unsatisfiable constraints: = {pin} and {c}")
        return
    # Every version starts with a non-negative number, so "0" is an implicit inclusive floor:
    # without it "< 0" would read as satisfiable.
    low, low_exclusive = "0", False
    high: str | None = None
    high_exclusive = False
    for c in constraints:
        if c.op in (">=", ">"):
            cmp = compare_versions(c.version, low)
            if cmp > 0 or (cmp == 0 and c.op == ">"):
                low, low_exclusive = c.version, c.op == ">"
        elif c.op in ("<=", "<"):
            cmp = 1 if high is None else compare_versions(high, c.version)
            if cmp > 0 or (cmp == 0 and c.op == "<"):
                high, high_exclusive = c.version, c.op == "<"
    if high is None:
        return
    # An exclusive lower bound admits the next spellable version, not the one named.
    effective = low + _SUCCESSOR if low_exclusive else low
    cmp = compare_versions(effective, high)
    if cmp > 0 or (cmp == 0 and high_exclusive):
        low_op = ">" if low_exclusive else ">="
        high_op = "<" if high_exclusive else "<="
        raise VersionError(f"unsatisfiable constraints: {low_op} {low} and {high_op} {high}")


def satisfies(provided: str | None,
              constraints: Requirement | Iterable[Constraint]) -> bool:
    """Whether a provided version (None: unversioned) meets every constraint.

    Names are not compared here; see :meth:`Requirement.is_satisfied_by`.
    """
    wanted = tuple(constraints.constraints if isinstance(constraints, Requirement)
                   else constraints)
    if not wanted:
        return True
    if provided is None:
        return False
    return all(c.holds(provided) for c in wanted)


__all__ = [
    "DEFAULT_NAMESPACE", "DERIVED_NAMESPACES", "OPERATORS",
    "Constraint", "Operator", "Provide", "Requirement", "VersionError",
    "check_name", "check_satisfiable", "compare_versions", "display_name", "is_derived",
    "is_version", "normalize_name", "parse_constraints", "parse_provide", "parse_requirement",
    "parse_version", "satisfies", "tag_version",
]
