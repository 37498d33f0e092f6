"""The cross-entry rules pass (sbx.domain.kits.rules) on plain documents."""

from __future__ import annotations

from typing import Any

import pytest

from sbx.domain.kits import rules
from sbx.domain.kits.diagnostics import format_path

NP1 = "com.docker.sandbox/network-policy@1"
NP2 = "com.docker.sandbox/network-policy@2"
CRED = "com.docker.sandbox/credential@1"


def doc(*capabilities: Any, **top: Any) -> dict[str, Any]:
    return {"schemaVersion": "3", "kind": top.pop("kind", "mixin"), **top,
            "capabilities": list(capabilities)}


def found(document: Any, **kwargs: Any) -> dict[str, str]:
    return {format_path(f.parts): f.message for f in rules.findings(document, **kwargs)}


def credential(*domains: str, phase: Any = "runtime", service: str = "acme") -> dict[str, Any]:
    return {"type": CRED, "config": {"service": service, "phase": phase,
                                     "apiKey": {"inject": [{"domain": d} for d in domains]}}}


def policy(version: str = NP1, **phases: list[Any]) -> dict[str, Any]:
    return {"type": version, "config": {p: {"allow": hosts} for p, hosts in phases.items()}}


@pytest.mark.parametrize("allow", [["api.acme.com"], ["api.acme.com:443"], ["*"], ["**"],
                                   [{"hosts": ["api.acme.com"], "methods": ["GET"]}]])
def test_inject_domain_inside_the_same_phase_allow_list(allow: list[Any]) -> None:
    version = NP2 if any(isinstance(a, dict) for a in allow) else NP1
    assert found(doc(policy(version, runtime=allow), credential("api.acme.com"))) == {}
    assert found(doc(policy(version, runtime=allow), credential("api.acme.com:8443"))) == {}


def test_inject_domain_outside_any_phase_is_reported_per_phase() -> None:
    result = found(doc(policy(runtime=["api.acme.com"]),
                       credential("api.acme.com", "other.com", phase=["install", "runtime"])))
    assert set(result) == {"capabilities[1].config.apiKey.inject[0].domain",
                           "capabilities[1].config.apiKey.inject[1].domain"}
    assert "install allow list" in result["capabilities[1].config.apiKey.inject[0].domain"]


def test_pattern_allow_entries_are_not_expanded_for_inject_checks() -> None:
    # Only bare * / ** cover everything; *.acme.com does not vouch for api.acme.com.
    assert found(doc(policy(runtime=["*.acme.com"]), credential("api.acme.com")))


def test_inject_check_waits_for_references_and_for_group_selection() -> None:
    parameterized = credential("${{ kit.args.host }}")
    assert found(doc(policy(runtime=["x.com"]), parameterized), effective=False) == \
        {"capabilities[1].config.apiKey.inject[0].domain":
         "references ${{ kit.args.host }}, but the kit declares no arg 'host'"}
    grouped = doc(policy(runtime=["x.com"]), credential("api.acme.com"),
                  {"group": {"optional": True,
                             "capabilities": [{"type": "com.docker.sandbox/privileged@1"}]}})
    assert found(grouped) == {}
    selected = rules.check_selected([policy(runtime=["x.com"]), credential("api.acme.com")],
                                    "kit.yaml")
    assert [d.path for d in selected] == ["capabilities[1].config.apiKey.inject[0].domain"]
    assert selected[0].line == 0


def test_singletons_and_exact_duplicates_are_reported_once() -> None:
    lifecycle = {"type": "com.docker.sandbox/lifecycle@1", "config": {"interactive": ["-l"]}}
    result = found(doc(lifecycle, dict(lifecycle)))
    assert result == {"capabilities[1].type": "com.docker.sandbox/lifecycle@1 is a singleton, "
                                              "already declared at capabilities[0]"}
    volume = {"type": "com.docker.sandbox/volume@1", "config": {"path": "/a"}}
    assert found(doc(volume, {**volume, "name": "label only"})) == \
        {"capabilities[1]": "identical to capabilities[0]"}


def test_arity_is_per_declaration_block() -> None:
    lifecycle = {"type": "com.docker.sandbox/lifecycle@1", "config": {"interactive": ["-l"]}}
    group = {"group": {"capabilities": [lifecycle]}}
    assert found(doc(lifecycle, group, {"group": {"capabilities": [lifecycle]}})) == {}


def test_unknown_types_dedup_on_type_and_config_only() -> None:
    a = {"type": "com.example/x@1", "config": {"k": 1}}
    assert found(doc(a, {"type": "com.example/x@1", "config": {"k": 2}})) == {}
    assert found(doc(a, {"type": "com.example/x@1", "config": {"k": 1}, "optional": True}))


def test_instance_keys_skip_references() -> None:
    port = {"type": "com.docker.sandbox/port@1", "config": {"container": "${{ kit.args.p }}"}}
    document = doc(port, {**port, "name": "other", "config": {"container":
                                                              "${{ kit.args.p }}",
                                                              "transport": "tcp"}},
                   args={"p": {"default": "1"}})
    assert found(document) == {}


def test_port_transport_defaults_to_tcp_for_dedup() -> None:
    a = {"type": "com.docker.sandbox/port@1", "config": {"container": 53}}
    b = {"type": "com.docker.sandbox/port@1", "config": {"container": 53, "transport": "udp"}}
    c = {"type": "com.docker.sandbox/port@1", "config": {"container": 53, "transport": "tcp"}}
    assert found(doc(a, b)) == {}
    assert "port 53/tcp already declared" in found(doc(a, c))["capabilities[1].config.container"]


def test_agent_context_explicit_profiles_may_repeat() -> None:
    def context(**config: str) -> dict[str, Any]:
        return {"type": "com.docker.sandbox/agent-context@1", "config": config}

    ok = doc(context(directory="/a", filename="A.md", content="body"),
             context(directory="/b", filename="B.md"), context(directory="/c", filename="C.md"))
    assert found(ok) == {}
    same = doc(context(directory="/a", filename="A.md"), context(directory="/a/", filename="A.md"))
    assert "capabilities[1].config.directory" in found(same)
    bodies = doc(context(directory="/a", filename="A.md", content="x"),
                 context(directory="/b", filename="B.md", contentFile="./y.md"))
    assert "body already declared" in found(bodies)["capabilities[1].config"]


def test_list_commands_of_both_session_capabilities_must_agree() -> None:
    sessions = {"type": "com.docker.sandbox/agent-sessions@1", "config": {"list": "agent ls"}}
    same = {"type": "com.docker.sandbox/agent-interactive-sessions@1",
            "config": {"list": ["sh", "-c", "agent ls"]}}
    other = {"type": "com.docker.sandbox/agent-interactive-sessions@1",
             "config": {"list": ["agent", "ls"]}}
    assert found(doc(sessions, same, kind="workload")) == {}
    assert "capabilities[1].config.list" in found(doc(sessions, other, kind="workload"))


def test_values_with_references_are_deferred_until_effective() -> None:
    entry = {"type": NP2, "config": {"runtime": {"allow": [
        {"hosts": ["${{ kit.args.h }}"], "methods": ["${{ kit.args.m }}"],
         "paths": ["${{ kit.args.p }}"]}]}}}
    document = doc(entry, args={"h": {}, "m": {}, "p": {}})
    assert found(document) == {}
    effective = found(document, effective=True)
    assert all("still references kit args" in m for m in effective.values())
    assert "capabilities[0].config.runtime.allow[0].methods[0]" in effective


def test_derived_provides_are_for_authors_only() -> None:
    document = doc(provides=["tool@1.0.0", "deb/curl@8.5.0"])
    assert "provides[1]" in found(document)
    assert found(document, authored=False) == {}


def test_relations_checks() -> None:
    result = found(doc(provides=["gh@${{ kit.args.v }}"], requires=["gh >= ${{ kit.args.v }}"],
                       conflicts=["${{ kit.args.v }}", "com.example/old", "old >= 1"],
                       args={"v": {"default": "1", "buildArg": "V"}}))
    assert set(result) == {"requires[0]", "conflicts[0]", "conflicts[2]"}


def test_mixin_may_not_declare_sbx_anywhere_but_a_workload_may() -> None:
    sbx = {"type": "com.docker.sandbox/sbx@1"}
    mixin = doc(sbx, {"group": {"capabilities": [dict(sbx)]}})
    assert set(found(mixin)) == {"capabilities[0].type",
                                 "capabilities[1].group.capabilities[0].type"}
    assert found(doc(sbx, kind="workload")) == {}
    assert found(doc(sbx, kind="set", kits=[{"ref": "docker.io/a/b:1"}])) == {}


@pytest.mark.parametrize("shape", [None, 1, "x", [], [1, "a", None], {"capabilities": "x"},
                                   {"capabilities": [None, 1, [], {"group": None},
                                                     {"group": {"capabilities": "x"}},
                                                     {"type": 5, "config": []}]},
                                   {"args": [1], "kits": "x", "provides": {"a": 1},
                                    "requires": [None, 3]},
                                   {"args": {"a": None, "b": {"pattern": 5, "enum": "x"}}}])
def test_malformed_shapes_never_crash(shape: Any) -> None:
    rules.findings(shape)
    rules.findings(shape, effective=True, authored=False)


def test_parse_path_inverts_format_path() -> None:
    parts = ("capabilities", 2, "group", "capabilities", 0, "config", "runtime", "allow", 10)
    assert rules.parse_path(format_path(parts)) == parts
    assert rules.parse_path("") == ()


def test_describe_renders_findings() -> None:
    lines = rules.describe(rules.findings(doc(provides=["BAD"])))
    assert lines == ["provides[0]: provides entry 'BAD': 'BAD' is not a capability name: "
                     "lowercase letters, digits, '-', '.' and '+', starting with a letter or "
                     "digit"]


def test_rule_tables_are_consistent() -> None:
    assert rules.SINGLETONS <= rules.KNOWN_TYPES
    assert rules.CONFIGLESS <= rules.SINGLETONS
    assert len(rules.KNOWN_TYPES) == 21


def test_every_known_type_has_a_wired_config_schema() -> None:
    import json
    from importlib import resources

    root = resources.files("sbx").joinpath("schema")
    kit = json.loads(root.joinpath("kit.schema.json").read_text(encoding="utf-8"))
    chain = kit["$defs"]["capability"]["allOf"]
    wired = {step["if"]["properties"]["type"]["const"]: step["then"]["properties"]["config"]
             for step in chain if "const" in step["if"]["properties"]["type"]}
    assert set(wired) == set(rules.KNOWN_TYPES)
    for ctype, ref in wired.items():
        short = ctype.removeprefix("com.docker.sandbox/")
        assert ref == {"$ref": f"capabilities/{short}.json"}
        schema = json.loads(root.joinpath(f"capabilities/{short}.json").read_text("utf-8"))
        assert schema["$id"].endswith(f"/capabilities/{short}.json")
        assert ("not" in schema) == (ctype in rules.CONFIGLESS)


def test_the_validation_cache_key_hashes_every_rule_source_that_exists() -> None:
    # A moved or renamed rule module must not silently drop out of the key (a stale "valid"
    # would then survive an edit of that module): every listed source is read, none skipped.
    from importlib import resources

    from sbx.domain.kits import schema

    package = resources.files("sbx.domain.kits")
    listed = set(schema._RULE_MODULES)
    for name in listed:
        assert package.joinpath(name).is_file(), name
    # The modules that decide validity are all listed.
    for module in ("descriptor", "document", "schema", "diagnostics", "rules", "args",
                   "placeholders", "patterns", "versions"):
        assert f"{module}.py" in listed
