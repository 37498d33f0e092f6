"""Kit-set resolution (KIT-SPEC-V3 §1.4-1.5, §4.1): is the set coherent, and in what order.

A kit set is **closed**: every ``requires`` is answered by *another* kit in the set, a present
provider must meet every ``integrates`` constraint, no ``conflicts`` name may be provided by another
kit, one normalized name has one provider, one credential (service, phase) has one owner, and there
is exactly one workload. Every problem is collected before failing, because the user assembled the
set by hand and deserves the whole picture in one pass.

The order is a pure function of the set (Kahn's algorithm, providers before requirers, ties broken
by the lexicographically smallest reference, a set's own declarations after every kit they tie
with), never of the order the kits were named in.

Names, versions and constraints come from :mod:`sbx.domain.kits.versions`; this module adds only
what a
consumption reference contributes (its version) and the set-level rules.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, NoReturn
from urllib.parse import parse_qs

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.kits.versions import (
    Requirement,
    VersionError,
    display_name,
    is_version,
    normalize_name,
    parse_provide,
    parse_requirement,
    satisfies,
    tag_version,
)

WORKLOAD_KINDS: Final = frozenset({"workload", "sandbox"})  # `sandbox` is the pre-rename spelling
INCOHERENT_MESSAGE: Final = "the kit set is not coherent"
_CREDENTIAL_TYPE: Final = "com.docker.sandbox/credential@1"


@dataclass(frozen=True)
class KitInput:
    """One kit of the set: the reference it was consumed by and its effective descriptor.

    ``version_from_reference`` is the version the reference itself carries (an OCI tag such as
    ``repo:1.2.3`` or a git ``#ref=v1.2.3``), or ``None``; :meth:`of` derives it.
    """

    reference: str
    descriptor: Mapping[str, Any]
    version_from_reference: str | None = None
    # A kind: set's own declarations: after every kit they tie with (KIT-SPEC-V3 §4.3).
    last_among_equals: bool = False

    @classmethod
    def of(cls, reference: str, descriptor: Mapping[str, Any], *,
           last_among_equals: bool = False) -> KitInput:
        return cls(reference, descriptor, version_from_reference(reference), last_among_equals)

    @property
    def kind(self) -> str:
        kind = str(self.descriptor.get("kind", ""))
        return "workload" if kind in WORKLOAD_KINDS else kind

    @property
    def effective_version(self) -> str | None:
        """The version an unversioned provide takes (reference first, then ``version:``)."""
        return effective_provide_version(self)


@dataclass(frozen=True)
class Provided:
    """One name the set provides: normalized name, effective version, providing kit."""

    name: str
    version: str | None
    reference: str

    @property
    def display(self) -> str:
        name = display_name(self.name)
        return f"{name}@{self.version}" if self.version else name


@dataclass(frozen=True)
class Resolution:
    """A coherent, ordered kit set.

    ``topological`` is pure dependency order (providers before requirers, the workload wherever
    its relations put it): use it for declarations such as hooks and the context index.
    ``ordered`` is layer order: the workload first, because its rootfs is the base every mixin
    lands on, then the mixins in topological order.
    """

    workload: KitInput | None
    mixins: tuple[KitInput, ...]
    topological: tuple[KitInput, ...]
    provided: tuple[Provided, ...]

    @property
    def ordered(self) -> tuple[KitInput, ...]:
        if self.workload is None:
            return self.mixins
        return (self.workload, *self.mixins)

    @property
    def references(self) -> tuple[str, ...]:
        return tuple(kit.reference for kit in self.ordered)


def resolve(kits: Sequence[KitInput], *, require_workload: bool = True) -> Resolution:
    """Judge the closed set and derive its order; raise one ``KIT_INCOHERENT`` naming every problem.

    ``require_workload=False`` judges a partial set (a set of overlays, as a ``kind: set`` merge
    does): every other rule holds, and more than one workload is still an error.
    """
    # Sorting first makes every message and every tie a function of the set, not of input order.
    units = sorted(kits, key=lambda kit: kit.reference)
    problems: list[str] = []
    if not units:
        problems.append("the kit set is empty; name one kind: workload kit")
        _fail(problems)
    _check_unique_references(units, problems)
    workload = _check_one_workload(units, problems, require_workload=require_workload)
    provides = _provides_index(units, problems)
    _check_one_provider_per_name(provides, problems)
    _check_one_credential_owner(units, problems)
    _check_requires(units, provides, problems)
    _check_integrates(units, provides, problems)
    _check_conflicts(units, provides, problems)
    if problems:
        _fail(problems)

    topological = _order(units, provides)
    mixins = tuple(kit for kit in topological if kit is not workload)
    provided = tuple(sorted((p for ps in provides.values() for p in ps),
                            key=lambda p: (p.name, p.reference, p.version or "")))
    return Resolution(workload, mixins, topological, provided)


def _fail(problems: Sequence[str], **extra: Any) -> NoReturn:
    raise SbxError(
        Reason.KIT_INCOHERENT,
        INCOHERENT_MESSAGE,
        body="\n".join(f"  - {problem}" for problem in problems),
        details={"problems": list(problems), **extra},
    )


def _check_unique_references(units: Sequence[KitInput], problems: list[str]) -> None:
    # A reference is a kit's identity (messages, lock, tie-breaks); two entries under one
    # identity cannot be told apart, so they are refused rather than silently collapsed.
    seen: set[str] = set()
    for kit in units:
        if kit.reference in seen:
            problems.append(f"{kit.reference} is listed more than once; name each kit once")
        seen.add(kit.reference)


def _check_one_workload(units: Sequence[KitInput], problems: list[str], *,
                        require_workload: bool) -> KitInput | None:
    workload: KitInput | None = None
    for kit in units:
        kind = kit.kind
        if kind == "set":
            problems.append(f"{kit.reference} declares kind: set; a set has to be merged into one "
                            "kit before it can be composed")
            continue
        if kind not in {"workload", "mixin"}:
            problems.append(f"{kit.reference} declares kind: {kind or '(none)'}; a composed kit is "
                            "a workload or a mixin")
            continue
        if kind != "workload":
            continue
        if workload is not None:
            problems.append(f"more than one workload kit: {workload.reference} and "
                            f"{kit.reference} both declare kind: workload; a composition has "
                            "exactly one base")
            continue
        workload = kit
    if workload is None and require_workload:
        problems.append("no workload kit in the set; every composition needs exactly one "
                        "kind: workload base")
    return workload


def _provides_index(units: Sequence[KitInput],
                    problems: list[str]) -> dict[str, list[Provided]]:
    index: dict[str, list[Provided]] = {}
    for kit in units:
        fallback = effective_provide_version(kit)
        for entry in _strings(kit.descriptor.get("provides")):
            try:
                provide = parse_provide(entry)
            except VersionError as exc:
                problems.append(f"{kit.reference}: provides entry {_quote(entry)}: {exc}")
                continue
            # Precedence: an explicit @version, then the reference's version, then `version:`.
            provided = Provided(provide.name, provide.version or fallback, kit.reference)
            index.setdefault(provide.name, []).append(provided)
    return index


def _check_one_provider_per_name(provides: Mapping[str, list[Provided]],
                                 problems: list[str]) -> None:
    # Owners, not entries: one kit spelling a name twice (bare and qualified) is one owner.
    for name in sorted(provides):
        offers: dict[str, Provided] = {}
        for p in provides[name]:
            offers.setdefault(p.reference, p)
        if len(offers) < 2:
            continue
        listed = ", ".join(f"{ref} ({p.version or 'unversioned'})" for ref, p in offers.items())
        problems.append(f"capability {_quote(display_name(name))} is provided by more than one "
                        f"kit: {listed}; one name has one owner, so drop the redundant kit")


def credential_keys(capabilities: Iterable[Any]) -> list[tuple[str, str]]:
    """The (service, phase) pairs of the credential entries, a list ``phase`` split per phase.

    Group items are skipped: groups are selected and flattened before resolution, and an
    unselected group must not claim a credential.
    """
    keys: list[tuple[str, str]] = []
    for item in capabilities:
        if not isinstance(item, Mapping) or item.get("type") != _CREDENTIAL_TYPE:
            continue
        config = item.get("config")
        if not isinstance(config, Mapping) or not isinstance(config.get("service"), str):
            continue  # the descriptor validator owns malformed configs
        phases = config.get("phase")
        for phase in [phases] if isinstance(phases, str) else _strings(phases):
            keys.append((config["service"], phase))
    return keys


def _check_one_credential_owner(units: Sequence[KitInput], problems: list[str]) -> None:
    owners: dict[tuple[str, str], list[str]] = {}
    for kit in units:
        for key in dict.fromkeys(credential_keys(_list(kit.descriptor.get("capabilities")))):
            owners.setdefault(key, []).append(kit.reference)
    for (service, phase), refs in sorted(owners.items()):
        if len(refs) > 1:
            problems.append(f"credential ({service}, {phase}) is declared by more than one kit: "
                            f"{', '.join(refs)}; one credential, one owner")


def _satisfied_by(requirement: Requirement, provides: Mapping[str, list[Provided]],
                  self_reference: str) -> Provided | None:
    # A kit never satisfies its own requirement: requires names a dependency on the rest of the set.
    for p in provides.get(requirement.name, []):
        if p.reference != self_reference and satisfies(p.version, requirement):
            return p
    return None


def _others(name: str, provides: Mapping[str, list[Provided]],
            self_reference: str) -> list[Provided]:
    return [p for p in provides.get(name, []) if p.reference != self_reference]


def _describe(p: Provided) -> str:
    if p.version is None:
        return f"{display_name(p.name)} (unversioned, from {p.reference})"
    return f"{display_name(p.name)}@{p.version} (from {p.reference})"


def _check_requires(units: Sequence[KitInput], provides: Mapping[str, list[Provided]],
                    problems: list[str]) -> None:
    for kit in units:
        for entry in _strings(kit.descriptor.get("requires")):
            try:
                requirement = parse_requirement(entry)
            except VersionError as exc:
                problems.append(f"{kit.reference}: requires entry {_quote(entry)}: {exc}")
                continue
            if _satisfied_by(requirement, provides, kit.reference) is not None:
                continue
            others = _others(requirement.name, provides, kit.reference)
            shown = display_name(requirement.name)
            if not others:
                own = any(p.reference == kit.reference
                          for p in provides.get(requirement.name, []))
                note = " (its own provide does not count)" if own else ""
                problems.append(f"{kit.reference} requires {_quote(entry.strip())} but nothing "
                                f"in the set provides it{note}; add a kit that provides {shown}")
            else:
                offered = ", ".join(_describe(p) for p in others)
                problems.append(f"{kit.reference} requires {_quote(entry.strip())} but the set "
                                f"only offers {offered}")


def _check_integrates(units: Sequence[KitInput], provides: Mapping[str, list[Provided]],
                      problems: list[str]) -> None:
    # An absent provider is the integration simply not happening; a present one that misses the
    # constraint would break it, which is incoherence.
    for kit in units:
        for entry in _strings(kit.descriptor.get("integrates")):
            try:
                requirement = parse_requirement(entry)
            except VersionError as exc:
                problems.append(f"{kit.reference}: integrates entry {_quote(entry)}: {exc}")
                continue
            others = _others(requirement.name, provides, kit.reference)
            if not others or _satisfied_by(requirement, provides, kit.reference) is not None:
                continue
            offered = ", ".join(_describe(p) for p in others)
            problems.append(f"{kit.reference} integrates with {_quote(entry.strip())} but the "
                            f"set only offers {offered}; upgrade the provider or drop it from "
                            "the set")


def _check_conflicts(units: Sequence[KitInput], provides: Mapping[str, list[Provided]],
                     problems: list[str]) -> None:
    for kit in units:
        for entry in _strings(kit.descriptor.get("conflicts")):
            name = normalize_name(entry.strip())
            for reference in dict.fromkeys(p.reference
                                           for p in _others(name, provides, kit.reference)):
                problems.append(f"{kit.reference} conflicts with {_quote(entry.strip())}, which "
                                f"{reference} provides; the two cannot compose")


def _order(units: Sequence[KitInput],
           provides: Mapping[str, list[Provided]]) -> tuple[KitInput, ...]:
    by_reference = {kit.reference: kit for kit in units}
    dependencies: dict[str, set[str]] = {kit.reference: set() for kit in units}
    for kit in units:
        # A met integrates entry orders like requires: the provider composes first.
        for entry in (*_strings(kit.descriptor.get("requires")),
                      *_strings(kit.descriptor.get("integrates"))):
            provider = _satisfied_by(parse_requirement(entry), provides, kit.reference)
            if provider is not None:
                dependencies[kit.reference].add(provider.reference)
    dependents: dict[str, list[str]] = {ref: [] for ref in dependencies}
    indegree = {ref: len(deps) for ref, deps in dependencies.items()}
    for ref, deps in dependencies.items():
        for dep in deps:
            dependents[dep].append(ref)

    def tie(ref: str) -> tuple[bool, str]:
        return by_reference[ref].last_among_equals, ref

    ready = [tie(ref) for ref, count in indegree.items() if count == 0]
    heapq.heapify(ready)
    ordered: list[KitInput] = []
    while ready:
        _, ref = heapq.heappop(ready)
        ordered.append(by_reference[ref])
        for dependent in dependents[ref]:
            indegree[dependent] -= 1
            if indegree[dependent] == 0:
                heapq.heappush(ready, tie(dependent))
    if len(ordered) != len(units):
        stuck = {ref for ref, count in indegree.items() if count > 0}
        cycle = _find_cycle(stuck, dependencies)
        _fail([f"dependency cycle: {' -> '.join(cycle)} (each kit needs the next one composed "
               "before it); drop one of these requires or integrates"],
              cycle=cycle, stuck=sorted(stuck))
    return tuple(ordered)


def _find_cycle(stuck: set[str], dependencies: Mapping[str, set[str]]) -> list[str]:
    # Every stuck kit waits on at least one stuck provider, so walking "smallest stuck
    # dependency" from the smallest stuck kit must revisit a kit: that loop is the cycle.
    path: list[str] = []
    seen: dict[str, int] = {}
    current = min(stuck)
    while current not in seen:
        seen[current] = len(path)
        path.append(current)
        current = min(dep for dep in dependencies[current] if dep in stuck)
    loop = path[seen[current]:]
    return [*loop, loop[0]]


# --- versions carried by references (KIT-SPEC-V3 §1.5) --------------------------------------


def version_from_reference(reference: str) -> str | None:
    """The version a consumption reference carries, or ``None``.

    A version-shaped OCI tag (``reg.io/kits/hello:1.0.3``) or git ref (``git+https://…#ref=v2.1.0``),
    with a leading ``v`` stripped. Digest-only references, non-version tags, branches, commits
    and local paths carry none.
    """
    if reference.startswith("git+"):
        _, hash_sign, fragment = reference.partition("#")
        if not hash_sign:
            return None
        refs = parse_qs(fragment).get("ref")
        return tag_version(refs[0]) if refs else None
    name = reference.split("@", 1)[0]
    colon = name.rfind(":")
    if colon <= name.rfind("/"):
        return None
    return tag_version(name[colon + 1:])


def effective_provide_version(kit: KitInput) -> str | None:
    """Explicit ``@version`` aside: the reference's version, else the descriptor's ``version:``.

    The reference is the kit's identity, so a stale ``version:`` in the descriptor never
    overrides a version the tag states.
    """
    if kit.version_from_reference:
        return kit.version_from_reference
    version = kit.descriptor.get("version")
    if isinstance(version, str) and is_version(version):
        return version
    return None


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else []


def _strings(value: Any) -> list[str]:
    return [item for item in _list(value) if isinstance(item, str)]


__all__ = [
    "KitInput",
    "Provided",
    "Resolution",
    "resolve",
    "credential_keys",
    "version_from_reference",
    "effective_provide_version",
    "INCOHERENT_MESSAGE",
    "WORKLOAD_KINDS",
]
