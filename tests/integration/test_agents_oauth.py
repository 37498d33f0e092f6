"""The agent kits with subscription logins: Claude Code, Codex and Gemini CLI on OAuth.

Each real client (built by test_agents.py's session fixture) runs in a sandbox whose login was
made on the host (``sbx secret login``, against a stand-in of the vendor's token endpoint on the
test "internet": tests/support/agent_logins.py). The stand-in APIs take only the provider's
*current* access token, and the login stored on the host is one the provider has already
replaced, so every client must refresh through sbx's proxy as it really does (Claude Code and
Gemini CLI because the credential file says the token expired, Codex because its first request
gets 401): the refresh goes upstream with the real refresh token, the provider rotates both
tokens, the host's store gets the new ones, the client gets sentinels, and its API call arrives
with the real new access token. Nothing real is in the sandbox's files or environment, and a
token the sandbox makes up is refused with 403 ``credential_not_issued``.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sbx.domain.credentials.oauth import Tokens
from sbx.domain.credentials.oauthstore import OAuthStore
from tests.support.agent_api import Script, StandIn, TokenState
from tests.support.agent_logins import (
    AnthropicAccount,
    ChatGPTBackend,
    CodeAssistAPI,
    Gated,
    GoogleAccount,
    PkceOAuthServer,
    openai_id_token,
    route,
)
from tests.support.origin import Internet
from tests.support.sbxproc import run_sbx

from .test_agents import AGENTS, RUN_TIMEOUT_S, SBX, SCRIPT, agent_versions  # noqa: F401

pytestmark = pytest.mark.docker

INITIAL_ACCESS = "real-access-token-0-initial-0123456789"
INITIAL_REFRESH = "real-refresh-token-0-initial-0123456789"
REPLACED = "real-access-token-0-replaced-0123456789"  # what the provider accepts at first
REAL = ("real-access-token-", "real-refresh-token-")


@dataclass(frozen=True)
class Login:
    kit: str
    agent: str  # `sbx secret login AGENT`
    service: str
    token_host: str
    token_path: str
    api: type[StandIn]
    one_shot: tuple[str, ...]
    sentinel: str  # the access sentinel the kit declares
    credential_file: str  # in the sandbox's HOME
    client_id: str
    form: bool  # the client refreshes with a form body (else JSON)

    @property
    def directory(self) -> Path:
        return AGENTS / self.kit


CLAUDE = Login("claude-code", "claude", "anthropic", "platform.claude.com", "/v1/oauth/token",
               AnthropicAccount, ("claude", "-p"), "sk-ant-oat01-sbx-proxy-managed-anthropic",
               ".claude/.credentials.json", "9d1c250a-e61b-44d9-88ed-5944d1962f5e", False)
CODEX = Login("codex", "codex", "openai", "auth.openai.com", "/oauth/token", ChatGPTBackend,
              ("codex", "exec", "--skip-git-repo-check"), "sbx-proxy-managed-openai-access",
              ".codex/auth.json", "app_EMoamEEZ73f0CkXaXp7hrann", False)
GEMINI = Login("gemini-cli", "gemini", "gemini", "oauth2.googleapis.com", "/token",
               CodeAssistAPI, ("gemini", "-p"), "ya29.sbx-proxy-managed-gemini-access",
               ".gemini/oauth_creds.json",
               "681255809395-oo8ft2oprdrnp9e3aqf6av3hmdib135j.apps.googleusercontent.com", True)
ALL = [pytest.param(x, id=x.kit) for x in (CLAUDE, CODEX, GEMINI)]


@dataclass
class Provider:
    login: Login
    server: PkceOAuthServer
    api: Gated
    google: GoogleAccount | None = None


@pytest.fixture
def provider(internet: Internet, request: pytest.FixtureRequest) -> Iterator[Provider]:
    login: Login = request.node.callspec.params["login"]
    server = PkceOAuthServer(login.token_host, login.token_path,
                             TokenState(REPLACED, INITIAL_REFRESH),
                             client_id=login.client_id)
    if login is CODEX:
        server.id_token = openai_id_token()
    api = Gated(login.api(Script()), server)
    api.install(internet.origin)
    google = GoogleAccount(server) if login is GEMINI else None
    if google is not None:
        route(internet.origin, login.token_host,
              lambda s: server(s) if server.routes_here(s.path) else None, google.handle)
        route(internet.origin, "www.googleapis.com", google.handle)
    else:
        server.install(internet.origin)
    internet.origin.clear()
    try:
        yield Provider(login, server, api, google)
    finally:
        api.uninstall(internet.origin)
        internet.origin.unroute(login.token_host)
        internet.origin.unroute("www.googleapis.com")


def _env(home: Path, config: Path) -> dict[str, str]:
    return {**os.environ, "SBX_HOME": str(home), "SBX_CONFIG": str(config), "NO_COLOR": "1"}


def _store_expired_login(home: Path, service: str) -> None:
    """The user's login as the host holds it: tokens the provider has since replaced, expired
    an hour ago (a login from yesterday)."""
    OAuthStore(home).set(service, Tokens(INITIAL_ACCESS, INITIAL_REFRESH,
                                         time.time() - 3600, ("user:inference",),
                                         source="test").with_identity(openai_id_token()))


def _agent_file(login: Login) -> dict[str, Any]:
    """The login file the agent's own login wrote on the host (its format), expired an hour
    ago with tokens the provider has since replaced."""
    expired_ms = int((time.time() - 3600) * 1000)
    if login is CLAUDE:
        return {"claudeAiOauth": {"accessToken": INITIAL_ACCESS, "refreshToken": INITIAL_REFRESH,
                                  "expiresAt": expired_ms, "scopes": ["user:inference",
                                                                      "user:profile"],
                                  "subscriptionType": "max"}}
    if login is CODEX:
        return {"OPENAI_API_KEY": None, "tokens": {
            "id_token": openai_id_token(), "access_token": INITIAL_ACCESS,
            "refresh_token": INITIAL_REFRESH, "account_id": "acct-sbx-test"},
            "last_refresh": "2026-11-30T10:00:00Z"}
    return {"access_token": INITIAL_ACCESS, "refresh_token": INITIAL_REFRESH,
            "scope": "https://www.googleapis.com/auth/cloud-platform openid",
            "token_type": "Bearer", "expiry_date": expired_ms}


def _import_agent_file(login: Login, env: dict[str, str], tmp_path: Path) -> str:
    """`sbx secret login AGENT --from-file` of the agent's own file; its output."""
    path = tmp_path / "agent-login.json"
    path.write_text(json.dumps(_agent_file(login)), encoding="utf-8")
    done = subprocess.run([SBX, "secret", "login", login.agent, "--from-file", str(path)],
                          env=env, capture_output=True, text=True, timeout=60, check=False,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    return done.stdout + done.stderr


def _run(login: Login, env: dict[str, str], *argv: str) -> tuple[int, str, str]:
    done = run_sbx(["run", str(login.directory), "--arg", "source=staged", "--timeout", "240",
                    "--", *argv], env=env, timeout=RUN_TIMEOUT_S)
    return done.returncode, done.stdout.decode(errors="replace"), \
        done.stderr.decode(errors="replace")


def _no_sentinel_or_secret_left_the_boundary(login: Login, internet: Internet,
                                            *outputs: str) -> None:
    for request in internet.origin.requests():
        text = json.dumps(request.headers) + request.body.decode("utf-8", "replace")
        assert login.sentinel not in text, (request.method, request.path)
        assert "sbx-proxy-managed" not in text and "sbx-oauth-" not in text, request.path
    for output in outputs:
        assert not any(prefix in output for prefix in REAL), output[-2000:]


@pytest.mark.usefixtures("agent_versions")
@pytest.mark.parametrize("login", ALL)
def test_client_starts_logged_in_refreshes_host_side_and_calls_with_the_real_token(
        login: Login, provider: Provider, internet: Internet, state_home: Path,
        tmp_path: Path) -> None:
    env = _env(state_home, internet.sbx_config(tmp_path / "config.toml"))
    imported = _import_agent_file(login, env, tmp_path)
    before = OAuthStore(state_home).get(login.service)
    assert before is not None and before.access_token == INITIAL_ACCESS
    assert before.source.startswith("--from-file ")
    code, out, err = _run(login, env, *login.one_shot, "Say hello.")
    assert code == 0, err[-3000:]
    assert SCRIPT.reply in out
    server = provider.server
    # The client refreshed as it does (its own client id and body format); the proxy sent
    # the real refresh token the host held, never the sentinel.
    [refresh] = [r for r in server.requests if server.form(r).get("grant_type")
                 == "refresh_token"]
    fields = server.form(refresh)
    assert fields["refresh_token"] == INITIAL_REFRESH
    assert fields.get("client_id") == login.client_id
    assert ("json" in (refresh.header("content-type") or "")) is not login.form
    # The provider rotated both tokens; the host's store holds the new ones.
    stored = OAuthStore(state_home).get(login.service)
    assert stored is not None and stored.access_token == server.state.access_token
    assert stored.refresh_token == server.state.refresh_token != INITIAL_REFRESH
    assert stored.refreshes == 1 and stored.expires_at is not None \
        and stored.expires_at > time.time()
    # Every call the API let through carried the new real token; the model was asked.
    assert provider.api.model_requests()
    assert {r.header("authorization") for r in provider.api.inner.recorded()} == \
        {f"Bearer {server.state.access_token}"}
    _no_sentinel_or_secret_left_the_boundary(login, internet, out, err, imported)
    listed = subprocess.run([SBX, "secret", "ls"], env=env, capture_output=True, text=True,
                            timeout=60, check=False, stdin=subprocess.DEVNULL)
    assert listed.returncode == 0, listed.stderr
    assert f"oauth {login.service}: access " in listed.stdout
    assert "refreshed 1x by sbx" in listed.stdout, listed.stdout
    assert "from --from-file " in listed.stdout and "expires " in listed.stdout
    assert not any(prefix in listed.stdout for prefix in REAL)


# Inside the sandbox: the credential file and the mode, then every process's environment and
# every file searched for a real token, and a bearer token the sandbox made up sent to the API.
PROBE = r"""
cf="$HOME/CREDENTIAL_FILE"
echo "mode=$(env | grep -c '^SBX_CRED_.*_MODE=oauth$')"
echo "keyvar=$(env | grep -c -E '^(ANTHROPIC|OPENAI|GEMINI)_API_KEY=')"
echo "file=$(base64 -w0 "$cf")"
echo "environ_hits=$(cat /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n' | grep -c real-)"
echo "file_hits=$(grep -rlsF -e real-access-token- -e real-refresh-token- / \
  --exclude-dir=proc --exclude-dir=sys 2>/dev/null | wc -l)"
curl -sS -m 30 -o /tmp/madeup -D /tmp/madeup.h -w 'madeup_code=%{http_code}\n' \
  -H 'Authorization: Bearer made-up-bearer-token-4242' -X POST -d '{}' URL
echo "madeup_reason=$(tr -d '\r' < /tmp/madeup.h | sed -n 's/^[Xx]-[Ss]bx-[Rr]eason: //p')"
"""
RESOURCE = {"claude-code": "https://api.anthropic.com/v1/messages",
            "codex": "https://chatgpt.com/backend-api/codex/responses",
            "gemini-cli": "https://cloudcode-pa.googleapis.com/v1internal:generateContent"}


@pytest.mark.usefixtures("agent_versions")
@pytest.mark.parametrize("login", ALL)
def test_sandbox_holds_only_sentinels_and_an_invented_token_is_refused(
        login: Login, provider: Provider, internet: Internet, state_home: Path,
        tmp_path: Path) -> None:
    _store_expired_login(state_home, login.service)
    env = _env(state_home, internet.sbx_config(tmp_path / "config.toml"))
    script = PROBE.replace("CREDENTIAL_FILE", login.credential_file).replace(
        "URL", RESOURCE[login.kit])
    code, out, err = _run(login, env, "bash", "-c", script)
    assert code == 0, err[-3000:]
    values = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    assert values["mode"] == "1" and values["keyvar"] == "0"  # the login wins over the key
    rendered = base64.b64decode(values["file"]).decode()
    assert login.sentinel in rendered and "real-" not in rendered
    assert (values["environ_hits"], values["file_hits"]) == ("0", "0")
    assert values["madeup_code"] == "403"
    assert values["madeup_reason"] == "credential_not_issued"
    assert not any("made-up-bearer" in json.dumps(r.headers)
                   for r in internet.origin.requests())
    if login is CODEX:
        # Who the user is, without the signature that made the id_token a credential.
        tokens = json.loads(rendered)["tokens"]
        assert tokens["account_id"] == "acct-sbx-test"
        header, claims, signature = tokens["id_token"].split(".")
        assert json.loads(base64.urlsafe_b64decode(header + "==")) == {
            "alg": "none", "typ": "JWT"}
        assert signature != openai_id_token().split(".")[2]
        assert claims == openai_id_token().split(".")[1]
