"""The kit-set resolver (KIT-SPEC-V3 §4.1): coherence rules, messages, versions and order."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.kits.resolve import (
    INCOHERENT_MESSAGE,
    KitInput,
    Provided,
    Resolution,
    credential_keys,
    effective_provide_version,
    resolve,
    version_from_reference,
)

CRED = "com.docker.sandbox/credential@1"


def kit(reference: str, kind: str = "mixin", **fields: Any) -> KitInput:
    descriptor: dict[str, Any] = {"schemaVersion": "3", "kind": kind}
    descriptor.update(fields)
    return KitInput.of(reference, descriptor)


def workload(reference: str = "w", **fields: Any) -> KitInput:
    return kit(reference, "workload", **fields)


def credential(service: str, phase: str | list[str]) -> dict[str, Any]:
    return {"type": CRED, "config": {"service": service, "phase": phase,
                                     "apiKey": {"name": "TOKEN"}}}


def problems_of(kits: Sequence[KitInput], **kwargs: Any) -> list[str]:
    with pytest.raises(SbxError) as caught:
        resolve(kits, **kwargs)
    assert caught.value.reason is Reason.KIT_INCOHERENT
    assert caught.value.message == INCOHERENT_MESSAGE
    problems: list[str] = caught.value.details["problems"]
    assert caught.value.body == "\n".join(f"  - {p}" for p in problems)
    return problems


def refs(kits: Sequence[KitInput]) -> list[str]:
    return [k.reference for k in kits]


# --- the workload rule ------------------------------------------------------------------------


def test_single_workload_resolves() -> None:
    resolution = resolve([workload("reg/shell:1.0")])
    assert resolution.workload is not None
    assert resolution.workload.reference == "reg/shell:1.0"
    assert refs(resolution.ordered) == ["reg/shell:1.0"]
    assert refs(resolution.topological) == ["reg/shell:1.0"]
    assert resolution.mixins == ()


def test_sandbox_kind_counts_as_workload() -> None:
    resolution = resolve([kit("old", "sandbox"), kit("m")])
    assert resolution.workload is not None
    assert resolution.workload.reference == "old"
    assert refs(resolution.mixins) == ["m"]


def test_no_workload_is_a_problem() -> None:
    assert problems_of([kit("a"), kit("b")]) == [
        "no workload kit in the set; every composition needs exactly one kind: workload base"]


def test_two_workloads_named_in_reference_order() -> None:
    assert problems_of([workload("zeta"), workload("alpha")]) == [
        "more than one workload kit: alpha and zeta both declare kind: workload; a composition "
        "has exactly one base"]


def test_sandbox_and_workload_are_two_workloads() -> None:
    assert any("more than one workload kit" in p
               for p in problems_of([workload("a"), kit("b", "sandbox")]))


def test_partial_set_needs_no_workload_but_still_one_at_most() -> None:
    resolution = resolve([kit("a"), kit("b")], require_workload=False)
    assert resolution.workload is None
    assert refs(resolution.ordered) == ["a", "b"]
    assert len(problems_of([workload("a"), workload("b")], require_workload=False)) == 1


@pytest.mark.parametrize(("kind", "expected"), [
    ("set", "x declares kind: set; a set has to be merged into one kit before it can be composed"),
    ("bogus", "x declares kind: bogus; a composed kit is a workload or a mixin"),
])
def test_kinds_that_cannot_compose(kind: str, expected: str) -> None:
    assert expected in problems_of([workload(), kit("x", kind)])


def test_empty_set_is_refused() -> None:
    assert problems_of([]) == ["the kit set is empty; name one kind: workload kit"]


def test_duplicate_reference_is_refused() -> None:
    assert "m is listed more than once; name each kit once" in problems_of(
        [workload(), kit("m"), kit("m")])


# --- one provider per name --------------------------------------------------------------------


def test_one_name_one_owner_at_any_version() -> None:
    problems = problems_of([workload("claude", provides=["claude@1.0.0"]),
                            kit("claude-mixin", provides=["com.docker.kit/claude"])])
    assert problems == [
        'capability "claude" is provided by more than one kit: claude (1.0.0), claude-mixin '
        "(unversioned); one name has one owner, so drop the redundant kit"]


def test_one_kit_spelling_a_name_twice_is_one_owner() -> None:
    resolution = resolve([workload(provides=["gh@1.0", "com.docker.kit/gh@1.0"])])
    assert {p.name for p in resolution.provided} == {"com.docker.kit/gh"}


def test_qualified_namespace_is_a_different_name() -> None:
    resolution = resolve([workload(provides=["gh@1"]), kit("m", provides=["com.example/gh@1"])])
    assert sorted(p.name for p in resolution.provided) == ["com.docker.kit/gh",
                                                           "com.example/gh"]


# --- one credential owner ---------------------------------------------------------------------


def test_credential_owned_twice_is_a_problem() -> None:
    problems = problems_of([workload(capabilities=[credential("github", "runtime")]),
                            kit("gh", capabilities=[credential("github", "runtime")])])
    assert problems == ["credential (github, runtime) is declared by more than one kit: gh, w; "
                        "one credential, one owner"]


def test_credential_list_phase_splits_per_phase() -> None:
    problems = problems_of([workload(capabilities=[credential("npm", ["install", "runtime"])]),
                            kit("m", capabilities=[credential("npm", "runtime")])])
    assert problems == ["credential (npm, runtime) is declared by more than one kit: m, w; "
                        "one credential, one owner"]


def test_same_service_in_different_phases_is_fine() -> None:
    resolve([workload(capabilities=[credential("npm", "install")]),
             kit("m", capabilities=[credential("npm", "runtime")])])


def test_credential_inside_an_unflattened_group_is_not_claimed() -> None:
    group = {"group": {"optional": True, "capabilities": [credential("npm", "runtime")]}}
    resolve([workload(capabilities=[credential("npm", "runtime")]),
             kit("m", capabilities=[group])])


def test_credential_keys_reads_every_phase() -> None:
    caps = [credential("a", ["install", "runtime"]), credential("b", "runtime"),
            {"type": "com.docker.sandbox/port@1", "config": {"container": 1}}]
    assert credential_keys(caps) == [("a", "install"), ("a", "runtime"), ("b", "runtime")]


# --- requires ---------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(("provides", "requirement", "expected"), [
    ([], "hello >= 2",
     'm requires "hello >= 2" but nothing in the set provides it; add a kit that provides hello'),
    (["hello@1.0"], "hello >= 2",
     'm requires "hello >= 2" but the set only offers hello@1.0 (from w)'),
    (["hello"], "hello >= 1",
     'm requires "hello >= 1" but the set only offers hello (unversioned, from w)'),
    (["hello@1.5"], "hello >= 1, < 1.5",
     'm requires "hello >= 1, < 1.5" but the set only offers hello@1.5 (from w)'),
    (["com.example/hello@3"], "hello",
     'm requires "hello" but nothing in the set provides it; add a kit that provides hello'),
])
def test_unmet_requirements(provides: list[str], requirement: str, expected: str) -> None:
    assert problems_of([workload(provides=provides), kit("m", requires=[requirement])]) == [
        expected]


@pytest.mark.slow
@pytest.mark.parametrize(("provides", "requirement"), [
    (["hello"], "hello"),
    (["hello@1.0"], "hello"),
    (["hello@2.0"], "hello >= 2"),
    (["hello@1.5"], "hello >= 1, < 2"),
    (["hello@1.10"], "hello > 1.9"),
    (["hello@2"], "hello = 2"),
    (["hello@1.0"], "com.docker.kit/hello >= 1.0"),
    (["com.docker.kit/hello@1.0"], "hello <= 1.0"),
])
def test_met_requirements(provides: list[str], requirement: str) -> None:
    resolution = resolve([workload(provides=provides), kit("m", requires=[requirement])])
    assert refs(resolution.topological) == ["w", "m"]


def test_a_kit_never_satisfies_its_own_requirement() -> None:
    assert problems_of([workload(provides=["x@1"], requires=["x"])]) == [
        'w requires "x" but nothing in the set provides it (its own provide does not count); '
        "add a kit that provides x"]


# --- integrates and conflicts -----------------------------------------------------------------


def test_absent_integration_is_fine() -> None:
    resolve([workload(), kit("m", integrates=["gh >= 2"])])


def test_present_provider_violating_integrates_is_a_problem() -> None:
    assert problems_of([workload(provides=["gh@1.0"]), kit("m", integrates=["gh >= 2"])]) == [
        'm integrates with "gh >= 2" but the set only offers gh@1.0 (from w); upgrade the '
        "provider or drop it from the set"]


def test_unversioned_provider_violates_constrained_integrates() -> None:
    assert len(problems_of([workload(provides=["gh"]), kit("m", integrates=["gh >= 2"])])) == 1


def test_conflicting_kit_is_a_problem() -> None:
    assert problems_of([workload(provides=["docker@27"]), kit("m", conflicts=["docker"])]) == [
        'm conflicts with "docker", which w provides; the two cannot compose']


def test_conflict_with_own_provide_or_absent_name_is_fine() -> None:
    resolve([workload(), kit("m", provides=["x@1"], conflicts=["x", "y"])])


def test_conflict_names_are_normalized() -> None:
    assert len(problems_of([workload(provides=["gh@1"]),
                            kit("m", conflicts=["com.docker.kit/gh"])])) == 1


# --- many problems at once, malformed entries -------------------------------------------------


def test_every_problem_is_reported_in_check_order() -> None:
    problems = problems_of([
        kit("a", provides=["x@1"], requires=["missing"], conflicts=["y"]),
        kit("b", provides=["x@2", "y@1"], integrates=["x >= 5"],
            capabilities=[credential("s", "runtime")]),
        kit("c", capabilities=[credential("s", "runtime")]),
    ])
    assert problems == [
        "no workload kit in the set; every composition needs exactly one kind: workload base",
        'capability "x" is provided by more than one kit: a (1), b (2); one name has one owner, '
        "so drop the redundant kit",
        "credential (s, runtime) is declared by more than one kit: b, c; one credential, one "
        "owner",
        'a requires "missing" but nothing in the set provides it; add a kit that provides missing',
        'b integrates with "x >= 5" but the set only offers x@1 (from a); upgrade the provider '
        "or drop it from the set",
        'a conflicts with "y", which b provides; the two cannot compose',
    ]


@pytest.mark.slow
@pytest.mark.parametrize(("field", "entry", "fragment"), [
    ("provides", "Not A Name", 'm: provides entry "Not A Name"'),
    ("provides", "gh@v1.0", 'm: provides entry "gh@v1.0"'),
    ("requires", "gh >> 1", 'm: requires entry "gh >> 1"'),
    ("requires", "gh >= 2, < 1", 'm: requires entry "gh >= 2, < 1"'),
    ("integrates", ">= 1", 'm: integrates entry ">= 1"'),
])
def test_malformed_entries_name_the_kit(field: str, entry: str, fragment: str) -> None:
    malformed = KitInput.of("m", {"kind": "mixin", field: [entry]})
    problems = problems_of([workload(), malformed])
    assert len(problems) == 1
    assert problems[0].startswith(fragment)


# --- effective provide versions ---------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(("reference", "provide", "version", "expected"), [
    ("reg/k:2.0.0", "k@3.0.0", "1.0.0", "3.0.0"),  # explicit @version wins
    ("reg/k:2.0.0", "k", "1.0.0", "2.0.0"),  # then the reference's version
    ("reg/k:v2.1", "k", "1.0.0", "2.1"),  # a "v" on a tag is stripped
    ("reg/k:latest", "k", "1.0.0", "1.0.0"),  # then the descriptor's version:
    ("./k", "k", "1.0.0", "1.0.0"),
    ("./k", "k", None, None),  # unversioned
    ("./k", "k", "${{ kit.args.v }}", None),  # a non-version fallback is ignored
    ("git+https://h/r#ref=v4.0.1&dir=k", "k", "1.0", "4.0.1"),
])
def test_effective_provide_version(reference: str, provide: str, version: str | None,
                                   expected: str | None) -> None:
    descriptor: dict[str, Any] = {"kind": "workload", "provides": [provide]}
    if version is not None:
        descriptor["version"] = version
    resolution = resolve([KitInput.of(reference, descriptor)])
    assert resolution.provided == (Provided("com.docker.kit/k", expected, reference),)


@pytest.mark.parametrize(("reference", "expected"), [
    ("docker.io/docker/sbx-kit-shell:1.0.0", "1.0.0"),
    ("reg.io:5000/kits/hello:1.0.3", "1.0.3"),
    ("reg.io:5000/kits/hello", None),
    ("hello:v2", "2"),
    ("hello:latest", None),
    ("hello:1.0@sha256:" + "a" * 64, "1.0"),
    ("hello@sha256:" + "a" * 64, None),
    ("./kits/hello", None),
    ("/abs/kits/hello", None),
    ("git+https://github.com/o/r#ref=v2.1.0", "2.1.0"),
    ("git+https://github.com/o/r#ref=main&dir=kits/x", None),
    ("git+https://github.com/o/r", None),
])
def test_version_from_reference(reference: str, expected: str | None) -> None:
    assert version_from_reference(reference) == expected


def test_explicit_version_from_reference_field_is_used_as_given() -> None:
    unit = KitInput("whatever", {"kind": "workload", "version": "1.0"}, "9.9")
    assert effective_provide_version(unit) == "9.9"
    assert unit.effective_version == "9.9"


def test_reference_version_satisfies_a_constraint_the_descriptor_version_would_not() -> None:
    base = KitInput.of("reg/base:2.0.0", {"kind": "workload", "version": "1.0.0",
                                          "provides": ["base"]})
    resolve([base, kit("m", requires=["base >= 2.0.0"])])


# --- order ------------------------------------------------------------------------------------


def test_providers_come_before_requirers_whatever_the_names() -> None:
    resolution = resolve([workload("a"), kit("b", requires=["z"]), kit("z-provider",
                                                                       provides=["z@1"])])
    assert refs(resolution.topological) == ["a", "z-provider", "b"]


def test_ties_are_broken_by_reference_not_input_order() -> None:
    kits = [kit("c"), workload("b"), kit("a")]
    assert refs(resolve(kits).topological) == ["a", "b", "c"]
    assert refs(resolve(kits).ordered) == ["b", "a", "c"]


def test_a_sets_own_declarations_come_after_every_kit_they_tie_with() -> None:
    own = KitInput.of("./a-team", {"schemaVersion": "3", "kind": "mixin"},
                      last_among_equals=True)
    resolution = resolve([own, workload("w"), kit("m")])
    assert refs(resolution.topological) == ["m", "w", "./a-team"]
    assert refs(resolution.ordered) == ["w", "m", "./a-team"]


def test_a_sets_own_declarations_still_precede_a_kit_that_requires_them() -> None:
    own = KitInput.of("./team", {"schemaVersion": "3", "kind": "mixin",
                                 "provides": ["team-context@1"]}, last_among_equals=True)
    resolution = resolve([own, workload("w", requires=["team-context"]), kit("z")])
    assert refs(resolution.topological) == ["z", "./team", "w"]


def test_workload_requiring_a_mixin_is_layered_first_but_declared_after() -> None:
    resolution = resolve([workload("shell", requires=["node"]),
                          kit("node", provides=["node@22"])])
    assert refs(resolution.topological) == ["node", "shell"]
    assert refs(resolution.ordered) == ["shell", "node"]
    assert resolution.references == ("shell", "node")


def test_met_integrates_orders_like_requires() -> None:
    resolution = resolve([workload("a", integrates=["zz"]), kit("zz-kit", provides=["zz@1"])])
    assert refs(resolution.topological) == ["zz-kit", "a"]


def test_chain_orders_transitively() -> None:
    resolution = resolve([
        kit("a", requires=["b"], provides=["a@1"]),
        kit("b", requires=["c"], provides=["b@1"]),
        workload("c", provides=["c@1"]),
    ])
    assert refs(resolution.topological) == ["c", "b", "a"]


@pytest.mark.slow
@pytest.mark.parametrize(("kits", "cycle"), [
    ([workload("a", provides=["a@1"], requires=["b"]), kit("b", provides=["b@1"], requires=["a"])],
     ["a", "b", "a"]),
    ([workload("w"),
      kit("x", provides=["x@1"], requires=["z"]),
      kit("y", provides=["y@1"], requires=["x"]),
      kit("z", provides=["z@1"], integrates=["y"])],
     ["x", "z", "y", "x"]),
])
def test_cycles_are_an_error_naming_the_cycle(kits: list[KitInput], cycle: list[str]) -> None:
    with pytest.raises(SbxError) as caught:
        resolve(kits)
    error = caught.value
    assert error.reason is Reason.KIT_INCOHERENT
    assert error.details["cycle"] == cycle
    assert error.details["problems"] == [
        f"dependency cycle: {' -> '.join(cycle)} (each kit needs the next one composed before "
        "it); drop one of these requires or integrates"]


def test_resolution_is_a_value() -> None:
    resolution = resolve([workload()])
    assert isinstance(resolution, Resolution)
    with pytest.raises(AttributeError):
        resolution.workload = None  # type: ignore[misc]


# --- determinism (properties) -----------------------------------------------------------------

_NAMES = [f"k{i}" for i in range(7)]


@st.composite
def dag_sets(draw: st.DrawFn) -> list[KitInput]:
    """A coherent set: kit i may require any kit j < i (so no cycles), one of them the workload."""
    count = draw(st.integers(min_value=1, max_value=len(_NAMES)))
    names = draw(st.permutations(_NAMES))[:count]
    workload_at = draw(st.integers(min_value=0, max_value=count - 1))
    kits: list[KitInput] = []
    for i, name in enumerate(names):
        requires = [f"cap-{names[j]} >= 1" for j in range(i)
                    if draw(st.booleans())]
        integrates = [f"cap-{names[j]}" for j in range(i) if draw(st.booleans())]
        integrates.append("cap-absent >= 9")
        kind = "workload" if i == workload_at else "mixin"
        kits.append(kit(f"reg/{name}:1.{i}", kind, provides=[f"cap-{name}"],
                        requires=requires, integrates=integrates))
    return kits


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(kits=dag_sets(), data=st.data())
def test_shuffling_the_input_never_changes_the_output(kits: list[KitInput],
                                                      data: st.DataObject) -> None:
    shuffled = data.draw(st.permutations(kits))
    first, second = resolve(kits), resolve(shuffled)
    assert refs(first.topological) == refs(second.topological)
    assert refs(first.ordered) == refs(second.ordered)
    assert first.provided == second.provided


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(kits=dag_sets())
def test_every_provider_precedes_its_requirers(kits: list[KitInput]) -> None:
    resolution = resolve(kits)
    position = {unit.reference: i for i, unit in enumerate(resolution.topological)}
    provider = {f"cap-{u.reference.split('/')[1].split(':')[0]}": u.reference for u in kits}
    for unit in kits:
        for entry in [*unit.descriptor["requires"], *unit.descriptor["integrates"]]:
            name = entry.split(" ")[0]
            if name in provider:
                assert position[provider[name]] < position[unit.reference]
    assert resolution.ordered[0] is resolution.workload


@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_problem_lists_do_not_depend_on_input_order(data: st.DataObject) -> None:
    kits = [workload("w1", provides=["x@1"]), workload("w2", provides=["x@2"]),
            kit("m", requires=["y"], conflicts=["x"], capabilities=[credential("s", "runtime")]),
            kit("n", capabilities=[credential("s", "runtime")])]
    expected = problems_of(kits)
    assert problems_of(data.draw(st.permutations(kits))) == expected
