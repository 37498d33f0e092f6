"""The one egress decision (KIT-SPEC-V3 §3): what the proxy enforces and ``sbx explain`` shows.

Networks are built with the real composition (``sbx.domain.kits.compose.compose``) from small
capability
dicts, so these tests judge the exact ``Network``/``Rule`` objects enforcement receives.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sbx.domain.egress import policy
from sbx.domain.egress.hosts import host_matches, is_literal_address, normalize_host
from sbx.domain.egress.paths import normalize_path, path_matches
from sbx.domain.egress.policy import (
    CODES,
    Decision,
    Match,
    Request,
    address_denied,
    classify,
    decide,
    describe_rule,
    names_address,
    rules_for,
)
from sbx.domain.kits.compose import Contribution, Network, Phase, compose

NS = "com.docker.sandbox/"


def net1(**phases: Any) -> dict[str, Any]:
    return {"type": NS + "network-policy@1", "config": phases}


def net2(**phases: Any) -> dict[str, Any]:
    return {"type": NS + "network-policy@2", "config": phases}


def network(*kits: tuple[str, list[dict[str, Any]]]) -> Network:
    composed = compose([Contribution(reference, entries) for reference, entries in kits])
    assert composed.network is not None
    return composed.network


# --- the networks the table judges ---------------------------------------------------------------

GH = network(("gh", [net2(runtime={
    "allow": [
        "github.com",
        {"hosts": ["api.github.com"], "methods": ["GET", "HEAD", "POST", "PATCH", "PUT", "DELETE"]},
        {"hosts": ["uploads.github.com"], "methods": ["POST", "PUT"]},
    ],
    "deny": [{"hosts": ["api.github.com"], "methods": ["DELETE"], "paths": ["/repos/**"]}],
})]))

BASIC = network(("basic", [net1(
    install={"allow": ["pypi.org", "files.pythonhosted.org"]},
    runtime={"allow": ["api.example.com", "web.example.com:8443", "*.cdn.example.com",
                       "**.deep.example.org", "[2001:db8::1]:443", "10.0.0.5", "bücher.de"],
             "deny": ["evil.cdn.example.com"]},
)]))

EVERYTHING = network(("open", [net1(
    install={"allow": ["**"]},
    runtime={"allow": ["*"], "deny": ["blocked.example.com", "*.ads.example.net"]},
)]))

INSTALL_ONLY = network(("build", [net1(install={"allow": ["pypi.org"]})]))

# Deny wins across kits: kit b's denies beat kit a's allows.
TWO = network(
    ("a", [net1(runtime={"allow": ["shared.example.com", "*.example.net"]})]),
    ("b", [net2(runtime={"deny": ["shared.example.com",
                                  {"hosts": ["*.example.net"], "methods": ["POST"]}]})]),
)

# A host one kit grants unbounded stays unbounded however another kit bounds it.
MIXED = network(
    ("a", [net2(runtime={"allow": [{"hosts": ["api.x.com"], "methods": ["GET"]}, "*.y.com"]})]),
    ("b", [net2(runtime={"allow": ["api.x.com", {"hosts": ["api.y.com"], "methods": ["GET"]}]})]),
)

PATHS = network(("reg", [net2(runtime={"allow": [
    {"hosts": ["reg.example.com"], "methods": ["GET", "HEAD"],
     "paths": ["/v2/*/manifests/*", "/v2/**/blobs/*", "/"]},
    {"hosts": ["reg.example.com"], "methods": ["ANY"], "paths": ["/tmp/**"]},
    {"hosts": ["upload.example.com"], "methods": ["PUT"], "paths": ["/files/*.tar.gz"]},
]})]))

NETWORKS: dict[str, Network | None] = {
    "none": None, "gh": GH, "basic": BASIC, "everything": EVERYTHING,
    "install-only": INSTALL_ONLY, "two": TWO, "mixed": MIXED, "paths": PATHS,
}

# (network, phase, host, port, method, path, expected code)
Case = tuple[str, Phase, str, int, str | None, str | None, str]
R: Phase = "runtime"
INSTALL: Phase = "install"

CASES: list[Case] = [
    # no network policy: no network at all
    ("none", R, "example.com", 443, None, None, "default_deny"),
    ("none", R, "example.com", 443, "GET", "/", "default_deny"),
    ("none", INSTALL, "pypi.org", 443, None, None, "default_deny"),
    # exact hosts: case, trailing dot, any port
    ("basic", R, "api.example.com", 443, None, None, "allowed"),
    ("basic", R, "API.Example.COM.", 443, None, None, "allowed"),
    ("basic", R, "api.example.com", 80, "GET", "/", "allowed"),
    ("basic", R, "example.com", 443, None, None, "default_deny"),
    ("basic", R, "other.example.com", 443, None, None, "default_deny"),
    ("basic", R, "api.example.com.evil.org", 443, None, None, "default_deny"),
    # host:port is that port only
    ("basic", R, "web.example.com", 8443, None, None, "allowed"),
    ("basic", R, "web.example.com", 443, None, None, "default_deny"),
    # *.domain is exactly one label
    ("basic", R, "a.cdn.example.com", 443, None, None, "allowed"),
    ("basic", R, "A.CDN.example.com", 443, None, None, "allowed"),
    ("basic", R, "cdn.example.com", 443, None, None, "default_deny"),
    ("basic", R, "a.b.cdn.example.com", 443, None, None, "default_deny"),
    ("basic", R, "evil.cdn.example.com", 443, None, None, "deny_rule"),
    # **.domain is one or more labels, never the apex
    ("basic", R, "x.deep.example.org", 443, None, None, "allowed"),
    ("basic", R, "x.y.z.deep.example.org", 443, None, None, "allowed"),
    ("basic", R, "deep.example.org", 443, None, None, "default_deny"),
    # IP literals compare canonically, in every spelling a resolver accepts
    ("basic", R, "[2001:db8::1]", 443, None, None, "allowed"),
    ("basic", R, "2001:db8:0:0:0:0:0:1", 443, None, None, "allowed"),
    ("basic", R, "[2001:db8::1]", 80, None, None, "default_deny"),
    ("basic", R, "10.0.0.5", 22, None, None, "allowed"),
    ("basic", R, "012.0.0.5", 443, None, None, "allowed"),
    ("basic", R, "0xa.0.0.5", 443, None, None, "allowed"),
    ("basic", R, "167772165", 443, None, None, "allowed"),
    ("basic", R, "10.0.0.6", 443, None, None, "default_deny"),
    # unicode names are IDNA-encoded on both sides
    ("basic", R, "xn--bcher-kva.de", 443, None, None, "allowed"),
    ("basic", R, "BÜCHER.de", 443, None, None, "allowed"),
    # phases: a rule of one phase is never valid in the other
    ("basic", INSTALL, "pypi.org", 443, None, None, "allowed"),
    ("basic", R, "pypi.org", 443, None, None, "default_deny"),
    ("basic", INSTALL, "api.example.com", 443, None, None, "default_deny"),
    ("install-only", R, "pypi.org", 443, None, None, "default_deny"),
    ("install-only", INSTALL, "pypi.org", 443, "GET", "/simple/", "allowed"),
    # unreadable targets are refused
    ("basic", R, "", 443, None, None, "invalid_target"),
    ("basic", R, "a..example.com", 443, None, None, "invalid_target"),
    ("basic", R, "api.example.com:443", 443, None, None, "invalid_target"),
    ("basic", R, "api.example.com", 0, None, None, "invalid_target"),
    ("basic", R, "api.example.com", 70000, None, None, "invalid_target"),
    ("basic", R, "api.example.com", 443, "GE T", "/", "invalid_target"),
    ("basic", R, "1.2.3.256", 443, None, None, "invalid_target"),
    ("basic", R, "exam\x00ple.com", 443, None, None, "invalid_target"),
    ("basic", R, "[fe80::1%eth0]", 443, None, None, "invalid_target"),
    # * and ** grant everything; deny still wins
    ("everything", R, "anything.org", 443, None, None, "allowed"),
    ("everything", R, "127.0.0.1", 443, None, None, "allowed"),
    ("everything", R, "[::1]", 8080, None, None, "allowed"),
    ("everything", R, "blocked.example.com", 443, None, None, "deny_rule"),
    ("everything", R, "BLOCKED.example.com.", 443, None, None, "deny_rule"),
    ("everything", R, "blocked.example.com", 80, "GET", "/", "deny_rule"),
    ("everything", R, "x.ads.example.net", 443, None, None, "deny_rule"),
    ("everything", R, "ads.example.net", 443, None, None, "allowed"),
    ("everything", INSTALL, "anything.org", 443, None, None, "allowed"),
    # deny wins across kits
    ("two", R, "shared.example.com", 443, None, None, "deny_rule"),
    ("two", R, "shared.example.com", 443, "GET", "/", "deny_rule"),
    ("two", R, "a.example.net", 443, None, None, "needs_inspection"),
    ("two", R, "a.example.net", 443, "GET", "/x", "allowed"),
    ("two", R, "a.example.net", 443, "POST", "/x", "deny_rule"),
    ("two", R, "a.example.net", 443, "post", "/x", "deny_rule"),
    ("two", R, "example.net", 443, None, None, "default_deny"),
    # the gh example (KIT-SPEC-V3 §3.3)
    ("gh", R, "api.github.com", 443, "DELETE", "/repos/x/y", "deny_rule"),
    ("gh", R, "api.github.com", 443, "DELETE", "/gists/1", "allowed"),
    ("gh", R, "api.github.com", 443, "GET", "/repos/x", "allowed"),
    ("gh", R, "api.github.com", 443, "delete", "/repos/x/y", "deny_rule"),
    ("gh", R, "api.github.com", 443, "Delete", "/gists/1", "allowed"),
    ("gh", R, "api.github.com", 443, "DELETE", "/repos", "deny_rule"),
    ("gh", R, "api.github.com", 443, "DELETE", "/repos/", "deny_rule"),
    ("gh", R, "api.github.com", 443, "DELETE", "/repository", "allowed"),
    ("gh", R, "api.github.com", 443, "DELETE", "/repos/x?force=1", "deny_rule"),
    ("gh", R, "api.github.com", 443, "DELETE", "/gists/1#frag", "allowed"),
    ("gh", R, "api.github.com", 443, None, None, "needs_inspection"),
    ("gh", R, "api.github.com", 443, "TRACE", "/x", "method_not_allowed"),
    ("gh", R, "api.github.com", 443, "OPTIONS", "/", "method_not_allowed"),
    ("gh", R, "uploads.github.com", 443, "POST", "/x", "allowed"),
    ("gh", R, "uploads.github.com", 443, "put", "/x", "allowed"),
    ("gh", R, "uploads.github.com", 443, "GET", "/", "method_not_allowed"),
    ("gh", R, "uploads.github.com", 443, None, None, "needs_inspection"),
    ("gh", R, "github.com", 443, None, None, "allowed"),
    ("gh", R, "github.com", 443, "DELETE", "/repos/x", "allowed"),
    ("gh", R, "gist.github.com", 443, None, None, "default_deny"),
    ("gh", INSTALL, "api.github.com", 443, "GET", "/repos/x", "default_deny"),
    # a method without a path: judged conservatively
    ("gh", R, "api.github.com", 443, "DELETE", None, "deny_rule"),
    ("gh", R, "api.github.com", 443, "GET", None, "allowed"),
    # path normalisation attacks
    ("gh", R, "api.github.com", 443, "DELETE", "/repos/../repos/x", "deny_rule"),
    ("gh", R, "api.github.com", 443, "DELETE", "//repos/x", "deny_rule"),
    ("gh", R, "api.github.com", 443, "DELETE", "/./repos/./x", "deny_rule"),
    ("gh", R, "api.github.com", 443, "DELETE", "/gists/../repos/x", "deny_rule"),
    ("gh", R, "api.github.com", 443, "DELETE", "/gists/%2E%2E/repos/x", "deny_rule"),
    ("gh", R, "api.github.com", 443, "DELETE", "/gists/.%2e/repos/x", "deny_rule"),
    ("gh", R, "api.github.com", 443, "DELETE", "/%72epos/x", "deny_rule"),
    ("gh", R, "api.github.com", 443, "DELETE", "/%2e%2e/repos/x", "invalid_target"),
    ("gh", R, "api.github.com", 443, "DELETE", "/..", "invalid_target"),
    ("gh", R, "api.github.com", 443, "DELETE", "/repos%2fx", "invalid_target"),
    ("gh", R, "api.github.com", 443, "DELETE", "/repos%2Fx/y", "invalid_target"),
    ("gh", R, "api.github.com", 443, "DELETE", "/repos%5cx", "invalid_target"),
    ("gh", R, "api.github.com", 443, "DELETE", "/repos\\x", "invalid_target"),
    ("gh", R, "api.github.com", 443, "DELETE", "/repos/x\x07", "invalid_target"),
    ("gh", R, "api.github.com", 443, "DELETE", "/repos/%00", "invalid_target"),
    ("gh", R, "api.github.com", 443, "DELETE", "/repos/%zz", "invalid_target"),
    ("gh", R, "api.github.com", 443, "DELETE", "repos/x", "invalid_target"),
    ("gh", R, "api.github.com", 443, "DELETE", "*", "invalid_target"),
    # paths are case-sensitive, as origins treat them: /REPOS is not /repos
    ("gh", R, "api.github.com", 443, "DELETE", "/REPOS/x", "allowed"),
    # an unreadable path only matters when a rule bounded by paths could judge it
    ("gh", R, "api.github.com", 443, "GET", "/repos%2fx", "allowed"),
    ("gh", R, "github.com", 443, "DELETE", "/repos%2fx", "allowed"),
    # unbounded + bounded for one host: unbounded wins
    ("mixed", R, "api.x.com", 443, None, None, "allowed"),
    ("mixed", R, "api.x.com", 443, "DELETE", "/x", "allowed"),
    ("mixed", R, "api.y.com", 443, None, None, "allowed"),
    ("mixed", R, "api.y.com", 443, "POST", "/z", "allowed"),
    # path globs: * one segment, ** any number (zero too), anchored; trailing / ignored
    ("paths", R, "reg.example.com", 443, "GET", "/v2/lib/manifests/latest", "allowed"),
    ("paths", R, "reg.example.com", 443, "GET", "/v2/lib/manifests/latest/", "allowed"),
    ("paths", R, "reg.example.com", 443, "GET", "/v2/lib/x/manifests/latest", "path_not_allowed"),
    ("paths", R, "reg.example.com", 443, "GET", "/v2/lib/manifests", "path_not_allowed"),
    ("paths", R, "reg.example.com", 443, "GET", "/v2/a/b/c/blobs/sha", "allowed"),
    ("paths", R, "reg.example.com", 443, "GET", "/v2/blobs/sha", "allowed"),
    ("paths", R, "reg.example.com", 443, "GET", "/x/v2/blobs/sha", "path_not_allowed"),
    ("paths", R, "reg.example.com", 443, "GET", "/", "allowed"),
    ("paths", R, "reg.example.com", 443, "HEAD", "/v2/li%62/manifests/x", "allowed"),
    ("paths", R, "reg.example.com", 443, "get", "/%76%32/lib/manifests/x", "allowed"),
    ("paths", R, "reg.example.com", 443, "DELETE", "/tmp/a/b", "allowed"),
    ("paths", R, "reg.example.com", 443, "DELETE", "/v2/lib/manifests/latest",
     "method_not_allowed"),
    ("paths", R, "reg.example.com", 443, "POST", "/v2/x", "path_not_allowed"),
    ("paths", R, "reg.example.com", 443, "GET", "", "invalid_target"),
    ("paths", R, "reg.example.com", 443, "GET", None, "path_not_allowed"),
    ("paths", R, "reg.example.com", 443, None, None, "needs_inspection"),
    ("paths", R, "upload.example.com", 443, "PUT", "/files/a.tar.gz", "allowed"),
    ("paths", R, "upload.example.com", 443, "PUT", "/files/a.zip", "path_not_allowed"),
    ("paths", R, "upload.example.com", 443, "PUT", "/files/x/a.tar.gz", "path_not_allowed"),
    ("paths", R, "upload.example.com", 443, "GET", "/files/a.tar.gz", "method_not_allowed"),
]


def judge(case: Case) -> Decision:
    name, phase, host, port, method, path, _ = case
    return decide(NETWORKS[name], Request(phase, host, port, method, path))


@pytest.mark.parametrize("case", CASES, ids=[
    f"{c[0]}-{c[1]}-{c[4] or 'conn'}-{c[2]!r}:{c[3]}{c[5] or ''}" for c in CASES])
def test_decision_table(case: Case) -> None:
    decision = judge(case)
    assert decision.code == case[-1], decision.reason
    assert decision.code in CODES
    assert decision.allowed is (decision.code == "allowed")
    assert decision.reason
    assert (decision.suggestion is None) is decision.allowed
    if decision.code == "deny_rule":
        assert decision.deciding is not None and decision.deciding.action == "deny"
        assert decision.suggestion is not None
        assert "deny rule at" in decision.suggestion
        assert decision.deciding.kit in decision.suggestion
        assert any(m.effect == "deny" for m in decision.matched)
    if decision.allowed:
        assert decision.deciding is not None and decision.deciding.action == "allow"
        assert not any(m.effect == "deny" for m in decision.matched)
        assert Match(decision.deciding, "allow") in decision.matched
    if decision.code in ("default_deny", "invalid_target"):
        assert decision.deciding is None
    if decision.code in ("method_not_allowed", "path_not_allowed", "needs_inspection"):
        assert decision.deciding is not None and decision.deciding.bounded
    assert json.loads(json.dumps(decision.as_dict()))["code"] == decision.code
    assert judge(case) == decision  # deterministic


def test_table_is_large_enough() -> None:
    assert len(CASES) >= 80
    assert {c[-1] for c in CASES} == set(CODES)


# --- what explain shows: matched rules, deciding rule, reason, suggestion ------------------------


def test_gh_delete_repos_lists_every_matching_rule_in_order() -> None:
    decision = decide(GH, Request("runtime", "api.github.com", 443, "DELETE", "/repos/x/y"))
    assert [(m.rule.host, m.rule.action, m.effect) for m in decision.matched] == [
        ("api.github.com", "allow", "allow"),
        ("api.github.com", "deny", "deny"),
    ]
    assert decision.deciding == GH.runtime.deny[0]
    assert decision.reason.startswith("denied by rule gh capabilities[0] runtime.deny: "
                                      "api.github.com DELETE /repos/**")
    assert "deny wins" in decision.reason
    assert decision.suggestion == ("a deny rule at gh capabilities[0] runtime.deny refuses it; "
                                   "deny wins, so remove that rule or do not compose gh")
    assert decision.path == "/repos/x/y"
    assert decision.host == "api.github.com"


def test_gh_delete_gists_shows_the_deny_rule_as_a_miss() -> None:
    decision = decide(GH, Request("runtime", "api.github.com", 443, "DELETE", "/gists/1"))
    assert [m.effect for m in decision.matched] == ["allow", "bounded-miss"]
    assert decision.matched[1].rule.action == "deny"
    assert "DELETE /gists/1 matches it" in decision.reason
    assert "1 bounded deny rule covers api.github.com but not DELETE /gists/1" in decision.reason


def test_method_miss_names_the_grants_and_the_rule_to_edit() -> None:
    decision = decide(GH, Request("runtime", "uploads.github.com", 443, "GET", "/x"))
    assert decision.code == "method_not_allowed"
    assert decision.reason == ("uploads.github.com is only allowed for POST, PUT on any path in "
                               "the runtime phase; GET /x is not among them")
    assert decision.suggestion == ("add GET to the methods of the rule at gh capabilities[0] "
                                   "runtime.allow (hosts: uploads.github.com)")
    assert [m.effect for m in decision.matched] == ["bounded-miss"]


def test_path_miss_suggests_adding_the_normalised_path() -> None:
    decision = decide(PATHS, Request("runtime", "upload.example.com", 443, "PUT",
                                     "/files/./a.zip?x=1"))
    assert decision.code == "path_not_allowed"
    assert decision.suggestion == ("add `/files/a.zip` to the paths of the rule at reg "
                                   "capabilities[0] runtime.allow (hosts: upload.example.com)")
    assert "PUT on /files/*.tar.gz" in decision.reason


def test_method_and_path_both_missing_suggests_a_new_entry() -> None:
    decision = decide(PATHS, Request("runtime", "upload.example.com", 443, "GET", "/other"))
    assert decision.code == "method_not_allowed"
    assert decision.suggestion == ("add the entry `{hosts: [upload.example.com], methods: [GET], "
                                   "paths: [/other]}` to network-policy runtime.allow")


def test_default_deny_suggests_the_smallest_allow_entry() -> None:
    plain = decide(BASIC, Request("runtime", "new.example.com", 443))
    assert plain.reason == ("no allow rule in the runtime phase matches new.example.com "
                            "(deny by default)")
    assert plain.suggestion == "add `new.example.com` to network-policy runtime.allow"
    odd_port = decide(BASIC, Request("runtime", "New.Example.com", 8080, scheme="http"))
    assert odd_port.suggestion == "add `new.example.com:8080` to network-policy runtime.allow"
    http = decide(BASIC, Request("runtime", "new.example.com", 80, "GET", "/", scheme="http"))
    assert http.suggestion == "add `new.example.com` to network-policy runtime.allow"
    v6 = decide(BASIC, Request("runtime", "[2001:db8::2]", 443))
    assert v6.suggestion == "add `[2001:db8::2]` to network-policy runtime.allow"


def test_default_deny_points_at_the_other_phase() -> None:
    decision = decide(BASIC, Request("runtime", "pypi.org", 443))
    assert "the install phase allows it, but install rules do not apply in the runtime phase" \
        in decision.reason
    assert decision.suggestion == "add `pypi.org` to network-policy runtime.allow"


def test_no_policy_says_the_sandbox_has_no_network() -> None:
    decision = decide(None, Request("install", "PyPI.org.", 443))
    assert "no network-policy capability" in decision.reason
    assert decision.suggestion == ("declare a network-policy capability with `pypi.org` in "
                                   "install.allow")
    assert decision.matched == ()


def test_deny_from_another_kit_names_that_kit() -> None:
    decision = decide(TWO, Request("runtime", "shared.example.com", 443, "GET", "/"))
    assert decision.deciding is not None
    assert (decision.deciding.kit, decision.deciding.action) == ("b", "deny")
    assert "it overrides a capabilities[0] runtime.allow: shared.example.com" in decision.reason
    assert decision.suggestion == ("a deny rule at b capabilities[0] runtime.deny refuses it; "
                                   "deny wins, so remove that rule or do not compose b")


def test_several_deny_rules_are_all_named() -> None:
    net = network(("a", [net1(runtime={"allow": ["*"], "deny": ["x.com"]})]),
                  ("b", [net1(runtime={"deny": ["*.com"]})]))
    decision = decide(net, Request("runtime", "x.com", 443))
    assert [m.effect for m in decision.matched] == ["allow", "deny", "deny"]
    assert decision.suggestion == ("deny rules at a capabilities[0] runtime.deny; b "
                                   "capabilities[0] runtime.deny refuse it; deny wins, so remove "
                                   "those rules or do not compose a, b")


def test_needs_inspection_explains_fail_closed() -> None:
    bounded = decide(GH, Request("runtime", "uploads.github.com", 443))
    assert "a connection sbx cannot inspect is refused (fail closed)" in bounded.reason
    assert bounded.suggestion is not None
    assert "`uploads.github.com` as a bare host" in bounded.suggestion
    by_deny = decide(TWO, Request("runtime", "a.example.net", 443))
    assert by_deny.deciding is not None and by_deny.deciding.action == "deny"
    assert "bounded deny rule" in by_deny.reason


def test_superseded_bounded_allows_are_reported() -> None:
    decision = decide(MIXED, Request("runtime", "api.x.com", 443, "DELETE", "/"))
    assert [r.kit for r in decision.superseded] == ["a"]
    assert decision.deciding is not None and not decision.deciding.bounded
    assert decision.as_dict()["superseded"][0]["methods"] == ["GET"]


def test_wildcard_unbounded_allow_beats_a_kept_bounded_allow() -> None:
    assert [r.host for r in MIXED.runtime.allow if r.bounded] == ["api.y.com"]
    decision = decide(MIXED, Request("runtime", "api.y.com", 443, "DELETE", "/"))
    assert decision.allowed
    assert decision.deciding is not None and decision.deciding.host == "*.y.com"
    assert [m.effect for m in decision.matched] == ["allow", "bounded-miss"]


def test_invalid_path_reason_says_what_is_wrong() -> None:
    decision = decide(GH, Request("runtime", "api.github.com", 443, "DELETE", "/repos%2fx"))
    assert "encoded `/`" in decision.reason
    assert decision.path is None
    above = decide(GH, Request("runtime", "api.github.com", 443, "DELETE", "/a/../.."))
    assert "above the root" in above.reason


def test_as_dict_shape() -> None:
    decision = decide(GH, Request("runtime", "api.github.com", 443, "DELETE", "/repos/x"))
    data = decision.as_dict()
    assert set(data) == {"allowed", "code", "reason", "suggestion", "request", "host", "path",
                         "deciding", "matched", "superseded"}
    assert data["request"] == {"phase": "runtime", "host": "api.github.com", "port": 443,
                               "method": "DELETE", "path": "/repos/x", "scheme": "https"}
    assert data["deciding"]["description"] == ("gh capabilities[0] runtime.deny: api.github.com "
                                               "DELETE /repos/**")
    assert data["matched"][1] == {"effect": "deny", "rule": data["deciding"]}


# --- classify: what a CONNECT needs --------------------------------------------------------------


@pytest.mark.parametrize(("net", "phase", "host", "port", "expected"), [
    (None, "runtime", "example.com", 443, "denied"),
    (GH, "runtime", "github.com", 443, "unbounded"),
    (GH, "runtime", "api.github.com", 443, "bounded"),
    (GH, "runtime", "uploads.github.com", 443, "bounded"),
    (GH, "runtime", "gist.github.com", 443, "denied"),
    (GH, "install", "github.com", 443, "denied"),
    (TWO, "runtime", "a.example.net", 443, "bounded"),
    (TWO, "runtime", "shared.example.com", 443, "denied"),
    (MIXED, "runtime", "api.y.com", 443, "unbounded"),
    (BASIC, "runtime", "web.example.com", 443, "denied"),
    (BASIC, "runtime", "web.example.com", 8443, "unbounded"),
    (BASIC, "runtime", "bad host", 443, "denied"),
    (BASIC, "runtime", "api.example.com", 0, "denied"),
    (EVERYTHING, "runtime", "x.ads.example.net", 443, "denied"),
])
def test_classify(net: Network | None, phase: Phase, host: str, port: int,
                  expected: str) -> None:
    assert classify(net, phase, host, port) == expected


# --- hosts ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("raw", "expected"), [
    ("Example.COM", "example.com"),
    ("example.com.", "example.com"),
    ("bücher.de", "xn--bcher-kva.de"),
    ("\uff45\uff58\uff41\uff4d\uff50\uff4c\uff45.com", "example.com"),  # fullwidth
    ("a_b.example.com", "a_b.example.com"),
    ("localhost", "localhost"),
    ("[::1]", "::1"),
    ("::1", "::1"),
    ("[2001:DB8:0::1]", "2001:db8::1"),
    ("[::ffff:127.0.0.1]", "127.0.0.1"),
    ("127.0.0.1", "127.0.0.1"),
    ("0x7f.1", "127.0.0.1"),
    ("2130706433", "127.0.0.1"),
    ("0177.0.0.1", "127.0.0.1"),
    ("169.254.43518", "169.254.169.254"),
    ("", None),
    (".", None),
    ("a..b", None),
    ("-a.com", None),
    ("a-.com", None),
    ("a b.com", None),
    ("a/b.com", None),
    ("x" * 64 + ".com", None),
    (("a" * 60 + ".") * 5 + "com", None),
    ("example.123", None),
    ("1.2.3.4.5", None),
    ("256.1.1.1", None),
    ("08.1.1.1", None),
    ("[::1", None),
    ("[fe80::1%25eth0]", None),
    ("host:443", None),
])
def test_normalize_host(raw: str, expected: str | None) -> None:
    assert normalize_host(raw) == expected


def test_is_literal_address() -> None:
    assert is_literal_address("10.0.0.1")
    assert is_literal_address("[::1]")
    assert is_literal_address("0x7f.1")
    assert not is_literal_address("example.com")
    assert not is_literal_address("not a host")


@pytest.mark.parametrize(("pattern", "host", "port", "expected"), [
    ("api.example.com", "API.example.com", 1, True),
    ("api.example.com:443", "api.example.com", 443, True),
    ("api.example.com:443", "api.example.com", 444, False),
    ("*.example.com", "a.example.com", 443, True),
    ("*.example.com", "example.com", 443, False),
    ("*.example.com", "a.b.example.com", 443, False),
    ("*.example.com:8080", "a.example.com", 8080, True),
    ("*.example.com:8080", "a.example.com", 443, False),
    ("**.example.com", "a.b.example.com", 443, True),
    ("**.example.com", "example.com", 443, False),
    ("a.*.example.com", "a.b.example.com", 443, True),
    ("*", "10.1.2.3", 22, True),
    ("**", "[::1]", 22, True),
    ("*:443", "anything.org", 443, True),
    ("*:443", "anything.org", 80, False),
    ("*.0.0.1", "127.0.0.1", 443, False),
    ("foo*.example.com", "foo1.example.com", 443, False),
    ("a.**.com", "a.b.com", 443, False),
    ("[2001:db8::1]:443", "2001:db8::1", 443, True),
    ("[2001:db8::1]", "2001:db8::1", 1, True),
    ("2001:db8::1", "[2001:db8:0::1]", 1, True),
    ("127.0.0.1", "0x7f.0.0.1", 1, True),
    ("*.bücher.de", "www.xn--bcher-kva.de", 443, True),
    ("example.com:http", "example.com", 80, False),
    ("example.com:0", "example.com", 0, False),
    ("[::1]x", "::1", 1, False),
    ("*.", "anything.org", 1, True),
])
def test_host_matches(pattern: str, host: str, port: int, expected: bool) -> None:
    assert host_matches(pattern, host, port) is expected


def test_names_address_only_counts_literal_rules() -> None:
    literal = names_address(BASIC, "runtime", "10.0.0.5", 443)
    assert literal is not None and literal.host == "10.0.0.5"
    assert names_address(BASIC, "runtime", "[2001:db8::1]", 443) is not None
    assert names_address(BASIC, "runtime", "[2001:db8::1]", 80) is None
    assert names_address(EVERYTHING, "runtime", "127.0.0.1", 443) is None
    assert names_address(BASIC, "runtime", "x.cdn.example.com", 443) is None
    assert names_address(None, "runtime", "10.0.0.5", 443) is None


def test_address_denied_catches_a_deny_written_as_an_address() -> None:
    net = network(("k", [net1(runtime={"allow": ["*"], "deny": ["10.0.0.5", "[::1]:8080",
                                                                "*.internal"]})]))
    assert decide(net, Request("runtime", "db.lan", 443)).allowed  # the name is not denied ...
    denied = address_denied(net, "runtime", "10.0.0.5", 443)  # ... the address it resolves to is
    assert denied is not None and denied.host == "10.0.0.5"
    assert address_denied(net, "runtime", "::1", 8080) is not None
    assert address_denied(net, "runtime", "::1", 80) is None
    assert address_denied(net, "runtime", "10.0.0.6", 443) is None
    assert address_denied(net, "runtime", "db.internal", 443) is None  # names are decide's job
    assert address_denied(None, "runtime", "10.0.0.5", 443) is None


# --- paths ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("raw", "expected"), [
    ("/", "/"),
    ("/repos/x", "/repos/x"),
    ("/repos/../repos/x", "/repos/x"),
    ("//repos///x", "/repos/x"),
    ("/gists/../repos/x", "/repos/x"),
    ("/gists/%2e%2E/repos/x", "/repos/x"),
    ("/a/./b/.", "/a/b/"),
    ("/a/b/..", "/a/"),
    ("/a/b/", "/a/b/"),
    ("/a?b=/../..", "/a"),
    ("/a#/../..", "/a"),
    ("/%41%7e%5f", "/A~_"),
    ("/a%20b", "/a%20b"),
    ("/a%e4", "/a%E4"),
    ("/a b", "/a%20b"),
    ("/ä", "/%C3%A4"),
    ("/a;b=c@d:e", "/a;b=c@d:e"),
    ("/%252e%252e/x", "/%252e%252e/x"),
    ("/..", None),
    ("/a/../..", None),
    ("/%2e%2e/repos/x", None),
    ("/repos%2fx", None),
    ("/repos%2Fx", None),
    ("/repos%5Cx", None),
    ("/repos\\x", None),
    ("/a\x00", None),
    ("/a\n", None),
    ("/a%0d%0a", None),
    ("/a%7f", None),
    ("/a%", None),
    ("/a%g0", None),
    ("a/b", None),
    ("", None),
    ("*", None),
    ("/\ud800", None),
])
def test_normalize_path(raw: str, expected: str | None) -> None:
    assert normalize_path(raw) == expected


@pytest.mark.parametrize(("pattern", "path", "expected"), [
    ("/**", "/", True),
    ("/**", "/a/b/c", True),
    ("/repos/**", "/repos", True),
    ("/repos/**", "/repos/x/y", True),
    ("/repos/**", "/repository", False),
    ("/repos/*", "/repos", False),
    ("/repos/*", "/repos/x", True),
    ("/repos/*", "/repos/x/y", False),
    ("/repos/*", "/repos/x/", True),
    ("/a/**/z", "/a/z", True),
    ("/a/**/z", "/a/b/c/z", True),
    ("/a/**/z", "/a/b/c/y", False),
    ("/v1/*.json", "/v1/a.json", True),
    ("/v1/*.json", "/v1/a/b.json", False),
    ("/", "/", True),
    ("/", "/a", False),
    ("/Repos/**", "/repos/x", False),
    ("/a%2fb", "/a", False),
    ("relative", "/relative", False),
    ("/%7euser/*", "/~user/x", True),
])
def test_path_matches(pattern: str, path: str, expected: bool) -> None:
    assert path_matches(pattern, path) is expected


# --- helpers -------------------------------------------------------------------------------------


def test_describe_rule_and_rules_for() -> None:
    assert [describe_rule(r) for r in rules_for(GH, "runtime")] == [
        "gh capabilities[0] runtime.allow: github.com",
        "gh capabilities[0] runtime.allow: api.github.com GET,HEAD,POST,PATCH,PUT,DELETE",
        "gh capabilities[0] runtime.allow: uploads.github.com POST,PUT",
        "gh capabilities[0] runtime.deny: api.github.com DELETE /repos/**",
    ]
    assert rules_for(GH, "install") == ()
    assert rules_for(None, "runtime") == ()


def test_describe_rule_uses_the_declaration_path() -> None:
    composed = compose([Contribution("k", [{"type": NS + "port@1", "config": {"container": 1}},
                                           net2(runtime={"allow": [{"hosts": ["a.com"],
                                                                    "methods": ["ANY"],
                                                                    "paths": ["/x/**"]}]})],
                                     ["capabilities[0]", "capabilities[3].group.capabilities[1]"])])
    assert composed.network is not None
    rule = composed.network.runtime.allow[0]
    assert describe_rule(rule) == ("k capabilities[3].group.capabilities[1] runtime.allow: a.com "
                                   "ANY /x/**")


def test_package_import_stays_light() -> None:
    import sbx.domain.egress

    # Sibling modules (the proxy, the CA) import ``sbx.domain.egress`` without paying for
    # composition.
    assert not hasattr(sbx.domain.egress, "decide")
    assert policy.decide is decide


# --- properties ----------------------------------------------------------------------------------

SETTINGS = settings(max_examples=300, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])
LABELS = ["a", "api", "x", "example", "com", "net", "github", "cdn", "shared", "ads", "evil",
          "deep", "org", "uploads", "reg", "upload", "blocked", "y", "API", "xn--bcher-kva", "de"]
SEGMENTS = ["repos", "gists", "x", "..", ".", "%2e%2e", "%2E", "", "REPOS", "v2", "manifests",
            "blobs", "tmp", "files", "a.tar.gz", "%2f", "%72epos", "lib", "?q", "#f", "a b"]
HOSTS = st.one_of(
    st.lists(st.sampled_from(LABELS), min_size=1, max_size=5).map(".".join),
    st.sampled_from(["10.0.0.5", "0xa.0.0.5", "[2001:db8::1]", "127.0.0.1", "[::1]", "bücher.de"]),
    st.text(max_size=12),
)
PATHS_ST = st.one_of(st.none(), st.lists(st.sampled_from(SEGMENTS), max_size=6).map(
    lambda parts: "/" + "/".join(parts)), st.text(max_size=10))
METHODS = st.sampled_from([None, "GET", "get", "DELETE", "delete", "POST", "PUT", "HEAD",
                           "TRACE", "CONNECT"])
NETS = st.sampled_from([GH, BASIC, EVERYTHING, INSTALL_ONLY, TWO, MIXED, PATHS])
PHASES_ST = st.sampled_from(["install", "runtime"])
PORTS = st.sampled_from([443, 80, 8443, 22])


def deny_could_apply(net: Network, request: Request) -> bool:
    """An oracle for "deny wins", from the public matchers only."""
    path = normalize_path(request.path) if request.path is not None else None
    for rule in net.phase(request.phase).deny:
        if not host_matches(rule.host, request.host, request.port):
            continue
        if not rule.bounded:
            return True
        if request.method is None:
            continue
        if rule.methods and "ANY" not in rule.methods and \
                request.method.upper() not in rule.methods:
            continue
        if not rule.paths or (path is not None and any(path_matches(p, path)
                                                       for p in rule.paths)):
            return True
    return False


@pytest.mark.slow
@SETTINGS
@given(NETS, PHASES_ST, HOSTS, PORTS, METHODS, PATHS_ST)
def test_deny_wins_and_decide_is_deterministic(net: Network, phase: Phase, host: str, port: int,
                                              method: str | None, path: str | None) -> None:
    request = Request(phase, host, port, method, path)
    decision = decide(net, request)
    assert decide(net, request) == decision
    assert decision.code in CODES and decision.reason
    assert (decision.suggestion is None) is decision.allowed
    if decision.allowed:
        assert not deny_could_apply(net, request)
        assert not any(m.effect == "deny" for m in decision.matched)
        assert any(host_matches(r.host, host, port) for r in net.phase(phase).allow)
        if method is None:
            # a tunnel is only granted when no rule at all could refuse part of it
            assert not any(host_matches(r.host, host, port) for r in net.phase(phase).deny)
    else:
        assert decision.suggestion
    for match in decision.matched:
        assert host_matches(match.rule.host, host, port)
    if method is None:
        handling = classify(net, phase, host, port)
        assert (handling == "unbounded") is decision.allowed
        assert (handling == "bounded") is (decision.code == "needs_inspection")


@pytest.mark.slow
@SETTINGS
@given(st.one_of(PATHS_ST.filter(lambda p: p is not None), st.text(max_size=20)))
def test_normalize_path_is_idempotent_and_clean(raw: str | None) -> None:
    assert raw is not None
    once = normalize_path(raw)
    if once is None:
        return
    assert normalize_path(once) == once
    assert once.startswith("/")
    assert "//" not in once
    segments = once.split("/")
    assert "." not in segments and ".." not in segments
    assert "?" not in once and "#" not in once


@pytest.mark.slow
@SETTINGS
@given(HOSTS)
def test_normalize_host_is_idempotent(raw: str) -> None:
    once = normalize_host(raw)
    if once is not None:
        again = normalize_host(f"[{once}]" if ":" in once else once)
        assert again == once
