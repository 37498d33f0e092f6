"""The OAuth decisions of the egress proxy (sbx.domain.egress.oauth_intercept), without any I/O."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from urllib.parse import parse_qsl

import pytest

from sbx.domain.egress import oauth_intercept as oi
from sbx.domain.egress.plan import credential_env
from sbx.domain.egress.proxycreds import CredentialSpec, Inject, OAuthSpec
from sbx.domain.kits.compose import Credential

ACCESS = "sk-ant-oat01-proxy-managed"
REFRESH = "sk-ant-ort01-proxy-managed"
SPEC = OAuthSpec("console.anthropic.com", "/v1/oauth/token", ("api.anthropic.com",), ACCESS,
                 REFRESH, headers=("authorization", "x-api-key"))
CRED = CredentialSpec("anthropic", "runtime", (), oauth=SPEC)
ROUTES = oi.OAuthRoutes((CRED, CredentialSpec("github", "runtime",
                                              (Inject("api.github.com"),))))


# -- routing ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("host", "port", "path", "hit"), [
    ("console.anthropic.com", 443, "/v1/oauth/token", True),
    ("console.anthropic.com", 443, "/v1/oauth/token/", True),
    ("CONSOLE.anthropic.com", 443, "/v1/oauth/token", True),
    ("console.anthropic.com.", 443, "/v1/oauth/token", True),
    ("console.anthropic.com", 8443, "/v1/oauth/token", True),  # a bare host: every port
    ("console.anthropic.com", 443, "/v1/OAUTH/Token", True),
    ("console.anthropic.com", 443, "/v1/oauth/token;x", True),
    ("console.anthropic.com", 443, "/v1/oauth/token%3bx=1", True),
    ("console.anthropic.com", 443, "/v1/oauth;p/token", True),
    ("console.anthropic.com", 443, "/v1/oauth/token.json", True),
    ("console.anthropic.com", 443, "/v1/oauth/token.", True),
    ("console.anthropic.com", 443, "/v1/oauth/token%2e", True),
    ("console.anthropic.com", 443, "/v1/oauth/%74oken", True),
    ("console.anthropic.com", 443, "/v1/oauth/token%20", True),
    ("console.anthropic.com", 443, "//v1//oauth/./token", True),
    ("console.anthropic.com", 443, "/x/../v1/oauth/token", True),
    ("console.anthropic.com", 443, "/v1/oauth/x/..;/token", True),
    ("console.anthropic.com", 443, "/v1/oauth/tokens", False),
    ("console.anthropic.com", 443, "/v1/oauth", False),
    ("console.anthropic.com", 443, "/v1/oauth/token/more", False),
    ("api.anthropic.com", 443, "/v1/oauth/token", False),
    ("evil-console.anthropic.com", 443, "/v1/oauth/token", False),
])
def test_token_endpoint_matching(host: str, port: int, path: str, hit: bool) -> None:
    found = ROUTES.token_endpoint("runtime", host, port, path)
    assert (found is CRED) is hit


@pytest.mark.parametrize("path", ["/v1/oauth%2ftoken", "/v1/oauth%2Ftoken", "/v1/oauth/token%00",
                                  "/v1/oauth/token%0a", "/v1/oauth\\token", "/v1/oauth/%zz",
                                  "/../v1/oauth/token", "*",
                                  # what an origin decoding twice, or before it cuts the query
                                  # or at a NUL, routes to the endpoint
                                  "/v1/oauth/token%252f", "/v1/oauth%252ftoken",
                                  "/v1/oauth/token%2500", "/v1/oauth/token%3f",
                                  "/v1/oauth/token%3Fgrant_type=x", "/v1/oauth/token%23x",
                                  "/v1/oauth/token%253bx", "/v1/oauth/x%252f..%252ftoken",
                                  "/v1/oauth/token%255c", "/V1/OAUTH/TOKEN%252E"])
def test_an_unreadable_path_on_the_token_host_is_ambiguous(path: str) -> None:
    with pytest.raises(oi.AmbiguousEndpoint) as raised:
        ROUTES.token_endpoint("runtime", "console.anthropic.com", 443, path)
    assert raised.value.service == "anthropic"
    # elsewhere the same path is none of OAuth's business
    assert ROUTES.token_endpoint("runtime", "api.anthropic.com", 443, path) is None


@pytest.mark.parametrize("path", ["/v1/files/100%25.txt", "/v1/oauth/tokens%3f",
                                  "/v1/oauth/authorize%3Fx", "/v1/oauth/token%2525252f"])
def test_other_escaped_paths_on_the_token_host_are_neither_hit_nor_refused(path: str) -> None:
    assert ROUTES.token_endpoint("runtime", "console.anthropic.com", 443, path) is None


def test_token_endpoint_without_a_path_is_any_path_and_phase_scoped() -> None:
    spec = OAuthSpec("auth.openai.com", None, (), "a-sentinel", "r-sentinel")
    routes = oi.OAuthRoutes((CredentialSpec("openai", "install", (), oauth=spec),))
    assert routes.token_endpoint("install", "auth.openai.com", 443, "/oauth/token")
    assert routes.token_endpoint("install", "auth.openai.com", 443, "/x%2fy")
    assert routes.token_endpoint("runtime", "auth.openai.com", 443, "/x") is None


def test_resource_hosts_and_interception() -> None:
    assert ROUTES.resource("runtime", "api.anthropic.com", 443) is CRED
    assert ROUTES.resource("runtime", "api.github.com", 443) is None
    assert ROUTES.resource("install", "api.anthropic.com", 443) is None
    assert ROUTES.intercepts("runtime", "console.anthropic.com", 443)
    assert ROUTES.intercepts("runtime", "api.anthropic.com", 443)
    assert not ROUTES.intercepts("runtime", "api.anthropic.com", 8443)  # port-less: 443 only
    # the token host on every port: a tunnel to another port would carry its answers unread
    assert ROUTES.intercepts("runtime", "console.anthropic.com", 8443)
    assert not ROUTES.intercepts("runtime", "example.com", 443)
    assert ROUTES.services_for("runtime", "console.anthropic.com", 443) == ["anthropic"]
    assert ROUTES.services_for("runtime", "example.com", 443) == []
    assert sorted(ROUTES.sentinels()) == sorted([ACCESS.encode(), REFRESH.encode()])


def test_oauth_spec_from_a_kit_credential_lists_the_inject_headers() -> None:
    credential = Credential(
        service="anthropic", phase="runtime", optional=False, kit="./claude", index=1,
        config={"service": "anthropic", "phase": "runtime",
                "apiKey": {"name": "ANTHROPIC_API_KEY", "proxyManaged": True,
                           "inject": [{"domain": "api.anthropic.com", "header": "X-Api-Key",
                                       "format": "%s"}]},
                "oauth": {"tokenEndpoint": {"host": "console.anthropic.com",
                                            "path": "/v1/oauth/token"},
                          "resourceHosts": ["api.anthropic.com"],
                          "sentinels": {"accessToken": ACCESS, "refreshToken": REFRESH}}})
    spec = CredentialSpec.from_credential(credential, mode="oauth")
    assert spec.oauth is not None and spec.domains == () and spec.env is None
    assert spec.oauth.headers == ("authorization", "x-api-key")
    assert spec.oauth.hosts == ("api.anthropic.com",)
    assert CredentialSpec.from_dict(json.loads(json.dumps(spec.as_dict()))) == spec
    # bound by its API key, or not bound at all: the token endpoint is still the proxy's
    by_key = CredentialSpec.from_credential(credential, mode="apikey")
    assert by_key.domains and by_key.oauth is not None and by_key.oauth.login_only
    assert by_key.oauth.hosts == () and by_key.oauth.token_host == "console.anthropic.com"  # noqa: S105
    assert CredentialSpec.from_dict(json.loads(json.dumps(by_key.as_dict()))) == by_key
    unbound = CredentialSpec.token_endpoint_only(credential)
    assert unbound is not None and unbound.domains == () and unbound.env is None
    routes = oi.OAuthRoutes((unbound,))
    assert routes.token_endpoint("runtime", "console.anthropic.com", 443, "/v1/oauth/token")
    assert routes.resource("runtime", "api.anthropic.com", 443) is None
    assert not routes.intercepts("runtime", "api.anthropic.com", 443)
    assert credential_env([spec, by_key, unbound]) == {
        "SBX_CRED_ANTHROPIC_MODE": "apikey", "ANTHROPIC_API_KEY": "sbx-proxy-managed-anthropic"}
    assert credential_env([spec]) == {"SBX_CRED_ANTHROPIC_MODE": "oauth"}
    assert credential_env([unbound]) == {}


# -- token requests --------------------------------------------------------------------------


def test_refresh_with_the_sentinel_gets_the_real_token_form_and_json() -> None:
    form = b"grant_type=refresh_token&refresh_token=" + REFRESH.encode() + b"&client_id=c%201"
    parsed = oi.parse_token_request(form, "application/x-www-form-urlencoded")
    out = oi.upstream_token_body(parsed, form, SPEC, "anthropic", "real-r")
    assert out is not None
    assert parse_qsl(out.decode()) == [("grant_type", "refresh_token"),
                                       ("refresh_token", "real-r"), ("client_id", "c 1")]
    body = json.dumps({"grant_type": "refresh_token", "refresh_token": REFRESH,
                       "scope": ["a", "b"]}).encode()
    parsed = oi.parse_token_request(body, "application/json; charset=utf-8")
    out = oi.upstream_token_body(parsed, body, SPEC, "anthropic", "real-r")
    assert out is not None and json.loads(out) == {"grant_type": "refresh_token",
                                                   "refresh_token": "real-r",
                                                   "scope": ["a", "b"]}


def test_refresh_with_another_token_is_foreign_and_without_a_stored_one_is_unbound() -> None:
    body = b"grant_type=refresh_token&refresh_token=someone-elses"
    parsed = oi.parse_token_request(body, None)
    with pytest.raises(oi.ForeignCredential) as raised:
        oi.upstream_token_body(parsed, body, SPEC, "anthropic", "real-r")
    assert "someone-elses" not in str(raised.value)
    body = b"grant_type=refresh_token&refresh_token=" + REFRESH.encode()
    parsed = oi.parse_token_request(body, None)
    assert oi.upstream_token_body(parsed, body, SPEC, "anthropic", None) is None


def test_login_grants_go_as_they_are() -> None:
    body = b"grant_type=authorization_code&code=abc&code_verifier=v"
    parsed = oi.parse_token_request(body, "application/x-www-form-urlencoded")
    assert parsed.grant == "authorization_code"
    assert oi.upstream_token_body(parsed, body, SPEC, "anthropic", None) is body


@pytest.mark.parametrize(("body", "kind", "query"), [
    (b"\xff\xfe", None, None), (b"{not json", "application/json", None),
    (b"[1, 2]", "application/json", None),
    (b"a=1&&b", "application/x-www-form-urlencoded", None),
    # a field twice: sbx and the origin could read different grants
    (b"grant_type=authorization_code&grant_type=refresh_token&refresh_token=x", None, None),
    (b'{"grant_type": "authorization_code", "grant_type": "refresh_token"}',
     "application/json", None),
    (b"grant_type=refresh_token&refresh_token=" + REFRESH.encode(), None,
     "grant_type=authorization_code"),
    (b"grant_type=refresh_token&refresh_token=" + REFRESH.encode(), None,
     "client_id=a&client_id=b"),
    # two spellings of one field an origin may read as one
    (b"grant_type=refresh_token&refresh_token=" + REFRESH.encode()
     + b"&refresh_token%5B%5D=attackers", None, None),
    (b'{"grant_type": "refresh_token", "refresh_token": "' + REFRESH.encode()
     + b'", "refreshToken": "attackers"}', "application/json", None),
    (b"grant_type=refresh_token&refresh_token=" + REFRESH.encode(), None, "Refresh-Token=x"),
    # a refresh token in the URL, a variant spelling of the grant, a grant mixed with another
    (b"grant_type=refresh_token", None, "refresh_token=someone-elses"),
    (b"grant_type=Refresh_Token&refresh_token=someone-elses", None, None),
    (b"grant_type=refresh_token%20&refresh_token=someone-elses", None, None),
    (b"grant_type=refresh_token&refresh_token=" + REFRESH.encode() + b"&code=stolen", None,
     None),
    (b'{"grant_type": "refresh_token", "refresh_token": "' + REFRESH.encode()
     + b'", "device_code": "d"}', "application/json", None),
])
def test_unreadable_token_requests(body: bytes, kind: str | None, query: str | None) -> None:
    with pytest.raises(oi.UnreadableTokenRequest):
        oi.parse_token_request(body, kind, query)


def test_the_query_grant_counts_and_the_body_keeps_its_own_fields() -> None:
    body = b"refresh_token=" + REFRESH.encode() + b"&client_id=c"
    parsed = oi.parse_token_request(body, None, "grant_type=refresh_token")
    assert parsed.grant == "refresh_token"
    out = oi.upstream_token_body(parsed, body, SPEC, "anthropic", "real-r")
    assert out is not None and parse_qsl(out.decode()) == [("refresh_token", "real-r"),
                                                           ("client_id", "c")]


# -- resource hosts --------------------------------------------------------------------------


def test_the_access_sentinel_is_swapped_in_credential_headers_only() -> None:
    headers = [(b"authorization", f"Bearer {ACCESS}".encode()), (b"x-api-key", ACCESS.encode()),
               (b"x-other", ACCESS.encode()), (b"accept", b"*/*")]
    out, swapped = oi.swap_credential_headers(headers, CRED, "real-a")
    assert swapped
    assert out == [(b"authorization", b"Bearer real-a"), (b"x-api-key", b"real-a"),
                   (b"x-other", ACCESS.encode()), (b"accept", b"*/*")]


@pytest.mark.parametrize("header", [(b"authorization", b"Bearer made-up"),
                                    (b"authorization", b"Basic eDp5"),
                                    (b"authorization", f"Bearer {REFRESH}".encode()),
                                    (b"x-api-key", b"sk-ant-api03-x")])
def test_a_credential_sbx_did_not_issue_is_foreign(header: tuple[bytes, bytes]) -> None:
    with pytest.raises(oi.ForeignCredential) as raised:
        oi.swap_credential_headers([header], CRED, "real-a")
    assert header[1].decode() not in str(raised.value)


def test_no_credential_passes_and_a_sentinel_without_a_token_is_unbound() -> None:
    headers = [(b"authorization", b""), (b"authorization", b"Bearer"), (b"accept", b"*/*")]
    assert oi.swap_credential_headers(headers, CRED, "real-a") == (headers, False)
    with pytest.raises(oi.NoStoredToken):
        oi.swap_credential_headers([(b"authorization", f"Bearer {ACCESS}".encode())], CRED,
                                   None)


# -- masking ---------------------------------------------------------------------------------


def test_mask_needles_cover_escaped_forms_and_skip_tiny_values() -> None:
    needles = oi.mask_needles(["a/b+c", "xy"])
    assert b"a/b+c" in needles and b"a%2Fb%2Bc" in needles and b"a%2fb%2bc" in needles
    assert b"a\\/b+c" not in needles and b"xy" not in needles
    assert oi.mask_needles(['q"uote']) == [b'q"uote', b"q%22uote", b'q\\"uote']


def test_store_lock_serialises_and_times_out(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with oi.store_lock(tmp_path, "svc"):
            with pytest.raises(TimeoutError):
                async with oi.store_lock(tmp_path, "svc", timeout=0.1):
                    pass
        async with oi.store_lock(tmp_path, "svc", timeout=0.1):
            pass

    asyncio.run(scenario())
    assert (tmp_path / ".svc.lock").stat().st_mode & 0o077 == 0
