"""Runtime composition of capability declarations (KIT-SPEC-V3 §4.2, §3.4)."""

from __future__ import annotations

from typing import Any

import pytest

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.kits.compose import (
    COMPOSE_MESSAGE,
    Composition,
    Contribution,
    Origin,
    Rule,
    clean_path,
    compose,
    contributions_of,
    size_bytes,
    skill_name,
)
from sbx.domain.kits.resolve import KitInput, resolve

NS = "com.docker.sandbox/"


def cap(name: str, config: Any = None, *, optional: bool = False, **extra: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"type": NS + name}
    if config is not None:
        entry["config"] = config
    if optional:
        entry["optional"] = True
    entry.update(extra)
    return entry


def net1(**phases: Any) -> dict[str, Any]:
    return cap("network-policy@1", phases)


def net2(**phases: Any) -> dict[str, Any]:
    return cap("network-policy@2", phases)


def run(*kits: tuple[str, list[dict[str, Any]]]) -> Composition:
    return compose([Contribution(reference, entries) for reference, entries in kits])


def problems(*kits: tuple[str, list[dict[str, Any]]]) -> list[str]:
    with pytest.raises(SbxError) as caught:
        run(*kits)
    assert caught.value.reason is Reason.KIT_INCOHERENT
    assert caught.value.message == COMPOSE_MESSAGE
    found: list[str] = caught.value.details["problems"]
    assert caught.value.body == "\n".join(f"  - {p}" for p in found)
    return found


def hosts(rules: tuple[Rule, ...]) -> list[str]:
    return [r.host for r in rules]


# --- network policy ---------------------------------------------------------------------------


def test_allow_and_deny_union_per_phase_with_provenance() -> None:
    c = run(("w", [net1(runtime={"allow": ["a.com"], "deny": ["bad.com"]})]),
            ("m", [cap("port@1", {"container": 1}),
                   net1(install={"allow": ["pypi.org"]}, runtime={"allow": ["b.com"]})]))
    assert c.network is not None
    assert hosts(c.network.runtime.allow) == ["a.com", "b.com"]
    assert hosts(c.network.runtime.deny) == ["bad.com"]
    assert hosts(c.network.install.allow) == ["pypi.org"]
    rule = c.network.runtime.allow[1]
    assert (rule.kit, rule.index, rule.phase, rule.action, rule.declared_at) == (
        "m", 1, "runtime", "allow", "capabilities[1]")
    assert c.network.origins == (Origin("w", 0, "capabilities[0]"),
                                 Origin("m", 1, "capabilities[1]"))


def test_absent_phase_block_grants_nothing() -> None:
    c = run(("w", [net1(runtime={"allow": ["a.com"]})]))
    assert c.network is not None
    assert c.network.install.allow == () and c.network.install.deny == ()
    assert c.network.config() == {"runtime": {"allow": ["a.com"]}}


def test_v1_only_stays_v1() -> None:
    c = run(("w", [net1(runtime={"allow": ["a.com"]})]),
            ("m", [net1(runtime={"allow": ["a.com", "b.com"]})]))
    assert c.network is not None
    assert c.network.version == 1
    assert c.capabilities()[0] == {"type": NS + "network-policy@1",
                                   "config": {"runtime": {"allow": ["a.com", "b.com"]}}}


def test_any_v2_input_makes_the_output_v2_and_v1_entries_bare() -> None:
    bounded = {"hosts": ["api.x.com"], "methods": ["GET"], "paths": ["/v1/**"]}
    c = run(("w", [net1(runtime={"allow": ["a.com"]})]),
            ("m", [net2(runtime={"allow": [bounded]})]))
    assert c.network is not None
    assert c.network.version == 2
    assert c.network.config() == {"runtime": {"allow": ["a.com", bounded]}}
    rule = c.network.runtime.allow[1]
    assert rule.bounded and rule.effective_methods == ("GET",) and rule.paths == ("/v1/**",)
    assert not c.network.runtime.allow[0].bounded
    assert c.network.runtime.allow[0].effective_paths == ("/**",)


def test_a_host_granted_unbounded_stays_unbounded() -> None:
    c = run(("w", [net2(runtime={"allow": [{"hosts": ["api.x.com", "b.com"],
                                            "methods": ["GET"]}]})]),
            ("m", [net1(runtime={"allow": ["api.x.com"]})]))
    assert c.network is not None
    allow = c.network.runtime.allow
    assert [(r.host, r.bounded) for r in allow] == [("b.com", True), ("api.x.com", False)]
    assert [(r.host, r.kit) for r in c.network.runtime.superseded] == [("api.x.com", "w")]


def test_universal_unbounded_allow_supersedes_every_bounded_allow() -> None:
    c = run(("w", [net1(install={"allow": ["**"]})]),
            ("m", [net2(install={"allow": [{"hosts": ["api.x.com"], "methods": ["POST"]}]})]))
    assert c.network is not None
    assert hosts(c.network.install.allow) == ["**"]
    assert hosts(c.network.install.superseded) == ["api.x.com"]


def test_port_qualified_unbounded_does_not_supersede_the_bare_host() -> None:
    c = run(("w", [net1(runtime={"allow": ["x.com:22"]})]),
            ("m", [net2(runtime={"allow": [{"hosts": ["x.com"], "methods": ["GET"]}]})]))
    assert c.network is not None
    assert [r.host for r in c.network.runtime.allow] == ["x.com:22", "x.com"]


def test_deny_survives_whoever_allows() -> None:
    c = run(("w", [net1(runtime={"allow": ["x.com"]})]),
            ("m", [net2(runtime={"deny": ["x.com", {"hosts": ["y.com"], "methods": ["DELETE"]}]})]))
    assert c.network is not None
    assert [(r.host, r.bounded, r.kit) for r in c.network.runtime.deny] == [
        ("x.com", False, "m"), ("y.com", True, "m")]


def test_effective_config_deduplicates_identical_entries() -> None:
    c = run(("w", [net1(runtime={"allow": ["a.com"]})]),
            ("m", [net1(runtime={"allow": ["a.com"]})]))
    assert c.network is not None
    assert len(c.network.runtime.allow) == 2  # both askers stay visible
    assert c.network.config() == {"runtime": {"allow": ["a.com"]}}


@pytest.mark.parametrize(("flags", "optional"), [
    ((True, True), True), ((True, False), False), ((False, False), False)])
def test_network_is_required_if_any_contributor_requires_it(flags: tuple[bool, bool],
                                                            optional: bool) -> None:
    c = run(("w", [cap("network-policy@1", {"runtime": {"allow": ["a"]}}, optional=flags[0])]),
            ("m", [cap("network-policy@1", {"runtime": {"allow": ["b"]}}, optional=flags[1])]))
    assert c.network is not None
    assert c.network.optional is optional


# --- credentials and ssh-agent ----------------------------------------------------------------


def credential(service: str, phase: Any, **extra: Any) -> dict[str, Any]:
    return cap("credential@1", {"service": service, "phase": phase,
                                "apiKey": {"name": "T"}}, **extra)


def test_credentials_split_per_phase() -> None:
    c = run(("w", [credential("npm", ["install", "runtime"], optional=True)]))
    assert [(x.service, x.phase, x.config["phase"], x.optional) for x in c.credentials] == [
        ("npm", "install", "install", True), ("npm", "runtime", "runtime", True)]
    assert [x.service for x in c.credentials_for("runtime")] == ["npm"]
    assert [e["config"]["phase"] for e in c.capabilities()] == ["install", "runtime"]


def test_one_credential_one_owner() -> None:
    assert problems(("w", [credential("gh", "runtime")]),
                    ("m", [credential("gh", ["install", "runtime"])])) == [
        "w capabilities[0] and m capabilities[0] both declare credential (gh, runtime); one "
        "credential has one owner"]


def test_same_service_other_phase_composes() -> None:
    c = run(("w", [credential("gh", "install")]), ("m", [credential("gh", "runtime")]))
    assert [(x.kit, x.phase) for x in c.credentials] == [("w", "install"), ("m", "runtime")]


def ssh(phase: Any, **config: Any) -> dict[str, Any]:
    return cap("ssh-agent@1", {"phase": phase, **config})


def test_ssh_agent_unrestricted_if_any_asker_is() -> None:
    c = run(("w", [ssh("runtime", unrestricted=False, sign=["git"])]), ("m", [ssh("runtime")]))
    (grant,) = c.ssh_agent
    assert grant.unrestricted and grant.sign == () and grant.config() == {"phase": "runtime"}
    assert [o.kit for o in grant.origins] == ["w", "m"]


def test_ssh_agent_bounded_asks_union() -> None:
    c = run(("w", [ssh("runtime", unrestricted=False, sign=["git"])]),
            ("m", [ssh(["install", "runtime"], unrestricted=False,
                       authenticate=["git@github.com"], sign=["file", "git"])]))
    install, runtime = c.ssh_agent
    assert (install.phase, install.sign, install.authenticate) == (
        "install", ("file", "git"), ("git@github.com",))
    assert runtime.config() == {"phase": "runtime", "unrestricted": False,
                                "sign": ["file", "git"], "authenticate": ["git@github.com"]}


# --- lifecycle --------------------------------------------------------------------------------


def lifecycle(**config: Any) -> dict[str, Any]:
    return cap("lifecycle@1", config)


def test_hooks_and_files_concatenate_in_dependency_order_with_provenance() -> None:
    c = run(("node", [lifecycle(install=[{"command": "apt-get install node"}],
                                startup=[{"command": ["node", "-v"], "background": True}])]),
            ("shell", [cap("port@1", {"container": 80}),
                       lifecycle(install=[{"command": "a", "user": "root", "env": ["X"]},
                                          {"command": "a"}],
                                 files=[{"path": "/etc/motd", "content": "hi"}])]))
    assert c.lifecycle is not None
    assert [(h.kit, h.index, h.position, h.command) for h in c.lifecycle.install] == [
        ("node", 0, 0, "apt-get install node"), ("shell", 1, 0, "a"), ("shell", 1, 1, "a")]
    startup = c.lifecycle.startup[0]
    assert startup.command == ("node", "-v") and startup.background and startup.stage == "startup"
    assert c.lifecycle.install[1].user == "root" and c.lifecycle.install[1].env == ("X",)
    (motd,) = c.lifecycle.files
    assert (motd.path, motd.content, motd.overwrite, motd.kit, motd.index) == (
        "/etc/motd", "hi", True, "shell", 1)
    assert c.lifecycle.config()["install"][0] == {"command": "apt-get install node"}


def test_one_file_path_one_author_after_cleaning() -> None:
    assert problems(("a", [lifecycle(files=[{"path": "/etc/x", "content": "1"}])]),
                    ("b", [lifecycle(files=[{"path": "/etc//./x", "content": "1"}])])) == [
        "a capabilities[0] and b capabilities[0] both write /etc/x; one file has one author"]


def test_one_interactive_tail() -> None:
    assert problems(("a", [lifecycle(interactive=["--tty"])]),
                    ("b", [lifecycle(interactive=["--other"])])) == [
        "a capabilities[0] and b capabilities[0] both declare a lifecycle interactive tail; it "
        "replaces the launch command's arguments, so it has one author"]


def test_empty_interactive_tail_is_dropped() -> None:
    c = run(("a", [lifecycle(interactive=["--tty"])]),
            ("b", [lifecycle(interactive=[], install=[{"command": "x"}])]))
    assert c.lifecycle is not None
    assert c.lifecycle.interactive == ("--tty",)
    assert c.lifecycle.interactive_origin == Origin("a", 0, "capabilities[0]")


def test_overwrite_false_and_optional_lifecycle() -> None:
    c = run(("a", [cap("lifecycle@1", {"files": [{"path": "/f", "content": "",
                                                   "overwrite": False, "mode": "0644"}]},
                       optional=True)]))
    assert c.lifecycle is not None
    assert c.lifecycle.optional
    assert (c.lifecycle.files[0].overwrite, c.lifecycle.files[0].mode) == (False, "0644")


def test_new_session_must_match_the_interactive_tail() -> None:
    found = problems(("w", [cap("agent-interactive-sessions@1", {"newSession": ["--new"]}),
                            lifecycle(interactive=["--tty"])]))
    assert found == ["w capabilities[0] and w capabilities[1]: newSession ['--new'] disagrees "
                     "with lifecycle interactive ['--tty']; they name the same launch"]
    run(("w", [cap("agent-interactive-sessions@1", {"newSession": ["--tty"]}),
               lifecycle(interactive=["--tty"])]))


# --- whole-sandbox declarations ---------------------------------------------------------------


@pytest.mark.parametrize(("ctype", "label", "first", "second"), [
    ("resources@1", "resources", {"cpu": 2}, {"cpu": 4}),
    ("agent-sessions@1", "agent-sessions", {"prompt": ["-p", "{{.Prompt}}"]},
     {"prompt": ["{{.Prompt}}"]}),
    ("agent-interactive-sessions@1", "agent-interactive-sessions", {"continue": ["-c"]},
     {"continue": ["--continue"]}),
])
def test_whole_sandbox_types_have_one_author(ctype: str, label: str, first: dict[str, Any],
                                             second: dict[str, Any]) -> None:
    assert problems(("w", [cap(ctype, first)]), ("m", [cap(ctype, second)])) == [
        f"w capabilities[0] and m capabilities[0] both declare {label} with different "
        "settings; it describes the whole sandbox, so it has one author"]


def test_identical_restatement_of_a_whole_sandbox_type_is_fine() -> None:
    c = run(("w", [cap("resources@1", {"cpu": 2, "memory": "4g"}, optional=True)]),
            ("m", [cap("resources@1", {"memory": "4g", "cpu": 2})]))
    assert c.resources is not None
    assert c.resources.config == {"cpu": 2, "memory": "4g"}
    assert not c.resources.optional
    assert [o.kit for o in c.resources.origins] == ["w", "m"]


# --- storage ----------------------------------------------------------------------------------


def volume(path: str, **config: Any) -> dict[str, Any]:
    return cap("volume@1", {"path": path, **config})


@pytest.mark.parametrize(("a", "b"), [
    ({"size": "1g"}, {"size": "1024m"}),
    ({"size": "1g"}, {"size": "1gib"}),
    ({"mode": "755"}, {"mode": "0755"}),
    ({}, {"tmpfs": False}),
    ({"size": "2G", "mode": "1777", "tmpfs": True}, {"size": "2048MiB", "tmpfs": True,
                                                     "mode": "1777"}),
])
def test_equivalent_volumes_merge(a: dict[str, Any], b: dict[str, Any]) -> None:
    c = run(("w", [volume("/data", **a)]), ("m", [volume("/data/./", **b)]))
    (merged,) = c.volumes
    assert merged.path == "/data"
    assert [o.kit for o in merged.origins] == ["w", "m"]


@pytest.mark.parametrize(("a", "b", "detail"), [
    ({"size": "1g"}, {"size": "2g"},
     "size 1073741824 bytes, block, mode unspecified vs size 2147483648 bytes, block, mode "
     "unspecified"),
    ({}, {"size": "1g"},
     "size unspecified, block, mode unspecified vs size 1073741824 bytes, block, mode "
     "unspecified"),
    ({"tmpfs": True}, {}, "size unspecified, tmpfs, mode unspecified vs size unspecified, "
     "block, mode unspecified"),
    ({"mode": "755"}, {"mode": "700"},
     "size unspecified, block, mode 0755 vs size unspecified, block, mode 0700"),
])
def test_different_volumes_at_one_path_fail(a: dict[str, Any], b: dict[str, Any],
                                            detail: str) -> None:
    assert problems(("w", [volume("/data", **a)]), ("m", [volume("/data", **b)])) == [
        f"w capabilities[0] and m capabilities[0] both declare volume@1 at /data with different "
        f"storage settings ({detail}); one of them has to change"]


@pytest.mark.parametrize("other", [
    cap("host-mount@1", {"path": "/cache"}),
    volume("/cache"),
])
def test_host_mount_has_one_owner_even_when_identical(other: dict[str, Any]) -> None:
    assert problems(("w", [cap("host-mount@1", {"path": "/cache"})]), ("m", [other])) == [
        "w capabilities[0] and m capabilities[0] both declare storage at /cache; a host mount "
        "has one owner"]


def test_volume_then_host_mount_also_conflicts() -> None:
    assert len(problems(("w", [volume("/c")]), ("m", [cap("host-mount@1", {"path": "/c"})]))) == 1


def test_volumes_and_host_mounts_are_kept_apart() -> None:
    c = run(("w", [volume("/a", size="1g"), cap("host-mount@1", {"path": "/b", "mode": "0755"})]))
    assert [(v.path, v.size) for v in c.volumes] == [("/a", "1g")]
    assert [(h.path, h.mode, h.origin.kit) for h in c.host_mounts] == [("/b", "0755", "w")]


# --- instance types ---------------------------------------------------------------------------


def test_ports_deduplicate_on_container_and_transport() -> None:
    c = run(("w", [cap("port@1", {"container": 3000, "name": "web"}),
                   cap("port@1", {"container": 3000, "transport": "udp"})]),
            ("m", [cap("port@1", {"container": 3000, "transport": "tcp"}, optional=True)]))
    assert [(p.key, p.name, len(p.origins), p.optional) for p in c.ports] == [
        ("3000/tcp", "web", 2, False), ("3000/udp", None, 1, False)]


def test_usb_deduplicates_on_the_exact_entry() -> None:
    c = run(("w", [cap("usb-device@1", {"vendorId": "1d6b", "productId": "0002"})]),
            ("m", [cap("usb-device@1", {"productId": "0002", "vendorId": "1d6b"}),
                   cap("usb-device@1", {"class": "03"})]))
    assert [e.config for e in c.usb] == [{"vendorId": "1d6b", "productId": "0002"},
                                         {"class": "03"}]


def test_skills_same_path_takes_the_widest_mode() -> None:
    c = run(("w", [cap("agent-skills@1", {"path": "/s"})]),
            ("m", [cap("agent-skills@1", {"path": "/s", "mode": "readwrite"}),
                   cap("agent-skills@1", {"path": "/t", "mode": "readonly"})]),
            ("n", [cap("agent-skills@1", {"path": "/s", "mode": "readonly"})]))
    assert [(e.config or {}).get("mode") for e in c.skills] == ["readwrite", "readonly"]
    assert len(c.skills[0].origins) == 3


def test_bundled_skills_collapse_by_name_and_source() -> None:
    c = run(("w", [cap("agent-skill@1", {"path": "/usr/share/skills/review"})]),
            ("m", [cap("agent-skill@1", {"path": "/usr/share/skills/review", "name": "review"})]))
    assert len(c.bundled_skills) == 1
    assert problems(("w", [cap("agent-skill@1", {"path": "/a/review"})]),
                    ("m", [cap("agent-skill@1", {"path": "/b/x", "name": "review"})])) == [
        "w capabilities[0] and m capabilities[0] both bundle a skill named 'review' from "
        "different sources (/a/review vs /b/x); rename one of them"]


def test_acp_one_adapter_per_agent() -> None:
    first = cap("acp@1", {"agent": "claude", "command": ["claude-acp"]})
    c = run(("w", [first]), ("m", [dict(first)]))
    assert len(c.acp) == 1
    found = problems(("w", [first]),
                     ("m", [cap("acp@1", {"agent": "com.docker.kit/claude", "command": ["x"]})]))
    assert found == ["w capabilities[0] and m capabilities[0] both declare an acp@1 adapter for "
                     "agent 'com.docker.kit/claude' with different settings; one agent has one "
                     "adapter"]


def test_configless_types_union_on_presence() -> None:
    c = run(("w", [cap("privileged@1", optional=True), cap("sbx@1")]),
            ("m", [cap("privileged@1", {}), cap("git-identity@1"), cap("kit-registry@1")]))
    assert [(e.type.removeprefix(NS), e.optional, len(e.origins)) for e in c.others] == [
        ("privileged@1", False, 2), ("sbx@1", False, 1), ("git-identity@1", False, 1),
        ("kit-registry@1", False, 1)]
    assert all(e.config is None for e in c.others)


def test_unknown_types_deduplicate_on_type_and_config() -> None:
    c = run(("w", [{"type": "com.example/thing@1", "config": {"a": 1}, "optional": True}]),
            ("m", [{"type": "com.example/thing@1", "config": {"a": 1}},
                   {"type": "com.example/thing@1", "config": {"a": 2}}]))
    assert [(e.config, e.optional) for e in c.others] == [({"a": 1}, False), ({"a": 2}, False)]


def test_agent_context_entries_are_all_kept_in_order() -> None:
    c = run(("w", [cap("agent-context@1", {"filename": "AGENTS.md", "contentFile": "/w.md"})]),
            ("m", [cap("agent-context@1", {"content": "use gh"}),
                   cap("agent-context@1", {"directory": "/home/agent/.claude",
                                           "filename": "CLAUDE.md", "content": "x"})]))
    assert [e.origins[0].kit for e in c.contexts] == ["w", "m", "m"]


def test_two_different_legacy_profiles_conflict() -> None:
    assert len(problems(("w", [cap("agent-context@1", {"filename": "AGENTS.md"})]),
                        ("m", [cap("agent-context@1", {"filename": "CLAUDE.md"})]))) == 1
    run(("w", [cap("agent-context@1", {"filename": "AGENTS.md"})]),
        ("m", [cap("agent-context@1", {"filename": "AGENTS.md"})]))


# --- groups, many problems, plumbing ----------------------------------------------------------


def test_groups_must_be_selected_first() -> None:
    assert problems(("w", [{"group": {"capabilities": [cap("privileged@1")]}}])) == [
        "w capabilities[0]: select groups before composition"]


def test_every_problem_is_collected() -> None:
    found = problems(
        ("w", [credential("a", "runtime"), volume("/v", size="1g"),
               cap("resources@1", {"cpu": 1}), lifecycle(files=[{"path": "/f", "content": ""}])]),
        ("m", [credential("a", "runtime"), volume("/v", size="2g"),
               cap("resources@1", {"cpu": 2}), lifecycle(files=[{"path": "/f", "content": ""}])]))
    assert len(found) == 4


def test_contributions_of_uses_topological_order_selection_and_paths() -> None:
    resolution = resolve([
        KitInput.of("shell", {"kind": "workload", "requires": ["node"],
                              "capabilities": [cap("privileged@1")]}),
        KitInput.of("node", {"kind": "mixin", "provides": ["node@22"],
                             "capabilities": [{"group": {"capabilities": [volume("/n")]}}]}),
    ])
    contributions = contributions_of(
        resolution, selected={"node": [volume("/n")]},
        paths={"node": ["capabilities[0].group.capabilities[0]"]})
    assert [c.reference for c in contributions] == ["node", "shell"]
    c = compose(contributions)
    assert c.kits == ("node", "shell")
    assert c.volumes[0].origins == (Origin("node", 0, "capabilities[0].group.capabilities[0]"),)
    with pytest.raises(SbxError):  # the unselected group reaches compose unflattened
        compose(resolution)


def test_compose_a_resolution_directly() -> None:
    resolution = resolve([
        KitInput.of("w", {"kind": "workload", "capabilities": [
            lifecycle(install=[{"command": "w"}])]}),
        KitInput.of("a", {"kind": "mixin", "capabilities": [
            lifecycle(install=[{"command": "a"}])]}),
    ])
    c = compose(resolution)
    assert c.lifecycle is not None
    assert [h.command for h in c.lifecycle.install] == ["a", "w"]  # topological, not layer order


def test_effective_capabilities_and_descriptor() -> None:
    c = run(("w", [cap("resources@1", {"cpu": 1}), credential("s", "runtime", optional=True),
                   cap("port@1", {"container": 8080}), volume("/v"), cap("privileged@1"),
                   lifecycle(install=[{"command": "x"}])]))
    types = [e["type"].removeprefix(NS) for e in c.capabilities()]
    assert types == ["credential@1", "volume@1", "port@1", "privileged@1", "resources@1",
                     "lifecycle@1"]
    assert c.capabilities()[0]["optional"] is True
    assert c.capabilities()[2]["config"] == {"container": 8080, "transport": "tcp"}
    assert "config" not in c.capabilities()[3]
    assert c.descriptor()["capabilities"] == list(c.capabilities())


def test_empty_composition() -> None:
    c = run(("w", []))
    assert c.capabilities() == ()
    assert c.network is None and c.lifecycle is None


@pytest.mark.parametrize(("text", "expected"), [
    ("512m", 512 * 1024**2), ("2g", 2 * 1024**3), ("1gib", 1024**3), ("1GB", 1024**3),
    ("100", 100), ("1.5k", 1536), ("lots", None), ("", None),
])
def test_size_bytes(text: str, expected: int | None) -> None:
    assert size_bytes(text) == expected


@pytest.mark.parametrize(("path", "expected"), [
    ("/a/./b//c/", "/a/b/c"), ("//a", "/a"), ("/", "/"), ("/a/../b", "/b"), ("", "")])
def test_clean_path(path: str, expected: str) -> None:
    assert clean_path(path) == expected


def test_skill_name_defaults_to_the_directory_name() -> None:
    assert skill_name({"path": "/usr/share/skills/review/"}) == "review"
    assert skill_name({"path": "/x", "name": "named"}) == "named"
