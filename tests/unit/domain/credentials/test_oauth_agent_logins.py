"""The agents' own logins (sbx.domain.credentials.agentlogins) and what sbx keeps of them."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from ruamel.yaml import YAML

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.credentials import agentlogins as al
from sbx.domain.credentials.oauth import (
    WITHHELD_ID_TOKEN,
    OAuthConfig,
    Tokens,
    account_from_id_token,
    render_credential_file,
    unsigned_id_token,
)
from sbx.domain.credentials.oauthparse import parse_login, tokens_from_response

AGENTS = Path(__file__).resolve().parents[4] / "examples" / "agents"


def _jwt(claims: dict[str, object]) -> str:
    def part(value: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    return f"{part({'alg': 'RS256'})}.{part(claims)}.cmVhbC1zaWduYXR1cmU"


ID_TOKEN = _jwt({"email": "a@example.com", "https://api.openai.com/auth": {
    "chatgpt_account_id": "acct-1", "chatgpt_user_id": "user-1"}})


@pytest.mark.parametrize("login", list(al.AGENTS.values()), ids=list(al.AGENTS))
def test_each_agent_login_matches_its_kits_token_endpoint(login: al.AgentLogin) -> None:
    """The host-side flow and the kit the sandbox runs must name the same provider."""
    kit = AGENTS / login.kit / f"{login.kit}.yaml"
    data = YAML(typ="safe").load(kit.read_text(encoding="utf-8"))
    [credential] = [c["config"] for c in data["capabilities"]
                    if c["type"] == "com.docker.sandbox/credential@1"]
    assert credential["service"] == login.service
    assert credential["oauth"]["tokenEndpoint"] == {"host": login.token_host,
                                                    "path": login.token_path}
    assert credential["oauth"]["credentialFile"]["path"] == login.credential_file


def test_authorize_url_carries_the_agents_client_and_an_s256_challenge() -> None:
    pkce = al.Pkce.new()
    url = urlsplit(al.authorize_url(al.CLAUDE, pkce))
    query = {k: v[0] for k, v in parse_qs(url.query).items()}
    assert f"{url.scheme}://{url.netloc}{url.path}" == al.CLAUDE.authorize_url
    assert query["client_id"] == al.CLAUDE.client_id and query["code"] == "true"
    assert query["redirect_uri"] == al.CLAUDE.redirect_uri
    digest = hashlib.sha256(pkce.verifier.encode()).digest()
    assert query["code_challenge"] == base64.urlsafe_b64encode(digest).decode().rstrip("=")
    assert query["code_challenge_method"] == "S256" and query["state"] == pkce.state
    assert "user:inference" in query["scope"].split()
    assert len(pkce.verifier) >= 43 and al.Pkce.new().verifier != pkce.verifier


def test_pasted_codes_are_read_in_each_form_and_another_logins_state_is_refused() -> None:
    pkce = al.Pkce.new()
    assert al.pasted_code(al.CLAUDE, f" abc#{pkce.state}\n", pkce) == "abc"
    assert al.pasted_code(al.GEMINI, "4/0Abc\n", pkce) == "4/0Abc"
    assert al.pasted_code(al.GEMINI, f"https://codeassist.google.com/authcode?code=xyz&state="
                          f"{pkce.state}", pkce) == "xyz"
    for bad in ("", "   ", "abc#other-state", "a b"):
        with pytest.raises(SbxError) as caught:
            al.pasted_code(al.CLAUDE, bad, pkce)
        assert caught.value.reason is Reason.LOGIN_FAILED


def test_code_exchange_is_each_agents_own_body() -> None:
    claude = al.code_exchange(al.CLAUDE, "c", "v", "s")
    assert claude.content_type == "application/json"
    assert json.loads(claude.body) == {
        "grant_type": "authorization_code", "code": "c", "redirect_uri": al.CLAUDE.redirect_uri,
        "client_id": al.CLAUDE.client_id, "code_verifier": "v", "state": "s"}
    gemini = al.code_exchange(al.GEMINI, "c", "v", "s")
    fields = {k: v[0] for k, v in parse_qs(gemini.body.decode()).items()}
    assert gemini.content_type == "application/x-www-form-urlencoded"
    assert fields["client_secret"] == al.GEMINI.client_secret and "state" not in fields
    codex = al.code_exchange(al.CODEX, "c", "v")
    assert {k: v[0] for k, v in parse_qs(codex.body.decode()).items()} == {
        "grant_type": "authorization_code", "code": "c", "redirect_uri": al.CODEX.redirect_uri,
        "client_id": al.CODEX.client_id, "code_verifier": "v"}


def test_device_code_answers_are_read_and_bounded() -> None:
    device = al.read_device_code(al.CODEX, {"device_auth_id": "d", "usercode": "AB-12",
                                            "interval": "0"})
    assert (device.user_code, device.device_auth_id, device.interval) == ("AB-12", "d", 1.0)
    assert al.read_device_code(al.CODEX, {"device_auth_id": "d", "user_code": "X",
                                          "interval": 9999}).interval == 60.0
    bad: object
    for bad in ({}, [], {"device_auth_id": "d"}, {"user_code": "X"}):
        with pytest.raises(SbxError):
            al.read_device_code(al.CODEX, bad)
    poll = al.device_poll_request(al.CODEX, device)
    assert json.loads(poll.body) == {"device_auth_id": "d", "user_code": "AB-12"}
    assert al.read_device_grant(al.CODEX, {"authorization_code": "c", "code_verifier": "v",
                                           "code_challenge": "x"}) == ("c", "v")
    assert al.device_pending(403) and al.device_pending(404) and not al.device_pending(500)
    with pytest.raises(SbxError):
        al.read_device_grant(al.CODEX, {"authorization_code": "c"})


def test_an_id_token_keeps_its_claims_and_loses_its_signature() -> None:
    unsigned = unsigned_id_token(ID_TOKEN)
    assert unsigned is not None and unsigned != ID_TOKEN
    header, claims, signature = unsigned.split(".")
    assert json.loads(base64.urlsafe_b64decode(header + "==")) == {"alg": "none", "typ": "JWT"}
    assert claims == ID_TOKEN.split(".")[1] and signature not in ID_TOKEN
    assert account_from_id_token(unsigned) == "acct-1"
    for not_a_jwt in ("abc", "a.b", "a.!!.c", None, 5, "a." + "x" * 20000 + ".c"):
        assert unsigned_id_token(not_a_jwt) is None
    assert WITHHELD_ID_TOKEN.count(".") == 2


def test_a_refresh_counts_and_keeps_who_the_login_is_of() -> None:
    first = tokens_from_response({"access_token": "a1", "refresh_token": "r1",
                                  "id_token": ID_TOKEN, "expires_in": 60},
                                 now=1000.0).with_source("sbx secret login codex")
    assert (first.account, first.refreshes, first.refreshed_at) == ("acct-1", 0, None)
    second = tokens_from_response({"access_token": "a2"}, previous=first, now=2000.0)
    assert (second.refresh_token, second.refreshes, second.refreshed_at) == ("r1", 1, 2000.0)
    assert (second.account, second.identity, second.source) == (
        "acct-1", first.identity, "sbx secret login codex")
    assert Tokens.from_dict(second.as_dict()) == second
    with pytest.raises(ValueError, match="refreshes"):
        Tokens.from_dict({**second.as_dict(), "refreshes": -1})


def test_host_login_files_of_each_agent_are_imported() -> None:
    codex = parse_login(json.dumps({"auth_mode": "chatgpt", "tokens": {
        "id_token": ID_TOKEN, "access_token": "a", "refresh_token": "r",
        "account_id": "acct-file"}, "last_refresh": "2025-01-01T00:00:00Z"}))
    assert (codex.access_token, codex.refresh_token, codex.account) == ("a", "r", "acct-file")
    assert codex.identity == unsigned_id_token(ID_TOKEN)
    gemini = parse_login(json.dumps({"access_token": "ya29.a", "refresh_token": "1//r",
                                     "scope": "openid email", "token_type": "Bearer",
                                     "expiry_date": 1_900_000_000_000}))
    assert gemini.expires_at == 1_900_000_000.0 and gemini.scopes == ("openid", "email")


def test_codex_credential_file_renders_sentinels_identity_and_account() -> None:
    kit = YAML(typ="safe").load((AGENTS / "codex" / "codex.yaml").read_text(encoding="utf-8"))
    [credential] = [c["config"] for c in kit["capabilities"]
                    if c["type"] == "com.docker.sandbox/credential@1"]
    config = OAuthConfig.from_credential("openai", credential)
    assert config is not None
    tokens = Tokens("real-a", "real-r", 5000.0).with_identity(ID_TOKEN)
    rendered = json.loads(render_credential_file(config, tokens, now=0))
    assert rendered["auth_mode"] == "chatgpt" and rendered["OPENAI_API_KEY"] is None
    assert rendered["tokens"] == {"id_token": unsigned_id_token(ID_TOKEN),
                                  "access_token": config.access_sentinel,
                                  "refresh_token": config.refresh_sentinel,
                                  "account_id": "acct-1"}
    bare = json.loads(render_credential_file(config, Tokens("real-a"), now=0))
    assert "account_id" not in bare["tokens"]
    assert bare["tokens"]["id_token"] == WITHHELD_ID_TOKEN
