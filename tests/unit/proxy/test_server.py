"""The egress proxy's parts: config round trip and validation, authority parsing, destination
classification, masking, the refusal body, and the proxy's bounds — the last run in-process on
127.0.0.1 with no origin at all (every case is refused before anything would be forwarded)."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import ssl
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

import sbx.proxy as proxy_module
from sbx.domain.egress.configfields import ProxyConfigError
from sbx.domain.egress.policy import Request as PolicyRequest
from sbx.domain.egress.policy import decide
from sbx.domain.egress.proxyconfig import ProxyConfig, ProxyLimits
from sbx.domain.egress.proxycreds import CredentialSpec, Inject, sentinel_for
from sbx.domain.kits.compose import Credential, Network, NetworkPhase, Rule
from sbx.proxy import (
    EgressProxy,
    Masker,
    blocked_address,
    explain_line,
    injected_value,
    parse_authority,
    redact,
    refusal_body,
    refusal_for,
    refusal_response,
)
from sbx.proxy import (
    EgressRefusal as Refusal,
)
from sbx.proxy import connection as connection_module
from sbx.proxy import exchange as exchange_module
from sbx.seams.host.handshake import PROXY


def rule(host: str, kit: str = "./gh", index: int = 0, *, action: str = "allow",
         methods: Sequence[str] = (), paths: Sequence[str] = (),
         phase: str = "runtime") -> Rule:
    return Rule(host, tuple(methods), tuple(paths), action, kit, index, phase,  # type: ignore[arg-type]
                f"capabilities[{index}]")


NETWORK = Network(
    version=2,
    install=NetworkPhase(allow=(rule("pypi.org", "./py", 2, phase="install"),)),
    runtime=NetworkPhase(
        allow=(rule("api.github.com", methods=("GET", "DELETE")), rule("github.com")),
        deny=(rule("api.github.com", index=1, action="deny", methods=("DELETE",),
                   paths=("/repos/**",)),),
        superseded=(rule("github.com", "./other", 3, methods=("GET",)),)),
    optional=False, origins=())


def config(tmp_path: Path, **changes: Any) -> ProxyConfig:
    values: dict[str, Any] = {
        "run_id": "run-123", "state_home": tmp_path / "state",
        "audit_log": tmp_path / "state" / "audit.jsonl", "network": NETWORK,
        "explain_command": "sbx explain ./hello --kit ./gh",
    }
    values.update(changes)
    return ProxyConfig(**values)


# -- config ----------------------------------------------------------------------------------------


def test_config_round_trip(tmp_path: Path) -> None:
    original = config(
        tmp_path, phase="install", listen_host="172.18.0.1", listen_port=3128,
        upstream_proxy="http://user:p%40ss@proxy.corp:8080", upstream_ca_file=tmp_path / "ca.pem",
        phase_file=tmp_path / "phase",
        limits=ProxyLimits(max_head_bytes=1000, idle_timeout=2.5),
        credentials=(
            CredentialSpec("github", "runtime", (Inject("api.github.com"),),
                           sentinel=sentinel_for("github"), env="GH_TOKEN", kit="./gh", index=4),
            CredentialSpec("registry", "install",
                           (Inject("pypi.org", scheme="basic", username="__token__"),),
                           kit="./py", index=1),
            CredentialSpec("example", "runtime", (Inject("example.com", header="X-Api-Key",
                                                         format="%s"),)),
        ))
    text = original.to_json()
    assert ProxyConfig.from_json(text) == original
    assert json.loads(text)["network"]["rules"][0]["kit"] in ("./py", "./gh")
    path = tmp_path / "proxy.json"
    original.write(path)
    assert path.stat().st_mode & 0o777 == 0o600
    assert ProxyConfig.load(path) == original


def test_config_holds_no_secret_value(tmp_path: Path) -> None:
    text = config(tmp_path, credentials=(
        CredentialSpec("github", "runtime", (Inject("api.github.com"),), sentinel="s"),)).to_json()
    assert set(json.loads(text)["credentials"][0]) == {
        "service", "phase", "domains", "sentinel", "env", "kit", "index"}


def test_config_without_network_denies_everything(tmp_path: Path) -> None:
    loaded = ProxyConfig.from_json(config(tmp_path, network=None).to_json())
    assert loaded.network is None


@pytest.mark.parametrize(("change", "message"), [
    ({"format": 2}, "format 2"),
    ({"surprise": 1}, "unknown key 'surprise'"),
    ({"phase": "build"}, "phase 'build'"),
    ({"run_id": ""}, "run_id"),
    ({"run_id": "a b"}, "run_id"),
    ({"listen_port": 70000}, "listen_port"),
    ({"upstream_proxy": "ftp://proxy:21"}, "upstream_proxy"),
    ({"upstream_proxy": "http://proxy:8080/path"}, "upstream_proxy"),
    ({"upstream_proxy": "socks5://proxy"}, "upstream_proxy"),
    ({"limits": {"idle_timeout": 0}}, "limits.idle_timeout"),
    ({"limits": {"max_headers": True}}, "limits.max_headers"),
    ({"limits": {"unknown": 1}}, "unknown key 'unknown' in limits"),
    ({"credentials": [{"service": "x", "phase": "runtime",
                       "domains": [{"domain": "a.com", "format": "Bearer"}]}]}, "exactly one %s"),
    ({"credentials": [{"service": "x", "phase": "runtime",
                       "domains": [{"domain": "a.com", "scheme": "basic"}]}]}, "username"),
    ({"credentials": [{"service": "x", "phase": "runtime",
                       "domains": [{"domain": "a.com", "header": "Bad Header"}]}]}, "header"),
    ({"credentials": [{"service": "x", "phase": "runtime", "domains": []},
                      {"service": "x", "phase": "runtime", "domains": []}]}, "listed twice"),
    ({"credentials": [{"service": "x", "phase": "runtime", "domains": [],
                       "sentinel": ""}]}, "empty sentinel"),
])
def test_config_refuses_bad_values(tmp_path: Path, change: dict[str, Any], message: str) -> None:
    data = config(tmp_path).as_dict()
    data.update(change)
    with pytest.raises(ProxyConfigError, match="invalid egress proxy config") as caught:
        ProxyConfig.from_dict(data)
    assert message in caught.value.message


def test_config_refuses_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(ProxyConfigError, match="cannot read"):
        ProxyConfig.load(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ProxyConfigError, match="not JSON"):
        ProxyConfig.load(tmp_path / "bad.json")


def test_credential_from_composition() -> None:
    named = Credential("github", "runtime", {"service": "github", "phase": "runtime", "apiKey": {
        "name": "GH_TOKEN", "proxyManaged": True,
        "inject": [{"domain": "api.github.com", "header": "Authorization",
                    "format": "token %s"}]}}, False, "./gh", 2)
    spec = CredentialSpec.from_credential(named)
    assert (spec.env, spec.sentinel, spec.kit, spec.index) == \
        ("GH_TOKEN", "sbx-proxy-managed-github", "./gh", 2)
    assert spec.domains == (Inject("api.github.com", format="token %s"),)
    inject_only = Credential("kit-tck", "install", {"apiKey": {"inject": [
        {"domain": "example.com"}, {"domain": "example.org", "header": "X-Key"},
        {"domain": "example.net", "scheme": "basic", "username": "bot"}]}}, False, "./t", 0)
    spec = CredentialSpec.from_credential(inject_only)
    assert (spec.env, spec.sentinel) == (None, None)
    assert [d.format for d in spec.domains[:2]] == ["Bearer %s", "%s"]
    assert spec.domains[2].scheme == "basic"


# -- parsing and classification --------------------------------------------------------------------


@pytest.mark.parametrize(("text", "default", "expected"), [
    ("api.github.com:443", None, ("api.github.com", 443)),
    ("example.com", 80, ("example.com", 80)),
    ("[::1]:8080", None, ("::1", 8080)),
    ("[2001:db8::1]", 443, ("2001:db8::1", 443)),
    ("example.com", None, None),  # CONNECT needs a port
    ("example.com:0", None, None),
    ("example.com:65536", None, None),
    ("example.com:+80", None, None),
    ("example.com:\uff18\uff10", None, None),  # fullwidth digits
    ("user@example.com:443", None, None),
    ("exa mple.com:443", None, None),
    ("::1:443", None, None),
    ("[::1", None, None),
    ("[::1]x", 443, None),
    (":443", None, None),
    ("", 80, None),
])
def test_parse_authority(text: str, default: int | None,
                         expected: tuple[str, int] | None) -> None:
    assert parse_authority(text, default) == expected


@pytest.mark.parametrize(("address", "why"), [
    ("127.0.0.1", "loopback"),
    ("127.255.0.9", "loopback"),
    ("0.0.0.0", "unspecified"),  # noqa: S104 -- classified, never bound
    ("10.1.2.3", "private"),
    ("172.16.0.1", "private"),
    ("192.168.1.1", "private"),
    ("169.254.169.254", "link-local"),
    ("100.64.0.1", "not a public"),
    ("224.0.0.251", "multicast"),
    ("255.255.255.255", "private"),
    ("240.0.0.1", "private"),  # reserved; Python files it under private
    ("198.18.0.1", "private"),
    ("::1", "loopback"),
    ("::", "unspecified"),
    ("fe80::1", "link-local"),
    ("fd00:ec2::254", "private"),
    ("ff02::1", "multicast"),
    ("::ffff:127.0.0.1", "loopback"),
    ("::ffff:169.254.169.254", "link-local"),
    ("2002:7f00:1::", "loopback"),  # 6to4 around 127.0.0.1
    ("64:ff9b::a9fe:a9fe", "link-local"),  # NAT64 around 169.254.169.254
    ("8.8.8.8", None),
    ("140.82.112.6", None),
    ("2606:4700:4700::1111", None),
])
def test_blocked_address(address: str, why: str | None) -> None:
    result = blocked_address(ipaddress.ip_address(address))
    if why is None:
        assert result is None
    else:
        assert result is not None and why in result


def test_masker_keeps_lengths_across_chunks() -> None:
    secret = b"s3cr3t-value"
    masker = Masker([secret, b"Bearer " + secret])
    data = b"x" * 10 + b"Bearer " + secret + b"y" * 5 + secret + b"z"
    out = b""
    for i in range(0, len(data), 3):
        out += masker.feed(data[i:i + 3])
    out += masker.flush()
    assert len(out) == len(data)
    assert secret not in out
    assert out.startswith(b"x" * 10 + b"*" * (7 + len(secret)))


def test_injected_values() -> None:
    assert injected_value(Inject("a.com"), "tok") == b"Bearer tok"
    assert injected_value(Inject("a.com", header="X-Key", format="%s"), "tok") == b"tok"
    assert injected_value(Inject("a.com", format="x %s%%"), "t") == b"x t%%"  # no printf
    basic = injected_value(Inject("a.com", scheme="basic", username="bot"), "pw")
    assert basic == b"Basic Ym90OnB3"


def test_redact() -> None:
    assert redact("token abc123 leaked", ["abc123", ""]) == "token ******** leaked"


def test_proxy_argv_carries_the_run_id(tmp_path: Path) -> None:
    argv = PROXY.argv(str(tmp_path / "proxy.json"), "run-42")
    assert argv[1:4] == ["-m", "sbx.proxy", str(tmp_path / "proxy.json")]
    assert argv[-1] == "run-42"


# -- the refusal -----------------------------------------------------------------------------------


def test_refusal_body_for_a_deny_rule() -> None:
    decision = decide(NETWORK, PolicyRequest("runtime", "api.github.com", 443, "DELETE",
                                             "/repos/x/y"))
    refusal = refusal_for(decision, host="api.github.com", port=443, scheme="https")
    body = refusal_body(refusal, "sbx explain ./hello --kit ./gh")
    assert body.splitlines()[:5] == [
        "blocked by sbx egress policy (403, egress_denied: deny_rule)",
        "host: api.github.com:443",
        "method: DELETE",
        "path: /repos/x/y",
        "rule: ./gh capabilities[1] runtime.deny: api.github.com DELETE /repos/** "
        "(kit ./gh, capability 1, phase runtime, deny)",
    ]
    assert body.splitlines()[-1] == \
        "explain: sbx explain ./hello --kit ./gh DELETE https://api.github.com/repos/x/y"
    raw = refusal_response(refusal, "sbx explain")
    head, _, payload = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 403 Forbidden\r\n")
    assert b"\r\nX-Sbx-Reason: egress_denied\r\n" in head
    assert b"\r\nX-Sbx-Rule: ./gh capabilities[1] runtime.deny: api.github.com DELETE " \
           b"/repos/**\r\n" in head
    assert b"\r\nContent-Type: text/plain; charset=utf-8\r\n" in head
    assert f"Content-Length: {len(payload)}".encode() in head


def test_refusal_body_for_default_deny_and_odd_input() -> None:
    decision = decide(NETWORK, PolicyRequest("runtime", "evil.example", 8443))
    refusal = refusal_for(decision, host="evil.example", port=8443, scheme="https")
    body = refusal_body(refusal, "sbx explain ./hello")
    assert "rule: no allow rule (deny by default)" in body
    assert "explain: sbx explain ./hello evil.example:8443" in body
    odd = Refusal(403, "host_mismatch", "bad\r\nInjected: header", "h\x00st", 80, "GET",
                  "/a b?x=1;rm -rf", "http", "rule\r\nX-Evil: 1")
    raw = refusal_response(odd, "sbx explain")
    assert b"\r\nInjected" not in raw
    assert b"\r\nX-Evil" not in raw
    assert explain_line("sbx explain", odd) == \
        "sbx explain GET 'http://h\x00st/a b?x=1;rm -rf'"
    assert "explain: sbx explain GET 'http://h?st/a b?x=1;rm -rf'" in \
        refusal_body(odd, "sbx explain")


# -- the proxy in-process --------------------------------------------------------------------------


def _no_certificates(host: str) -> ssl.SSLContext:  # pragma: no cover - never reached
    raise AssertionError(f"no TLS interception expected here ({host})")


_open_connection = asyncio.open_connection  # the test's own client, even while the proxy's is faked


async def _talk(proxy: EgressProxy, payload: bytes, *, read_timeout: float = 5.0) -> bytes:
    reader, writer = await _open_connection("127.0.0.1", proxy.port)
    try:
        writer.write(payload)
        await writer.drain()
        async with asyncio.timeout(read_timeout):
            return await reader.read(1 << 20)
    finally:
        writer.close()


def run_proxy(tmp_path: Path, scenario: Callable[[EgressProxy], Awaitable[None]], *,
              network: Network | None = NETWORK, limits: ProxyLimits | None = None,
              resolver: Any = None, errors: list[str] | None = None) -> None:
    cfg = config(tmp_path, network=network, limits=limits or ProxyLimits())

    async def main() -> None:
        proxy = EgressProxy(cfg, server_context=_no_certificates, secrets={},
                            stderr=(errors.append if errors is not None else None),
                            resolver=resolver)
        await proxy.start()
        try:
            async with asyncio.timeout(30):
                await scenario(proxy)
        finally:
            await proxy.close()

    asyncio.run(main())


def _status(raw: bytes) -> int:
    return int(raw.split(b" ", 2)[1])


def test_bounds_on_request_heads(tmp_path: Path) -> None:
    limits = ProxyLimits(max_head_bytes=4096, max_target_bytes=512, max_headers=10)

    async def scenario(proxy: EgressProxy) -> None:
        big = b"GET http://github.com/ HTTP/1.1\r\nHost: github.com\r\nX: " + b"a" * 5000
        assert _status(await _talk(proxy, big + b"\r\n\r\n")) == 431
        slow_big = b"GET http://github.com/ HTTP/1.1\r\nX: " + b"a" * 5000  # never ends
        assert _status(await _talk(proxy, slow_big)) == 431
        long = b"GET http://github.com/" + b"a" * 600 + b" HTTP/1.1\r\nHost: github.com\r\n\r\n"
        assert _status(await _talk(proxy, long)) == 414
        many = b"GET http://github.com/ HTTP/1.1\r\nHost: github.com\r\n" + \
            b"".join(b"X-%d: 1\r\n" % i for i in range(11)) + b"\r\n"
        assert _status(await _talk(proxy, many)) == 431
        assert _status(await _talk(proxy, b"\x16\x03\x01 not http at all\r\n\r\n")) == 400
        assert _status(await _talk(proxy, b"GET / HTTP/1.1\r\nHost: github.com\r\n\r\n")) == 400
        for target in (b"example.com", b"user@example.com:443", b"example.com:99999",
                       b"exa%mple.com:443"):
            raw = await _talk(proxy, b"CONNECT " + target + b" HTTP/1.1\r\nHost: x\r\n\r\n")
            assert _status(raw) == 400, target
        smuggle = (b"POST http://github.com/ HTTP/1.1\r\nHost: github.com\r\n"
                   b"Content-Length: 5\r\nTransfer-Encoding: chunked, identity\r\n\r\n")
        assert _status(await _talk(proxy, smuggle)) in (400, 501)
        both = (b"POST http://github.com/ HTTP/1.1\r\nHost: github.com\r\n"
                b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
        raw = await _talk(proxy, both)
        assert _status(raw) == 400
        assert b"ambiguous_framing" in raw

    run_proxy(tmp_path, scenario, limits=limits)


@pytest.mark.slow
def test_head_timeout_closes_silent_clients(tmp_path: Path) -> None:
    async def scenario(proxy: EgressProxy) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        raw = await _talk(proxy, b"GET http://github.com/ HTTP/1.1\r\n", read_timeout=5)
        assert raw == b""
        assert loop.time() - started < 3

    run_proxy(tmp_path, scenario, limits=ProxyLimits(head_timeout=0.3))


def test_connection_limit(tmp_path: Path) -> None:
    async def scenario(proxy: EgressProxy) -> None:
        _reader, writer = await _open_connection("127.0.0.1", proxy.port)
        writer.write(b"GET http://github.com/ HTTP/1.1\r\n")  # holds its slot
        await writer.drain()
        await asyncio.sleep(0.1)
        try:
            assert _status(await _talk(proxy, b"")) == 503
        finally:
            writer.close()

    run_proxy(tmp_path, scenario, limits=ProxyLimits(max_connections=1))


def test_no_network_policy_denies_everything(tmp_path: Path) -> None:
    async def scenario(proxy: EgressProxy) -> None:
        raw = await _talk(proxy, b"CONNECT github.com:443 HTTP/1.1\r\nHost: github.com\r\n\r\n")
        assert _status(raw) == 403
        assert b"no network-policy capability" in raw
        raw = await _talk(proxy, b"GET http://github.com/ HTTP/1.1\r\nHost: github.com\r\n\r\n")
        assert _status(raw) == 403

    run_proxy(tmp_path, scenario, network=None)
    events = [json.loads(line) for line in
              (tmp_path / "state" / "audit.jsonl").read_text().splitlines()]
    assert [(e["event_type"], e["run_id"], e["details"]["code"]) for e in events] == \
        [("egress_denied", "run-123", "default_deny")] * 2


@pytest.mark.slow
def test_dns_answers_are_checked_before_connecting(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    everything = Network(2, NetworkPhase(), NetworkPhase(allow=(
        rule("*", "./open"), rule("10.9.8.7:80", "./corp", 1))), False, ())
    answers = {"rebind.test": ["140.82.112.6", "127.0.0.1"],
               "metadata.test": ["169.254.169.254"], "corp.test": ["10.9.8.7"],
               "broken.test": []}
    asked: list[str] = []

    async def resolver(host: str, port: int) -> list[str]:
        asked.append(host)
        if host == "slow.test":
            await asyncio.sleep(10)
        return answers[host]

    dialed: list[tuple[str, int]] = []

    async def fake_open(host: str, port: int, **_: Any) -> Any:
        dialed.append((host, port))
        raise ConnectionRefusedError("test: nothing listens")

    async def scenario(proxy: EgressProxy) -> None:
        for name in ("rebind.test", "metadata.test"):
            raw = await _talk(proxy, f"CONNECT {name}:80 HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            assert _status(raw) == 403, name
            assert b"destination_blocked" in raw
        raw = await _talk(proxy, b"CONNECT corp.test:80 HTTP/1.1\r\nHost: x\r\n\r\n")
        assert _status(raw) == 502  # the literal rule opens 10.9.8.7:80; nothing listens
        raw = await _talk(proxy, b"CONNECT corp.test:81 HTTP/1.1\r\nHost: x\r\n\r\n")
        assert _status(raw) == 403  # the rule names port 80 only
        raw = await _talk(proxy, b"CONNECT broken.test:80 HTTP/1.1\r\nHost: x\r\n\r\n")
        assert _status(raw) == 502
        raw = await _talk(proxy, b"CONNECT slow.test:80 HTTP/1.1\r\nHost: x\r\n\r\n")
        assert _status(raw) == 502

    monkeypatch.setattr(asyncio, "open_connection", fake_open)  # as the dialer calls it
    run_proxy(tmp_path, scenario, network=everything, resolver=resolver,
              limits=ProxyLimits(connect_timeout=0.5))
    assert dialed == [("10.9.8.7", 80)]
    assert asked == ["rebind.test", "metadata.test", "corp.test", "corp.test", "broken.test",
                     "slow.test"]


def test_internal_errors_fail_closed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def explode(*_: Any) -> Any:
        raise RuntimeError("policy bug")

    monkeypatch.setattr(connection_module, "classify", explode)
    errors: list[str] = []

    async def scenario(proxy: EgressProxy) -> None:
        raw = await _talk(proxy, b"CONNECT github.com:443 HTTP/1.1\r\nHost: x\r\n\r\n")
        assert _status(raw) == 502
        assert b"X-Sbx-Reason: proxy_failed" in raw
        assert b"internal_error" in raw

    run_proxy(tmp_path, scenario, errors=errors)
    assert errors == ["internal error on a connection: RuntimeError: policy bug"]


def test_phase_switch_is_one_way(tmp_path: Path) -> None:
    async def scenario(proxy: EgressProxy) -> None:
        before = proxy.phase  # read once: mypy would keep proxy.phase narrowed to "install"
        assert before == "install"
        assert (tmp_path / "phase").read_text() == "install\n"
        proxy.switch_to_runtime()
        proxy.switch_to_runtime()
        assert proxy.phase == "runtime"
        assert (tmp_path / "phase").read_text() == "runtime\n"

    cfg_changes = {"phase": "install", "phase_file": tmp_path / "phase"}

    async def main() -> None:
        proxy = EgressProxy(config(tmp_path, **cfg_changes), server_context=_no_certificates,
                            secrets={})
        await proxy.start()
        try:
            await scenario(proxy)
        finally:
            await proxy.close()

    asyncio.run(main())


def test_main_refuses_a_mismatched_run_id(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "proxy.json"
    config(tmp_path).write(path)
    assert proxy_module.main([str(path), "run-other"]) == 2
    assert proxy_module.main([]) == 2
    assert proxy_module.main([str(tmp_path / "missing.json")]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "does not match" in captured.err
    assert "usage:" in captured.err


def test_tunnel_carries_bytes_both_ways_with_half_close(tmp_path: Path) -> None:
    payload = bytes(range(256)) * 16384  # 4 MiB

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        received = await reader.read()  # until the client's EOF crosses the tunnel
        writer.write(received[::-1] + b"BYE")
        await writer.drain()
        writer.close()

    async def main() -> None:
        server = await asyncio.start_server(echo, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        net = Network(2, NetworkPhase(), NetworkPhase(allow=(rule(f"127.0.0.1:{port}"),)),
                      False, ())
        proxy = EgressProxy(config(tmp_path, network=net), server_context=_no_certificates,
                            secrets={})
        await proxy.start()
        try:
            async with asyncio.timeout(30):
                reader, writer = await _open_connection("127.0.0.1", proxy.port)
                writer.write(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
                             + payload[:1000])  # eager bytes right behind the CONNECT
                head = await reader.readuntil(b"\r\n\r\n")
                assert head.startswith(b"HTTP/1.1 200 ")
                writer.write(payload[1000:])
                writer.write_eof()
                answer = await reader.read()
                writer.close()
                assert answer == payload[::-1] + b"BYE"
        finally:
            await proxy.close()
            server.close()
            await server.wait_closed()

    asyncio.run(main())


def test_internal_errors_inside_interception_answer_502_over_tls(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sbx.domain.egress.ca import CertificateAuthority

    ca = CertificateAuthority.load_or_create(tmp_path / "state")
    trust = ssl.create_default_context(cadata=ca.certificate_pem().decode())

    def explode(*_: Any) -> Any:
        raise RuntimeError("decision bug")

    monkeypatch.setattr(exchange_module, "decide", explode)
    errors: list[str] = []

    async def main() -> None:
        proxy = EgressProxy(config(tmp_path), server_context=ca.ssl_context_for, secrets={},
                            stderr=errors.append)
        await proxy.start()
        try:
            async with asyncio.timeout(30):
                reader, writer = await _open_connection("127.0.0.1", proxy.port)
                writer.write(b"CONNECT api.github.com:443 HTTP/1.1\r\nHost: x\r\n\r\n")
                assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200 ")
                await writer.start_tls(trust, server_hostname="api.github.com")
                writer.write(b"GET /user HTTP/1.1\r\nHost: api.github.com\r\n\r\n")
                answer = await reader.read()
                writer.close()
                assert answer.startswith(b"HTTP/1.1 502 ")
                assert b"internal_error" in answer
        finally:
            await proxy.close()

    asyncio.run(main())
    assert errors == ["internal error on a connection: RuntimeError: decision bug"]
