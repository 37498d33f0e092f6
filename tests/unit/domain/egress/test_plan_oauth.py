"""How a run binds an OAuth credential: the mode, the refusals, the sandbox's credential file."""

from __future__ import annotations

import json
import tomllib
from typing import Any

import pytest

from sbx.base.errors import SbxError
from sbx.domain.credentials.oauth import OAuthConfig, Tokens, render_credential_file
from sbx.domain.egress.plan import credential_env, plan_egress
from sbx.domain.egress.proxycreds import CredentialSpec
from sbx.domain.kits.compose import Composition, Credential, Network, NetworkPhase

OAUTH: dict[str, Any] = {
    "tokenEndpoint": {"host": "console.anthropic.com", "path": "/v1/oauth/token"},
    "resourceHosts": ["api.anthropic.com"],
    "sentinels": {"accessToken": "sk-ant-oat01-proxy-managed",
                  "refreshToken": "sk-ant-ort01-proxy-managed"},
    "credentialFile": {"path": "~/.claude/.credentials.json", "structure": {
        "claudeAiOauth": {"accessToken": "{{.AccessToken}}", "refreshToken": "{{.RefreshToken}}",
                          "expiresAt": "{{.ExpiresAt}}", "scopes": "{{.Scopes}}"},
        "primaryApiKey": "{{.PrimaryApiKey}}"}},
}
API_KEY = {"name": "ANTHROPIC_API_KEY",
           "inject": [{"domain": "api.anthropic.com", "header": "x-api-key", "format": "%s"}]}


def _composition(*, oauth: dict[str, Any] | None = OAUTH, api_key: bool = False,
                 optional: bool = False) -> Composition:
    config: dict[str, Any] = {"service": "anthropic", "phase": "runtime"}
    if oauth is not None:
        config["oauth"] = oauth
    if api_key:
        config["apiKey"] = API_KEY
    credential = Credential("anthropic", "runtime", config, optional, "./claude", 1)
    return Composition(kits=("./claude",), network=Network(1, NetworkPhase(), NetworkPhase(),
                                                           False, ()),
                       credentials=(credential,))


def _plan(composition: Composition, *, secret: bool = False, tokens: bool = False) -> Any:
    return plan_egress(composition, has_install_hooks=False,
                       secret_available={"anthropic": secret},
                       oauth_available={"anthropic": tokens})


def test_oauth_only_without_a_login_is_refused_by_name_with_the_login_hint() -> None:
    with pytest.raises(SbxError) as raised:
        _plan(_composition())
    assert raised.value.reason == "credential_unbound"
    assert "anthropic" in raised.value.message
    assert "sbx secret login anthropic" in (raised.value.hint or "")


def test_optional_oauth_without_a_login_is_skipped() -> None:
    plan = _plan(_composition(optional=True))
    assert plan.bound == () and "no OAuth login" in plan.skipped[0].reason


@pytest.mark.slow
@pytest.mark.parametrize(("secret", "tokens", "mode"), [
    (False, True, "oauth"), (True, True, "oauth"), (True, False, "apikey")])
def test_the_mode_prefers_oauth_when_tokens_are_stored(secret: bool, tokens: bool,
                                                       mode: str) -> None:
    plan = _plan(_composition(api_key=True), secret=secret, tokens=tokens)
    assert plan.bound == ("anthropic",) and plan.modes == {"anthropic": mode}
    [credential] = plan.credentials
    spec = CredentialSpec.from_credential(credential, mode=mode)
    env = credential_env([spec])
    assert env["SBX_CRED_ANTHROPIC_MODE"] == mode
    # in OAuth mode the API key's variable is not set: the agent would prefer it
    assert ("ANTHROPIC_API_KEY" in env) is (mode == "apikey")


def test_passthrough_is_refused_by_name_unless_an_api_key_can_stand_in() -> None:
    passthrough = {**OAUTH, "passthrough": True}
    with pytest.raises(SbxError) as raised:
        _plan(_composition(oauth=passthrough), tokens=True)
    assert raised.value.reason == "unsupported_capability"
    assert "passthrough" in raised.value.message
    plan = _plan(_composition(oauth=passthrough, api_key=True), secret=True, tokens=True)
    assert plan.modes == {"anthropic": "apikey"}


def test_the_credential_file_holds_sentinels_and_the_stored_expiry() -> None:
    config = OAuthConfig.from_credential("anthropic", {"oauth": OAUTH})
    assert config is not None
    text = render_credential_file(config, Tokens("real-a", "real-r", 1_900_000_000.5,
                                                 ("user:inference",)))
    assert "real-" not in text
    assert json.loads(text) == {"claudeAiOauth": {
        "accessToken": "sk-ant-oat01-proxy-managed",
        "refreshToken": "sk-ant-ort01-proxy-managed",
        "expiresAt": 1_900_000_000_500, "scopes": ["user:inference"]}}


@pytest.mark.slow
def test_a_toml_credential_file() -> None:
    oauth = {**OAUTH, "credentialFile": {"path": "/etc/agent/auth.toml", "format": "toml",
                                         "structure": {"auth": {"token": "{{.AccessToken}}",
                                                                "at": "{{.ExpiresAt}}"}}}}
    config = OAuthConfig.from_credential("anthropic", {"oauth": oauth})
    assert config is not None
    data = tomllib.loads(render_credential_file(config, None, now=100.0))
    assert data == {"auth": {"token": "sk-ant-oat01-proxy-managed", "at": 3_700_000}}
