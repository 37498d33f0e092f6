"""Boundary holes of issue #10, against the egress proxy as ``sbx run`` starts it (a subprocess
whose stdin is its owner's pipe) and the local "internet" (an origin on 127.0.0.1 answering for
any host, reached through the proxy's upstream-proxy setting). No Docker; nothing but loopback.

Each class: only the run's client may use the proxy (407 / peer refusal), the secret cannot come
back inside an encoded, chunked or ranged body, path parameters cannot step out of a bound, a
raw tunnel's TLS server name must be its CONNECT host, cloud metadata names are refused whatever
the upstream, and the proxy ends with its owner. Refusals are proven by the proxy's answer, the
audit record, and by what the origin and the upstream proxy did not see.
"""

from __future__ import annotations

import gzip
import json
import secrets
import shutil
import socket
import ssl
import subprocess
import time
import urllib.request
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from sbx.domain.credentials.secrets import SecretStore
from sbx.domain.egress.proxyconfig import ProxyConfig
from sbx.domain.egress.proxycreds import CredentialSpec, Inject
from sbx.domain.kits.compose import Network, NetworkPhase, Rule
from tests.support.origin import Internet, ProxyProcess, Response, basic_proxy_auth

SECRET = "ghp_Boundary-Secret-0123456789abcdefXYZ"  # noqa: S105 - a test value
SENTINEL = "sbx-proxy-managed-github"
ALL_METHODS = ("GET", "HEAD", "POST", "PATCH", "PUT", "DELETE")


def rule(host: str, kit: str, index: int, *, action: str = "allow", methods: Sequence[str] = (),
         paths: Sequence[str] = ()) -> Rule:
    return Rule(host, tuple(methods), tuple(paths), action, kit, index,  # type: ignore[arg-type]
                "runtime")


def network(allow: Sequence[Rule] = (), deny: Sequence[Rule] = ()) -> Network:
    return Network(2, NetworkPhase(), NetworkPhase(tuple(allow), tuple(deny)), False, ())


BOUNDED = network(
    allow=[rule("github.com", "./gh", 0), rule("example.org", "./hello", 1),
           rule("api.github.com", "./gh", 0, methods=ALL_METHODS, paths=("/v1/**",))],
    deny=[rule("api.github.com", "./gh", 1, action="deny", paths=("/v1/admin/**",))],
)
CREDENTIALS = (CredentialSpec("github", "runtime", (Inject("api.github.com"),),
                              sentinel=SENTINEL, env="GH_TOKEN", kit="./gh", index=2),)


@pytest.fixture(autouse=True)
def _fresh_origin(internet: Internet) -> None:
    internet.origin.clear()


def start(directory: Path, net: Network, internet: Internet, *, token: str | None = None,
          **changes: Any) -> ProxyProcess:
    home = directory / "state"
    SecretStore(home).set("github", SECRET)
    values: dict[str, Any] = {
        "run_id": f"run-{directory.name}", "state_home": home, "audit_log": home / "audit.jsonl",
        "network": net, "credentials": CREDENTIALS, "upstream_proxy": internet.upstream.url,
        "upstream_ca_file": internet.pki.ca_file, "explain_command": "sbx explain ./hello"}
    values.update(changes)
    return ProxyProcess(ProxyConfig(**values), directory / "proxy.json", client_token=token)


def decoded_text(response: Response) -> str:
    """The body as a client that honours Content-Encoding would read it."""
    body = response.body
    codings = [c.strip().lower() for c in (response.header("content-encoding") or "").split(",")]
    for coding in reversed([c for c in codings if c and c != "identity"]):
        if coding in ("gzip", "x-gzip"):
            body = gzip.decompress(body)
        elif coding == "deflate":
            body = zlib.decompress(body)
    return body.decode("utf-8", "replace")


# -- 4. only the run's client may use the proxy ----------------------------------------------------


def test_a_client_without_the_run_token_gets_407_and_nothing_leaves(
        tmp_path: Path, internet: Internet) -> None:
    token = secrets.token_hex(32)
    before = len(internet.upstream.targets())
    with start(tmp_path, BOUNDED, internet, token=token) as proxy:
        anonymous = proxy.client()
        anonymous.proxy_auth = None
        _, missing = anonymous.connect("api.github.com", 443)
        plain = anonymous.http("GET", "http://github.com/anonymous")
        wrong = proxy.client()
        wrong.proxy_auth = basic_proxy_auth(secrets.token_hex(32))
        _, invalid = wrong.connect("api.github.com", 443)
        other_user = proxy.client()
        other_user.proxy_auth = basic_proxy_auth(token, username="admin")
        _, user = other_user.connect("example.org", 443)
        [allowed] = proxy.client().https("api.github.com", [("GET", "/v1/user")])
        denials = proxy.denials()
    for response in (missing, plain, invalid, user):
        assert response.status == 407, response.text
        assert response.header("X-Sbx-Reason") == "proxy_client_refused"
        assert (response.header("Proxy-Authenticate") or "").startswith("Basic ")
        assert "proxy_client_refused" in response.text and "HTTPS_PROXY" in response.text
    assert "proxy_auth_missing" in missing.text and "proxy_auth_invalid" in invalid.text
    assert allowed.status == 200
    # only the authorised request crossed: one CONNECT upstream, one request at the origin
    assert internet.upstream.targets()[before:] == ["api.github.com:443"]
    assert [r.path for r in internet.origin.requests()] == ["/v1/user"]
    codes = [d["code"] for d in denials]
    assert codes == ["proxy_auth_missing", "proxy_auth_missing", "proxy_auth_invalid",
                     "proxy_auth_invalid"]
    assert token not in Path(proxy.config.audit_log).read_text()
    assert token.encode() not in proxy.stdout + proxy.stderr


def test_a_peer_outside_the_run_network_is_refused_even_with_the_token(
        tmp_path: Path, internet: Internet) -> None:
    token = secrets.token_hex(32)
    with start(tmp_path, BOUNDED, internet, token=token,
               peer_network="10.255.255.0/24") as proxy:
        _, answer = proxy.client().connect("example.org", 443)
        plain = proxy.client().http("GET", "http://github.com/x")
        denials = proxy.denials()
    for response in (answer, plain):
        assert response.status == 403
        assert response.header("X-Sbx-Reason") == "proxy_client_refused"
        assert "peer_not_sandbox" in response.text and "127.0.0.1" in response.text
    assert internet.origin.requests() == []
    assert [d["code"] for d in denials] == ["peer_not_sandbox"] * 2
    assert denials[0]["client"] == "127.0.0.1"


def test_curl_requests_and_urllib_send_the_credentials_of_the_proxy_url(
        tmp_path: Path, internet: Internet) -> None:
    import requests

    token = secrets.token_hex(32)
    with start(tmp_path, BOUNDED, internet, token=token) as proxy:
        url = f"http://sbx:{token}@127.0.0.1:{proxy.port}"
        bundle = tmp_path / "bundle.pem"
        bundle.write_bytes(proxy.ca_file.read_bytes() + internet.pki.ca_file.read_bytes())
        codes: dict[str, int] = {}
        if shutil.which("curl"):
            for name, target in (("curl_https", "https://api.github.com/v1/curl"),
                                 ("curl_tunnel", "https://example.org/curl"),
                                 ("curl_http", "http://github.com/curl")):
                done = subprocess.run(
                    ["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "--cacert",
                     str(bundle), "-x", url, target], capture_output=True, text=True,
                    timeout=60, check=False, env={"PATH": "/usr/bin:/bin"})
                codes[name] = int(done.stdout or 0)
        proxies = {"http": url, "https": url}
        with requests.Session() as session:
            session.trust_env = False
            codes["requests_https"] = session.get("https://api.github.com/v1/requests",
                                                  proxies=proxies, verify=str(bundle),
                                                  timeout=30).status_code
            codes["requests_http"] = session.get("http://github.com/requests", proxies=proxies,
                                                 timeout=30).status_code
        opener = urllib.request.build_opener(
            urllib.request.ProxyHandler(proxies),
            urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=str(bundle))))
        for name, target in (("urllib_https", "https://api.github.com/v1/urllib"),
                             ("urllib_http", "http://github.com/urllib")):
            with opener.open(target, timeout=30) as answer:
                codes[name] = answer.status
        denials = proxy.denials()
    assert set(codes.values()) == {200}, codes
    assert denials == []
    seen = {r.path for r in internet.origin.requests()}
    assert {"/v1/requests", "/v1/urllib"} <= seen
    for request in internet.origin.requests():
        assert all(token not in value for _, value in request.headers)  # never forwarded
        if request.path.startswith("/v1/"):
            assert request.header("authorization") == f"Bearer {SECRET}"


# -- 5. masking of encoded, chunked and ranged bodies ----------------------------------------------


@pytest.mark.parametrize("path", [
    "/v1/echo-encoded/gzip",
    "/v1/echo-encoded/x-gzip",
    "/v1/echo-encoded/deflate",
    "/v1/echo-encoded/gzip,deflate",
    "/v1/echo-encoded/gzip/chunk/7",
    "/v1/echo-encoded/identity/chunk/5",
    "/v1/echo-encoded/gzip,gzip/chunk/3",
])
def test_an_encoded_or_chunked_echo_cannot_reveal_the_secret(
        tmp_path: Path, internet: Internet, path: str) -> None:
    with start(tmp_path, BOUNDED, internet) as proxy:
        [response] = proxy.client().https("api.github.com", [("GET", path)],
                                          headers=[("Accept-Encoding", "gzip, deflate, br")])
    assert response.status == 200
    text = decoded_text(response)
    assert SECRET not in text and SECRET[5:25] not in text
    assert "*" * len(f"Bearer {SECRET}") in text  # the echo arrived, masked
    assert response.header("content-encoding") in (None, "identity")
    [seen] = internet.origin.requests()
    assert seen.header_values("accept-encoding") == ["identity"]
    assert seen.header("authorization") == f"Bearer {SECRET}"


@pytest.mark.parametrize("coding", ["br", "zstd", "compress", "gzip,br"])
def test_an_encoding_the_proxy_cannot_read_is_refused(tmp_path: Path, internet: Internet,
                                                     coding: str) -> None:
    with start(tmp_path, BOUNDED, internet) as proxy:
        [response] = proxy.client().https("api.github.com",
                                          [("GET", f"/v1/echo-encoded/{coding}")])
    assert response.status == 502, response.text
    assert response.header("X-Sbx-Reason") == "response_unmaskable"
    assert SECRET not in response.text
    assert "content encoding" in response.text


def test_a_range_request_cannot_cut_the_secret_out(tmp_path: Path, internet: Internet) -> None:
    with start(tmp_path, BOUNDED, internet) as proxy:
        [response] = proxy.client().https("api.github.com", [("GET", "/v1/echo-headers")],
                                          headers=[("Range", "bytes=30-45"),
                                                   ("If-Range", "x")])
    assert response.status == 200
    assert SECRET not in response.text
    [seen] = internet.origin.requests()
    assert seen.header("range") is None and seen.header("if-range") is None


def test_hosts_without_injection_keep_their_encodings(tmp_path: Path,
                                                      internet: Internet) -> None:
    with start(tmp_path, BOUNDED, internet) as proxy:
        response = proxy.client().http("GET", "http://github.com/echo-encoded/gzip",
                                       headers=[("Accept-Encoding", "gzip")])
    assert response.status == 200
    assert response.header("content-encoding") == "gzip"
    [seen] = internet.origin.requests()
    assert seen.header("accept-encoding") == "gzip"


# -- 6. path parameters, raw-tunnel SNI, metadata names --------------------------------------------


@pytest.mark.parametrize(("target", "status", "forwarded"), [
    ("/v1/..;/v2/x", 403, None),
    ("/v1/..;jsessionid=1/v2/x", 403, None),
    ("/v1/%2e%2e;/v2/x", 403, None),
    ("/v1/..%3b/v2/x", 403, None),
    ("/v1/.%2E%3Bx/..;/v2", 403, None),
    ("/v1/admin;x/users", 403, None),
    ("/v1/admin%3Bx/users", 403, None),
    ("/v1/x/..;/admin/users", 403, None),
    ("/v1;x/repos", 403, None),
    ("/v1/repos;jsessionid=AB12/x", 200, "/v1/repos;jsessionid=AB12/x"),
    ("/v1/a/.;x/b", 200, "/v1/a/b"),
    ("/v1/a/b/..;x/c", 200, "/v1/a/c"),
])
def test_path_parameters_cannot_step_out_of_a_bound(tmp_path: Path, internet: Internet,
                                                    target: str, status: int,
                                                    forwarded: str | None) -> None:
    with start(tmp_path, BOUNDED, internet) as proxy:
        [response] = proxy.client().https("api.github.com", [("GET", target)])
    assert response.status == status, response.text
    seen = [r.target for r in internet.origin.requests()]
    assert seen == ([] if forwarded is None else [forwarded])
    if status == 403:
        assert response.header("X-Sbx-Reason") == "egress_denied"


def test_a_raw_tunnel_carries_only_the_server_name_it_was_opened_for(
        tmp_path: Path, internet: Internet) -> None:
    with start(tmp_path, BOUNDED, internet) as proxy:
        client = proxy.client()
        sock, answer = client.connect("example.org", 443)  # unbounded: a raw tunnel
        assert sock is not None and answer.status == 200
        careless = ssl.create_default_context()  # an attacker accepts any certificate
        careless.check_hostname = False
        careless.verify_mode = ssl.CERT_NONE
        with pytest.raises((ssl.SSLError, ConnectionError)) as refused, \
                careless.wrap_socket(sock, server_hostname="evil.example"):
            pass
        [good] = client.https("example.org", [("GET", "/fine")])
        denials = proxy.denials()
    assert "unrecognized name" in str(refused.value).lower() or \
        "UNRECOGNIZED_NAME" in str(refused.value)
    assert good.status == 200
    assert "evil.example" not in internet.origin.server_names()
    assert internet.origin.server_names() == ["example.org"]
    assert [r.path for r in internet.origin.requests()] == ["/fine"]
    assert denials[-1]["code"] == "sni_mismatch" and denials[-1]["host"] == "example.org"


def test_server_first_protocols_still_work_through_a_raw_tunnel(tmp_path: Path) -> None:
    """The client's first bytes are held until judged, the server's flow at once: a server
    that speaks first (SMTP, FTP...) is not stuck behind the check."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    server.settimeout(10)
    open_net = network(allow=[rule(f"127.0.0.1:{port}", "./mail", 0)])
    home = tmp_path / "state"
    config = ProxyConfig(run_id="run-banner", state_home=home, audit_log=home / "audit.jsonl",
                         network=open_net)
    with ProxyProcess(config, tmp_path / "proxy.json") as proxy:
        sock, answer = proxy.client().connect("127.0.0.1", port)
        assert sock is not None and answer.status == 200
        conn, _ = server.accept()
        with conn, sock:
            conn.sendall(b"220 mail.example ESMTP\r\n")
            sock.settimeout(10)
            assert sock.recv(100) == b"220 mail.example ESMTP\r\n"
            sock.sendall(b"EHLO sandbox\r\n")
            conn.settimeout(10)
            assert conn.recv(100) == b"EHLO sandbox\r\n"
    server.close()


METADATA_TARGETS = [
    ("metadata.google.internal", 80), ("metadata.google.internal.", 80), ("metadata", 80),
    ("METADATA.Google.Internal", 443), ("metadata.goog", 80), ("instance-data", 80),
    ("instance-data.ec2.internal", 80), ("instance-data.eu-west-1.compute.internal", 80),
    ("metadata.azure.com", 80), ("metadata.packet.net", 443),
    ("metadata.platformequinix.com", 443), ("metadata.tencentyun.com", 80),
    ("api.metadata.cloud.ibm.com", 80), ("100.100.100.200", 80), ("169.254.169.254", 80),
    ("169.254.170.2", 80), ("fd00:ec2::254", 80), ("::ffff:169.254.169.254", 80),
]


def test_metadata_names_and_addresses_are_refused_whatever_the_upstream(
        tmp_path: Path, internet: Internet) -> None:
    everything = network(allow=[rule("*", "./open", 0)])
    before = len(internet.upstream.targets())
    with start(tmp_path, everything, internet, credentials=()) as proxy:
        client = proxy.client()
        answers = [client.connect(host, port)[1] for host, port in METADATA_TARGETS]
        plain = client.http("GET", "http://metadata.google.internal/computeMetadata/v1/",
                            headers=[("Metadata-Flavor", "Google")])
        sock, fine = client.connect("example.com", 443)
        assert sock is not None
        sock.close()
        denials = proxy.denials()
    for (host, _port), answer in zip(METADATA_TARGETS, answers, strict=True):
        assert answer.status == 403, host
        assert "destination_blocked" in answer.text, host
    assert plain.status == 403 and "metadata" in plain.text
    assert fine.status == 200
    assert internet.upstream.targets()[before:] == ["example.com:443"]  # nothing else left
    assert {d["code"] for d in denials} == {"destination_blocked"}


def test_a_rule_naming_the_metadata_host_opens_it(tmp_path: Path, internet: Internet) -> None:
    named = network(allow=[rule("*", "./open", 0), rule("metadata.google.internal", "./gcp", 1)])
    before = len(internet.upstream.targets())
    with start(tmp_path, named, internet, credentials=()) as proxy:
        sock, answer = proxy.client().connect("metadata.google.internal", 80)
        assert sock is not None and answer.status == 200
        sock.close()
        _, other = proxy.client().connect("metadata", 80)
    assert other.status == 403
    assert internet.upstream.targets()[before:] == ["metadata.google.internal:80"]


# -- 8. the proxy ends with its owner --------------------------------------------------------------


def test_the_proxy_exits_when_its_owner_pipe_closes(tmp_path: Path, internet: Internet) -> None:
    proxy = start(tmp_path, BOUNDED, internet)
    try:
        assert proxy.proc.stdin is not None
        proxy.proc.stdin.close()  # what the kernel does when the owner dies, even by SIGKILL
        deadline = time.monotonic() + 20
        while proxy.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proxy.proc.poll() is not None, "the proxy outlived its owner"
    finally:
        if proxy.proc.poll() is None:
            proxy.proc.kill()
        proxy.proc.wait(10)
        assert proxy.proc.stdout is not None and proxy.proc.stderr is not None
        stderr = proxy.proc.stderr.read()
        proxy.proc.stdout.close()
        proxy.proc.stderr.close()
    assert proxy.proc.returncode == 0, stderr  # a clean exit, not a crash
    assert json.dumps(proxy.denials()) == "[]"
