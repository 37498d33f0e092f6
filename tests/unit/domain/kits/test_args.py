"""Create-phase expansion of kit args and kit.env references (KIT-SPEC-V3 §1.6, §6.1)."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sbx.base.errors import KitError, SbxError
from sbx.base.reasons import Reason
from sbx.domain.kits.args import (
    ExpandedKit,
    declarations,
    expand,
    final_environment,
    parse_arg_assignment,
    parse_arg_assignments,
    typed_scalar,
    validate_effective,
)
from sbx.domain.kits.descriptor import parse_descriptor_text
from sbx.domain.kits.placeholders import (
    contains_env_ref,
    malformed_placeholders,
    referenced_args,
    whole_arg_ref,
)

HEAD = '# syntax=docker/sandbox-kit:3\nschemaVersion: "3"\nkind: mixin\n'
SECRET = "value-that-must-never-be-printed"  # noqa: S105 - a marker, not a password


def kit(body: str) -> str:
    return HEAD + textwrap.dedent(body)


def run(text: str, *, supplied: dict[str, str] | None = None,
        env: dict[str, str] | None = None) -> ExpandedKit:
    descriptor = parse_descriptor_text(text, "kit.yaml")
    return expand(descriptor, supplied=supplied or {}, env=env, file="kit.yaml", text=text)


def failure(text: str, **kwargs: Any) -> KitError:
    with pytest.raises(KitError) as caught:
        run(text, **kwargs)
    assert caught.value.reason is Reason.INVALID_KIT
    return caught.value


def diagnostics(error: KitError) -> dict[str, str]:
    return {d["path"]: d["message"] for d in error.details["diagnostics"]}


@pytest.mark.parametrize(("text", "value"), [
    ("8080", 8080), ("0", 0), ("-3", -3), ("1.5", 1.5), ("0.25", 0.25), ("-2.5", -2.5),
    ("0.00001", 0.00001), ("true", True), ("false", False),
    ("1.0", "1.0"), ("007", "007"), ("1e5", "1e5"), ("NaN", "NaN"), ("Inf", "Inf"),
    ("-0", "-0"), ("-0.0", "-0.0"), ("+5", "+5"), ("1.50", "1.50"), (".5", ".5"),
    ("True", "True"), ("1_000", "1_000"), (" 1", " 1"), ("", ""),
    ("99999999999999999999", "99999999999999999999"), ("0x10", "0x10"), ("abc", "abc"),
])
def test_whole_reference_adopts_the_type_its_spelling_round_trips_to(text: str,
                                                                     value: object) -> None:
    adopted = typed_scalar(text)
    assert adopted == value and type(adopted) is type(value)


@given(st.integers(-(2**63), 2**63 - 1))
def test_every_int64_round_trips(number: int) -> None:
    assert typed_scalar(str(number)) == number


def test_reference_helpers() -> None:
    assert whole_arg_ref("${{ kit.args.port }}") == "port"
    assert whole_arg_ref("${{kit.args.port}}") == "port"
    assert whole_arg_ref("x${{ kit.args.port }}") is None
    assert referenced_args("${{ kit.args.a }}-${{kit.args.b}}-${{ kit.args.a }}") == ["a", "b"]
    assert contains_env_ref("${{ kit.env.HOME }}") and contains_env_ref("${{ kit.env.1 }}")
    assert not contains_env_ref("$HOME ${HOME}")
    assert malformed_placeholders("${{ kit.args.x")
    assert malformed_placeholders("${{ kit.env }}")
    assert not malformed_placeholders("${{ kit.args.x }} and ${{ kit.env.Y }}")
    assert not malformed_placeholders("${{ kit.argsx }}")  # not a kit opener at all


def test_expansion_is_structural_and_typed() -> None:
    text = kit("""\
        args:
          port: {default: "8080"}
          ratio: {default: "1.5"}
          tag: {default: "1.0"}
          flag: {default: "true"}
          name: {default: web}
          quote: {default: 'a "quoted" \\\\ value'}
        capabilities:
          - type: com.docker.sandbox/port@1
            config:
              container: ${{ kit.args.port }}
              name: "svc-${{ kit.args.name }}"
          - type: com.example/opaque@1
            config:
              ratio: ${{ kit.args.ratio }}
              tag: ${{ kit.args.tag }}
              flag: "${{kit.args.flag}}"
              embedded: "port ${{ kit.args.port }}"
              "${{ kit.args.port }}": key
              quote: ${{ kit.args.quote }}
        """)
    expanded = run(text)
    port, opaque = expanded.data["capabilities"]
    assert port["config"] == {"container": 8080, "name": "svc-web"}
    assert opaque["config"] == {"ratio": 1.5, "tag": "1.0", "flag": True,
                                "embedded": "port 8080", "8080": "key",
                                "quote": 'a "quoted" \\\\ value'}
    assert expanded.values["port"] == "8080"
    validate_effective(expanded.data, "kit.yaml", text=text)


def test_text_fields_keep_their_spelling() -> None:
    text = kit("""\
        args:
          mode: {default: "755"}
          size: {default: "2"}
        capabilities:
          - type: com.docker.sandbox/volume@1
            config: {path: /data, mode: "${{ kit.args.mode }}", size: "${{ kit.args.size }}"}
          - type: com.docker.sandbox/lifecycle@1
            config:
              files: [{path: /f, content: x, mode: "${{ kit.args.mode }}"}]
        """)
    expanded = run(text)
    volume, lifecycle = expanded.data["capabilities"]
    assert volume["config"]["mode"] == "755" and volume["config"]["size"] == "2"
    assert lifecycle["config"]["files"][0]["mode"] == "755"
    validate_effective(expanded.data, "kit.yaml", text=text)


def test_supplied_values_beat_defaults_and_phases_are_split() -> None:
    text = kit("""\
        args:
          version: {default: "1.0.0", pattern: '[0-9.]+', buildArg: TOOL_VERSION}
          timeout: {default: "30", env: TOOL_TIMEOUT}
          team: {required: true, enum: [alpha, beta]}
          silent: {description: optional without default}
        provides: ["tool@${{ kit.args.version }}"]
        capabilities:
          - type: com.docker.sandbox/lifecycle@1
            config:
              files: [{path: /etc/team, content: "${{ kit.args.team }}"}]
        """)
    expanded = run(text, supplied={"team": "beta", "version": "2.0.0"})
    assert expanded.values == {"version": "2.0.0", "timeout": "30", "team": "beta"}
    assert expanded.build_args == {"TOOL_VERSION": "2.0.0"}
    assert expanded.env_exports == {"TOOL_TIMEOUT": "30"}
    assert expanded.data["provides"] == ["tool@2.0.0"]
    validate_effective(expanded.data, "kit.yaml", text=text)


def test_value_errors_never_print_the_value() -> None:
    text = kit("""\
        args:
          team: {enum: [alpha, beta]}
          code: {pattern: '[0-9]+'}
          needed: {required: true}
        """)
    error = failure(text, supplied={"team": SECRET, "code": SECRET + "x", "extra": SECRET})
    found = diagnostics(error)
    assert "not one of the declared values" in found["args.team"]
    assert "does not match its pattern" in found["args.code"]
    assert "is required" in found["args.needed"]
    assert "'extra' was supplied" in found["args"]
    assert SECRET not in (error.body or "") and SECRET not in str(error.details)


def test_pattern_is_a_whole_value_match() -> None:
    text = kit("args:\n  code: {pattern: '[0-9]+'}\n")
    assert run(text, supplied={"code": "123"}).values == {"code": "123"}
    assert "args.code" in diagnostics(failure(text, supplied={"code": "123abc"}))


def test_values_may_not_smuggle_placeholders_or_nul() -> None:
    text = kit("args:\n  a: {}\n")
    for bad in ("${{ kit.env.HOME }}", "${{ kit.args.a }}", "x\x00y"):
        assert "args.a" in diagnostics(failure(text, supplied={"a": bad}))


def test_unresolved_and_undeclared_references_are_errors() -> None:
    text = kit("""\
        args:
          optional: {}
        capabilities:
          - type: com.docker.sandbox/lifecycle@1
            config:
              files:
                - {path: /a, content: "${{ kit.args.optional }}"}
        """)
    found = diagnostics(failure(text))
    assert "has no resolved value" in found["capabilities[0].config.files[0].content"]
    # An undeclared reference is refused by the grammar before expansion; expanding plain data
    # reports it too.
    data = {"schemaVersion": "3", "kind": "mixin", "description": "${{ kit.args.ghost }}"}
    with pytest.raises(KitError) as caught:
        expand(data, supplied={}, env=None, file="kit.yaml")
    assert "declares no arg 'ghost'" in diagnostics(caught.value)["description"]


def test_two_keys_expanding_to_one_key_is_an_error() -> None:
    text = kit("""\
        args:
          a: {default: same}
          b: {default: same}
        capabilities:
          - type: com.example/opaque@1
            config:
              "${{ kit.args.a }}": 1
              "${{ kit.args.b }}": 2
        """)
    error = failure(text)
    (path, message), = diagnostics(error).items()
    assert path == "capabilities[0].config.${{ kit.args.b }}"
    assert "two keys into 'same'" in message
    line = error.details["diagnostics"][0]["line"]
    assert text.splitlines()[line - 1].strip().startswith('"${{ kit.args.b }}"')


ENV_KIT = kit("""\
    displayName: "${{ kit.env.HOME }} stays literal outside configs"
    capabilities:
      - type: com.docker.sandbox/lifecycle@1
        config:
          files:
            - path: "${{ kit.env.DIR }}/out"
              content: "home=${{kit.env.HOME}} ${{ kit.env.EMPTY }}."
      - group:
          capabilities:
            - type: com.docker.sandbox/volume@1
              config: {path: "${{ kit.env.DIR }}"}
    """)


def test_env_references_expand_in_configs_only() -> None:
    expanded = run(ENV_KIT, env={"DIR": "/work", "HOME": "/home/agent", "EMPTY": ""})
    lifecycle, group = expanded.data["capabilities"]
    assert lifecycle["config"]["files"][0] == {"path": "/work/out", "content": "home=/home/agent ."}
    assert group["group"]["capabilities"][0]["config"]["path"] == "/work"
    assert expanded.data["displayName"].startswith("${{ kit.env.HOME }}")
    validate_effective(expanded.data, "kit.yaml", text=ENV_KIT)


def test_env_values_are_not_expanded_again() -> None:
    error = failure(ENV_KIT, env={"DIR": "${{ kit.env.HOME }}", "HOME": "/h", "EMPTY": ""})
    assert "holds NUL or a ${{ kit.* }} placeholder" in " ".join(diagnostics(error).values())


def test_env_errors_name_the_variable_never_the_value() -> None:
    error = failure(ENV_KIT, env={"DIR": "/work\x00" + SECRET, "EMPTY": ""})
    found = diagnostics(error)
    messages = " ".join(found.values())
    assert "'HOME'" in messages and "'DIR'" in messages
    assert SECRET not in (error.body or "") and SECRET not in str(error.details)
    assert all(d["line"] > 0 for d in error.details["diagnostics"])


def test_env_none_leaves_references_for_later_and_strict_validation_refuses_them() -> None:
    expanded = run(ENV_KIT, env=None)
    with pytest.raises(KitError) as caught:
        validate_effective(expanded.data, "kit.yaml", text=ENV_KIT)
    assert any("still references kit.env (DIR)" in m
               for m in diagnostics(caught.value).values())


def test_env_reference_in_a_key_is_an_error() -> None:
    data = {"schemaVersion": "3", "kind": "mixin", "capabilities": [
        {"type": "com.example/x@1", "config": {"${{ kit.env.K }}": "v"}}]}
    with pytest.raises(KitError) as caught:
        expand(data, supplied={}, env={"K": "k"}, file="kit.yaml")
    assert "not allowed in mapping keys" in " ".join(diagnostics(caught.value).values())


def test_malformed_env_reference_is_an_error() -> None:
    data = {"schemaVersion": "3", "kind": "mixin", "capabilities": [
        {"type": "com.example/x@1", "config": {"v": "${{ kit.env.9 }}"}}]}
    with pytest.raises(KitError) as caught:
        expand(data, supplied={}, env={}, file="kit.yaml")
    assert "malformed" in diagnostics(caught.value)["capabilities[0].config.v"]


def test_validate_effective_refuses_remaining_arg_references() -> None:
    text = kit("args:\n  a: {default: x}\ndescription: '${{ kit.args.a }}'\n")
    with pytest.raises(KitError) as caught:
        validate_effective({"schemaVersion": "3", "kind": "mixin",
                            "args": {"a": {"default": "x"}},
                            "description": "${{ kit.args.a }}"}, "kit.yaml", text=text)
    (diagnostic,) = caught.value.details["diagnostics"]
    assert diagnostic["path"] == "description"
    assert "still references kit args (a)" in diagnostic["message"]
    assert diagnostic["line"] == 6


def test_validate_effective_is_strict_on_expanded_values() -> None:
    text = kit("""\
        args:
          port: {default: "99999"}
          method: {default: get}
        capabilities:
          - type: com.docker.sandbox/port@1
            config: {container: "${{ kit.args.port }}"}
          - type: com.docker.sandbox/network-policy@2
            config:
              runtime:
                allow: [{hosts: [example.com], methods: ["${{ kit.args.method }}"]}]
        """)
    expanded = run(text)  # lenient at load: both values are references
    with pytest.raises(KitError) as caught:
        validate_effective(expanded.data, "kit.yaml", text=text)
    found = diagnostics(caught.value)
    assert "from 1 to 65535" in found["capabilities[0].config.container"]
    assert "not an uppercase HTTP method" in \
        found["capabilities[1].config.runtime.allow[0].methods[0]"]


def test_positions_come_from_the_file_when_no_text_is_given(tmp_path: Path) -> None:
    text = kit("args:\n  a: {}\ncapabilities:\n  - type: com.example/x@1\n"
               "    config: {v: '${{ kit.args.a }}'}\n")
    path = tmp_path / "kit.yaml"
    path.write_text(text, encoding="utf-8")
    descriptor = parse_descriptor_text(text, str(path))
    with pytest.raises(KitError) as caught:
        expand(descriptor, supplied={}, env=None, file=str(path))
    (diagnostic,) = caught.value.details["diagnostics"]
    assert diagnostic["line"] == 8


def test_declarations_skip_malformed_entries() -> None:
    decls = declarations({"args": {"a": {"default": "x", "env": "A"}, "b": "junk",
                                   "c": {"enum": ["x", 1], "buildArg": "C"}}})
    assert set(decls) == {"a", "c"}
    assert decls["a"].phase == "create" and decls["c"].phase == "build"
    assert decls["c"].enum == ("x",)
    assert declarations({"args": []}) == {}


def test_arg_assignments() -> None:
    assert parse_arg_assignment("version=1.2.3") == ("version", "1.2.3")
    assert parse_arg_assignment("empty=") == ("empty", "")
    assert parse_arg_assignment("eq=a=b") == ("eq", "a=b")
    assert parse_arg_assignments(["a=1", "b=2"]) == {"a": "1", "b": "2"}
    for bad in ("novalue", "=x", "1a=x", "a-b=x"):
        with pytest.raises(SbxError) as caught:
            parse_arg_assignment(bad)
        assert caught.value.reason is Reason.INVALID_ARGUMENT
    with pytest.raises(SbxError, match="more than once"):
        parse_arg_assignments(["a=1", "a=2"])


def test_final_environment_precedence() -> None:
    env = final_environment({"A": "image", "B": "image", "C": "image"},
                            {"B": "export", "C": "export"}, {"C": "override"})
    assert env == {"A": "image", "B": "export", "C": "override"}
