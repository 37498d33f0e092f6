"""The pure parts of the boundary fixes of issue #10: path parameters in the normaliser, the
ClientHello reader, metadata and internal names, proxy credentials and peers, response decoding
and masking, the owner pipe, the firewall transaction — plus the proxy in-process on 127.0.0.1
for the client checks and the raw-tunnel gate (a local echo server, nothing else)."""

from __future__ import annotations

import asyncio
import base64
import gzip
import ipaddress
import os
import ssl
import subprocess
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

import sbx.proxy as proxy_module
from sbx.base.reasons import Reason
from sbx.domain.egress import clienthello, proxyauth
from sbx.domain.egress.clienthello import ClientHello, NotAClientHello, parse_client_hello
from sbx.domain.egress.configfields import ProxyConfigError
from sbx.domain.egress.encoding import (
    PIECE,
    BodyDecoder,
    CorruptBody,
    UnsupportedEncoding,
    content_codings,
)
from sbx.domain.egress.hosts import internal_name, is_metadata_name
from sbx.domain.egress.paths import normalize_path, path_matches
from sbx.domain.egress.plan import ProxyProcess, proxy_env
from sbx.domain.egress.policy import Request, decide
from sbx.domain.egress.proxyconfig import ProxyConfig
from sbx.domain.kits.compose import Network, NetworkPhase, Rule
from sbx.proxy import EgressProxy, Masker, blocked_address, client_refusal
from sbx.seams.host.firewall import BridgeGuard, bridge_network
from sbx.seams.host.processes import Program


def rule(host: str, *, action: str = "allow", methods: Sequence[str] = (),
         paths: Sequence[str] = (), index: int = 0) -> Rule:
    return Rule(host, tuple(methods), tuple(paths), action, "./kit", index,  # type: ignore[arg-type]
                "runtime", f"capabilities[{index}]")


def network(*rules: Rule) -> Network:
    return Network(2, NetworkPhase(), NetworkPhase(
        allow=tuple(r for r in rules if r.action == "allow"),
        deny=tuple(r for r in rules if r.action == "deny")), False, ())


# -- 6. path parameters ----------------------------------------------------------------------------


@pytest.mark.parametrize(("raw", "normalised"), [
    ("/v1/..;/v2/x", "/v2/x"),
    ("/v1/..;jsessionid=1/v2", "/v2"),
    ("/v1/..;a=b;c=d/v2/", "/v2/"),
    ("/v1/%2e%2e;/v2/x", "/v2/x"),
    ("/v1/%2E%2E%3Bx/v2", "/v2"),
    ("/v1/..%3b/v2", "/v2"),
    ("/v1/.%2e%3B/v2", "/v2"),
    ("/v1/.;x/v2", "/v1/v2"),
    ("/v1/.%3B/v2", "/v1/v2"),
    ("/v1/;x/v2", "/v1/v2"),
    ("/v1/%3Bx/v2", "/v1/v2"),
    ("/v1/x;jsessionid=AB12/y", "/v1/x;jsessionid=AB12/y"),
    ("/v1/x%3bjs/y", "/v1/x%3Bjs/y"),
    ("/v1/x;/y", "/v1/x;/y"),
    ("/v1/...;x/y", "/v1/...;x/y"),  # three dots are a name, not a dot segment
    ("/v1/..;", "/"),
    ("/v1/a/.;", "/v1/a/"),
    ("/..;/x", None),
    ("/v1/..;/..;/x", None),
    ("/%2e%2e%3b/x", None),
])
def test_dot_segments_with_path_parameters_are_dot_segments(raw: str,
                                                             normalised: str | None) -> None:
    assert normalize_path(raw) == normalised


@pytest.mark.parametrize(("pattern", "path", "allow", "deny"), [
    ("/v1/**", "/v1/x;jsessionid=1/y", True, True),
    ("/v1/**", "/v1;x/y", False, True),  # one reading is /v1;x/y: not under /v1/
    ("/v1/**", "/v1%3Bx/y", False, True),
    ("/admin/**", "/admin;x/users", False, True),  # Tomcat reads /admin/users
    ("/admin/**", "/admin%3Bx/users", False, True),
    ("/repos/*/issues", "/repos/o;x/issues", True, True),
    ("/files/*.txt", "/files/a.exe;.txt", False, True),  # stripped: a.exe
    ("/files/*.exe", "/files/a.exe;x", False, True),
    ("/v1/*", "/v1/a;/b", False, False),
    ("/a;b/**", "/a;b/x", True, True),
    ("/v2/**", "/v1/x", False, False),
])
def test_path_parameters_are_matched_both_ways(pattern: str, path: str, allow: bool,
                                               deny: bool) -> None:
    assert path_matches(pattern, path) is allow
    assert path_matches(pattern, path, deny=True) is deny


BOUNDED = network(rule("api.example.com", methods=("GET",), paths=("/v1/**",)),
                  rule("api.example.com", action="deny", methods=("ANY",),
                       paths=("/v1/admin/**",), index=1))


@pytest.mark.parametrize(("path", "code", "forwarded"), [
    ("/v1/..;/v2/x", "path_not_allowed", None),
    ("/v1/%2e%2e;/v2/x", "path_not_allowed", None),
    ("/v1/..%3B/v2/x", "path_not_allowed", None),
    ("/v1/admin;x/users", "deny_rule", None),
    ("/v1/x/..;/admin/users", "deny_rule", None),
    ("/v1;x/users", "path_not_allowed", None),
    ("/v1/users;jsessionid=1", "allowed", "/v1/users;jsessionid=1"),
    ("/v1/a/.;x/b", "allowed", "/v1/a/b"),
])
def test_decide_closes_path_parameter_tricks(path: str, code: str,
                                             forwarded: str | None) -> None:
    """The proxy enforces and ``sbx explain`` explains this very decision."""
    decision = decide(BOUNDED, Request("runtime", "api.example.com", 443, "GET", path))
    assert decision.code == code, decision.reason
    assert decision.allowed is (forwarded is not None)
    if forwarded is not None:
        assert decision.path == forwarded  # what the origin receives


# -- 6. the ClientHello of a raw tunnel ------------------------------------------------------------


def real_client_hello(server_name: str | None) -> bytes:
    """The ClientHello Python's own TLS client sends (OpenSSL), captured from a memory BIO."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = context.wrap_bio(incoming, outgoing, server_hostname=server_name)
    with pytest.raises(ssl.SSLWantReadError):
        obj.do_handshake()
    return outgoing.read()


def hello_bytes(extensions: Sequence[tuple[int, bytes]] | None, *,
                record_sizes: Sequence[int] = ()) -> bytes:
    """A hand-made ClientHello (TLS 1.2 layout), split into records of the given sizes."""
    body = b"\x03\x03" + b"\x11" * 32 + b"\x00" + b"\x00\x02\x13\x01" + b"\x01\x00"
    if extensions is not None:
        block = b"".join(kind.to_bytes(2, "big") + len(data).to_bytes(2, "big") + data
                         for kind, data in extensions)
        body += len(block).to_bytes(2, "big") + block
    message = b"\x01" + len(body).to_bytes(3, "big") + body
    records, at = b"", 0
    for size in (*record_sizes, len(message)):
        piece = message[at:at + size]
        if not piece:
            break
        records += b"\x16\x03\x01" + len(piece).to_bytes(2, "big") + piece
        at += len(piece)
    return records


def sni(*names: bytes, kind: int = 0) -> tuple[int, bytes]:
    entries = b"".join(bytes([kind]) + len(n).to_bytes(2, "big") + n for n in names)
    return 0, len(entries).to_bytes(2, "big") + entries


def test_reads_the_server_name_of_a_real_client_hello() -> None:
    data = real_client_hello("api.github.com")
    assert parse_client_hello(data) == ClientHello("api.github.com", False)
    assert parse_client_hello(real_client_hello(None)) == ClientHello(None, False)
    for cut in range(len(data)):  # every partial read: "need more", never a wrong answer
        assert parse_client_hello(data[:cut]) is None
    assert parse_client_hello(data + b"\x17\x03\x03\x00\x01x") == \
        ClientHello("api.github.com", False)  # bytes after it are not part of it


def test_a_client_hello_split_across_records() -> None:
    data = hello_bytes([sni(b"example.org")], record_sizes=(3, 10, 7))
    assert parse_client_hello(data) == ClientHello("example.org", False)
    assert parse_client_hello(data[:-1]) is None


def test_hidden_server_names_are_noticed() -> None:
    ech = hello_bytes([sni(b"public.example"), (clienthello.ENCRYPTED_CLIENT_HELLO, b"\x00")])
    assert parse_client_hello(ech) == ClientHello("public.example", True)
    esni = hello_bytes([(clienthello.ENCRYPTED_SERVER_NAME, b"\x00\x01")])
    assert parse_client_hello(esni) == ClientHello(None, True)
    assert parse_client_hello(hello_bytes(None)) == ClientHello(None, False)


@pytest.mark.parametrize("data", [
    b"\x17\x03\x03\x00\x05hello",
    b"\x16\x03\x03\x00\x05\x02\x00\x00\x01\x00",  # a ServerHello
    b"\x16\x02\x00\x00\x05\x01\x00\x00\x01\x00",  # not a TLS record version
    b"\x16\x03\x01\x00\x00",  # an empty record
    hello_bytes([sni(b"a.example"), sni(b"b.example")]),  # the extension twice
    hello_bytes([sni(b"a.example", b"b.example")]),  # two host names
    hello_bytes([sni(b"evil\x00.example")]),
    hello_bytes([(0, b"\x00\x10\x00")]),  # a truncated server name list
    b"\x16\x03\x01\x00\x02\x01\x00" + b"\x17\x03\x03\x00\x01x",  # another record mid-message
])
def test_malformed_client_hellos_are_refused(data: bytes) -> None:
    with pytest.raises(NotAClientHello):
        parse_client_hello(data)


def test_looks_like_tls_and_alerts() -> None:
    assert clienthello.looks_like_tls(b"\x16\x03\x01")
    assert not clienthello.looks_like_tls(b"SSH-2.0-OpenSSH\r\n")
    assert not clienthello.looks_like_tls(b"")
    assert clienthello.alert(112) == b"\x15\x03\x03\x00\x02\x02\x70"


# -- 6. metadata and internal names ----------------------------------------------------------------


@pytest.mark.parametrize("name", [
    "metadata.google.internal", "METADATA.Google.Internal.", "metadata", "metadata.goog",
    "instance-data", "instance-data.ec2.internal", "instance-data.eu-west-1.compute.internal",
    "metadata.azure.com", "metadata.azure.internal", "metadata.packet.net",
    "metadata.platformequinix.com", "metadata.tencentyun.com", "api.metadata.cloud.ibm.com",
])
def test_metadata_names(name: str) -> None:
    assert is_metadata_name(name)
    assert internal_name(name) == "a cloud metadata service name"


@pytest.mark.parametrize(("name", "why"), [
    ("intranet", "single-label"), ("host.docker.internal", ".internal"),
    ("printer.local", ".local"), ("nas.home.arpa", ".home.arpa"),
    ("box.localdomain", ".localdomain"),
])
def test_internal_only_names(name: str, why: str) -> None:
    assert not is_metadata_name(name)
    assert why in (internal_name(name) or "")


@pytest.mark.parametrize("name", ["api.github.com", "metadata.example.com", "example.org",
                                  "169.254.169.254", "100.100.100.200", "fd00:ec2::254",
                                  "internal.example.com"])
def test_public_names_and_literals_are_not_internal_names(name: str) -> None:
    assert internal_name(name) is None
    assert not is_metadata_name(name)


@pytest.mark.parametrize("address", ["169.254.169.254", "169.254.170.2", "100.100.100.200",
                                     "fd00:ec2::254", "::ffff:169.254.169.254",
                                     "fe80::a9fe:a9fe", "192.0.0.192"])
def test_metadata_addresses_are_blocked(address: str) -> None:
    assert blocked_address(ipaddress.ip_address(address)) is not None


# -- 4. proxy credentials and peers ----------------------------------------------------------------


TOKEN = "ab" * 32


def basic(user: str, password: str, scheme: str = "Basic") -> bytes:
    return f"{scheme} {base64.b64encode(f'{user}:{password}'.encode()).decode()}".encode()


@pytest.mark.parametrize(("values", "expected"), [
    ([], proxyauth.MISSING),
    ([basic("sbx", TOKEN)], None),
    ([basic("sbx", TOKEN, "basic")], None),
    ([b"  " + basic("sbx", TOKEN) + b"  "], None),
    ([proxyauth.authorization(TOKEN)], None),
    ([basic("sbx", "cd" * 32)], proxyauth.INVALID),
    ([basic("sbx", TOKEN[:-1])], proxyauth.INVALID),
    ([basic("sbx", TOKEN + "0")], proxyauth.INVALID),
    ([basic("admin", TOKEN)], proxyauth.INVALID),
    ([basic("", TOKEN)], proxyauth.INVALID),
    ([basic("sbx", TOKEN), basic("sbx", TOKEN)], proxyauth.INVALID),
    ([f"Bearer {TOKEN}".encode()], proxyauth.INVALID),
    ([b"Basic !!!notbase64"], proxyauth.INVALID),
    ([b"Basic " + base64.b64encode(TOKEN.encode())], proxyauth.INVALID),  # no user:
    ([b"Basic"], proxyauth.INVALID),
    ([b""], proxyauth.INVALID),
])
def test_proxy_authorization_parsing(values: list[bytes], expected: str | None) -> None:
    assert proxyauth.check_authorization(values, TOKEN) == expected


@pytest.mark.parametrize(("peer", "allowed"), [
    ("172.18.0.2", True), ("172.18.255.254", True), ("::ffff:172.18.0.2", True),
    ("172.18.0.1", False),  # the gateway: where every host process comes from
    ("172.18.0.0", False), ("172.18.255.255", False),  # network and broadcast
    ("172.17.0.2", False), ("127.0.0.1", False), ("10.0.0.5", False),
    ("fe80::1", False), ("not an address", False),
])
def test_peers_must_be_inside_the_run_network(peer: str, allowed: bool) -> None:
    assert proxyauth.peer_allowed(peer, "172.18.0.0/16", "172.18.0.1") is allowed


def test_tokens_and_urls() -> None:
    first, second = proxyauth.new_token(), proxyauth.new_token()
    assert first != second and proxyauth.valid_token(first) and len(first) == 64
    assert not proxyauth.valid_token("sbx:" + first)
    assert proxyauth.proxy_url("172.18.0.1", 3128, first) == f"http://sbx:{first}@172.18.0.1:3128"
    assert proxyauth.proxy_url("172.18.0.1", 3128, None) == "http://172.18.0.1:3128"
    env = proxy_env("172.18.0.1", 3128, first)
    assert {env[k] for k in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")} == \
        {f"http://sbx:{first}@172.18.0.1:3128"}
    # Only the sandbox's own loopback is exempt from the proxy.
    assert env["NO_PROXY"] == env["no_proxy"] == "localhost,127.0.0.1,::1"


def test_the_token_is_not_in_the_proxy_process_repr() -> None:
    process = subprocess.Popen(["true"])
    process.wait()
    handle = ProxyProcess(Program(process), 1, Path("phase"), Path("log"), client_token=TOKEN)
    assert TOKEN not in repr(handle)


def test_client_refusals_name_the_reason_and_never_the_token() -> None:
    missing = client_refusal(proxyauth.MISSING, client="172.18.0.1", host="api.github.com",
                             port=443, method="CONNECT")
    raw = proxy_module.refusal_response(missing, "sbx explain ./k")
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 407 Proxy Authentication Required\r\n")
    assert b'Proxy-Authenticate: Basic realm="sbx egress proxy"' in head
    assert b"X-Sbx-Reason: proxy_client_refused" in head
    assert b"proxy_auth_missing" in body and b"HTTPS_PROXY" in body
    assert b"explain: sbx explain proxy_client_refused" in body
    peer = client_refusal(proxyauth.PEER, client="10.1.2.3")
    assert proxy_module.refusal_response(peer, "sbx explain").startswith(b"HTTP/1.1 403 ")
    assert f"X-Sbx-Reason: {Reason.PROXY_CLIENT_REFUSED.value}".encode() in head


# -- 5. decoding and masking -----------------------------------------------------------------------


SECRET = b"ghp_unit-secret-0123456789"  # a test value


def decode_all(codings: Sequence[str], data: bytes, step: int) -> bytes:
    decoder = BodyDecoder(codings)
    out = b""
    for at in range(0, len(data), step):
        out += b"".join(decoder.feed(data[at:at + step]))
    return out + b"".join(decoder.finish())


@pytest.mark.parametrize("step", [1, 7, 4096])
def test_decoders_undo_gzip_and_deflate_chains(step: int) -> None:
    body = b'{"authorization": "Bearer ' + SECRET + b'"}' * 50
    raw_deflate = zlib.compressobj(wbits=-15)
    cases = {
        ("gzip",): gzip.compress(body),
        ("x-gzip",): gzip.compress(body),
        ("deflate",): zlib.compress(body),
        ("deflate", "raw"): raw_deflate.compress(body) + raw_deflate.flush(),
        ("gzip", "gzip"): gzip.compress(gzip.compress(body)),
        ("deflate", "gzip"): gzip.compress(zlib.compress(body)),
        ("gzip", "members"): gzip.compress(body[:100]) + gzip.compress(body[100:]),
    }
    for key, data in cases.items():
        codings = [c for c in key if c not in ("raw", "members")]
        assert decode_all(codings, data, step) == body, key


def test_decoding_is_streamed_in_bounded_pieces() -> None:
    bomb = gzip.compress(b"\x00" * (20 * PIECE))
    pieces = list(BodyDecoder(["gzip"]).feed(bomb))
    assert len(pieces) >= 20 and max(len(p) for p in pieces) <= PIECE


@pytest.mark.parametrize("codings", [["br"], ["zstd"], ["compress"], ["gzip", "br"],
                                     ["gzip"] * 5, ["exi"]])
def test_unsupported_codings_are_refused(codings: list[str]) -> None:
    with pytest.raises(UnsupportedEncoding):
        BodyDecoder(codings)


def test_corrupt_and_truncated_bodies_never_pass() -> None:
    with pytest.raises(CorruptBody):
        list(BodyDecoder(["gzip"]).feed(b"\x1f\x8b" + b"garbage" * 10))
    decoder = BodyDecoder(["gzip"])
    list(decoder.feed(gzip.compress(b"x" * 1000)[:-10]))
    with pytest.raises(CorruptBody):
        list(decoder.finish())
    assert list(BodyDecoder(["gzip"]).finish()) == []  # an empty body


def test_content_codings_from_headers() -> None:
    headers = [(b"content-type", b"x"), (b"content-encoding", b"GZIP, identity"),
               (b"Content-Encoding", b" br ,")]
    assert content_codings(headers) == ["gzip", "br"]
    assert content_codings([(b"content-encoding", b"identity")]) == []


def test_masking_holds_at_every_split_of_the_secret() -> None:
    text = b"prefix " + SECRET + b" middle " + SECRET + b" end"
    for cut in range(len(text) + 1):
        for second in range(cut, len(text) + 1, 5):
            masker = Masker([SECRET])
            out = masker.feed(text[:cut]) + masker.feed(text[cut:second]) \
                + masker.feed(text[second:]) + masker.flush()
            assert out == text.replace(SECRET, b"*" * len(SECRET)), (cut, second)


def test_escaped_forms_of_the_secret_are_masked_too() -> None:
    secret = "p@ss/w\"rd+0123"  # noqa: S105 - a test value
    forms = proxy_module.escaped_forms(secret.encode())
    assert b"p%40ss%2Fw%22rd%2B0123" in forms and b"p%40ss%2fw%22rd%2b0123" in forms
    assert b'p@ss/w\\"rd+0123' in forms
    masker = Masker(forms)
    echoed = b'{"q": "p%40ss%2Fw%22rd%2B0123", "j": "p@ss/w\\"rd+0123"}'
    assert b"p%40" not in masker.feed(echoed) + masker.flush()


# -- config, owner pipe, start conditions ----------------------------------------------------------


def config(tmp_path: Path, **changes: Any) -> ProxyConfig:
    values: dict[str, Any] = {"run_id": "run-1", "state_home": tmp_path / "state",
                              "audit_log": tmp_path / "state" / "audit.jsonl",
                              "network": BOUNDED}
    values.update(changes)
    return ProxyConfig(**values)


def test_peer_network_round_trips_and_is_validated(tmp_path: Path) -> None:
    original = config(tmp_path, listen_host="172.18.0.1", peer_network="172.18.0.0/16")
    assert ProxyConfig.from_json(original.to_json()) == original
    assert "token" not in original.to_json().lower()
    with pytest.raises(ProxyConfigError, match="peer_network"):
        config(tmp_path, peer_network="not a network")


def test_a_proxy_on_a_network_address_needs_token_and_peer_network(tmp_path: Path) -> None:
    startable = proxy_module.startable
    exposed = config(tmp_path, listen_host="172.18.0.1", peer_network="172.18.0.0/16")
    assert startable(exposed, TOKEN) is None
    assert "client token" in (startable(exposed, None) or "")
    assert startable(config(tmp_path, listen_host="172.18.0.1"), TOKEN) is not None
    assert "malformed" in (startable(exposed, "sbx:" + TOKEN) or "")
    assert startable(config(tmp_path), None) is None  # loopback: tests, doctor


def test_owner_line(tmp_path: Path) -> None:
    read, write = os.pipe()
    try:
        os.write(write, f"{TOKEN}\nlater bytes".encode())
        assert proxy_module.read_owner_line(read) == TOKEN
        assert os.read(read, 100) == b"later bytes"  # nothing after the line was consumed
        os.write(write, b"partial")
        os.close(write)
        write = -1
        assert proxy_module.read_owner_line(read) is None  # EOF before a newline
    finally:
        os.close(read)
        if write >= 0:
            os.close(write)


def test_main_refuses_without_an_owner(tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "proxy.json"
    config(tmp_path, listen_host="172.18.0.1", peer_network="172.18.0.0/16").write(path)
    read, write = os.pipe()
    os.close(write)
    try:
        assert proxy_module.main([str(path)], owner_fd=read) == 1
    finally:
        os.close(read)
    read, write = os.pipe()
    os.write(write, b"\n")
    try:
        assert proxy_module.main([str(path)], owner_fd=read) == 2  # no token, not loopback
    finally:
        os.close(read)
        os.close(write)
    err = capsys.readouterr().err
    assert "nobody owns this proxy" in err and "needs the run's client token" in err


# -- the proxy in-process: client checks and the raw-tunnel gate -----------------------------------


def _no_certificates(host: str) -> ssl.SSLContext:  # pragma: no cover - never reached
    raise AssertionError(f"no interception expected ({host})")


def _run(tmp_path: Path, net: Network, scenario: Any, **changes: Any) -> None:
    token = changes.pop("client_token", None)

    async def main() -> None:
        proxy = EgressProxy(config(tmp_path, network=net, **changes),
                            server_context=_no_certificates, secrets={}, client_token=token)
        await proxy.start()
        try:
            async with asyncio.timeout(30):
                await scenario(proxy)
        finally:
            await proxy.close()

    asyncio.run(main())


async def _talk(port: int, payload: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(payload)
        await writer.drain()
        async with asyncio.timeout(10):
            return await reader.read(1 << 16)
    finally:
        writer.close()


def test_requests_without_credentials_get_407(tmp_path: Path) -> None:
    auth = b"Proxy-Authorization: " + proxyauth.authorization(TOKEN) + b"\r\n"

    async def scenario(proxy: EgressProxy) -> None:
        for payload in (b"CONNECT api.example.com:443 HTTP/1.1\r\nHost: x\r\n\r\n",
                        b"GET http://api.example.com/v1/x HTTP/1.1\r\nHost: api.example.com"
                        b"\r\n\r\n",
                        b"CONNECT api.example.com:443 HTTP/1.1\r\nHost: x\r\n"
                        b"Proxy-Authorization: " + basic("sbx", "00" * 32) + b"\r\n\r\n"):
            raw = await _talk(proxy.port, payload)
            assert raw.startswith(b"HTTP/1.1 407 "), raw
        # with the credentials the policy decides (no origin here: a denied host)
        raw = await _talk(proxy.port, b"CONNECT denied.example:443 HTTP/1.1\r\nHost: x\r\n"
                          + auth + b"\r\n")
        assert raw.startswith(b"HTTP/1.1 403 ") and b"default_deny" in raw

    _run(tmp_path, BOUNDED, scenario, client_token=TOKEN)
    audit = (tmp_path / "state" / "audit.jsonl").read_text()
    assert audit.count("proxy_auth_missing") == 2 and audit.count("proxy_auth_invalid") == 1
    assert TOKEN not in audit and '"client": "127.0.0.1"' in audit


def test_peers_outside_the_network_get_403_even_with_credentials(tmp_path: Path) -> None:
    auth = b"Proxy-Authorization: " + proxyauth.authorization(TOKEN) + b"\r\n"

    async def scenario(proxy: EgressProxy) -> None:
        raw = await _talk(proxy.port, b"CONNECT api.example.com:443 HTTP/1.1\r\nHost: x\r\n"
                          + auth + b"\r\n")
        assert raw.startswith(b"HTTP/1.1 403 ") and b"peer_not_sandbox" in raw

    _run(tmp_path, BOUNDED, scenario, client_token=TOKEN, peer_network="10.99.0.0/24")


def _gate_scenario(tmp_path: Path, first: bytes, server_first: bool = False) -> tuple[bytes,
                                                                                       bytes]:
    """What a client gets back and what the tunnelled server receives, when the client sends
    ``first`` into a raw tunnel to a local server (a literal rule names it)."""
    received = bytearray()
    answer = bytearray()

    async def main() -> None:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            if server_first:
                writer.write(b"220 ready\r\n")
                await writer.drain()
            with_timeout = asyncio.timeout(5)
            try:
                async with with_timeout:
                    received.extend(await reader.read(1 << 16))
            except TimeoutError:
                pass
            writer.write(b"SERVER-REPLY")
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        net = network(rule(f"127.0.0.1:{port}"))
        proxy = EgressProxy(config(tmp_path, network=net), server_context=_no_certificates,
                            secrets={})
        await proxy.start()
        try:
            async with asyncio.timeout(30):
                reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
                writer.write(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
                assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200 ")
                if server_first:
                    answer.extend(await reader.readexactly(len(b"220 ready\r\n")))
                writer.write(first)
                await writer.drain()
                answer.extend(await reader.read(1 << 16))
                writer.close()
        finally:
            await proxy.close()
            server.close()
            await server.wait_closed()

    asyncio.run(main())
    return bytes(answer), bytes(received)


def test_the_gate_refuses_a_mismatched_server_name(tmp_path: Path) -> None:
    answer, received = _gate_scenario(tmp_path, real_client_hello("evil.example"))
    assert answer == clienthello.alert(clienthello.ALERT_UNRECOGNIZED_NAME)
    assert received == b""  # not one byte of the ClientHello reached the server
    audit = (tmp_path / "state" / "audit.jsonl").read_text()
    assert "sni_mismatch" in audit


def test_the_gate_refuses_a_hidden_server_name(tmp_path: Path) -> None:
    ech = hello_bytes([sni(b"127.0.0.1"), (clienthello.ENCRYPTED_CLIENT_HELLO, b"\x00")])
    answer, received = _gate_scenario(tmp_path, ech)
    assert answer == clienthello.alert(clienthello.ALERT_ACCESS_DENIED)
    assert received == b""


def test_the_gate_passes_matching_absent_and_non_tls_first_bytes(tmp_path: Path) -> None:
    for first in (hello_bytes([sni(b"127.0.0.1")]), hello_bytes(None),
                  b"SSH-2.0-OpenSSH_9.2\r\n"):
        answer, received = _gate_scenario(tmp_path, first)
        assert received == first and answer == b"SERVER-REPLY", first[:20]
    answer, received = _gate_scenario(tmp_path, b"EHLO me\r\n", server_first=True)
    assert answer == b"220 ready\r\nSERVER-REPLY" and received == b"EHLO me\r\n"


# -- 8. firewall rules -----------------------------------------------------------------------------


def test_the_accept_rule_names_the_proxy_address_and_the_bridge() -> None:
    guard = BridgeGuard("sbx0123456789ab", "f" * 32, allow_tcp_ports=(41234,),
                        proxy_address="172.18.0.1")
    rules = guard.rules()
    assert all(r[:2] == ["-i", "sbx0123456789ab"] for r in rules)
    assert rules[1][-8:] == \
        ["-d", "172.18.0.1/32", "-p", "tcp", "--dport", "41234", "-j", "ACCEPT"]
    assert rules[-1][-2:] == ["-j", "DROP"]
    script = guard.restore_script().splitlines()
    assert script[0] == "*filter" and script[-1] == "COMMIT"
    inserted = script[1:-1]
    assert all(line.startswith("-I INPUT 1 ") for line in inserted)
    assert inserted[0].endswith("-j DROP") and "ESTABLISHED" in inserted[-1]  # reversed


def test_a_moved_proxy_port_is_redirected_on_the_bridge_before_the_accept() -> None:
    guard = BridgeGuard("sbx0123456789ab", "f" * 32, allow_tcp_ports=(41999,),
                        proxy_address="172.18.0.1", redirect=(41234, 41999))
    [nat] = guard.nat_rules()
    assert nat[:2] == ["-i", "sbx0123456789ab"] and f"sbx-run-{'f' * 32}" in nat
    assert nat[-10:] == ["-d", "172.18.0.1/32", "-p", "tcp", "--dport", "41234", "-j", "DNAT",
                         "--to-destination", "172.18.0.1:41999"]
    assert guard.rules()[1][-4:] == ["--dport", "41999", "-j", "ACCEPT"]
    script = guard.restore_script().splitlines()
    assert script[:3] == ["*nat", "-I PREROUTING 1 " + " ".join(nat), "COMMIT"]
    assert script[3] == "*filter" and script[-1] == "COMMIT"
    assert BridgeGuard("b", "r", proxy_address="172.18.0.1").nat_rules() == []


def test_bridge_network_reads_an_interface() -> None:
    assert bridge_network("lo") == "127.0.0.0/8"
    assert bridge_network("no-such-if0") is None
    assert bridge_network("../etc") is None
