"""The user policy: parsing `HOST[:PORT][PATH]`, the overlay on the kits' rules (judged by the
one evaluator: deny wins, a user allow never beats a kit's deny), widenings as the pull gate
shows them, the store (a damaged file refuses, concurrent edits never lose a rule), the proxy's
live view of the file, and the `sbx policy allow|deny|ls|rm` commands."""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from pathlib import Path
from typing import Any

import pytest

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.egress import userpolicy
from sbx.domain.egress.configfields import ProxyConfigError
from sbx.domain.egress.policy import Request, decide
from sbx.domain.egress.policystore import PolicyStore, rules_path
from sbx.domain.egress.proxyconfig import ProxyConfig
from sbx.domain.egress.userpolicy import UserRule, overlay, parse_target
from sbx.domain.kits.compose import Network, NetworkPhase, Rule
from sbx.domain.sandbox.records import SandboxRecord
from sbx.proxy.userrules import UserRules
from sbx.usecases.sandboxstore import SandboxStore
from tests.conftest import run_cli


def kit_rule(host: str, *, action: str = "allow", methods: tuple[str, ...] = (),
             paths: tuple[str, ...] = ()) -> Rule:
    return Rule(host, methods, paths, action, "./k", 0, "runtime",  # type: ignore[arg-type]
                "capabilities[0]")


KITS = Network(2, NetworkPhase(), NetworkPhase(
    allow=(kit_rule("api.example.com", methods=("GET",)), kit_rule("open.example")),
    deny=(kit_rule("open.example", action="deny", paths=("/admin/**",)),)), False, ())


def user(rule_id: str, action: str, target: str, *, methods: tuple[str, ...] = (),
         sandbox: str | None = None, expires: float | None = None,
         phase: str = "runtime") -> UserRule:
    host, path = parse_target(target)
    return UserRule(rule_id, action, host, path, methods, phase, sandbox,  # type: ignore[arg-type]
                    time.time(), expires)


@pytest.mark.parametrize(("text", "host", "path"), [
    ("api.example.com", "api.example.com", None),
    ("API.Example.com:8443/v1/**", "api.example.com:8443", "/v1/**"),
    ("https://api.example.com/v1/x?q=1", "api.example.com", "/v1/x"),
    ("*.example.com", "*.example.com", None),
    ("[2001:db8::1]:443/p", "[2001:db8::1]:443", "/p"),
    ("10.0.0.5:80", "10.0.0.5:80", None),
])
def test_targets(text: str, host: str, path: str | None) -> None:
    assert parse_target(text) == (host, path)


@pytest.mark.slow
@pytest.mark.parametrize("text", ["", "foo*.com", "host:0", "host:99999", "user@host",
                                  "h:443:1", "[::1", "a b"])
def test_bad_targets(text: str) -> None:
    with pytest.raises(ValueError, match=r".+"):
        parse_target(text)


def test_a_path_given_twice_is_refused() -> None:
    assert parse_target("h.example", "/a/**") == ("h.example", "/a/**")
    with pytest.raises(ValueError, match="already has a path"):
        parse_target("h.example/a", "/b")


def _decide(network: Network | None, method: str | None, host: str, path: str | None = None,
            ) -> Any:
    return decide(network, Request("runtime", host, 443, method, path))


def test_overlay_is_judged_by_the_one_evaluator() -> None:
    rules = [user("00000001", "allow", "api.example.com/v1/**", methods=("POST",)),
             user("00000002", "deny", "api.example.com/private/**"),
             user("00000003", "allow", "open.example/admin/**"),  # a kit's deny still wins
             user("00000004", "deny", "open.example/user/**", sandbox="other")]
    merged = overlay(KITS, rules, sandbox="dev", now=time.time())
    allowed = _decide(merged, "POST", "api.example.com", "/v1/messages")
    assert allowed.allowed and allowed.deciding.user_rule == "00000001"
    assert "user policy, rule 00000001" in allowed.reason
    assert not _decide(merged, "POST", "api.example.com", "/v2/x").allowed  # nothing broader
    assert not _decide(merged, "DELETE", "api.example.com", "/v1/x").allowed
    assert _decide(merged, "GET", "api.example.com", "/v1/x").allowed  # the kit's GET
    denied = _decide(merged, "GET", "api.example.com", "/private/k")
    assert not denied.allowed and denied.deciding.user_rule == "00000002"  # deny wins
    kit_deny = _decide(merged, "GET", "open.example", "/admin/x")
    assert not kit_deny.allowed and kit_deny.deciding.kit == "./k"
    assert _decide(merged, "GET", "open.example", "/user/1").allowed  # other's rule
    assert overlay(None, rules, sandbox="dev", now=time.time()) is None  # no network, none


def test_expired_and_other_phase_rules_do_not_apply() -> None:
    now = time.time()
    rules = [user("00000001", "allow", "late.example", expires=now - 1),
             user("00000002", "allow", "inst.example", phase="install")]
    merged = overlay(KITS, rules, sandbox=None, now=now)
    assert not _decide(merged, None, "late.example").allowed
    assert not _decide(merged, None, "inst.example").allowed
    assert decide(merged, Request("install", "inst.example", 443)).allowed


def test_widenings_are_the_pull_gates() -> None:
    assert userpolicy.widenings(KITS, user("00000001", "allow", "api.example.com",
                                           methods=("GET",))) == []
    assert userpolicy.widenings(KITS, user("00000001", "deny", "new.example")) == []
    [new] = userpolicy.widenings(KITS, user("00000001", "allow", "new.example"))
    assert str(new) == "network.runtime.allow: new.example"
    [bounded] = userpolicy.widenings(
        KITS, user("00000001", "allow", "api.example.com/v1/**", methods=("POST",)))
    assert str(bounded) == "network.runtime.http.allow: POST api.example.com/v1/**"
    assert userpolicy.widenings(None, user("00000001", "allow", "new.example"))


def test_store_refuses_a_damaged_file(tmp_path: Path) -> None:
    path = rules_path(tmp_path)
    path.parent.mkdir(parents=True)
    for text in ("{", '{"format": 2, "rules": []}',
                 '{"format": 1, "rules": [{"id": "zz", "action": "allow"}]}'):
        path.write_text(text)
        with pytest.raises(SbxError) as caught:
            PolicyStore(tmp_path).load()
        assert caught.value.reason is Reason.STATE_CORRUPT


def _add_rules(home: str, worker: int, count: int) -> None:
    store = PolicyStore(Path(home))
    for i in range(count):
        with store.editing() as rules:
            time.sleep(0.002)  # widen the window a lost update would need
            rules.append(user(userpolicy.new_id(r.id for r in rules), "allow",
                              f"w{worker}-{i}.example"))


@pytest.mark.slow
def test_concurrent_edits_never_lose_a_rule(tmp_path: Path) -> None:
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_add_rules, args=(str(tmp_path), w, 10))
               for w in range(6)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
        assert worker.exitcode == 0
    rules = PolicyStore(tmp_path).load()
    assert len(rules) == 60 and len({r.host for r in rules}) == 60
    assert oct(rules_path(tmp_path).stat().st_mode & 0o777) == "0o600"


def test_the_proxys_view_follows_the_file(tmp_path: Path) -> None:
    path = rules_path(tmp_path)
    said: list[str] = []
    live = UserRules(path, KITS, "dev", said.append)
    assert live.network() is KITS  # no file: the kits' rules alone
    with PolicyStore(tmp_path).editing() as rules:
        rules.append(user("0000000a", "allow", "new.example", sandbox="dev"))
    time.sleep(0.02)
    assert _decide(live.network(), None, "new.example").allowed
    path.write_text("{ damaged")
    time.sleep(0.02)
    assert _decide(live.network(), None, "new.example").allowed  # the last good rules
    assert len(said) == 1 and "cannot be read" in said[0]
    live.network()
    assert len(said) == 1  # said once
    with pytest.raises(ProxyConfigError):
        UserRules(path, KITS, "dev", said.append)  # unreadable at start: no proxy


@pytest.mark.slow
def test_the_proxys_view_drops_a_lapsed_rule(tmp_path: Path) -> None:
    with PolicyStore(tmp_path).editing() as rules:
        rules.append(user("0000000b", "allow", "brief.example", expires=time.time() + 0.3))
    live = UserRules(rules_path(tmp_path), KITS, None, lambda _m: None)
    assert _decide(live.network(), None, "brief.example").allowed
    time.sleep(0.4)
    assert not _decide(live.network(), None, "brief.example").allowed


def _named(home: Path, name: str, network: Network | None) -> None:
    record = SandboxRecord(name=name, run_id="d" * 32, created=1.0, workload="./k", kits=[],
                           workspace=None, access="none",
                           request={"options": {}, "proxy": network is not None},
                           container_id="c" * 64)
    SandboxStore(home).save(record)
    if network is not None:
        run_dir = home / "runs" / record.run_id
        run_dir.mkdir(parents=True)
        ProxyConfig(run_id=record.run_id, state_home=home, audit_log=home / "audit.jsonl",
                    network=network).write(run_dir / "proxy.json")


@pytest.mark.slow
def test_commands(tmp_path: Path) -> None:
    home = tmp_path / "state"
    env = {**os.environ, "SBX_HOME": str(home), "NO_COLOR": "1"}
    _named(home, "dev", KITS)
    _named(home, "bare", None)
    widened = run_cli(["policy", "allow", "new.example", "--sandbox", "dev"], env=env)
    assert widened.exit_code == 125 and "(permission_widened)" in widened.stderr
    assert "+ network.runtime.allow: new.example" in widened.stderr
    assert not rules_path(home).exists()
    # Already granted by dev's kits: not a widening, no question, no --yes.
    same = run_cli(["policy", "allow", "api.example.com", "/v1/**", "--method", "get",
                    "--sandbox", "dev", "--json"], env=env)
    assert same.exit_code == 0, same.stderr
    data = same.envelope()["data"]
    assert data["via"] == "not a widening" and data["rule"]["methods"] == ["GET"]
    yes = run_cli(["policy", "allow", "new.example", "--sandbox", "dev", "--yes", "--for",
                   "2h"], env=env)
    assert yes.exit_code == 0 and "added rule" in yes.stdout
    deny = run_cli(["policy", "deny", "api.example.com:443/private/**"], env=env)
    assert deny.exit_code == 0, deny.stderr
    listed = run_cli(["policy", "ls", "--json"], env=env).envelope()["data"]["rules"]
    assert [(r["action"], r["target"], r["sandbox"]) for r in listed] == [
        ("allow", "api.example.com/v1/**", "dev"), ("allow", "new.example", "dev"),
        ("deny", "api.example.com:443/private/**", None)]
    assert all(len(r["id"]) == 8 and r["remove"] == f"sbx policy rm {r['id']}" for r in listed)
    assert listed[1]["expires"] is not None
    assert run_cli(["policy", "rm", listed[0]["id"]], env=env).exit_code == 0
    assert run_cli(["policy", "rm", listed[0]["id"]], env=env).exit_code == 2
    assert len(run_cli(["policy", "ls", "--json"], env=env).envelope()["data"]["rules"]) == 2
    for bad in (["policy", "allow", "new.example", "--sandbox", "nosuch", "--yes"],
                ["policy", "allow", "new.example", "--sandbox", "bare", "--yes"],
                ["policy", "allow", "foo*.example", "--yes"],
                ["policy", "allow", "x.example", "--phase", "build", "--yes"],
                ["policy", "allow", "x.example", "--for", "soon", "--yes"]):
        assert run_cli(bad, env=env).exit_code == 2, bad
    events = [json.loads(line) for line in (home / "audit.jsonl").read_text().splitlines()]
    kinds = [e["event_type"] for e in events]
    assert kinds == ["policy_rule_added"] * 3 + ["policy_rule_removed"]
    assert events[1]["details"]["via"] == "--yes"
    assert events[1]["details"]["widenings"] == ["network.runtime.allow: new.example"]
