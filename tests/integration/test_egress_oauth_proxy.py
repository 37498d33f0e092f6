"""The OAuth half of credential@1 at the real egress proxy (a subprocess, as ``sbx run`` starts
it), against the local "internet" reached through the upstream-proxy setting, with the OAuth
stand-in of tests/support/agent_api.py as the provider. No Docker; traffic stays on loopback.

What is proven: the token endpoint is answered with sentinels while the real refresh token
goes upstream and the rotated real tokens land in the host store (0600); a login inside the
sandbox (authorization code) is masked the same way and kept for that sandbox only; the
access sentinel becomes the real access token on the resource host and the real token never
comes back; a credential sbx did not issue is refused with a 403 and the stand-in sees
nothing; nothing is logged.
"""

from __future__ import annotations

import json
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from sbx.domain.credentials.oauth import Tokens
from sbx.domain.credentials.oauthstore import OAuthStore
from sbx.domain.egress.proxyconfig import ProxyConfig
from sbx.domain.egress.proxycreds import CredentialSpec, OAuthSpec
from sbx.domain.kits.compose import Network, NetworkPhase, Rule
from tests.support.agent_api import OAuthServer, TokenState
from tests.support.origin import Internet, ProxyProcess

SERVICE = "anthropic"
TOKEN_HOST = "console.anthropic.com"  # noqa: S105 - a host name
TOKEN_PATH = "/v1/oauth/token"  # noqa: S105 - a path
ACCESS_SENTINEL = "sk-ant-oat01-proxy-managed"
REFRESH_SENTINEL = "sk-ant-ort01-proxy-managed"
REAL_ACCESS = "real-access-token-0-initial-abcdef"
REAL_REFRESH = "real-refresh-token-0-initial-abcdef"


def _network() -> Network:
    rules = (*(Rule(h, (), (), "allow", "./claude", 0, "runtime")
               for h in ("api.anthropic.com", TOKEN_HOST)),
             # bounded, so intercepted: the proxy sees (and drops) what a request carries
             Rule("example.com", ("GET",), (), "allow", "./claude", 0, "runtime"))
    return Network(2, NetworkPhase(), NetworkPhase(rules, ()), False, ())


CREDENTIAL = CredentialSpec(
    SERVICE, "runtime", (), kit="./claude", index=1,
    oauth=OAuthSpec(TOKEN_HOST, TOKEN_PATH, ("api.anthropic.com",), ACCESS_SENTINEL,
                    REFRESH_SENTINEL, headers=("authorization", "x-api-key")))


@pytest.fixture
def provider(internet: Internet) -> Iterator[OAuthServer]:
    server = OAuthServer(TOKEN_HOST, TOKEN_PATH, TokenState(REAL_ACCESS, REAL_REFRESH))
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


def _store(proxy: ProxyProcess) -> OAuthStore:
    return OAuthStore(Path(proxy.config.state_home))


def _token_request(proxy: ProxyProcess, form: dict[str, str], *,
                   as_json: bool = False) -> dict[str, Any]:
    body = json.dumps(form).encode() if as_json else urlencode(form).encode()
    kind = "application/json" if as_json else "application/x-www-form-urlencoded"
    [response] = proxy.client().https(TOKEN_HOST, [("POST", TOKEN_PATH)], body=body,
                                      headers=[("Content-Type", kind)])
    assert response.status == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def _no_secret_in_logs(proxy: ProxyProcess, values: list[str]) -> None:
    proxy.stop()
    logged = proxy.stdout + proxy.stderr + Path(proxy.config.audit_log).read_bytes() \
        if Path(proxy.config.audit_log).exists() else proxy.stdout + proxy.stderr
    for value in values:
        assert value.encode() not in logged


@pytest.mark.parametrize("as_json", [False, True], ids=["form", "json"])
def test_refresh_with_the_sentinel_is_answered_with_sentinels(
        proxy: ProxyProcess, provider: OAuthServer, as_json: bool) -> None:
    answer = _token_request(proxy, {"grant_type": "refresh_token",
                                    "refresh_token": REFRESH_SENTINEL,
                                    "client_id": "claude-code"}, as_json=as_json)
    # the sandbox gets sentinels, the expiry and the other fields as the provider sent them
    assert answer["access_token"] == ACCESS_SENTINEL
    assert answer["refresh_token"] == REFRESH_SENTINEL
    assert (answer["expires_in"], answer["token_type"]) == (3600, "Bearer")
    # the provider saw the real refresh token (and the client's other fields), never a sentinel
    [seen] = provider.requests
    form = OAuthServer.form(seen)
    assert form["refresh_token"] == REAL_REFRESH and form["client_id"] == "claude-code"
    assert REFRESH_SENTINEL.encode() not in seen.body
    # the rotated real tokens are on the host, in a private file
    stored = _store(proxy).get(SERVICE)
    assert stored is not None
    assert (stored.access_token, stored.refresh_token) == (provider.state.access_token,
                                                           provider.state.refresh_token)
    assert stored.access_token != REAL_ACCESS and stored.expires_at is not None
    mode = stat.S_IMODE(_store(proxy).path(SERVICE).stat().st_mode)
    assert mode == 0o600
    # a second refresh uses the rotated token (the old one would be refused by the provider)
    again = _token_request(proxy, {"grant_type": "refresh_token",
                                   "refresh_token": REFRESH_SENTINEL}, as_json=as_json)
    assert again["access_token"] == ACCESS_SENTINEL
    assert provider.state.generation == 2
    _no_secret_in_logs(proxy, [REAL_ACCESS, REAL_REFRESH, provider.state.access_token,
                               provider.state.refresh_token])


def test_login_inside_the_sandbox_is_kept_for_the_sandbox_and_replaced_by_sentinels(
        proxy: ProxyProcess, provider: OAuthServer, internet: Internet) -> None:
    answer = _token_request(proxy, {"grant_type": "authorization_code",
                                    "code": provider.code, "redirect_uri": "http://x/cb"})
    assert (answer["access_token"], answer["refresh_token"]) == (ACCESS_SENTINEL,
                                                                 REFRESH_SENTINEL)
    assert OAuthServer.form(provider.requests[0])["code"] == provider.code
    login = provider.state.access_token
    # the user's own login is untouched; the sandbox's is kept in its own directory (0600)
    stored = _store(proxy).get(SERVICE)
    assert stored is not None and stored.access_token == REAL_ACCESS
    kept = OAuthStore.at(Path(proxy.config.login_dir)).get(SERVICE)
    assert kept is not None and kept.access_token == login
    assert stat.S_IMODE(OAuthStore.at(Path(proxy.config.login_dir)).path(SERVICE)
                        .stat().st_mode) == 0o600
    # and it is what this sandbox uses from now on: on the resource host, and to refresh
    internet.origin.clear()
    [used] = proxy.client().https("api.anthropic.com", [("GET", "/v1/models")],
                                  headers=[("Authorization", f"Bearer {ACCESS_SENTINEL}")])
    assert used.status == 200
    assert internet.origin.requests()[0].header("authorization") == f"Bearer {login}"
    refreshed = _token_request(proxy, {"grant_type": "refresh_token",
                                       "refresh_token": REFRESH_SENTINEL})
    assert refreshed["access_token"] == ACCESS_SENTINEL
    assert OAuthServer.form(provider.requests[-1])["refresh_token"] != REAL_REFRESH
    kept = OAuthStore.at(Path(proxy.config.login_dir)).get(SERVICE)
    assert kept is not None and kept.access_token == provider.state.access_token
    stored = _store(proxy).get(SERVICE)
    assert stored is not None and (stored.access_token, stored.refresh_token) == (
        REAL_ACCESS, REAL_REFRESH)


def test_refresh_with_a_token_sbx_did_not_issue_is_refused(
        proxy: ProxyProcess, provider: OAuthServer) -> None:
    [response] = proxy.client().https(
        TOKEN_HOST, [("POST", TOKEN_PATH)],
        body=urlencode({"grant_type": "refresh_token",
                        "refresh_token": "someone-elses-refresh"}).encode(),
        headers=[("Content-Type", "application/x-www-form-urlencoded")])
    assert response.status == 403
    assert response.header("X-Sbx-Reason") == "credential_not_issued"
    assert "sbx explain credential_not_issued" in response.text
    assert provider.requests == []
    assert [d["code"] for d in proxy.denials()] == ["foreign_credential"]


def test_provider_error_passes_and_keeps_the_stored_tokens(
        proxy: ProxyProcess, provider: OAuthServer) -> None:
    provider.state.refresh_token = "the-provider-forgot-it"  # noqa: S105 - a test value
    [response] = proxy.client().https(
        TOKEN_HOST, [("POST", TOKEN_PATH)],
        body=urlencode({"grant_type": "refresh_token",
                        "refresh_token": REFRESH_SENTINEL}).encode(),
        headers=[("Content-Type", "application/x-www-form-urlencoded")])
    assert response.status == 400 and response.json() == {"error": "invalid_grant"}
    stored = _store(proxy).get(SERVICE)
    assert stored is not None and stored.refresh_token == REAL_REFRESH


def test_resource_host_gets_the_real_access_token_and_never_echoes_it(
        proxy: ProxyProcess, internet: Internet) -> None:
    internet.origin.clear()
    [response, echoed] = proxy.client().https(
        "api.anthropic.com", [("GET", "/v1/models"), ("GET", "/echo-headers")],
        headers=[("Authorization", f"Bearer {ACCESS_SENTINEL}")])
    assert response.status == echoed.status == 200
    seen = internet.origin.requests()
    assert [s.header("authorization") for s in seen] == [f"Bearer {REAL_ACCESS}"] * 2
    assert REAL_ACCESS not in echoed.text and "*" * len(REAL_ACCESS) in echoed.text
    assert ACCESS_SENTINEL not in json.dumps(seen[0].headers)


def test_api_key_header_form_is_swapped_too(proxy: ProxyProcess, internet: Internet) -> None:
    internet.origin.clear()
    [response] = proxy.client().https("api.anthropic.com", [("GET", "/v1/models")],
                                      headers=[("X-Api-Key", ACCESS_SENTINEL)])
    assert response.status == 200
    assert internet.origin.requests()[0].header("x-api-key") == REAL_ACCESS


@pytest.mark.parametrize("header", [("Authorization", "Bearer made-up-token-123"),
                                    ("X-Api-Key", "sk-ant-api03-someone-elses"),
                                    ("Authorization", f"Bearer {REFRESH_SENTINEL}")])
def test_a_credential_sbx_did_not_issue_is_refused_on_the_resource_host(
        proxy: ProxyProcess, internet: Internet, header: tuple[str, str]) -> None:
    internet.origin.clear()
    [response] = proxy.client().https("api.anthropic.com", [("GET", "/v1/models")],
                                      headers=[header])
    assert response.status == 403
    assert response.header("X-Sbx-Reason") == "credential_not_issued"
    assert internet.origin.requests() == []
    assert header[1] not in response.text


def test_the_sentinel_with_no_stored_tokens_is_refused(proxy: ProxyProcess,
                                                       internet: Internet) -> None:
    _store(proxy).remove(SERVICE)
    internet.origin.clear()
    [response] = proxy.client().https("api.anthropic.com", [("GET", "/v1/models")],
                                      headers=[("Authorization", f"Bearer {ACCESS_SENTINEL}")])
    assert response.status == 502
    assert response.header("X-Sbx-Reason") == "credential_unbound"
    assert "sbx secret login anthropic" in response.text
    assert internet.origin.requests() == []


def test_sentinels_never_leave_for_other_intercepted_hosts(proxy: ProxyProcess,
                                               internet: Internet) -> None:
    internet.origin.clear()
    [response] = proxy.client().https("example.com", [("GET", "/x")],
                                      headers=[("Authorization", f"Bearer {ACCESS_SENTINEL}"),
                                               ("X-Other", REFRESH_SENTINEL)])
    assert response.status == 200
    [seen] = internet.origin.requests()
    assert seen.header("authorization") is None and seen.header("x-other") is None


def test_concurrent_refreshes_take_turns_with_the_rotating_token(
        proxy: ProxyProcess, provider: OAuthServer) -> None:
    # Two refreshes at once (two agents, or two sandboxes): without the store's lock both
    # would send the same real refresh token, and the provider would refuse the second.
    from concurrent.futures import ThreadPoolExecutor

    form = {"grant_type": "refresh_token", "refresh_token": REFRESH_SENTINEL}
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda _: _token_request(proxy, form), range(4)))
    assert all(a["access_token"] == ACCESS_SENTINEL for a in answers)
    assert provider.state.generation == 4
    sent = [OAuthServer.form(s)["refresh_token"] for s in provider.requests]
    assert len(set(sent)) == 4 and sent[0] == REAL_REFRESH
    stored = _store(proxy).get(SERVICE)
    assert stored is not None and stored.refresh_token == provider.state.refresh_token
