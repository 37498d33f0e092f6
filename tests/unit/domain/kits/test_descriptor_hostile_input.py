"""Hostile kit descriptors (issue #10): every input finishes fast, with success or a refusal.

A descriptor is attacker-controlled input (a pulled or shared kit). Whatever its structure —
YAML anchors and aliases (billion laughs), deep nesting, huge lists and strings, catastrophic
arg patterns — decoding, validation, selection and resolution must end well inside a time
budget with either a kit set or a kit-stage refusal (``invalid_kit`` and its siblings), never a
hang, a crash or unbounded memory. Also here: kit arg patterns are RE2 (linear time), and kit
prose cannot forge the agent profile's managed-section markers in any spelling a reader would
take for them.

The hang detector is a per-example budget measured with a monotonic clock (generous: 5 s;
examples take milliseconds), backed by SIGALRM so a Python-level loop that never returns fails
the test instead of stalling the suite.
"""

from __future__ import annotations

import json
import os
import signal
import time
import unicodedata
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sbx.base.errors import KitError, SbxError
from sbx.base.reasons import Reason
from sbx.domain.kits.args import MAX_EXPANSION, ArgDecl, check_value, expand
from sbx.domain.kits.descriptor import SYNTAX_LINE, parse_descriptor_text, read_descriptor_text
from sbx.domain.kits.diagnostics import Diagnostic
from sbx.domain.kits.document import MAX_DEPTH, MAX_DESCRIPTOR_BYTES, MAX_NODES
from sbx.domain.kits.kitset import load_kit_set
from sbx.domain.kits.markers import INDEX_END, INDEX_START, neutralise
from sbx.domain.kits.patterns import MAX_PATTERN_LENGTH, PatternError, check_pattern, full_match
from sbx.domain.kits.rules import MAX_HTTP_GRANTS
from sbx.domain.kits.surface import surface
from sbx.domain.sandbox.capabilities import SUPPORTED, _context_body, _kit_index
from sbx.usecases.explain import static_composition

# The hang detector: 10x the slowest honest example measured (1,692 nested `[`: ~1.1 s of CPU
# warm, over 5 s on a first call in a loaded CI run); a blow-up still ends far above it.
BUDGET_S = 12.0
HEAD = '# syntax=docker/sandbox-kit:3\nschemaVersion: "3"\nkind: workload\n'
# What the kit stage may answer for a hostile kit: a refusal, never anything else.
KIT_REFUSALS = frozenset({Reason.INVALID_KIT, Reason.KIT_INCOHERENT,
                          Reason.UNSUPPORTED_CAPABILITY, Reason.INVALID_ARGUMENT})
FUZZ = settings(max_examples=40, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.large_base_example,
                                       HealthCheck.function_scoped_fixture])


class Hang(AssertionError):
    """The code under test ran past its budget."""


@contextmanager
def budget(seconds: float = BUDGET_S) -> Iterator[None]:
    """Fail when the block uses more than ``seconds`` of this process's CPU time, and interrupt
    it (SIGALRM) when it runs six times that long by the wall clock, so a hang — a spinning loop
    or a blocked read — fails instead of stalling the suite. CPU time, not the wall clock,
    decides the budget: other work on a busy CI machine must not make an honest example fail."""
    def interrupt(_signum: int, _frame: FrameType | None) -> None:
        raise Hang(f"still running after {6 * seconds:g}s")

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 6 * seconds)
    started = time.process_time()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    used = time.process_time() - started
    if used > seconds:
        raise Hang(f"used {used:.2f}s of CPU, over the {seconds:g}s budget")


def kit_stage(root: Path, text: str, args: Sequence[str] = ()) -> Reason | None:
    """Decode → validate → select → resolve → compose one kit (as `sbx explain KIT` does),
    and project its permission surface (as `sbx pull` does): None when it loads, else the
    reason of the refusal."""
    kit = root / f"k{time.monotonic_ns()}"
    kit.mkdir(parents=True)
    (kit / f"{kit.name}.yaml").write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        kit_set = load_kit_set(str(kit), [], list(args), cwd=root, cache_dir=root / "cache",
                               supported=SUPPORTED)
        static_composition(kit_set)
        for loaded in kit_set.kits:  # the permission surface `sbx pull` compares
            surface(loaded.local.descriptor.data)
    except SbxError as error:
        return error.reason
    return None


def assert_fast_and_clean(root: Path, text: str, args: Sequence[str] = ()) -> Reason | None:
    with budget():
        outcome = kit_stage(root, text, args)
    assert outcome is None or outcome in KIT_REFUSALS, outcome
    return outcome


def as_json(document: Any) -> str:
    """A descriptor in its published form: compact JSON (which is YAML) after the syntax line."""
    return f"{SYNTAX_LINE}\n{json.dumps(document, default=str)}\n"


def refusal(text: str) -> KitError:
    with budget(), pytest.raises(KitError) as caught:
        parse_descriptor_text(text, "hostile.yaml")
    assert caught.value.reason is Reason.INVALID_KIT
    return caught.value


def messages(error: KitError) -> str:
    return "\n".join(d["message"] for d in error.details["diagnostics"])


# -- YAML anchors, aliases and merge keys: refused outright --------------------------------------


def billion_laughs(levels: int = 9, width: int = 9) -> str:
    """The classic expansion bomb: each level an anchored list of ``width`` aliases to the
    previous one (a few hundred bytes standing for width**levels strings)."""
    lines = [f"l0: &l0 [{', '.join(['lol'] * width)}]"]
    for level in range(1, levels):
        refs = ", ".join([f"*l{level - 1}"] * width)
        lines.append(f"l{level}: &l{level} [{refs}]")
    return HEAD + "\n".join(lines) + "\n"


def test_an_alias_bomb_is_refused_at_once_not_expanded(tmp_path: Path) -> None:
    text = billion_laughs()
    assert len(text.encode()) < 600  # 9**9 = 387 million strings if expanded
    assert assert_fast_and_clean(tmp_path, text) is Reason.INVALID_KIT
    error = refusal(text)
    assert "anchors (&l0) are not allowed" in messages(error)
    assert error.details["diagnostics"][0]["line"] == 4  # the first anchor, where it is written


@pytest.mark.parametrize(("text", "expected"), [
    ("description: &d hello\ndisplayName: *d\n", "anchors (&d) are not allowed"),
    ("description: *nowhere\n", "aliases (*nowhere) are not allowed"),
    ("labels: {<<: {a: b}}\n", "merge keys (<<) are not allowed"),
    ("provides: [&p 'x@1.0.0']\n", "anchors (&p) are not allowed"),
], ids=["anchor", "alias", "merge-key", "anchor-in-flow"])
def test_anchors_aliases_and_merge_keys_are_refused_with_a_position(text: str,
                                                                     expected: str) -> None:
    error = refusal(HEAD + text)
    assert expected in messages(error)
    assert error.details["diagnostics"][0]["line"] == 4


def test_a_quoted_or_valued_double_angle_is_just_text() -> None:
    descriptor = parse_descriptor_text(HEAD + 'description: "<<"\ndisplayName: \'<<\'\n', "x")
    assert descriptor.data["description"] == "<<"


# -- structure budgets ---------------------------------------------------------------------------


def test_nesting_past_the_limit_is_refused_naming_it() -> None:
    nested = "[" * (MAX_DEPTH + 5) + "]" * (MAX_DEPTH + 5)
    error = refusal(HEAD + f"x: {nested}\n")
    assert f"nests deeper than {MAX_DEPTH} levels" in messages(error)


@pytest.mark.slow
def test_very_deep_nesting_costs_no_more_than_shallow(tmp_path: Path) -> None:
    for opener in ("[", "{a: "):
        text = HEAD + "x: " + opener * 200_000 + "\n"
        assert assert_fast_and_clean(tmp_path, text) is Reason.INVALID_KIT


def test_nesting_within_the_limit_is_not_refused_for_depth() -> None:
    nested = "[" * (MAX_DEPTH - 3) + "]" * (MAX_DEPTH - 3)
    error = refusal(HEAD + f"x: {nested}\n")  # invalid (unknown field x), but not too deep
    assert "nests deeper" not in messages(error)


@pytest.mark.slow
def test_too_many_nodes_is_refused_naming_the_limit() -> None:
    items = ", ".join(f"p{i}@1.0.0" for i in range(MAX_NODES + 1))
    error = refusal(HEAD + f"provides: [{items}]\n")
    assert f"more than {MAX_NODES} YAML nodes" in messages(error)


def test_an_oversized_descriptor_is_refused_naming_the_limit(tmp_path: Path) -> None:
    text = HEAD + "description: '" + "a" * MAX_DESCRIPTOR_BYTES + "'\n"
    error = refusal(text)
    assert "512 KiB (524288 bytes) limit" in messages(error)
    assert assert_fast_and_clean(tmp_path, text) is Reason.INVALID_KIT


def test_a_huge_descriptor_file_is_refused_without_being_read(tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    with path.open("wb") as handle:
        handle.truncate(8 * 1024**3)  # sparse: 8 GiB that would exhaust memory if read whole
    with budget(), pytest.raises(KitError) as caught:
        read_descriptor_text(path)
    assert "8589934592 bytes, over the 512 KiB" in messages(caught.value)


def test_a_fifo_descriptor_is_refused_without_blocking(tmp_path: Path) -> None:
    path = tmp_path / "fifo.yaml"
    os.mkfifo(path)
    with budget(), pytest.raises(KitError) as caught:
        read_descriptor_text(path)  # opening a FIFO for reading would wait for a writer
    assert "not a regular file" in messages(caught.value)


def test_a_source_line_is_shown_as_a_window_around_the_column() -> None:
    line = "x" * 5000 + "TARGET" + "y" * 5000
    rendered = Diagnostic("p", "bad", "f.yaml", 1, 5001, line).render()
    shown, caret = rendered.splitlines()[1:3]
    assert len(shown) < 140 and "TARGET" in shown
    assert shown[caret.index("^")] == "T"


@pytest.mark.slow
def test_thousands_of_problems_are_counted_but_a_bounded_number_shown() -> None:
    items = ", ".join(f"{{a: {i}}}" for i in range(1500))
    with budget():
        error = refusal(HEAD + f"licenses: [{items}]\n")
    assert error.body is not None
    assert error.body.count("licenses[") <= 60
    assert "more problems" in error.body
    assert len(error.body) < 100_000


@pytest.mark.slow
def test_unique_items_is_checked_in_linear_time_with_json_equality() -> None:
    from sbx.domain.kits.schema import _unique_items, _validator

    validator = _validator()

    def unique(items: list[Any]) -> bool:
        return not list(_unique_items(validator, True, items, {}))

    assert not unique([1, 1.0]) and unique([True, 1]) and unique([False, 0, None])
    assert not unique([{"a": 1, "b": [2]}, {"b": [2], "a": 1}])
    assert unique([{"a": 1}, {"a": "1"}])
    with budget():  # pairwise comparison of these would take minutes
        assert unique([{"k": i, "v": [i, str(i)]} for i in range(50_000)])


# -- expansion: a value used in many places must not multiply without end ------------------------


@pytest.mark.slow
def test_a_policy_cannot_multiply_into_millions_of_grants(tmp_path: Path) -> None:
    hosts = ", ".join(f"h{i}.example.com" for i in range(1500))
    paths = ", ".join(f"/p{i}" for i in range(1500))
    text = HEAD.replace("workload", "mixin") + (
        "capabilities:\n  - type: com.docker.sandbox/network-policy@2\n    config:\n"
        f"      runtime:\n        allow:\n          - hosts: [{hosts}]\n"
        f"            methods: [GET, POST, PUT]\n            paths: [{paths}]\n")
    assert assert_fast_and_clean(tmp_path, text) is Reason.INVALID_KIT
    assert f"more than {MAX_HTTP_GRANTS}" in messages(refusal(text))


@pytest.mark.slow
@FUZZ
@given(st.lists(st.tuples(st.integers(0, 1500), st.integers(0, 12), st.integers(0, 1500)),
                min_size=1, max_size=4),
       st.sampled_from(["allow", "deny"]), st.sampled_from(["install", "runtime"]))
def test_network_policies_of_any_size_finish_fast(tmp_path: Path,
                                                  shapes: list[tuple[int, int, int]],
                                                  side: str, phase: str) -> None:
    methods = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT",
               "ANY", "get", "X"]
    entries = [{"hosts": [f"h{i}.example.com" for i in range(h)], "methods": methods[:m],
                "paths": [f"/p{i}/**" for i in range(p)]} for h, m, p in shapes]
    document = {"schemaVersion": "3", "kind": "mixin", "capabilities": [
        {"type": "com.docker.sandbox/network-policy@2", "config": {phase: {side: entries}}}]}
    assert_fast_and_clean(tmp_path, as_json(document))


@pytest.mark.slow
def test_an_arg_used_everywhere_cannot_blow_up_the_descriptor(tmp_path: Path) -> None:
    uses = "${{kit.args.a}}" * 25_000
    by_default = HEAD + f"args:\n  a: {{default: '{'x' * 100_000}'}}\ndescription: '{uses}'\n"
    assert assert_fast_and_clean(tmp_path, by_default) is Reason.INVALID_KIT
    by_flag = HEAD + f"args:\n  a: {{}}\ndescription: '{uses}'\n"
    assert assert_fast_and_clean(tmp_path, by_flag, ["a=" + "y" * 100_000]) \
        is Reason.INVALID_KIT
    assert assert_fast_and_clean(tmp_path, by_flag, ["a=y"]) is None  # 25 KB: fine
    with pytest.raises(KitError) as caught:
        expand({"args": {"a": {}}, "description": uses}, supplied={"a": "y" * 100_000},
               env=None, file="x.yaml")
    assert f"more than {MAX_EXPANSION // 1024} KiB" in messages(caught.value)


def test_kit_env_references_expand_in_linear_time_and_bounded_size() -> None:
    data = {"capabilities": [{"type": "example.com/thing@1",
                              "config": {"k": "${{ kit.env.A }}-" * 40_000}}]}
    with budget(2.0):
        done = expand(data, supplied={}, env={"A": "a"}, file="x.yaml")
    assert done.data["capabilities"][0]["config"]["k"] == "a-" * 40_000
    with budget(2.0), pytest.raises(KitError) as caught:
        expand(data, supplied={}, env={"A": "a" * 1000}, file="x.yaml")
    assert "KiB to the descriptor" in messages(caught.value)


# -- kit arg patterns: RE2 ------------------------------------------------------------------------


CATASTROPHIC = ["^(a+)+$", "(a|aa)+$", "(a|a?)+b", "^(a*)*$", "(x+x+)+y",
                "^(([a-z])+.)+[A-Z]([a-z])+$", "(.*a){20}", "^(\\w+\\s?)*$"]


@pytest.mark.parametrize("pattern", CATASTROPHIC)
def test_catastrophic_patterns_match_in_linear_time(pattern: str) -> None:
    decl = ArgDecl(name="v", pattern=pattern)
    value = "a" * 32 + "!"
    with budget(1.0):
        full_match(pattern, value * 1000)
        assert check_value(decl, value) is not None  # no match: refused, promptly
        check_value(decl, "aaaa")


def test_the_reported_redos_kit_finishes(tmp_path: Path) -> None:
    pattern = "args:\n  v:\n    pattern: '^(a+)+$'\n"
    bad = "a" * 32 + "!"
    assert assert_fast_and_clean(tmp_path, HEAD + pattern + f"    default: '{bad}'\n") \
        is Reason.INVALID_KIT
    assert assert_fast_and_clean(tmp_path, HEAD + pattern, [f"v={bad}"]) is Reason.INVALID_KIT
    assert assert_fast_and_clean(tmp_path, HEAD + pattern, ["v=aaaa"]) is None


@pytest.mark.parametrize(("pattern", "why"), [
    ("(?=a)a", "lookaround"), ("(?<!a)b", "lookaround"), ("(a)\\1", "backreference"),
    ("[a-", "invalid pattern"), ("a{2,1}", "invalid pattern"), ("a\\Z", "invalid pattern"),
    ("x" * (MAX_PATTERN_LENGTH + 1), "longer than"),
])
def test_patterns_outside_re2_are_invalid_kit_naming_the_field(pattern: str, why: str) -> None:
    assert why in (check_pattern(pattern) or "")
    error = refusal(HEAD + f"args:\n  v:\n    pattern: {json.dumps(pattern)}\n")
    found = [d for d in error.details["diagnostics"] if d["path"] == "args.v.pattern"]
    assert found and why in found[0]["message"], error.details


def test_re2_semantics_are_the_specs() -> None:
    assert full_match("[0-9]+", "123") and not full_match("[0-9]+", "12a")
    assert not full_match("\\d+", "\u0661\u0662")  # RE2's \d is ASCII, Python's is not
    assert full_match("[[:alpha:]]+", "abc") and full_match("\\pL+", "\u00e9t\u00e9")
    assert not full_match("a", "a\n")  # a whole-value match: no "$ before a final newline"
    assert not full_match("[a-z]+", "ab\udcff")  # undecodable bytes match no class: no crash
    with pytest.raises(PatternError):
        full_match("(?=x)", "x")


@FUZZ
@given(st.sampled_from(CATASTROPHIC), st.text(alphabet="ab!x \n", max_size=5000))
def test_any_value_against_any_pattern_is_linear(pattern: str, value: str) -> None:
    with budget(1.0):
        full_match(pattern, value)


# -- the fuzzer: descriptor structure, sizes, nesting, anchors, long strings ---------------------


WORDS = ["schemaVersion", "kind", "capabilities", "type", "config", "optional", "group", "args",
         "provides", "requires", "integrates", "conflicts", "kits", "runtime", "install", "allow",
         "deny", "hosts", "methods", "paths", "service", "phase", "apiKey", "inject", "domain",
         "name", "path", "mode", "size", "pattern", "default", "enum", "licenses", "build",
         "files", "content", "startup", "command", "description", "labels"]
TYPES = ["com.docker.sandbox/" + t for t in (
    "network-policy@2", "credential@1", "volume@1", "port@1", "resources@1", "lifecycle@1",
    "agent-context@1", "ssh-agent@1", "privileged@1", "sbx@1")]
LONG_TEXT = st.builds(lambda piece, count: piece * count,
                      st.sampled_from(["a", "${{ kit.args.", "{{", "[", " ", "é", "\\", "&a ",
                                       "*a ", "- ", ":", "x@1.0.0,"]),
                      st.integers(0, 120_000))
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-(2**80), 2**80),
                    st.floats(allow_nan=False), st.sampled_from(WORDS + TYPES),
                    st.text(max_size=20))
KEYS = st.one_of(st.sampled_from(WORDS), st.text(max_size=10))
# The generated text is kept under this size (the sbx limit is 512 KiB: larger ones test the
# size refusal); repetition multiplies sizes, so the generator itself must not run away.
MAX_GENERATED = 1_500_000


def _nest(value: Any, depth: int, kind: str) -> Any:
    for _ in range(depth):
        value = [value] if kind == "list" else {"config": value}
    return value


def _size(value: Any) -> int:
    """Roughly how many characters ``value`` takes as JSON (shared items counted each time)."""
    if isinstance(value, dict):
        return 2 + sum(len(str(k)) + 4 + _size(v) for k, v in value.items())
    if isinstance(value, list):
        if value and all(item is value[0] for item in value):
            return 2 + len(value) * (_size(value[0]) + 2)
        return 2 + sum(_size(v) + 2 for v in value)
    return len(str(value)) + 2


STRUCTURES = st.recursive(
    st.one_of(SCALARS, LONG_TEXT),
    lambda inner: st.one_of(
        st.lists(inner, max_size=6), st.dictionaries(KEYS, inner, max_size=6),
        st.builds(lambda item, n: [item] * n, SCALARS, st.integers(0, 8000)),
        st.builds(lambda item, n: [item] * n, inner, st.integers(0, 300)),
        st.builds(_nest, inner, st.integers(0, 120), st.sampled_from(["list", "map"]))),
    max_leaves=12)
DOCUMENTS = st.builds(
    lambda base, extra: {**base, **extra},
    st.fixed_dictionaries({"schemaVersion": st.sampled_from(["3", 3]),
                           "kind": st.sampled_from(["workload", "mixin", "set", "x"])}),
    st.dictionaries(st.sampled_from(["capabilities", "args", "provides", "requires", "labels",
                                     "licenses", "description", "kits", "build"]),
                    STRUCTURES, max_size=4),
).filter(lambda document: _size(document) < MAX_GENERATED)


@pytest.mark.slow
@FUZZ
@given(DOCUMENTS)
def test_random_structures_finish_fast_with_success_or_a_refusal(
        tmp_path: Path, document: dict[str, Any]) -> None:
    assert_fast_and_clean(tmp_path, as_json(document))


@FUZZ
@given(st.integers(1, 12), st.integers(1, 30), st.sampled_from(["flow", "block"]),
       st.sampled_from(["description", "labels", "capabilities", "provides"]))
def test_alias_bombs_of_any_shape_finish_fast(tmp_path: Path, levels: int, width: int,
                                              style: str, field: str) -> None:
    lines = [f"{field}_0: &a0 [{', '.join(['lol'] * width)}]"]
    for level in range(1, levels):
        refs = [f"*a{level - 1}"] * width
        body = f"[{', '.join(refs)}]" if style == "flow" else "\n" + "\n".join(
            f"  - {r}" for r in refs)
        lines.append(f"{field}_{level}: &a{level} {body}")
    lines.append(f"{field}: *a{levels - 1}")
    assert assert_fast_and_clean(tmp_path, HEAD + "\n".join(lines) + "\n") is Reason.INVALID_KIT


@pytest.mark.slow
@FUZZ
@given(st.sampled_from(["[", "{k: ", "- ", "k:\n", "!!map {k: "]), st.integers(1, 100_000),
       st.sampled_from(["", "x", "]", "&a x", "*a"]))
def test_deep_and_long_texts_finish_fast(tmp_path: Path, opener: str, count: int,
                                         tail: str) -> None:
    if opener in ("- ", "k:\n"):  # block nesting: one more indentation step per level
        body = "".join(" " * i + opener for i in range(min(count, 2000)))
    else:
        body = opener * count
    assert_fast_and_clean(tmp_path, HEAD + "x: " + body + tail + "\n")


@pytest.mark.slow
@FUZZ
@given(st.sampled_from(sorted((Path(__file__).resolve().parents[3] / "data" / "kits" / "valid")
                              .glob("*/*.yaml"))),
       st.integers(1, 2000), st.data())
def test_valid_kits_with_a_list_blown_up_finish_fast(tmp_path: Path, path: Path, times: int,
                                                     data: st.DataObject) -> None:
    from ruamel.yaml import YAML

    document = YAML(typ="safe", pure=True).load(path.read_text(encoding="utf-8"))
    lists = [value for value in _values(document) if isinstance(value, list) and value]
    if lists:
        chosen = data.draw(st.sampled_from(lists))
        chosen.extend([json.loads(json.dumps(item)) for item in chosen] * times)
    assert_fast_and_clean(tmp_path, as_json(document))


def _values(value: Any) -> Iterator[Any]:
    yield value
    children = value.values() if isinstance(value, dict) else value \
        if isinstance(value, list) else ()
    for child in children:
        yield from _values(child)


# -- agent-context markers ----------------------------------------------------------------------


LOOKALIKE = {"s": ["s", "S", "\uff53", "\u0455", "\ua731"], "b": ["b", "B", "\uff42", "\u0184"],
             "x": ["x", "X", "\uff58", "\u0445", "\u03c7"], "<": ["<", "\uff1c", "\ufe64"],
             "!": ["!", "\uff01", "\u01c3"], "-": ["-", "\u2014", "\u2010", "\uff0d", "\u2212"]}
GAPS = ["", "", " ", "\t", "\n", "\u200b", "\u00a0", "\u2060"]


def _reads(text: str) -> str:
    """How a reader sees text for the comparison (independent of the implementation's table):
    compatibility-folded, lower case, no invisible characters or spaces, look-alikes mapped."""
    back = {v: k for k, variants in LOOKALIKE.items() for v in variants}
    out = []
    for char in unicodedata.normalize("NFKC", text):
        seen = back.get(char, char).lower()
        if seen.isspace() or unicodedata.category(seen) in ("Cf", "Mn"):
            continue
        out.append(seen)
    return "".join(out)


@st.composite
def marker_variants(draw: st.DrawFn) -> str:
    marker = draw(st.sampled_from([INDEX_START, INDEX_END, "<!-- sbx:anything -->"]))
    out = []
    for char in marker:
        out.append(draw(st.sampled_from(LOOKALIKE.get(char.lower(), [char]))))
        out.append(draw(st.sampled_from(GAPS)))
    return "".join(out)


@pytest.mark.parametrize("variant", [
    "<!-- sbx:end -->", "<!--SBX:END-->", "<!--  sbx : end -->", "<!--\tSbX:kit-index\t-->",
    "<!-- \uff53\uff42\uff58:end -->", "<!-- \u0455b\u0445:end -->", "<!-- s\u200bbx:end -->",
    "\uff1c!-- sbx:end --\uff1e", "<!\u2014 sbx:end -->", "<! -- sbx:end -->",
])
def test_marker_variants_are_neutralised(variant: str) -> None:
    out = neutralise(f"before\n{variant}\nafter")
    assert "<!--sbx" not in _reads(out)
    assert "<!-- kit" in out and out.startswith("before\n") and out.endswith("\nafter")


@pytest.mark.slow
@FUZZ
@given(st.lists(st.one_of(marker_variants(), st.text(max_size=30)), max_size=8))
def test_no_spelling_of_a_marker_survives(parts: list[str]) -> None:
    text = "".join(parts)
    out = neutralise(text)
    assert "<!--sbx" not in _reads(out)
    assert neutralise(out) == out


def test_other_comments_and_plain_text_are_left_alone() -> None:
    for text in ("<!-- note -->", "a < b and sbx is a tool", "<b>sbx</b>", "plain"):
        assert neutralise(text) == text


@pytest.mark.slow
@FUZZ
@given(st.lists(marker_variants(), min_size=1, max_size=4), st.text(max_size=40))
def test_the_managed_section_has_one_start_and_one_end(markers: list[str], prose: str) -> None:
    body = _context_body({"content": prose.join(markers)}, None)
    profile = _kit_index(["./kit"], {"./kit": [body]})
    seen = _reads(profile)
    assert seen.count(_reads(INDEX_START)) == 1 and seen.count(_reads(INDEX_END)) == 1
    assert seen.count("<!--sbx") == 2
    assert profile.startswith(INDEX_START) and profile.rstrip().endswith(INDEX_END)
