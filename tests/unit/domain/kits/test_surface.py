"""The permission surface and the upgrade gate (KIT-SPEC-V3 §5)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sbx.domain.kits.compose import Contribution, compose
from sbx.domain.kits.surface import (
    CATEGORIES,
    JSON_FIELDS,
    Surface,
    Widening,
    complete_http_grants,
    diff_widenings,
    format_widenings,
    http_atoms,
    service_entry,
    surface,
)

NS = "com.docker.sandbox/"


def cap(ctype: str, config: Any = None, **extra: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"type": ctype if "/" in ctype else NS + ctype}
    if config is not None:
        entry["config"] = config
    entry.update(extra)
    return entry


def of(*entries: dict[str, Any]) -> dict[str, Any]:
    return surface(list(entries)).to_json()


def widenings(granted: Surface, candidate: Surface) -> list[tuple[str, str]]:
    return [(w.category, w.detail) for w in diff_widenings(granted, candidate)]


# --- projection -------------------------------------------------------------------------------


@pytest.mark.parametrize(("entry", "expected"), [
    (cap("network-policy@1", {"install": {"allow": ["pypi.org"], "deny": ["evil.org"]}}),
     {"networkInstallAllow": ["pypi.org"], "networkInstallDeny": ["evil.org"],
      "networkInstallHTTPAllow": ["ANY pypi.org/**"],
      "networkInstallHTTPDeny": ["ANY evil.org/**"]}),
    (cap("network-policy@2", {"runtime": {"allow": [
        {"hosts": ["api.gh.com"], "methods": ["GET", "POST"], "paths": ["/repos/**", "/user"]}]}}),
     {"networkRuntimeHTTPAllow": ["GET api.gh.com/repos/**", "GET api.gh.com/user",
                                  "POST api.gh.com/repos/**", "POST api.gh.com/user"]}),
    (cap("network-policy@2", {"runtime": {"allow": [{"hosts": ["a.com"],
                                                     "methods": ["GET", "ANY"]}]}}),
     {"networkRuntimeHTTPAllow": ["ANY a.com/**"]}),
    (cap("network-policy@2", {"runtime": {"deny": [
        {"hosts": ["api.gh.com"], "methods": ["DELETE"], "paths": ["/repos/**"]}, "x.com"]}}),
     {"networkRuntimeDeny": ["x.com"],
      "networkRuntimeHTTPDeny": ["ANY x.com/**", "DELETE api.gh.com/repos/**"]}),
    (cap("credential@1", {"service": "gh", "phase": ["install", "runtime"]}),
     {"credentialsInstall": ["gh"], "credentialsRuntime": ["gh"]}),
    (cap("credential@1", {"service": "gh", "phase": "runtime"}), {"credentialsRuntime": ["gh"]}),
    (cap("ssh-agent@1", {"phase": "runtime"}), {"sshAgent": ["runtime"]}),
    (cap("ssh-agent@1", {"phase": ["install", "runtime"], "unrestricted": False, "sign": ["git"],
                         "authenticate": ["git@github.com"]}),
     {"sshAgent": ["install authenticate git@github.com", "install sign git",
                   "runtime authenticate git@github.com", "runtime sign git"]}),
    (cap("volume@1", {"path": "/data/./cache/", "size": "1g"}), {"storagePaths": ["/data/cache"]}),
    (cap("host-mount@1", {"path": "/cache"}), {"hostMountPaths": ["/cache"]}),
    (cap("agent-skills@1", {"path": "/s"}), {"skillsPaths": ["/s"]}),
    (cap("agent-skills@1", {"path": "/s", "mode": "readwrite"}),
     {"skillsPaths": ["/s"], "skillsWritePaths": ["/s"]}),
    (cap("port@1", {"container": 3000}), {"ports": ["3000/tcp"]}),
    (cap("port@1", {"container": 53, "transport": "udp", "name": "dns"}), {"ports": ["53/udp"]}),
    (cap("usb-device@1", {"vendorId": "1d6b", "productId": "0002"}), {"usb": ["1d6b:0002"]}),
    (cap("usb-device@1", {"class": "03"}), {"usb": ["class:03"]}),
    (cap("privileged@1"), {"privileged": True}),
    (cap("kit-registry@1"), {"services": [NS + "kit-registry@1"]}),
    (cap("git-identity@1", {}), {"services": [NS + "git-identity@1"]}),
])
def test_projection(entry: dict[str, Any], expected: dict[str, Any]) -> None:
    assert of(entry) == expected


@pytest.mark.parametrize("name", [
    "resources@1", "long-running@1", "agent-skill@1", "agent-sessions@1",
    "agent-interactive-sessions@1", "lifecycle@1", "agent-context@1", "sbx@1", "acp@1"])
def test_declarations_that_are_not_surface(name: str) -> None:
    assert of(cap(name, {"anything": 1})) == {}


@pytest.mark.parametrize("entry", [
    cap("credential@1", {"phase": "runtime"}),
    cap("port@1", {"container": "80"}),
    cap("volume@1", {"size": "1g"}),
    cap("usb-device@1", {"vendorId": "1d6b"}),
    cap("ssh-agent@1", {"phase": "runtime", "unrestricted": "no"}),
    cap("network-policy@1", {"runtime": {"allow": [{"hosts": ["a.com"]}]}}),
    cap("network-policy@2", {"runtime": {"allow": [{"hosts": ["a.com"], "bogus": 1}]}}),
    cap("network-policy@2", {"everywhere": {}}),
])
def test_undecodable_well_known_entries_land_in_services(entry: dict[str, Any]) -> None:
    assert of(entry) == {"services": [service_entry(entry["type"], entry["config"])]}


def test_unknown_types_and_their_config_digest() -> None:
    config = {"b": [1, 2], "a": "<tag> & \u2028"}
    canonical = '{"a":"\\u003ctag\\u003e \\u0026 \\u2028","b":[1,2]}'
    digest = hashlib.sha256(canonical.encode()).hexdigest()[:12]
    assert service_entry("com.example/x@1", config) == f"com.example/x@1+{digest}"
    assert of(cap("com.example/x@1", config), cap("com.example/y@1")) == {
        "services": [f"com.example/x@1+{digest}", "com.example/y@1"]}


def test_non_ascii_config_hashes_as_utf8() -> None:
    digest = hashlib.sha256('{"k":"é"}'.encode()).hexdigest()[:12]
    assert service_entry("t", {"k": "é"}) == f"t+{digest}"


def test_optional_and_name_never_change_the_surface() -> None:
    plain = of(cap("port@1", {"container": 1}))
    assert of(cap("port@1", {"container": 1}, optional=True, name="web")) == plain


def test_group_members_are_inventoried_conservatively() -> None:
    group = {"group": {"optional": True, "capabilities": [cap("volume@1", {"path": "/c"}),
                                                           cap("privileged@1")]}}
    assert surface({"capabilities": [group]}).to_json() == {"privileged": True,
                                                            "storagePaths": ["/c"]}


def test_lists_are_sorted_and_deduplicated() -> None:
    s = Surface(ports=("80/tcp", "3000/tcp", "80/tcp"), services=("b", "a"))
    assert s.ports == ("3000/tcp", "80/tcp") and s.services == ("a", "b")
    assert s == Surface(ports=("80/tcp", "3000/tcp"), services=("a", "b"))


def test_surface_of_a_composition_matches_its_effective_descriptor() -> None:
    c = compose([
        Contribution("w", [cap("network-policy@1", {"runtime": {"allow": ["a.com"]}}),
                           cap("credential@1", {"service": "gh", "phase": "runtime",
                                                "apiKey": {"name": "T"}})]),
        Contribution("m", [cap("network-policy@2", {"runtime": {"allow": [
            {"hosts": ["a.com"], "methods": ["GET"]}, {"hosts": ["b.com"], "methods": ["PUT"]}]}}),
            cap("port@1", {"container": 80})]),
    ])
    s = surface(c)
    assert s == surface(c.descriptor())
    assert s.to_json() == {
        "credentialsRuntime": ["gh"],
        "networkRuntimeAllow": ["a.com"],
        "networkRuntimeHTTPAllow": ["ANY a.com/**", "PUT b.com/**"],
        "ports": ["80/tcp"],
    }


def test_http_atoms() -> None:
    assert http_atoms(["h"], [], []) == ["ANY h/**"]
    assert http_atoms(["h", "i"], ["GET"], ["/a"]) == ["GET h/a", "GET i/a"]


# --- JSON -------------------------------------------------------------------------------------


def test_json_uses_the_lock_field_names_and_omits_empty_fields() -> None:
    assert set(JSON_FIELDS.values()) == {
        "networkInstallAllow", "networkInstallDeny", "networkRuntimeAllow", "networkRuntimeDeny",
        "networkInstallHTTPAllow", "networkInstallHTTPDeny", "networkRuntimeHTTPAllow",
        "networkRuntimeHTTPDeny", "credentialsInstall", "credentialsRuntime",
        "credentialDestinations", "sshAgent", "storagePaths", "hostMountPaths", "skillsPaths",
        "skillsWritePaths", "ports", "usb", "privileged", "services"}
    assert Surface().to_json() == {}
    assert Surface().is_empty()
    assert Surface(privileged=True).to_json() == {"privileged": True}


_lists = st.lists(st.text(min_size=1, max_size=8), max_size=4).map(tuple)


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(st.fixed_dictionaries({attr: (st.booleans() if attr == "privileged" else _lists)
                              for attr in JSON_FIELDS}))
def test_json_round_trip(values: dict[str, Any]) -> None:
    s = Surface(**values)
    text = json.dumps(s.to_json())
    assert Surface.from_json(json.loads(text)) == s


@pytest.mark.slow
@pytest.mark.parametrize("data", [
    {"ports": "80/tcp"}, {"ports": [80]}, {"privileged": "yes"}, ["not", "an", "object"]])
def test_from_json_rejects_wrong_types(data: Any) -> None:
    with pytest.raises(ValueError, match="surface"):
        Surface.from_json(data)


def test_from_json_tolerates_missing_null_and_unknown_fields() -> None:
    assert Surface.from_json({"ports": None, "futureField": [1]}) == Surface()


# --- the gate ---------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(("attr", "value", "category"), [
    ("network_install_allow", "pypi.org", "network.install.allow"),
    ("network_runtime_allow", "a.com", "network.runtime.allow"),
    ("credentials_install", "npm", "credentials.install"),
    ("credentials_runtime", "gh", "credentials.runtime"),
    ("ssh_agent", "runtime", "ssh-agent"),
    ("storage_paths", "/data", "storage"),
    ("host_mount_paths", "/cache", "host-mount"),
    ("skills_paths", "/s", "skills"),
    ("skills_write_paths", "/s", "skills.write"),
    ("ports", "80/tcp", "ports"),
    ("usb", "class:03", "usb"),
    ("services", NS + "kit-registry@1", "services"),
])
def test_a_new_grant_widens_and_removing_it_is_silent(attr: str, value: str,
                                                      category: str) -> None:
    granted, candidate = Surface(), Surface.from_json({JSON_FIELDS[attr]: [value]})
    assert widenings(granted, candidate) == [(category, value)]
    assert widenings(candidate, granted) == []
    assert widenings(candidate, candidate) == []


def test_privileged_absent_to_present_widens() -> None:
    assert widenings(Surface(), Surface(privileged=True)) == [
        ("privileged", "requests privileged execution")]
    assert widenings(Surface(privileged=True), Surface()) == []


@pytest.mark.parametrize(("attr", "category"), [
    ("network_install_deny", "network.install.deny-removed"),
    ("network_runtime_deny", "network.runtime.deny-removed"),
])
def test_a_removed_deny_widens_and_an_added_one_is_silent(attr: str, category: str) -> None:
    denied = Surface.from_json({JSON_FIELDS[attr]: ["evil.org"]})
    assert widenings(denied, Surface()) == [(category, "evil.org")]
    assert widenings(Surface(), denied) == []


def rules(phase: str = "runtime", allow: Any = (), deny: Any = (),
          version: int = 2) -> dict[str, Any]:
    block: dict[str, Any] = {}
    if allow:
        block["allow"] = list(allow)
    if deny:
        block["deny"] = list(deny)
    return cap(f"network-policy@{version}", {phase: block})


def surf(*entries: dict[str, Any]) -> Surface:
    return surface(list(entries))


GET_REPOS = {"hosts": ["api.gh.com"], "methods": ["GET"], "paths": ["/repos/**"]}


@pytest.mark.parametrize(("granted", "candidate", "expected"), [
    # ANY covers every method.
    ([{"hosts": ["h.com"], "methods": ["ANY"]}], [{"hosts": ["h.com"], "methods": ["DELETE"]}],
     []),
    # /prefix/** covers narrower paths and the prefix itself.
    ([GET_REPOS], [{"hosts": ["api.gh.com"], "methods": ["GET"], "paths": ["/repos/o/r"]}], []),
    ([GET_REPOS], [{"hosts": ["api.gh.com"], "methods": ["GET"], "paths": ["/repos"]}], []),
    # ... but not siblings, other methods or a wider ANY.
    ([GET_REPOS], [{"hosts": ["api.gh.com"], "methods": ["GET"], "paths": ["/user"]}],
     [("network.runtime.http.allow", "GET api.gh.com/user")]),
    ([GET_REPOS], [{"hosts": ["api.gh.com"], "methods": ["POST"], "paths": ["/repos/**"]}],
     [("network.runtime.http.allow", "POST api.gh.com/repos/**")]),
    ([GET_REPOS], [{"hosts": ["api.gh.com"], "methods": ["ANY"], "paths": ["/repos/**"]}],
     [("network.runtime.http.allow", "ANY api.gh.com/repos/**")]),
    # Other path wildcards are not expanded: a narrower glob that is not /** reads as new.
    ([{"hosts": ["h.com"], "methods": ["GET"], "paths": ["/a/*"]}],
     [{"hosts": ["h.com"], "methods": ["GET"], "paths": ["/a/b"]}],
     [("network.runtime.http.allow", "GET h.com/a/b")]),
    # Bounding a previously unbounded host is a narrowing.
    (["api.gh.com"], [GET_REPOS], []),
    # Removing the bound is a widening, reported once by the host list.
    ([GET_REPOS], ["api.gh.com"], [("network.runtime.allow", "api.gh.com")]),
    # A universal bare allow covers every bounded host.
    (["**"], [GET_REPOS], []),
    # A port-qualified grant covers only its port; an unqualified one covers every port.
    ([{"hosts": ["h.com:8443"], "methods": ["POST"]}], [{"hosts": ["h.com"], "methods": ["POST"]}],
     [("network.runtime.http.allow", "POST h.com/**")]),
    ([{"hosts": ["h.com"], "methods": ["POST"]}], [{"hosts": ["h.com:443"], "methods": ["POST"]}],
     []),
])
def test_http_allow_containment(granted: list[Any], candidate: list[Any],
                                expected: list[tuple[str, str]]) -> None:
    assert widenings(surf(rules(allow=granted)), surf(rules(allow=candidate))) == expected


def test_star_subdomain_pattern_is_not_expanded() -> None:
    granted = surf(rules(allow=["*.example.com"]))
    candidate = surf(rules(allow=["*.example.com", {"hosts": ["api.example.com"],
                                                   "methods": ["GET"]}]))
    assert widenings(granted, candidate) == [("network.runtime.http.allow",
                                              "GET api.example.com/**")]


def test_atoms_of_a_newly_allowed_host_are_not_reported_again() -> None:
    assert widenings(Surface(), surf(rules(allow=["new.com"]))) == [
        ("network.runtime.allow", "new.com")]


def test_new_port_on_a_granted_host_does_not_hide_the_old_port() -> None:
    # GET h.com reaches both allowed ports; :443 was granted as a connection only on that port,
    # so the new bound request there is reported even though :8443 is new as a whole.
    granted = surf(rules(allow=["h.com:443"]))
    candidate = surf(rules(allow=["h.com:443", "h.com:8443",
                                  {"hosts": ["h.com"], "methods": ["GET"]}]))
    assert widenings(granted, candidate) == [
        ("network.runtime.allow", "h.com:8443"), ("network.runtime.http.allow", "GET h.com/**")]


def test_bounded_entry_for_a_fresh_host_is_reported_as_http() -> None:
    # Only a bounded grant on an entirely new host: no host-list entry exists, so the HTTP list
    # is the only place the new grant can show.
    assert widenings(Surface(), surf(rules(allow=[GET_REPOS]))) == [
        ("network.runtime.http.allow", "GET api.gh.com/repos/**")]


def test_bounded_atoms_of_a_host_whose_every_allowed_port_is_new_are_not_repeated() -> None:
    candidate = surf(rules(allow=["h.com:8443", {"hosts": ["h.com"], "methods": ["GET"]}]))
    assert widenings(Surface(), candidate) == [("network.runtime.allow", "h.com:8443")]


def test_dropping_a_bare_deny_reports_once() -> None:
    assert widenings(surf(rules(allow=["a.com"], deny=["bad.com"])),
                     surf(rules(allow=["a.com"]))) == [
        ("network.runtime.deny-removed", "bad.com")]


def test_dropping_a_bounded_deny_reports_the_http_atom() -> None:
    deny = {"hosts": ["api.gh.com"], "methods": ["DELETE"], "paths": ["/repos/**"]}
    assert widenings(surf(rules(allow=["api.gh.com"], deny=[deny])),
                     surf(rules(allow=["api.gh.com"]))) == [
        ("network.runtime.http.deny-removed", "DELETE api.gh.com/repos/**")]


@pytest.mark.parametrize("stronger", [
    {"hosts": ["api.gh.com"], "methods": ["ANY"], "paths": ["/repos/**"]},
    {"hosts": ["api.gh.com"], "methods": ["DELETE"], "paths": ["/**"]},
    {"hosts": ["**"], "methods": ["DELETE"]},
    "api.gh.com",
])
def test_strengthening_a_deny_is_silent(stronger: Any) -> None:
    deny = {"hosts": ["api.gh.com"], "methods": ["DELETE"], "paths": ["/repos/x/**"]}
    assert widenings(surf(rules(deny=[deny])), surf(rules(deny=[stronger]))) == []


def test_install_phase_has_its_own_categories() -> None:
    granted = surf(rules("install", allow=[GET_REPOS], deny=[{"hosts": ["x.com"],
                                                             "methods": ["GET"]}]))
    candidate = surf(rules("install", allow=[{"hosts": ["api.gh.com"], "methods": ["PUT"]}]))
    assert widenings(granted, candidate) == [
        ("network.install.http.allow", "PUT api.gh.com/**"),
        ("network.install.http.deny-removed", "GET x.com/**")]


def test_moving_a_host_between_phases_widens() -> None:
    assert widenings(surf(rules("install", allow=["a.com"], version=1)),
                     surf(rules("runtime", allow=["a.com"], version=1))) == [
        ("network.runtime.allow", "a.com")]


def test_legacy_lock_without_http_fields_reconstructs_unbounded_grants() -> None:
    legacy = Surface.from_json({"networkRuntimeAllow": ["a.com", "b.com:443"]})
    fresh = surf(rules(allow=["a.com", "b.com:443"], version=1))
    assert widenings(legacy, fresh) == []
    assert complete_http_grants(["a.com", "b.com:443"], ["GET b.com/x"]) == (
        "ANY a.com/**", "GET b.com/x")


def test_credential_moving_phase_widens() -> None:
    assert widenings(Surface(credentials_install=("npm",)),
                     Surface(credentials_runtime=("npm",))) == [("credentials.runtime", "npm")]


@pytest.mark.parametrize(("granted", "candidate", "expected"), [
    (("runtime",), ("runtime sign git", "runtime authenticate github.com"), []),
    (("runtime authenticate github.com",), ("runtime authenticate git@github.com",), []),
    (("runtime authenticate git@github.com",), ("runtime authenticate github.com",),
     ["runtime authenticate github.com"]),
    (("runtime sign git",), ("runtime",), ["runtime"]),
    (("install",), ("runtime sign git",), ["runtime sign git"]),
])
def test_ssh_agent_containment(granted: tuple[str, ...], candidate: tuple[str, ...],
                               expected: list[str]) -> None:
    assert [w.detail for w in diff_widenings(Surface(ssh_agent=granted),
                                             Surface(ssh_agent=candidate))] == expected


def test_readonly_to_readwrite_skills_widens() -> None:
    ro = surf(cap("agent-skills@1", {"path": "/s"}))
    rw = surf(cap("agent-skills@1", {"path": "/s", "mode": "readwrite"}))
    assert widenings(ro, rw) == [("skills.write", "/s")]
    assert widenings(rw, ro) == []


def test_volume_size_and_mode_changes_do_not_widen() -> None:
    assert widenings(surf(cap("volume@1", {"path": "/d", "size": "1g"})),
                     surf(cap("volume@1", {"path": "/d", "size": "9g", "mode": "0700"}))) == []


def test_moving_a_path_from_volume_to_host_mount_widens() -> None:
    assert widenings(surf(cap("volume@1", {"path": "/d"})),
                     surf(cap("host-mount@1", {"path": "/d"}))) == [("host-mount", "/d")]


def test_a_service_config_change_widens() -> None:
    old = surf(cap("com.example/thing@1", {"level": 1}))
    new = surf(cap("com.example/thing@1", {"level": 2}))
    assert widenings(old, new) == [("services", service_entry("com.example/thing@1",
                                                              {"level": 2}))]


def test_widenings_come_in_category_order_and_format_as_prompt_lines() -> None:
    candidate = Surface(services=("x",), privileged=True, ports=("1/tcp",),
                        network_runtime_allow=("a.com",))
    found = diff_widenings(Surface(), candidate)
    assert [w.category for w in found] == ["network.runtime.allow", "ports", "privileged",
                                          "services"]
    assert format_widenings(found) == (
        "  + network.runtime.allow: a.com\n  + ports: 1/tcp\n"
        "  + privileged: requests privileged execution\n  + services: x")
    assert format_widenings([]) == ""
    assert str(found[0]) == "network.runtime.allow: a.com"
    assert found[0].as_dict() == {"category": "network.runtime.allow", "detail": "a.com"}
    assert {w.category for w in found} <= set(CATEGORIES)


def test_a_kit_absent_from_the_lock_widens_by_its_whole_surface() -> None:
    s = surf(cap("port@1", {"container": 1}), cap("privileged@1"),
             rules(allow=[GET_REPOS, "a.com"]))
    assert set(widenings(Surface(), s)) == {
        ("network.runtime.allow", "a.com"), ("network.runtime.http.allow",
                                             "GET api.gh.com/repos/**"),
        ("ports", "1/tcp"), ("privileged", "requests privileged execution")}


def test_widening_is_a_value() -> None:
    assert Widening("ports", "1/tcp") == Widening("ports", "1/tcp")


@pytest.mark.slow
def test_surface_keeps_composes_vocabulary_without_importing_it() -> None:
    """The surface spells PHASES and METHOD_ANY itself, so that the lock and the gate (a pull,
    a run of a locked kit) do not import the composer; they must stay compose's."""
    import subprocess
    import sys

    from sbx.domain.kits import compose, surface

    assert surface.PHASES == compose.PHASES
    assert surface.METHOD_ANY == compose.METHOD_ANY
    probe = ("import sys, sbx.domain.kits.lock, sbx.usecases.pull; "
             "print('sbx.domain.kits.compose' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.strip() == "False"


# --- credential destinations ------------------------------------------------------------------


def _credential(**config: Any) -> dict[str, Any]:
    return cap("credential@1", {"service": "gh", "phase": "runtime", **config})


INJECT = {"name": "GH_TOKEN", "inject": [{"domain": "API.github.com", "header": "Authorization",
                                          "format": "Bearer %s"}]}
OAUTH = {"tokenEndpoint": {"host": "auth.example.com", "path": "/oauth/token"},
         "resourceHosts": ["api.example.com"]}


def test_each_credential_destination_is_an_atom() -> None:
    assert of(_credential(apiKey=INJECT, oauth=OAUTH))["credentialDestinations"] == [
        "gh runtime inject api.github.com header authorization",
        "gh runtime oauth-fields access_token,refresh_token,expires_in",
        "gh runtime oauth-resource api.example.com",
        "gh runtime oauth-token auth.example.com/oauth/token"]
    basic = {"inject": [{"domain": "git.example.com", "scheme": "basic", "username": "x"}]}
    both = of(cap("credential@1", {"service": "gh", "phase": ["install", "runtime"],
                                   "apiKey": basic}))
    assert both["credentialDestinations"] == [
        "gh install inject git.example.com basic authorization",
        "gh runtime inject git.example.com basic authorization"]


@pytest.mark.parametrize(("before", "after", "detail"), [
    # The secret moved to another host the policy allows: a widening, not "within".
    ({"apiKey": INJECT}, {"apiKey": {**INJECT, "inject": [{"domain": "gist.github.com"}]}},
     "gh runtime inject gist.github.com header authorization"),
    ({"apiKey": INJECT}, {"apiKey": {**INJECT, "inject": [
        {"domain": "api.github.com", "header": "X-Leak"}]}},
     "gh runtime inject api.github.com header x-leak"),
    ({"oauth": OAUTH}, {"oauth": {**OAUTH, "tokenEndpoint": {"host": "evil.example.com"}}},
     "gh runtime oauth-token evil.example.com/**"),
    ({"oauth": OAUTH}, {"oauth": {**OAUTH, "resourceHosts": ["api.example.com",
                                                            "evil.example.com"]}},
     "gh runtime oauth-resource evil.example.com"),
    ({"oauth": OAUTH}, {"oauth": {**OAUTH, "passthrough": True}}, "gh runtime oauth-passthrough"),
    ({"oauth": OAUTH}, {"oauth": {**OAUTH, "responseFields": {"accessToken": "tok"}}},
     "gh runtime oauth-fields tok,refresh_token,expires_in"),
])
def test_moving_a_credential_destination_widens(before: dict[str, Any], after: dict[str, Any],
                                                detail: str) -> None:
    granted, candidate = surface([_credential(**before)]), surface([_credential(**after)])
    assert ("credentials.destinations", detail) in widenings(granted, candidate)
    assert all(category == "credentials.destinations"
               for category, _ in widenings(granted, candidate))


def test_dropping_a_destination_is_a_narrowing() -> None:
    two = {**INJECT, "inject": [*INJECT["inject"], {"domain": "uploads.github.com"}]}
    assert widenings(surface([_credential(apiKey=two)]), surface([_credential(apiKey=INJECT)])) \
        == []


def test_an_undecodable_destination_keeps_the_whole_credential_in_services() -> None:
    entry = _credential(apiKey={"inject": [{"header": "Authorization"}]})
    assert of(entry) == {"services": [service_entry(entry["type"], entry["config"])]}
