"""The egress proxy as ``sbx run`` starts it (a subprocess, the ready line on stdout), against a
local "internet": an origin on 127.0.0.1 that answers for any host, reached through the proxy's
upstream-proxy setting. No Docker, no traffic beyond loopback.

Refusals are proven by the proxy's answer (403 body, X-Sbx-* headers), the audit record, and by
what the origin, the upstream proxy or a loopback listener saw: nothing.
"""

from __future__ import annotations

import signal
import socket
import ssl
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from sbx.domain.credentials.secrets import SecretStore
from sbx.domain.egress.proxyconfig import ProxyConfig, ProxyLimits
from sbx.domain.egress.proxycreds import CredentialSpec, Inject
from sbx.domain.kits.compose import Network, NetworkPhase, Rule
from tests.support.origin import Internet, LoopbackListener, ProxyProcess, UpstreamProxy

# Test values stored in the per-test secret store (never a real credential).
SECRET = "ghp_Real-Secret-Value-0123456789abcdef"  # noqa: S105
INSTALL_SECRET = "pkg-install-token-9876543210"  # noqa: S105
EXAMPLE_SECRET = "example-api-key-55555"  # noqa: S105
SENTINEL = "sbx-proxy-managed-github"
EXPLAIN = "sbx explain ./hello --kit ./gh"
ALL_METHODS = ("GET", "HEAD", "POST", "PATCH", "PUT", "DELETE")


def rule(host: str, kit: str, index: int, *, action: str = "allow", methods: Sequence[str] = (),
         paths: Sequence[str] = (), phase: str = "runtime") -> Rule:
    return Rule(host, tuple(methods), tuple(paths), action, kit, index, phase)  # type: ignore[arg-type]


def network(allow: Sequence[Rule] = (), deny: Sequence[Rule] = ()) -> Network:
    phases = {}
    for name in ("install", "runtime"):
        phases[name] = NetworkPhase(tuple(r for r in allow if r.phase == name),
                                    tuple(r for r in deny if r.phase == name))
    return Network(2, phases["install"], phases["runtime"], False, ())


# The gh example (KIT-SPEC §3.3) plus a workload kit and a lock-down kit.
GH_NETWORK = network(
    allow=[
        rule("github.com", "./gh", 0),
        rule("api.github.com", "./gh", 0, methods=ALL_METHODS),
        rule("uploads.github.com", "./gh", 0, methods=("POST", "PUT")),
        rule("example.com", "./hello", 1),
        rule("example.org", "./hello", 1),
        rule("example.net", "./hello", 1),
        rule("install.example.net", "./hello", 1, phase="install"),
        rule("example.com", "./hello", 1, phase="install"),
    ],
    deny=[
        rule("api.github.com", "./gh", 1, action="deny", methods=("DELETE",),
             paths=("/repos/**",)),
        rule("example.net", "./lockdown", 0, action="deny"),
    ],
)

CREDENTIALS = (
    CredentialSpec("github", "runtime", (Inject("api.github.com"),), sentinel=SENTINEL,
                   env="GH_TOKEN", kit="./gh", index=2),
    # inject-only (no variable, no sentinel) on a host granted outright: intercepted for it
    CredentialSpec("example", "runtime", (Inject("example.com", header="X-Api-Key",
                                                 format="%s"),), kit="./hello", index=3),
    CredentialSpec("pkg", "install", (Inject("example.com", header="X-Pkg-Token",
                                             format="token %s"),),
                   sentinel="sbx-proxy-managed-pkg", env="PKG_TOKEN", kit="./hello", index=4),
)


def start(directory: Path, net: Network, *, internet: Internet | None, phase: str = "runtime",
          credentials: Sequence[CredentialSpec] = CREDENTIALS, limits: ProxyLimits | None = None,
          secrets: dict[str, str] | None = None, upstream_url: str | None = None,
          ) -> ProxyProcess:
    home = directory / "state"
    store = SecretStore(home)
    for service, value in (secrets if secrets is not None else
                           {"github": SECRET, "pkg": INSTALL_SECRET,
                            "example": EXAMPLE_SECRET}).items():
        store.set(service, value)
    config = ProxyConfig(
        run_id=f"run-{directory.name}", state_home=home, audit_log=home / "audit.jsonl",
        network=net, phase=phase,  # type: ignore[arg-type]
        credentials=tuple(credentials),
        upstream_proxy=upstream_url or (internet.upstream.url if internet else None),
        upstream_ca_file=internet.pki.ca_file if internet else None,
        explain_command=EXPLAIN, phase_file=directory / "phase", limits=limits or ProxyLimits())
    return ProxyProcess(config, directory / "proxy.json")


@pytest.fixture(scope="module")
def gh(tmp_path_factory: pytest.TempPathFactory, internet: Internet) -> Iterator[ProxyProcess]:
    proxy = start(tmp_path_factory.mktemp("gh"), GH_NETWORK, internet=internet)
    yield proxy
    proxy.stop()


@pytest.fixture(autouse=True)
def _fresh_origin(request: pytest.FixtureRequest) -> None:
    if "internet" in request.fixturenames:
        internet = request.getfixturevalue("internet")
        internet.origin.clear()


def assert_refused(response: Any, *, code: str, host: str, method: str, path: str | None,
                   rule_text: str, explain: str) -> None:
    assert response.status == 403, response.text
    assert response.header("X-Sbx-Reason") == "egress_denied"
    assert response.header("Content-Type").startswith("text/plain")
    body = response.text
    assert f"host: {host}" in body
    assert f"method: {method}" in body
    if path is not None:
        assert f"path: {path}" in body
    assert f"rule: {rule_text}" in body
    assert f"explain: {explain}" in body
    assert f"({response.status}, egress_denied: {code})" in body


# -- allowed, with credentials ---------------------------------------------------------------------


def test_ready_line_and_cmdline(gh: ProxyProcess) -> None:
    assert gh.ready_line == f"SBX-PROXY-READY {gh.port}\n"
    cmdline = Path(f"/proc/{gh.proc.pid}/cmdline").read_bytes().split(b"\0")
    assert gh.config.run_id.encode() in cmdline


def test_allowed_get_gets_the_secret_and_never_the_sentinel(gh: ProxyProcess,
                                                            internet: Internet) -> None:
    responses = gh.client().https("api.github.com", [("GET", "/user"), ("GET", "/repos/x/y")],
                                  headers=[("Authorization", f"Bearer {SENTINEL}"),
                                           ("X-Debug", f"copy of {SENTINEL}")])
    assert [r.status for r in responses] == [200, 200]
    seen = internet.origin.requests()
    assert [(s.method, s.path) for s in seen] == [("GET", "/user"), ("GET", "/repos/x/y")]
    for request in seen:
        assert request.header_values("authorization") == [f"Bearer {SECRET}"]
        assert request.sni == "api.github.com"
        assert all(SENTINEL not in value for _, value in request.headers)
    # the CONNECT went to the corporate proxy by name, not resolved locally
    assert "api.github.com:443" in internet.upstream.targets()
    # what came back is masked: the origin echoed the header, the sandbox never sees the value
    assert SECRET not in responses[0].text
    assert "*" * len(f"Bearer {SECRET}") in responses[0].text


def test_injection_replaces_whatever_the_client_sent(gh: ProxyProcess, internet: Internet) -> None:
    [response] = gh.client().https("api.github.com", [("GET", "/user")],
                                   headers=[("authorization", "token someone-elses"),
                                            ("AUTHORIZATION", "Basic eDp5")])
    assert response.status == 200
    [seen] = internet.origin.requests()
    assert seen.header_values("authorization") == [f"Bearer {SECRET}"]


def test_echoing_origin_cannot_reveal_the_secret(gh: ProxyProcess) -> None:
    client = gh.client()
    [body_echo] = client.https("api.github.com", [("GET", "/echo-headers")])
    [header_echo] = client.https("api.github.com", [("GET", "/set-header-echo")])
    assert SECRET not in body_echo.text
    assert SECRET not in (header_echo.header("X-Echo-Authorization") or "")
    assert SECRET not in header_echo.text


def test_inject_only_credential_on_an_unbounded_host(gh: ProxyProcess,
                                                     internet: Internet) -> None:
    # example.com is granted outright; the proxy intercepts it only to add the key
    [response] = gh.client().https("example.com", [("POST", "/v1/items")], body=b"{}")
    assert response.status == 200
    [seen] = internet.origin.requests()
    assert seen.header_values("x-api-key") == [EXAMPLE_SECRET]
    assert seen.body == b"{}"
    assert seen.header("x-pkg-token") is None  # an install-phase credential, not in runtime


def test_unbounded_host_is_a_plain_tunnel(gh: ProxyProcess, internet: Internet) -> None:
    [response] = gh.client().https("example.org", [("GET", "/bytes/1000")])
    assert response.status == 200
    assert len(response.body) == 1000
    [seen] = internet.origin.requests()
    assert seen.sni == "example.org"  # the origin's own certificate: not intercepted
    assert seen.header("x-api-key") is None


def test_plain_http_absolute_form(gh: ProxyProcess, internet: Internet) -> None:
    response = gh.client().http("GET", "http://github.com/login?next=%2F")
    assert response.status == 200
    [seen] = internet.origin.requests()
    assert not seen.tls
    assert seen.target == "http://github.com/login?next=%2F"  # absolute-form to the upstream
    assert "http://github.com/login?next=%2F" in internet.upstream.targets()


def test_plain_http_never_carries_a_credential(gh: ProxyProcess, internet: Internet) -> None:
    response = gh.client().http("GET", "http://api.github.com/user")
    assert response.status == 403
    assert "credential_needs_tls" in response.text
    assert internet.origin.requests() == []


def test_missing_secret_refuses_instead_of_sending_the_sentinel(
        tmp_path: Path, internet: Internet) -> None:
    with start(tmp_path, GH_NETWORK, internet=internet, secrets={}) as proxy:
        [response] = proxy.client().https("api.github.com", [("GET", "/user")],
                                          headers=[("Authorization", f"Bearer {SENTINEL}")])
        assert response.status == 502
        assert response.header("X-Sbx-Reason") == "credential_unbound"
        assert "sbx secret set github" in response.text
        assert internet.origin.requests() == []
    assert b"credential 'github' has no stored secret" in proxy.stderr
    assert proxy.stdout == b""


# -- refused ---------------------------------------------------------------------------------------


def test_denied_host_names_the_rule_and_the_explain_command(gh: ProxyProcess,
                                                            internet: Internet) -> None:
    connects = len(internet.upstream.targets())
    [response] = gh.client().https("evil.example", [("GET", "/")])
    assert_refused(response, code="default_deny", host="evil.example:443", method="CONNECT",
                   path="-", rule_text="no allow rule (deny by default)",
                   explain=f"{EXPLAIN} evil.example:443")
    assert response.header("X-Sbx-Rule") == "default-deny"
    # The narrowest fix to paste (no name: every sandbox), and the kit author's.
    assert "fix: sbx policy allow evil.example:443\n" in response.text
    assert "kit fix: add `evil.example` to network-policy runtime.allow" in response.text
    assert internet.origin.requests() == []
    assert len(internet.upstream.targets()) == connects  # nothing left the proxy
    fix = {"command": "sbx policy allow evil.example:443", "kit": None,
           "text": "allows only connections to evil.example:443, in the runtime phase, for "
                   "every sandbox (a one-shot run has no name)"}
    assert gh.denials()[-1] == {
        "host": "evil.example", "port": 443, "method": "CONNECT", "path": None,
        "scheme": "https", "rule": "default-deny", "code": "default_deny", "phase": "runtime",
        "status": 403, "fix": fix,
        "suggestion": "add `evil.example` to network-policy runtime.allow"}


def test_allowed_host_denied_method(gh: ProxyProcess, internet: Internet) -> None:
    client = gh.client()
    [deleted_repo] = client.https("api.github.com", [("DELETE", "/repos/x/y")])
    assert_refused(
        deleted_repo, code="deny_rule", host="api.github.com:443", method="DELETE",
        path="/repos/x/y",
        rule_text="./gh capabilities[1] runtime.deny: api.github.com DELETE /repos/** "
                  "(kit ./gh, capability 1, phase runtime, deny)",
        explain=f"{EXPLAIN} DELETE https://api.github.com/repos/x/y")
    assert deleted_repo.header("X-Sbx-Rule") == \
        "./gh capabilities[1] runtime.deny: api.github.com DELETE /repos/**"
    assert internet.origin.requests() == []
    [deleted_gist] = client.https("api.github.com", [("DELETE", "/gists/1")])
    assert deleted_gist.status == 200
    assert [(s.method, s.path) for s in internet.origin.requests()] == [("DELETE", "/gists/1")]
    denial = gh.denials()[-1]
    assert (denial["host"], denial["method"], denial["path"], denial["code"]) == \
        ("api.github.com", "DELETE", "/repos/x/y", "deny_rule")


def test_method_not_in_a_bounded_allow(gh: ProxyProcess, internet: Internet) -> None:
    client = gh.client()
    [get] = client.https("uploads.github.com", [("GET", "/assets/1")])
    assert get.status == 403
    assert "method_not_allowed" in get.text
    [post] = client.https("uploads.github.com", [("POST", "/assets")], body=b"data")
    assert post.status == 200
    assert [(s.method, s.path, s.body) for s in internet.origin.requests()] == \
        [("POST", "/assets", b"data")]


@pytest.mark.parametrize("target", [
    "/repos/../repos/x",
    "/%2e%2e/repos/x",
    "/gists/..%2frepos/x",
    "/gists/..%2Frepos/x",
    "//repos/x",
    "/./repos/x/",
    "/gists/%2e%2e/repos/x",
    "/gists/..%5crepos/x",
    "/gists/..\\repos/x",
])
def test_path_tricks_cannot_slip_past_a_deny(gh: ProxyProcess, internet: Internet,
                                             target: str) -> None:
    [response] = gh.client().https("api.github.com", [("DELETE", target)])
    assert response.status == 403, response.text
    assert response.header("X-Sbx-Reason") == "egress_denied"
    assert internet.origin.requests() == []


def test_lowercase_method_and_method_override_are_judged_too(gh: ProxyProcess,
                                                             internet: Internet) -> None:
    client = gh.client()
    [lower] = client.https("api.github.com", [("delete", "/repos/x/y")])
    assert lower.status == 403
    [override] = client.https("api.github.com", [("POST", "/repos/x/y")],
                              headers=[("X-HTTP-Method-Override", "DELETE")])
    assert override.status == 403
    assert "method_override" in override.text
    assert internet.origin.requests() == []


def test_forwarded_path_is_the_normalised_one(gh: ProxyProcess, internet: Internet) -> None:
    [response] = gh.client().https("api.github.com", [("GET", "/gists/./1/../2?x=%2F")])
    assert response.status == 200
    [seen] = internet.origin.requests()
    assert seen.target == "/gists/2?x=%2F"


def test_deny_from_one_kit_beats_allow_from_another(gh: ProxyProcess,
                                                    internet: Internet) -> None:
    [response] = gh.client().https("example.net", [("GET", "/")])
    assert response.status == 403
    assert response.header("X-Sbx-Rule") == "./lockdown capabilities[0] runtime.deny: example.net"
    assert "(kit ./lockdown, capability 0, phase runtime, deny)" in response.text
    assert "./hello capabilities[1] runtime.allow: example.net" in response.text  # overridden
    assert internet.origin.requests() == []


def test_raw_bytes_to_a_bounded_host_are_refused(gh: ProxyProcess, internet: Internet) -> None:
    connects = len(internet.upstream.targets())
    sock, answer = gh.client().connect("api.github.com", 443)
    assert sock is not None and answer.status == 200
    with sock:
        sock.sendall(b"SSH-2.0-OpenSSH_9.2\r\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    assert data.startswith(b"HTTP/1.1 403 ")
    assert b"egress_denied: not_tls" in data
    assert internet.origin.requests() == []
    assert len(internet.upstream.targets()) == connects


def test_not_http_inside_tls_to_a_bounded_host_is_refused(gh: ProxyProcess,
                                                          internet: Internet) -> None:
    client = gh.client()
    sock, _ = client.connect("api.github.com", 443)
    assert sock is not None
    with client.tls(sock, "api.github.com") as tls:
        tls.sendall(b"\x00\x01binary protocol, not HTTP\r\n\r\n")
        data = tls.recv(65536)
    assert data.startswith(b"HTTP/1.1 403 ")
    assert b"not_http" in data
    assert internet.origin.requests() == []


def test_sni_must_name_the_connect_host(gh: ProxyProcess, internet: Internet) -> None:
    client = gh.client()
    sock, _ = client.connect("api.github.com", 443)
    assert sock is not None
    with pytest.raises(ssl.SSLError), client.tls(sock, "example.com"):
        pass
    assert gh.denials()[-1]["code"] == "sni_mismatch"
    assert internet.origin.requests() == []


def test_host_header_must_name_the_connect_host(gh: ProxyProcess, internet: Internet) -> None:
    client = gh.client()
    [response] = client.https("api.github.com", [("GET", "/user")], host_header="example.com")
    assert response.status == 403
    assert "host_mismatch" in response.text
    [absolute] = client.https("api.github.com", [("GET", "https://example.com/user")])
    assert absolute.status == 403
    plain = client.http("GET", "http://github.com/", host_header="api.github.com")
    assert plain.status == 403
    assert internet.origin.requests() == []


def test_install_only_host_is_refused_in_runtime(gh: ProxyProcess) -> None:
    [response] = gh.client().https("install.example.net", [("GET", "/")])
    assert response.status == 403
    assert "the install phase allows it" in response.text


def test_malformed_and_oversized_requests(gh: ProxyProcess, internet: Internet) -> None:
    client = gh.client()
    huge = client.http("GET", "http://github.com/", headers=[("X-Big", "a" * 70_000)])
    assert huge.status == 431
    long_target = client.http("GET", "http://github.com/" + "a" * 9000)
    assert long_target.status in (414, 431)
    origin_form = socket.create_connection(("127.0.0.1", gh.port), timeout=10)
    with origin_form:
        origin_form.sendall(b"GET / HTTP/1.1\r\nHost: github.com\r\n\r\n")
        assert origin_form.recv(65536).startswith(b"HTTP/1.1 400 ")
    assert internet.origin.requests() == []


# -- destinations ----------------------------------------------------------------------------------


@pytest.fixture
def listeners() -> Iterator[tuple[LoopbackListener, LoopbackListener]]:
    with LoopbackListener() as a, LoopbackListener() as b:
        yield a, b


def test_internal_destinations_are_refused_without_upstream(
        tmp_path: Path, listeners: tuple[LoopbackListener, LoopbackListener]) -> None:
    trap, named = listeners
    everything = network(allow=[rule("*", "./open", 0),
                                rule(f"127.0.0.1:{named.port}", "./hostsvc", 0)])
    with start(tmp_path, everything, internet=None, credentials=()) as proxy:
        client = proxy.client()
        refused = [f"127.0.0.1:{trap.port}", f"localhost:{trap.port}", f"[::1]:{trap.port}",
                   f"2130706433:{trap.port}", f"0x7f.1:{trap.port}", f"0.0.0.0:{trap.port}",
                   f"[::ffff:127.0.0.1]:{trap.port}", f"sub.localhost:{trap.port}"]
        for authority in refused:
            host, _, port = authority.rpartition(":")
            sock, answer = client.connect(host.strip("[]"), int(port))
            assert sock is None and answer.status == 403, authority
            assert "destination_blocked" in answer.text, authority
        plain = client.http("GET", f"http://127.0.0.1:{trap.port}/")
        assert plain.status == 403
        assert trap.connections == 0  # the proxy never connected
        # the same check, and only the 403 and the audit record, for cloud metadata
        sock, metadata = client.connect("169.254.169.254", 80)
        assert sock is None and metadata.status == 403
        assert "link-local" in metadata.text
        # a rule that names the address literally opens it (proves the listener works)
        sock, answer = client.connect("127.0.0.1", named.port)
        assert sock is not None and answer.status == 200
        sock.close()
        deadline = time.monotonic() + 5
        while named.connections == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert named.connections == 1
        denials = proxy.denials()
    assert trap.connections == 0
    assert [d["code"] for d in denials] == ["destination_blocked"] * (len(refused) + 2)
    assert denials[-1]["host"] == "169.254.169.254"


def loopback_name_from_hosts_file() -> str | None:
    """A name that /etc/hosts (read at run time) maps to loopback only, so the proxy resolves it
    from the file: no DNS query leaves the machine."""
    try:
        lines = Path("/etc/hosts").read_text().splitlines()
    except OSError:
        return None
    names: dict[str, set[str]] = {}
    for line in lines:
        fields = line.split("#", 1)[0].split()
        for name in fields[1:]:
            names.setdefault(name.lower(), set()).add(fields[0])
    for name, addresses in names.items():
        if "localhost" in name or name.startswith("ip6-"):  # refused by name already
            continue
        if all(a.startswith("127.") or a == "::1" for a in addresses):
            return name
    return None


def test_a_name_resolving_to_loopback_is_refused(
        tmp_path: Path, listeners: tuple[LoopbackListener, LoopbackListener]) -> None:
    trap, _ = listeners
    name = loopback_name_from_hosts_file()
    if name is None:
        pytest.skip("/etc/hosts maps no name but localhost to a loopback address")
    everything = network(allow=[rule("*", "./open", 0)])
    with start(tmp_path, everything, internet=None, credentials=()) as proxy:
        sock, answer = proxy.client().connect(name, trap.port)
        assert sock is None and answer.status == 403
        assert "loopback" in answer.text
    assert trap.connections == 0


def test_internal_literals_are_refused_with_an_upstream_too(tmp_path: Path,
                                                            internet: Internet) -> None:
    everything = network(allow=[rule("*", "./open", 0)])
    before = len(internet.upstream.targets())
    with start(tmp_path, everything, internet=internet, credentials=()) as proxy:
        for host, port in (("127.0.0.1", 22), ("169.254.169.254", 80), ("localhost", 80),
                           ("10.0.0.1", 443)):
            sock, answer = proxy.client().connect(host, port)
            assert sock is None and answer.status == 403, host
        sock, answer = proxy.client().connect("example.com", 443)  # names go to the upstream
        assert sock is not None and answer.status == 200
        sock.close()
    assert internet.upstream.targets()[before:] == ["example.com:443"]


def test_upstream_proxy_credentials_are_sent_to_the_upstream_only(
        tmp_path: Path, internet: Internet) -> None:
    url = f"http://corp%5Cme:p%40ss@127.0.0.1:{internet.upstream.port}"
    before = len(internet.upstream.records)
    with start(tmp_path, GH_NETWORK, internet=internet, upstream_url=url) as proxy:
        client = proxy.client()
        [tls] = client.https("github.com", [("GET", "/")],
                             headers=[("Proxy-Authorization", "Basic c2FuZGJveDpndWVzcw==")])
        plain = client.http("GET", "http://github.com/x",
                            headers=[("Proxy-Authorization", "Basic c2FuZGJveDpndWVzcw==")])
    assert tls.status == plain.status == 200
    expected = "Basic Y29ycFxtZTpwQHNz"  # corp\me:p@ss
    records = internet.upstream.records[before:]
    assert [r.method for r in records] == ["CONNECT", "GET"]
    for record in records:
        values = [v for k, v in record.headers if k.lower() == "proxy-authorization"]
        assert values == [expected]  # ours, never the sandbox's
    # plain HTTP crosses the upstream as is: only our credential rides on it, the sandbox's is
    # dropped (a tunnelled request carries whatever the sandbox put inside its own TLS)
    [plain_seen] = [seen for seen in internet.origin.requests() if not seen.tls]
    assert plain_seen.header_values("proxy-authorization") == [expected]


def test_https_upstream_proxy(tmp_path: Path, internet: Internet) -> None:
    with UpstreamProxy(internet.origin, tls=internet.pki.server_context()) as secure:
        with start(tmp_path, GH_NETWORK, internet=internet, upstream_url=secure.url) as proxy:
            client = proxy.client()
            [tunnelled] = client.https("example.org", [("GET", "/bytes/100000")])
            [intercepted] = client.https("api.github.com", [("GET", "/user")])
            plain = client.http("GET", "http://github.com/plain")
        assert [r.status for r in (tunnelled, intercepted, plain)] == [200, 200, 200], \
            intercepted.text
        assert len(tunnelled.body) == 100000
        assert secure.targets() == ["example.org:443", "api.github.com:443",
                                    "http://github.com/plain"]
    seen = {s.path: s for s in internet.origin.requests()}
    assert seen["/user"].header_values("authorization") == [f"Bearer {SECRET}"]


def test_sighup_rereads_rotated_and_removed_secrets(tmp_path: Path,
                                                    internet: Internet) -> None:
    with start(tmp_path, GH_NETWORK, internet=internet) as proxy:
        store = SecretStore(Path(proxy.config.state_home))
        client = proxy.client()
        store.set("github", "rotated-value-0001")
        proxy.signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            internet.origin.clear()
            [response] = client.https("api.github.com", [("GET", "/user")])
            assert response.status == 200
            if internet.origin.requests()[0].header("authorization") == \
                    "Bearer rotated-value-0001":
                break
            time.sleep(0.05)
        else:
            raise AssertionError("the rotated secret was not used after SIGHUP")
        store.remove("github")
        proxy.signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            [response] = client.https("api.github.com", [("GET", "/user")])
            if response.status == 502:
                break
            time.sleep(0.05)
        assert response.header("X-Sbx-Reason") == "credential_unbound"
    assert b"rotated-value-0001" not in proxy.stderr + proxy.stdout
    assert SECRET.encode() not in proxy.stderr + proxy.stdout


# -- phases ----------------------------------------------------------------------------------------


def wait_for_phase(proxy: ProxyProcess, phase: str, seconds: float = 10.0) -> None:
    path = Path(proxy.config.phase_file)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip() == phase:
            return
        time.sleep(0.02)
    raise AssertionError(f"the proxy did not reach the {phase} phase in {seconds} s")


def test_install_phase_closes_on_sigusr1(tmp_path: Path, internet: Internet) -> None:
    with start(tmp_path, GH_NETWORK, internet=internet, phase="install") as proxy:
        wait_for_phase(proxy, "install")
        client = proxy.client()
        [before] = client.https("install.example.net", [("GET", "/setup")])
        assert before.status == 200
        [pkg] = client.https("example.com", [("GET", "/simple/")],
                             headers=[("X-Pkg-Token", "token sbx-proxy-managed-pkg")])
        assert pkg.status == 200
        [runtime_only] = client.https("api.github.com", [("GET", "/user")])
        assert runtime_only.status == 403
        seen = {s.path: s for s in internet.origin.requests()}
        assert seen["/simple/"].header_values("x-pkg-token") == [f"token {INSTALL_SECRET}"]
        assert seen["/simple/"].header("x-api-key") is None  # a runtime credential
        tunnel, answer = client.connect("install.example.net", 443)  # open across the switch
        assert tunnel is not None and answer.status == 200
        internet.origin.clear()

        proxy.signal(signal.SIGUSR1)
        wait_for_phase(proxy, "runtime")
        tunnel.settimeout(10)
        with tunnel:
            try:
                closed = tunnel.recv(1) == b""  # the install-phase tunnel was closed
            except ConnectionResetError:
                closed = True
            assert closed
        [after] = client.https("install.example.net", [("GET", "/setup")])
        assert after.status == 403
        assert "the install phase allows it" in after.text
        [pkg_after] = client.https("example.com", [("GET", "/simple/")],
                                   headers=[("X-Pkg-Token", "token sbx-proxy-managed-pkg")])
        assert pkg_after.status == 200
        [seen_after] = internet.origin.requests()
        assert seen_after.header("x-pkg-token") is None  # revoked, and the sentinel dropped
        assert seen_after.header_values("x-api-key") == [EXAMPLE_SECRET]
        proxy.signal(signal.SIGUSR1)  # never back
        [still] = client.https("install.example.net", [("GET", "/setup")])
        assert still.status == 403
        assert proxy.denials()[-1]["phase"] == "runtime"


# -- the secret never leaks ------------------------------------------------------------------------


def test_secret_never_in_output_or_audit(tmp_path: Path, internet: Internet) -> None:
    with start(tmp_path, GH_NETWORK, internet=internet) as proxy:
        client = proxy.client()
        client.https("api.github.com", [("GET", "/user"), ("DELETE", "/repos/a/b")])
        client.https("api.github.com", [("GET", f"/search?q={SECRET}")])
        client.https("api.github.com", [("GET", "/echo-headers")],
                     headers=[("Authorization", f"Bearer {SECRET}")])
        client.https("evil.example", [("GET", "/")])
        client.http("GET", "http://api.github.com/user")
        client.https("api.github.com", [("GET", "/user")], host_header="evil.example")
        assert proxy.proc.poll() is None
    assert proxy.stop() == 0
    assert proxy.stdout == b""  # nothing after the ready line
    assert SECRET.encode() not in proxy.stdout + proxy.stderr
    assert proxy.stderr == b""
    log = Path(proxy.config.audit_log).read_text()
    assert SECRET not in log
    assert len(proxy.denials()) >= 3


def test_sigterm_exits_cleanly(tmp_path: Path) -> None:
    proxy = start(tmp_path, network(), internet=None, credentials=())
    assert proxy.stop() == 0
    assert proxy.stderr == b""
