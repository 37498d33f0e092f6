"""From a refusal to its fix, and the destination checks the proxy and explain share: the
command is the narrowest that opens the refused request (and, applied as a user rule, opens
nothing broader), a deny is never answered with an allow, cloud metadata is never offered."""

from __future__ import annotations

import shlex
import time
from pathlib import Path

import pytest

from sbx.domain.egress import destination, fixes
from sbx.domain.egress.policy import Request, decide
from sbx.domain.egress.userpolicy import UserRule, overlay, parse_methods, parse_target
from sbx.domain.kits.compose import Network, NetworkPhase, Origin, Rule
from sbx.seams import names


def kit_rule(host: str, *, action: str = "allow", methods: tuple[str, ...] = (),
             paths: tuple[str, ...] = ()) -> Rule:
    return Rule(host, methods, paths, action, "./k", 1, "runtime",  # type: ignore[arg-type]
                "capabilities[1]")


KITS = Network(2, NetworkPhase(), NetworkPhase(
    allow=(kit_rule("api.example.com", methods=("GET",), paths=("/v1/**",)),),
    deny=(kit_rule("api.example.com", action="deny", paths=("/admin/**",)),)), False,
    (Origin("./k", 1, "capabilities[1]"),))


@pytest.mark.parametrize(("path", "prefix"), [
    ("/v1/messages", "/v1/**"), ("/user", "/user"), ("/", "/"), ("/a/b/c?q=1", "/a/b/**"),
    (None, None)])
def test_path_prefix(path: str | None, prefix: str | None) -> None:
    assert fixes.path_prefix(path) == prefix


def test_allow_command_names_host_method_prefix_phase_and_sandbox() -> None:
    assert fixes.allow_command("api.example.com", 443, method="post", path="/v1/messages",
                               sandbox="dev") == (
        "sbx policy allow api.example.com '/v1/**' --method POST --sandbox dev")
    assert fixes.allow_command("api.example.com", 8443, method="GET", path="/x") == (
        "sbx policy allow api.example.com:8443 /x --method GET")
    assert fixes.allow_command("evil.example", 443) == "sbx policy allow evil.example:443"
    assert fixes.allow_command("2001:db8::1", 443, phase="install") == (
        "sbx policy allow '[2001:db8::1]:443' --phase install")


def _apply(command: str) -> UserRule:
    """The user rule that pasting ``command`` stores (parsed as the CLI parses it)."""
    words = shlex.split(command)
    assert words[:3] == ["sbx", "policy", "allow"]
    target, rest = words[3], words[4:]
    path = rest.pop(0) if rest and not rest[0].startswith("--") else None
    options = dict(zip(rest[::2], rest[1::2], strict=True))
    host, glob = parse_target(target, path)
    return UserRule("0000000f", "allow", host, glob, parse_methods(
        [options["--method"]] if "--method" in options else []),
        options.get("--phase", "runtime"), options.get("--sandbox"),  # type: ignore[arg-type]
        time.time())


def test_the_fix_opens_the_refused_request_and_nothing_broader() -> None:
    refused = decide(KITS, Request("runtime", "api.example.com", 443, "POST", "/v1/messages"))
    assert refused.code == "method_not_allowed"
    fix = fixes.for_refusal(code=refused.code, host="api.example.com", port=443,
                            method="POST", path="/v1/messages", sandbox="dev",
                            deciding=refused.deciding, network=KITS,
                            kit_files={"./k": "/kits/k/k.yaml"})
    assert fix is not None and fix.command is not None
    merged = overlay(KITS, [_apply(fix.command)], sandbox="dev", now=time.time())

    def verdict(method: str, host: str, path: str) -> bool:
        return decide(merged, Request("runtime", host, 443, method, path)).allowed

    assert verdict("POST", "api.example.com", "/v1/messages")
    assert verdict("POST", "api.example.com", "/v1/other")  # the path prefix
    assert not verdict("DELETE", "api.example.com", "/v1/messages")
    assert not verdict("POST", "api.example.com", "/v2/messages")
    assert not verdict("POST", "other.example.com", "/v1/messages")
    assert not verdict("POST", "api.example.com", "/admin/x")  # the kit's deny still wins
    other = overlay(KITS, [_apply(fix.command)], sandbox="other", now=time.time())
    assert not decide(other, Request("runtime", "api.example.com", 443, "POST",
                                     "/v1/messages")).allowed
    assert fix.kit is not None and fix.kit.file == "/kits/k/k.yaml"
    assert fix.kit.under == "capabilities[1].config.runtime.allow"
    assert fix.kit.lines == ("- hosts: [api.example.com]", "  methods: [POST]",
                             "  paths: ['/v1/**']")


def test_a_deny_is_answered_by_its_removal_never_an_allow() -> None:
    denied = decide(KITS, Request("runtime", "api.example.com", 443, "GET", "/admin/x"))
    fix = fixes.for_refusal(code=denied.code, host="api.example.com", port=443, method="GET",
                            path="/admin/x", deciding=denied.deciding, network=KITS,
                            kit_files={"./k": "/kits/k/k.yaml"})
    assert fix is not None and fix.command is None and "deny wins" in fix.text
    mine = UserRule("0000abcd", "deny", "x.example", None, (), "runtime", None, time.time())
    by_user = decide(overlay(KITS, [mine], sandbox=None, now=time.time()),
                     Request("runtime", "x.example", 443))
    fix = fixes.for_refusal(code=by_user.code, host="x.example", port=443,
                            deciding=by_user.deciding)
    assert fix is not None and fix.command == "sbx policy rm 0000abcd"


def test_destination_fixes_name_the_literal_and_never_cloud_metadata() -> None:
    blocked = destination.Blocked("db.corp.example", 5432, "a private address", "10.1.2.3")
    fix = fixes.for_refusal(code="destination_blocked", host="db.corp.example", port=5432,
                            destination=blocked, sandbox="dev")
    assert fix is not None and fix.command == "sbx policy allow 10.1.2.3:5432 --sandbox dev"
    for meta in (destination.Blocked("x.example", 80, "a cloud metadata address",
                                     "169.254.169.254"),
                 destination.Blocked("metadata.google.internal", 80, "metadata")):
        fix = fixes.for_refusal(code="destination_blocked", host=meta.host, port=80,
                                destination=meta)
        assert fix is not None and fix.command is None and "never" in fix.text


def test_destination_checks_are_the_proxys_for_literals_names_and_answers() -> None:
    allow_all = Network(2, NetworkPhase(), NetworkPhase(allow=(kit_rule("*"),)), False, ())
    judge = destination.judge
    assert judge(allow_all, "runtime", "127.0.0.1", 80, upstream=False,
                 answers=None).blocked is not None
    assert judge(allow_all, "runtime", "localhost", 80, upstream=False,
                 answers=None).blocked is not None
    assert judge(allow_all, "runtime", "metadata.google.internal", 80, upstream=True,
                 answers=None).blocked is not None
    assert judge(allow_all, "runtime", "svc", 80, upstream=True,
                 answers=None).blocked is not None  # single label, upstream resolves it
    assert judge(allow_all, "runtime", "api.example.com", 443, upstream=True,
                 answers=None).resolution == "upstream"
    assert judge(allow_all, "runtime", "api.example.com", 443, upstream=False,
                 answers=None).resolution == "unresolved"
    rebind = judge(allow_all, "runtime", "rebind.example", 443, upstream=False,
                   answers=["93.184.216.34", "10.0.0.1"])
    assert rebind.blocked is not None and rebind.blocked.address == "10.0.0.1"
    named = Network(2, NetworkPhase(), NetworkPhase(allow=(kit_rule("*"),
                                                           kit_rule("10.0.0.1:443"))),
                    False, ())
    assert judge(named, "runtime", "rebind.example", 443, upstream=False,
                 answers=["10.0.0.1"]).blocked is None


def test_hosts_file_lookup(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 localhost\n10.1.2.3 Db.Corp.Example db # a comment\n"
                     "# 1.1.1.1 commented.example\n::1 localhost ip6-localhost\n")
    assert names.from_hosts_file("db.corp.example.", hosts) == ["10.1.2.3"]
    assert names.from_hosts_file("localhost", hosts) == ["127.0.0.1", "::1"]
    assert names.from_hosts_file("commented.example", hosts) == []
    assert names.from_hosts_file("x", tmp_path / "missing") == []
