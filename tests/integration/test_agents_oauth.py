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

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sbx.domain.credentials.oauth import OAuthStore, Tokens
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

from .test_agents import AGENTS, RUN_TIMEOUT_S, SCRIPT, agent_versions  # noqa: F401

pytestmark = pytest.mark.docker

INITIAL_ACCESS = "real-access-token-0-initial-0123456789"
INITIAL_REFRESH = "real-refresh-token-0-initial-0123456789"
REPLACED = "real-access-token-0-replaced-0123456789"  # what the provider accepts at first
REAL = ("real-access-token-", "real-refresh-token-")
ACCOUNT = "acct-sbx-test"  # the ChatGPT account of openai_id_token()


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
                                         source="test", account=ACCOUNT))


@pytest.mark.parametrize("login", ALL)
def test_client_starts_logged_in_refreshes_host_side_and_calls_with_the_real_token(
        login: Login, agent_versions: dict[str, str], provider: Provider, internet: Internet,
        state_home: Path, tmp_path: Path) -> None:
    _store_expired_login(state_home, login.service)
    env = _env(state_home, internet.sbx_config(tmp_path / "config.toml"))
    done = run_sbx(["run", str(login.directory), "--arg", "source=staged", "--timeout", "240",
                    "--", *login.one_shot, "Say hello."], env=env, timeout=RUN_TIMEOUT_S)
    out, err = done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")
    seen = [(r.method, r.header("host"), r.path, r.header("authorization"))
            for r in internet.origin.requests()]
    Path("/tmp/b25-debug.txt").write_text(err + "\n" + "\n".join(map(str, seen)))
    assert done.returncode == 0, (err[-3000:], seen)
    assert SCRIPT.reply in out, (out, seen)
