"""Names, versions, constraints and satisfaction (KIT-SPEC-V3 §1.4, §1.5)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sbx.domain.kits.versions import (
    Constraint,
    Provide,
    Requirement,
    VersionError,
    check_name,
    compare_versions,
    display_name,
    is_derived,
    normalize_name,
    parse_constraints,
    parse_provide,
    parse_requirement,
    parse_version,
    satisfies,
    tag_version,
)


@pytest.mark.parametrize("text", ["1", "1.2.3", "0.0.1", "2.0.0-rc1", "1.x", "10.a-b.3",
                                  " 1.2 ", "007"])
def test_version_grammar_accepts(text: str) -> None:
    assert parse_version(text) == text.strip()


@pytest.mark.parametrize("text", ["", "v1.2.3", "V1", "1.", "1..2", ".1", "a.1", "1.2_3",
                                  "1.2+build", "latest", "1 .2"])
def test_version_grammar_rejects(text: str) -> None:
    with pytest.raises(VersionError):
        parse_version(text)


def test_v_prefix_gets_a_hint() -> None:
    with pytest.raises(VersionError, match="no 'v' prefix"):
        parse_version("v1.0")


@pytest.mark.parametrize(("a", "b", "expected"), [
    ("1.2.3", "1.2.3", 0),
    ("1.2.10", "1.2.9", 1),          # numeric, not lexical
    ("1.10", "1.9.9", 1),
    ("2", "10", -1),
    ("1", "1.0", -1),                # a missing segment sorts first
    ("1.0", "1.0.0", -1),
    ("007", "7", 0),                 # leading zeros do not count
    ("1.0.0-rc1", "1.0.0-rc2", -1),  # non-numeric segments compare lexically
    ("1.a", "1.b", -1),
    ("1.a", "1.1", 1),               # "a" > "1" lexically
    ("99999999999999999999", "100000000000000000000", -1),  # no integer overflow
])
def test_compare_versions(a: str, b: str, expected: int) -> None:
    assert compare_versions(a, b) == expected
    assert compare_versions(b, a) == -expected


_segment = st.one_of(st.integers(0, 10**6).map(str),
                     st.text("abcXYZ-0123456789", min_size=1, max_size=4))
_versions = st.builds(lambda head, rest: ".".join([str(head), *rest]),
                      st.integers(0, 1000), st.lists(_segment, max_size=4))


@pytest.mark.slow
@given(_versions, _versions, _versions)
def test_compare_is_a_total_order(a: str, b: str, c: str) -> None:
    assert compare_versions(a, a) == 0
    assert compare_versions(a, b) == -compare_versions(b, a)
    if compare_versions(a, b) <= 0 and compare_versions(b, c) <= 0:
        assert compare_versions(a, c) <= 0


@pytest.mark.slow
@given(_versions)
def test_every_generated_version_parses_and_satisfies_its_own_pin(version: str) -> None:
    assert parse_version(version) == version
    requirement = parse_requirement(f"tool = {version}")
    assert satisfies(version, requirement)
    assert satisfies(version, parse_requirement(f"tool >= {version}, <= {version}"))
    assert not satisfies(version, parse_requirement(f"tool > {version}"))


def test_tag_version_strips_a_leading_v_only_at_the_boundary() -> None:
    assert tag_version("v2.1.0") == "2.1.0"
    assert tag_version("2.1.0") == "2.1.0"
    assert tag_version("latest") is None
    assert tag_version("vv1") is None


def test_normalize_and_display_names() -> None:
    assert normalize_name("gh") == "com.docker.kit/gh"
    assert normalize_name("com.example/gh") == "com.example/gh"
    assert normalize_name("com.docker.kit/gh") == "com.docker.kit/gh"
    assert display_name("com.docker.kit/gh") == "gh"
    assert display_name("com.example/gh") == "com.example/gh"
    assert is_derived("deb/curl") and is_derived("apk/musl")
    assert not is_derived("com.docker.kit/deb")


@pytest.mark.parametrize("name", ["gh", "libstdc++6", "python3.12", "a", "com.example/gh",
                                  "io.github.some-org/tool", "deb/curl", "apk/musl-utils"])
def test_names_accepted(name: str) -> None:
    check_name(name)


@pytest.mark.parametrize(("name", "why"), [
    ("Gh", "not a capability name"),
    ("-gh", "not a capability name"),
    ("gh-", "not a capability name"),
    ("gh_cli", "not a capability name"),
    ("/gh", "not a capability name"),
    ("acme/gh", "single label"),
    ("com..example/gh", "not reverse-DNS"),
    ("-com.example/gh", "not reverse-DNS"),
    ("com.example/", "not a capability name"),
    ("a" * 250 + ".example/gh", "no domain is longer"),
])
def test_names_rejected(name: str, why: str) -> None:
    with pytest.raises(VersionError, match=why):
        check_name(name)


def test_parse_provide() -> None:
    assert parse_provide("gh@2.100.0") == Provide("com.docker.kit/gh", "2.100.0")
    assert parse_provide(" com.example/gh ") == Provide("com.example/gh", None)
    assert str(parse_provide("gh@1")) == "gh@1"
    with pytest.raises(VersionError):
        parse_provide("gh@")
    with pytest.raises(VersionError):
        parse_provide("gh@v1")


@pytest.mark.parametrize(("text", "name", "constraints"), [
    ("shell", "com.docker.kit/shell", ()),
    ("hello >= 1.0.0", "com.docker.kit/hello", (Constraint(">=", "1.0.0"),)),
    ("hello>=1.0.0", "com.docker.kit/hello", (Constraint(">=", "1.0.0"),)),
    ("com.example/base >= 1.0, < 2.0", "com.example/base",
     (Constraint(">=", "1.0"), Constraint("<", "2.0"))),
    ("x=1,<=1", "com.docker.kit/x", (Constraint("=", "1"), Constraint("<=", "1"))),
    ("deb/curl > 7", "deb/curl", (Constraint(">", "7"),)),
])
def test_parse_requirement(text: str, name: str, constraints: tuple[Constraint, ...]) -> None:
    requirement = parse_requirement(text)
    assert requirement == Requirement(name, constraints)


@pytest.mark.parametrize(("text", "why"), [
    (">= 1", "names no capability"),
    ("x >=", "has no version"),
    ("x >= 1,", "trailing comma"),
    ("x >= 1,, < 2", "empty constraint"),
    ("x ~ 1", "not a capability name"),
    ("x >= 1 < 2", "not a version"),
    ("x => 1", "not a version"),
    ("x >= 2, < 1", "unsatisfiable constraints: >= 2 and < 1"),
    ("x = 1, = 2", "unsatisfiable constraints: = 1"),
    ("x = 1, > 1", "unsatisfiable"),
    ("x > 1, < 1", "unsatisfiable"),
    ("x > 1, <= 1", "unsatisfiable"),
    ("x >= 1, < 1", "unsatisfiable"),
    ("x < 0", "unsatisfiable"),
])
def test_parse_requirement_rejects(text: str, why: str) -> None:
    with pytest.raises(VersionError, match=why):
        parse_requirement(text)


@pytest.mark.parametrize("text", ["x >= 1, <= 1", "x > 1, < 2", "x > 1, < 1.0", "x <= 0",
                                  "x = 1, >= 1, <= 1", "x > 1.9, < 2"])
def test_tight_but_satisfiable_sets_pass(text: str) -> None:
    parse_requirement(text)


def test_satisfies() -> None:
    unconstrained = parse_requirement("gh")
    ranged = parse_requirement("gh >= 2.0, < 3")
    assert satisfies(None, unconstrained)          # unversioned meets "any version"
    assert not satisfies(None, ranged)             # ...and nothing else
    assert satisfies("2.100.0", ranged)
    assert not satisfies("3.0", ranged)
    assert satisfies("2.5", parse_constraints(">= 2"))
    assert satisfies("anything", [])
    assert ranged.is_satisfied_by(Provide("com.docker.kit/gh", "2.1"))
    assert not ranged.is_satisfied_by(Provide("com.example/gh", "2.1"))
    assert str(ranged) == "gh >= 2.0, < 3"
