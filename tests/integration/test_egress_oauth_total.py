"""Every way a token answer could reach a sandbox unrewritten, tried at the real egress proxy
(a subprocess, as ``sbx run`` starts it) against stand-in OAuth providers on the local
"internet" (tests/support/origin.py), reached through the upstream-proxy setting. No Docker.

What is proven: a provider answering form-encoded (as GitHub does) is rewritten like a JSON
one; spellings of the token path that lenient origins route to the endpoint (case, ``;x``,
``%3b``, ``.json``, ``/``, ``//``, ``%2e``), other methods, a query-string grant, another
port of the token host and a second request on the same connection are all intercepted; a
path sbx cannot normalise (``%2f``, ``%00``), or one a lenient origin decoding twice or
before it cuts the query could route there (``%252f``, ``%2500``, ``%3f``), is refused
before the provider sees it; an answer
sbx cannot rewrite (HTML, a bare token, duplicate keys, a redirect carrying a token, br) is
refused with a 502 and no real token in it; cookies never pass; gzip and chunked answers are
rewritten. The legitimate refresh keeps working and rotates the host's tokens.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qsl, urlencode

import pytest

from sbx.domain.credentials.oauth import Tokens
from sbx.domain.credentials.oauthstore import OAuthStore
from sbx.domain.egress.proxyconfig import ProxyConfig
from sbx.domain.egress.proxycreds import CredentialSpec, OAuthSpec
from sbx.domain.kits.compose import Network, NetworkPhase, Rule
from tests.support.agent_api import OAuthServer, TokenState
from tests.support.origin import Internet, ProxyProcess, Reply, Response, Seen, read_response

SERVICE = "github"
TOKEN_HOST = "github.com"  # noqa: S105 - a host name
TOKEN_PATH = "/login/oauth/access_token"  # noqa: S105 - a path
ACCESS_SENTINEL = "gho_sbx-proxy-managed-access"
REFRESH_SENTINEL = "ghr_sbx-proxy-managed-refresh"
REAL_ACCESS = "real-access-token-0-initial-abcdef"
REAL_REFRESH = "real-refresh-token-0-initial-abcdef"
REAL = ("real-access-token-", "real-refresh-token-")
FORM = [("Content-Type", "application/x-www-form-urlencoded")]


def _network() -> Network:
    rules = tuple(Rule(h, (), (), "allow", "./gh", 0, "runtime")
                  for h in ("api.github.com", TOKEN_HOST))
    return Network(2, NetworkPhase(), NetworkPhase(rules, ()), False, ())


CREDENTIAL = CredentialSpec(
    SERVICE, "runtime", (), kit="./gh", index=1,
    oauth=OAuthSpec(TOKEN_HOST, TOKEN_PATH, ("api.github.com",), ACCESS_SENTINEL,
                    REFRESH_SENTINEL))


@pytest.fixture
def provider(internet: Internet) -> Iterator[OAuthServer]:
    server = OAuthServer(TOKEN_HOST, TOKEN_PATH, TokenState(REAL_ACCESS, REAL_REFRESH),
                         answer_as="form", lenient=True)
    server.install(internet.origin)
    internet.origin.clear()
    yield server
    internet.origin.unroute(TOKEN_HOST)


@pytest.fixture
def proxy(tmp_path: Path, internet: Internet) -> Iterator[ProxyProcess]:
    home = tmp_path / "state"
    OAuthStore(home).set(SERVICE, Tokens(REAL_ACCESS, REAL_REFRESH, 2_000_000_000.0))
    config = ProxyConfig(
        run_id=f"run-{tmp_path.name}", state_home=home, audit_log=home / "audit.jsonl",
        network=_network(), credentials=(CREDENTIAL,), upstream_proxy=internet.upstream.url,
        upstream_ca_file=internet.pki.ca_file, phase_file=tmp_path / "phase",
        login_dir=tmp_path / "run" / "oauth")
    with ProxyProcess(config, tmp_path / "proxy.json") as process:
        yield process


def _exchange(proxy: ProxyProcess, requests: list[bytes], *, port: int = 443) -> list[Response]:
    """Raw requests, one after the other on one intercepted connection to the token host."""
    client = proxy.client()
    sock, answer = client.connect(TOKEN_HOST, port)
    if sock is None:
        return [answer]
    with client.tls(sock, TOKEN_HOST) as tls:
        rfile = tls.makefile("rb")
        out = []
        for raw in requests:
            tls.sendall(raw)
            response = read_response(rfile)
            out.append(response)
            if response.header("connection") == "close":
                break
        rfile.close()
    return out


def _request(method: str, target: str, body: bytes = b"",
             headers: list[tuple[str, str]] = FORM) -> bytes:
    lines = [f"{method} {target} HTTP/1.1", f"Host: {TOKEN_HOST}",
             *(f"{k}: {v}" for k, v in headers), f"Content-Length: {len(body)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


REFRESH_BODY = urlencode({"grant_type": "refresh_token", "refresh_token": REFRESH_SENTINEL,
                          "client_id": "Iv1.sbx"}).encode()


def _no_real_token(response: Response) -> None:
    shown = response.body + json.dumps(response.headers).encode()
    for prefix in REAL:
        assert prefix.encode() not in shown, response


def _store(proxy: ProxyProcess) -> Tokens:
    tokens = OAuthStore(Path(proxy.config.state_home)).get(SERVICE)
    assert tokens is not None
    return tokens


def test_a_form_encoded_refresh_answer_is_rewritten_and_the_host_keeps_the_new_tokens(
        proxy: ProxyProcess, provider: OAuthServer) -> None:
    [response] = _exchange(proxy, [_request("POST", TOKEN_PATH, REFRESH_BODY)])
    assert response.status == 200, response.text
    _no_real_token(response)
    assert dict(parse_qsl(response.text)) == {
        "token_type": "Bearer", "access_token": ACCESS_SENTINEL,
        "refresh_token": REFRESH_SENTINEL, "expires_in": "3600",
        "scope": "user:inference user:profile"}
    assert OAuthServer.form(provider.requests[0])["refresh_token"] == REAL_REFRESH
    stored = _store(proxy)
    assert (stored.access_token, stored.refresh_token) == (provider.state.access_token,
                                                           provider.state.refresh_token)


@pytest.mark.parametrize("target", [
    "/LOGIN/OAUTH/ACCESS_TOKEN", "/login/oauth/access_token;x", "/login/oauth/access_token%3bx",
    "/login/oauth/access_token.json", "/login/oauth/access_token/",
    "//login//oauth/access_token", "/login/oauth/%61ccess_token",
    "/login/x/../oauth/access_token", "/login/oauth/access_token?x=1",
    "https://github.com/login/oauth/access_token",
])
def test_every_spelling_of_the_token_path_is_intercepted(
        proxy: ProxyProcess, provider: OAuthServer, target: str) -> None:
    [response] = _exchange(proxy, [_request("POST", target, REFRESH_BODY)])
    assert response.status == 200, response.text
    _no_real_token(response)
    assert dict(parse_qsl(response.text))["access_token"] == ACCESS_SENTINEL
    [seen] = provider.requests
    assert OAuthServer.form(seen)["refresh_token"] == REAL_REFRESH  # the swap happened
    assert _store(proxy).access_token == provider.state.access_token


@pytest.mark.parametrize("method", ["GET", "PUT", "PATCH"])
def test_other_methods_and_a_grant_in_the_query_are_intercepted(
        proxy: ProxyProcess, provider: OAuthServer, method: str) -> None:
    target = f"{TOKEN_PATH}?grant_type=authorization_code&code={provider.code}"
    [response] = _exchange(proxy, [_request(method, target)])
    assert response.status == 200, response.text
    _no_real_token(response)
    assert dict(parse_qsl(response.text))["access_token"] == ACCESS_SENTINEL


@pytest.mark.parametrize("target", ["/login/oauth%2faccess_token", "/login/oauth%2Faccess_token",
                                    "/login/oauth/access_token%00", "/login/oauth/access_token%0d",
                                    "/login/oauth\\access_token", "/login/oauth/%zz",
                                    "/login/oauth/access_token%252f",
                                    "/login/oauth/access_token%2500",
                                    "/login/oauth/access_token%3fx",
                                    "/login/oauth/access_token%23"])
def test_a_path_sbx_cannot_normalise_on_the_token_host_is_refused(
        proxy: ProxyProcess, provider: OAuthServer, internet: Internet, target: str) -> None:
    [response] = _exchange(proxy, [_request("POST", target, REFRESH_BODY)])
    assert response.status == 403, response.text
    assert response.header("X-Sbx-Reason") == "token_endpoint_ambiguous"
    assert "sbx explain token_endpoint_ambiguous" in response.text
    assert provider.requests == [] and internet.origin.requests() == []
    assert [d["code"] for d in proxy.denials()] == ["ambiguous_token_path"]


def test_a_second_request_on_the_same_connection_is_intercepted_too(
        proxy: ProxyProcess, provider: OAuthServer) -> None:
    first, second = _exchange(proxy, [_request("POST", TOKEN_PATH, REFRESH_BODY),
                                      _request("POST", TOKEN_PATH + ".json", REFRESH_BODY)])
    for response in (first, second):
        assert response.status == 200, response.text
        _no_real_token(response)
    assert provider.state.generation == 2
    assert _store(proxy).refresh_token == provider.state.refresh_token


def test_another_port_of_the_token_host_is_intercepted_not_tunnelled(
        proxy: ProxyProcess, provider: OAuthServer) -> None:
    raw = _request("POST", TOKEN_PATH, REFRESH_BODY).replace(
        f"Host: {TOKEN_HOST}".encode(), f"Host: {TOKEN_HOST}:8443".encode())
    [response] = _exchange(proxy, [raw], port=8443)
    assert response.status == 200, response.text
    _no_real_token(response)
    assert OAuthServer.form(provider.requests[0])["refresh_token"] == REAL_REFRESH


@pytest.mark.parametrize("answer", [
    Reply(200, [("Content-Type", "text/html")], b"<html>real-access-token-9-x</html>"),
    Reply(200, [("Content-Type", "text/plain")], b"real-access-token-9-x"),
    Reply(200, [("Content-Type", "application/json")], b'"real-access-token-9-x"'),
    Reply(200, [("Content-Type", "application/json")],
          b'{"access_token": "real-access-token-9-x", "access_token": "other"}'),
    Reply(200, [("Content-Type", "application/x-www-form-urlencoded")],
          b"access_token=real-access-token-9-x&access_token=other"),
    Reply(302, [("Location", "https://app.example/cb#access_token=real-access-token-9-x")],
          b""),
    Reply(400, [("Content-Type", "text/html")], b"<p>real-refresh-token-9-x</p>"),
    Reply(200, [("Content-Type", "application/json"), ("Content-Encoding", "br")],
          b'{"access_token": "real-access-token-9-x"}'),
], ids=["html", "text", "bare-json", "json-twice", "form-twice", "redirect", "error-html", "br"])
def test_an_answer_sbx_cannot_rewrite_is_refused_never_forwarded(
        proxy: ProxyProcess, internet: Internet, answer: Reply) -> None:
    seen: list[Seen] = []

    def hostile(request: Seen) -> Reply:
        seen.append(request)
        return answer

    internet.origin.route(TOKEN_HOST, hostile)
    try:
        [response] = _exchange(proxy, [_request("POST", TOKEN_PATH, REFRESH_BODY)])
    finally:
        internet.origin.unroute(TOKEN_HOST)
    assert seen, "the provider was asked"
    assert response.status == 502, response.text
    assert response.header("X-Sbx-Reason") in ("token_answer_unrewritable",
                                               "response_unmaskable")
    _no_real_token(response)
    # Audited as what it is: not a policy decision but an answer the proxy would not carry.
    refused = [(e["event_type"], e["details"]["status"]) for e in proxy.audit()
               if e.get("event_type") in ("egress_failed", "egress_denied")]
    assert refused == [("egress_failed", 502)], "the refusal is audited"
    assert _store(proxy).access_token == REAL_ACCESS  # nothing half-read was stored


def test_cookies_and_token_headers_never_pass_and_gzip_and_chunked_are_read(
        proxy: ProxyProcess, internet: Internet) -> None:
    body = json.dumps({"access_token": "real-access-token-7-z", "token_type": "bearer",
                       "refresh_token": "real-refresh-token-7-z"}).encode()

    def answer(_request: Seen) -> Reply:
        return Reply(200, [("Content-Type", "application/json"), ("Content-Encoding", "gzip"),
                           ("Set-Cookie", "user_session=real-access-token-7-z; Secure"),
                           ("X-Access-Token", "real-access-token-7-z"),
                           ("X-Request-Id", "req-1")], gzip.compress(body))

    internet.origin.route(TOKEN_HOST, answer)
    try:
        [response] = _exchange(proxy, [_request("POST", TOKEN_PATH, REFRESH_BODY)])
    finally:
        internet.origin.unroute(TOKEN_HOST)
    assert response.status == 200, response.text
    _no_real_token(response)
    assert response.json()["access_token"] == ACCESS_SENTINEL
    names = {k.lower() for k, _ in response.headers}
    assert "set-cookie" not in names and "x-access-token" not in names
    assert "content-encoding" not in names and response.header("X-Request-Id") == "req-1"
    assert _store(proxy).access_token == "real-access-token-7-z"  # noqa: S105 - test value


def test_a_chunked_answer_split_inside_a_token_is_rewritten(
        proxy: ProxyProcess, internet: Internet) -> None:
    """The origin answers in 3-byte chunks: every token arrives in pieces."""
    body = (b'{"access_token": "real-access-token-8-q", '
            b'"refresh_token": "real-refresh-token-8-q", "token_type": "bearer"}')
    internet.origin.route(TOKEN_HOST, lambda _request: Reply(
        200, [("Content-Type", "application/json")], body, chunk=3))
    try:
        [response] = _exchange(proxy, [_request("POST", TOKEN_PATH, REFRESH_BODY)])
    finally:
        internet.origin.unroute(TOKEN_HOST)
    assert response.status == 200, response.text
    _no_real_token(response)
    assert response.json() == {"access_token": ACCESS_SENTINEL,
                               "refresh_token": REFRESH_SENTINEL, "token_type": "bearer"}
    assert _store(proxy).refresh_token == "real-refresh-token-8-q"  # noqa: S105 - test value


def test_a_credential_bound_by_its_api_key_still_has_its_token_endpoint_rewritten(
        tmp_path: Path, internet: Internet, provider: OAuthServer) -> None:
    """No OAuth login on the host, an API key instead: a login inside the sandbox gets
    sentinels, is kept for the sandbox, and the resource host still gets the API key."""
    from sbx.domain.credentials.secrets import SecretStore
    from sbx.domain.egress.proxycreds import Inject

    home = tmp_path / "state"
    SecretStore(home, keyring=None).set(SERVICE, "ghp_the-users-api-key-0123456789")
    credential = CredentialSpec(
        SERVICE, "runtime", (Inject("api.github.com", format="token %s"),), kit="./gh",
        index=1, oauth=OAuthSpec(TOKEN_HOST, TOKEN_PATH, (), ACCESS_SENTINEL, REFRESH_SENTINEL,
                                 login_only=True))
    config = ProxyConfig(
        run_id=f"run-{tmp_path.name}", state_home=home, audit_log=home / "audit.jsonl",
        network=_network(), credentials=(credential,), upstream_proxy=internet.upstream.url,
        upstream_ca_file=internet.pki.ca_file, phase_file=tmp_path / "phase",
        login_dir=tmp_path / "run" / "oauth")
    with ProxyProcess(config, tmp_path / "proxy.json") as proxy:
        login = urlencode({"grant_type": "authorization_code", "code": provider.code}).encode()
        [response] = _exchange(proxy, [_request("POST", TOKEN_PATH, login)])
        assert response.status == 200, response.text
        _no_real_token(response)
        kept = OAuthStore.at(tmp_path / "run" / "oauth").get(SERVICE)
        assert kept is not None and kept.access_token == provider.state.access_token
        assert OAuthStore(home).get(SERVICE) is None  # never the user's
        internet.origin.clear()
        [api] = proxy.client().https("api.github.com", [("GET", "/user")], headers=[
            ("Authorization", f"Bearer {ACCESS_SENTINEL}")])
        assert api.status == 200
        [seen] = internet.origin.requests()
        assert seen.header("authorization") == "token ghp_the-users-api-key-0123456789"


def test_a_content_encoded_token_request_is_refused_before_the_provider_sees_it(
        proxy: ProxyProcess, provider: OAuthServer) -> None:
    raw = _request("POST", TOKEN_PATH, gzip.compress(REFRESH_BODY),
                   headers=[*FORM, ("Content-Encoding", "gzip")])
    [response] = _exchange(proxy, [raw])
    assert response.status == 400 and "content-encoded" in response.text
    assert provider.requests == []


def test_pipelined_requests_behind_a_token_request_are_each_intercepted(
        proxy: ProxyProcess, provider: OAuthServer) -> None:
    """Two requests in one write, the second a login behind the refresh: both rewritten."""
    login = urlencode({"grant_type": "authorization_code", "code": provider.code}).encode()
    client = proxy.client()
    sock, answer = client.connect(TOKEN_HOST)
    assert sock is not None, answer
    with client.tls(sock, TOKEN_HOST) as tls:
        tls.sendall(_request("POST", TOKEN_PATH, REFRESH_BODY)
                    + _request("POST", TOKEN_PATH.upper(), login))
        with tls.makefile("rb") as rfile:
            responses = [read_response(rfile), read_response(rfile)]
    for response in responses:
        assert response.status == 200, response.text
        _no_real_token(response)
        assert dict(parse_qsl(response.text))["access_token"] == ACCESS_SENTINEL
    assert provider.state.generation == 2
    kept = OAuthStore.at(Path(proxy.config.login_dir)).get(SERVICE)
    assert kept is not None and kept.access_token == provider.state.access_token
    assert _store(proxy).access_token != provider.state.access_token  # the login is not yours
