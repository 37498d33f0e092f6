"""OAuth credentials from inside a real sandbox: sentinels in, real tokens only on the host.

A workload in the agent-like image (bash, curl, python3) reads the sentinel credential file sbx
rendered, refreshes through the token endpoint, calls the resource host with what it got, and
tries a bearer token of its own. The provider is the OAuth stand-in of
tests/support/agent_api.py on the local "internet" (TESTING.md), reached through sbx's
``[network] upstream_proxy``; nothing leaves loopback and the run's own Docker network.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sbx.domain.credentials.oauth import Tokens
from sbx.domain.credentials.oauthstore import OAuthStore
from tests.support.agent_api import AnthropicAPI, OAuthServer, TokenState
from tests.support.origin import Internet

pytestmark = pytest.mark.docker

BOOKWORM = "sbx-base/bookworm:1"
TOKEN_HOST = "console.anthropic.com"  # noqa: S105 - a host name
TOKEN_PATH = "/v1/oauth/token"  # noqa: S105 - a path
ACCESS_SENTINEL = "sk-ant-oat01-proxy-managed"
REFRESH_SENTINEL = "sk-ant-ort01-proxy-managed"
# Every real token of the stand-in starts with one of these (OAuthServer._rotate).
REAL_PREFIXES = ("real-access-token-", "real-refresh-token-")
INITIAL_ACCESS = "real-access-token-0-initial-0123456789"
INITIAL_REFRESH = "real-refresh-token-0-initial-0123456789"
MADE_UP = "made-up-bearer-token-4242"
POLICY = f"""
capabilities:
  - type: com.docker.sandbox/network-policy@1
    config:
      runtime:
        allow: [api.anthropic.com, {TOKEN_HOST}]
  - type: com.docker.sandbox/credential@1
    config:
      service: anthropic
      phase: runtime
      oauth:
        tokenEndpoint: {{host: {TOKEN_HOST}, path: {TOKEN_PATH}}}
        resourceHosts: [api.anthropic.com]
        sentinels: {{accessToken: {ACCESS_SENTINEL}, refreshToken: {REFRESH_SENTINEL}}}
        credentialFile:
          path: ~/.claude/.credentials.json
          structure:
            claudeAiOauth:
              accessToken: "{{{{.AccessToken}}}}"
              refreshToken: "{{{{.RefreshToken}}}}"
              expiresAt: "{{{{.ExpiresAt}}}}"
              scopes: "{{{{.Scopes}}}}"
"""
# Inside the sandbox: show the credential file, refresh with what it holds, call the API with
# the access token the refresh returned, then with a bearer token of its own; finally look for
# any real token in every process's environment and in every file.
SCRIPT = r"""
set -u
cf="$HOME/.claude/.credentials.json"
api=https://api.anthropic.com
real='-e real-access-token- -e real-refresh-token-'
field() { python3 -c 'import json, sys
value = json.load(open(sys.argv[1]))
for key in sys.argv[2:]: value = value[key]
print(value)' "$@"; }
echo "file=$(base64 -w0 "$cf")"
echo "mode=${SBX_CRED_ANTHROPIC_MODE:-unset}"
echo "file_stat=$(stat -c '%a %u' "$cf") $(stat -c '%a %u' "$(dirname "$cf")") $(id -u)"
refresh=$(field "$cf" claudeAiOauth refreshToken)
curl -sS -m 30 -X POST -H 'Content-Type: application/json' \
  -d "{\"grant_type\": \"refresh_token\", \"refresh_token\": \"$refresh\"}" \
  -o /tmp/token -w '%{http_code}' https://console.anthropic.com/v1/oauth/token > /tmp/code
echo "refresh_code=$(cat /tmp/code)"
echo "token=$(base64 -w0 /tmp/token)"
access=$(field /tmp/token access_token)
echo "api_code=$(curl -sS -m 30 -o /tmp/api -w '%{http_code}' \
  -H "Authorization: Bearer $access" $api/v1/models)"
echo "madeup_code=$(curl -sS -m 30 -o /tmp/madeup -w '%{http_code}' \
  -H "Authorization: Bearer MADE_UP" $api/v1/made-up)"
echo "madeup=$(base64 -w0 /tmp/madeup)"
echo "environ_hits=$(cat /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n' | grep -c $real)"
echo "file_hits=$(grep -rls $real / --exclude-dir=proc --exclude-dir=sys 2>/dev/null | wc -l)"
""".replace("MADE_UP", MADE_UP)


@pytest.fixture
def oauth_env(tmp_path: Path, state_home: Path, internet: Internet) -> dict[str, str]:
    config = internet.sbx_config(tmp_path / "config.toml")
    internet.origin.clear()
    return {**os.environ, "SBX_HOME": str(state_home), "SBX_CONFIG": str(config),
            "NO_COLOR": "1"}


@pytest.fixture
def provider(internet: Internet) -> Iterator[tuple[OAuthServer, AnthropicAPI]]:
    api = AnthropicAPI()
    api.install(internet.origin)
    server = OAuthServer(TOKEN_HOST, TOKEN_PATH, TokenState(INITIAL_ACCESS, INITIAL_REFRESH))
    server.install(internet.origin)
    yield server, api
    internet.origin.unroute(TOKEN_HOST)
    api.uninstall(internet.origin)


@pytest.fixture
def oauth_kit(kit_factory: Callable[..., Path]) -> Path:
    return kit_factory("oauth", f"FROM {BOOKWORM}\nUSER agent\nWORKDIR /home/agent/work\n",
                       POLICY)


def _values(stdout: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in stdout.splitlines() if "=" in line)


def test_required_oauth_credential_without_a_login_is_refused_by_name(
        oauth_kit: Path, sbx_cli: Any, oauth_env: dict[str, str]) -> None:
    result = sbx_cli(["run", str(oauth_kit), "--", "true"], env=oauth_env)
    assert result.exit_code == 125 and "(credential_unbound)" in result.stderr
    assert "anthropic" in result.stderr and "sbx secret login anthropic" in result.stderr


def test_refresh_and_api_call_from_the_sandbox_never_show_a_real_token(
        oauth_kit: Path, sbx_cli: Any, oauth_env: dict[str, str], tmp_path: Path,
        provider: tuple[OAuthServer, AnthropicAPI], state_home: Path) -> None:
    server, api = provider
    # The agent's own host login, as Claude Code writes it, stored with `sbx secret login`.
    login = tmp_path / "credentials.json"
    login.write_text(json.dumps({"claudeAiOauth": {
        "accessToken": INITIAL_ACCESS, "refreshToken": INITIAL_REFRESH,
        "expiresAt": 1_900_000_000_000, "scopes": ["user:inference"]}}), encoding="utf-8")
    stored = sbx_cli(["secret", "login", "anthropic", "--from-file", str(login), "--kit",
                      str(oauth_kit), "--json"], env=oauth_env)
    assert stored.exit_code == 0, stored.stderr
    assert INITIAL_ACCESS not in stored.stdout + stored.stderr

    result = sbx_cli(["run", "--json", str(oauth_kit), "--timeout", "120", "--", "bash", "-c",
                      SCRIPT], env=oauth_env)
    envelope = result.envelope()
    assert envelope["status"] == "ok", envelope
    assert envelope["data"]["credentials"] == {"anthropic": "oauth"}
    values = _values(envelope["data"]["stdout"])
    for prefix in REAL_PREFIXES:
        assert prefix not in result.stdout + result.stderr

    # the credential file holds the sentinels in the declared shape, with the stored expiry
    credential_file = json.loads(base64.b64decode(values["file"]))
    assert credential_file == {"claudeAiOauth": {
        "accessToken": ACCESS_SENTINEL, "refreshToken": REFRESH_SENTINEL,
        "expiresAt": 1_900_000_000_000, "scopes": ["user:inference"]}}
    assert values["mode"] == "oauth"
    # the sandbox user's own: the file 0600, its directory 0700
    file_mode, file_uid, dir_mode, dir_uid, uid = values["file_stat"].split()
    assert (file_mode, dir_mode) == ("600", "700") and file_uid == dir_uid == uid

    # the refresh: sentinels back; the provider saw the real refresh token and rotated
    assert values["refresh_code"] == "200"
    answer = json.loads(base64.b64decode(values["token"]))
    assert (answer["access_token"], answer["refresh_token"]) == (ACCESS_SENTINEL,
                                                                 REFRESH_SENTINEL)
    assert answer["expires_in"] == 3600
    [seen] = server.requests
    assert OAuthServer.form(seen)["refresh_token"] == INITIAL_REFRESH
    tokens = OAuthStore(state_home).get("anthropic")
    assert tokens is not None and server.state.generation == 1
    assert (tokens.access_token, tokens.refresh_token) == (server.state.access_token,
                                                           server.state.refresh_token)

    # the resource host got the rotated real access token; the made-up bearer never left
    assert values["api_code"] == "200"
    assert [s.header("authorization") for s in api.recorded()] == [
        f"Bearer {server.state.access_token}"]
    assert values["madeup_code"] == "403"
    refusal = base64.b64decode(values["madeup"]).decode()
    assert "credential_not_issued" in refusal and MADE_UP not in refusal

    # no real token anywhere in the sandbox: environments and files
    assert (values["environ_hits"], values["file_hits"]) == ("0", "0")


def test_explain_shows_the_oauth_binding(oauth_kit: Path, sbx_cli: Any,
                                         oauth_env: dict[str, str], state_home: Path) -> None:
    # Unbound, the required credential refuses the run; explain answers and says so, with
    # run's reason and fix.
    before = sbx_cli(["explain", "--json", str(oauth_kit)], env=oauth_env)
    assert before.exit_code == 0
    refusal = before.envelope()["data"]["run_refusal"]
    assert refusal["reason"] == "credential_unbound"
    assert "sbx secret login anthropic" in str(refusal["hint"])
    OAuthStore(state_home).set("anthropic", Tokens(INITIAL_ACCESS, INITIAL_REFRESH))
    after = sbx_cli(["explain", str(oauth_kit)], env=oauth_env)
    assert "anthropic (runtime): bound (oauth)" in after.stdout
    assert INITIAL_ACCESS not in after.stdout + after.stderr


# -- a provider answering form-encoded (GitHub's default), attacked from inside -------------

GH_TOKEN_HOST = "github.com"  # noqa: S105 - a host name
GH_TOKEN_PATH = "/login/oauth/access_token"  # noqa: S105 - a path
GH_ACCESS = "gho_sbx-access-sentinel"
GH_REFRESH = "ghr_sbx-refresh-sentinel"
GH_POLICY = f"""
capabilities:
  - type: com.docker.sandbox/network-policy@1
    config:
      runtime:
        allow: [api.github.com, {GH_TOKEN_HOST}]
  - type: com.docker.sandbox/credential@1
    config:
      service: github
      phase: runtime
      oauth:
        tokenEndpoint: {{host: {GH_TOKEN_HOST}, path: {GH_TOKEN_PATH}}}
        resourceHosts: [api.github.com]
        sentinels: {{accessToken: {GH_ACCESS}, refreshToken: {GH_REFRESH}}}
"""
# Refresh through every spelling of the token path a lenient origin routes to it, one path
# sbx cannot normalise, a GET with the grant in the query, then a login of the sandbox's own;
# call the API with the sentinel; look for a real token anywhere in the sandbox.
GH_SCRIPT = r"""
set -u
real='-e real-access-token- -e real-refresh-token-'
n=0
for path in /login/oauth/access_token /LOGIN/OAUTH/ACCESS_TOKEN '/login/oauth/access_token;x' \
            /login/oauth/access_token.json /login/oauth/access_token/ \
            //login/oauth/./access_token; do
  n=$((n+1))
  code=$(curl -sS -m 30 -X POST -d "grant_type=refresh_token&refresh_token=GH_REFRESH" \
    -o /tmp/t$n -w '%{http_code}' "https://github.com$path")
  echo "refresh$n=$code $(grep -c $real /tmp/t$n) $(grep -c GH_ACCESS /tmp/t$n)"
done
echo "ambiguous=$(curl -sS -m 30 -X POST -d 'grant_type=refresh_token&refresh_token=GH_REFRESH' \
  -o /tmp/amb -w '%{http_code}' https://github.com/login/oauth%2faccess_token) \
  $(grep -c token_endpoint_ambiguous /tmp/amb)"
q='grant_type=authorization_code&code=CODE'
echo "get=$(curl -sS -m 30 -o /tmp/get -w '%{http_code}' \
  "https://github.com/login/oauth/access_token?$q") $(grep -c $real /tmp/get) \
  $(grep -c GH_ACCESS /tmp/get)"
echo "login=$(curl -sS -m 30 -X POST -d 'grant_type=authorization_code&code=CODE' \
  -o /tmp/login -w '%{http_code}' https://github.com/login/oauth/access_token) \
  $(grep -c $real /tmp/login) $(grep -c GH_ACCESS /tmp/login)"
echo "api=$(curl -sS -m 30 -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer GH_ACCESS' \
  https://api.github.com/user)"
echo "environ_hits=$(cat /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n' | grep -c $real)"
echo "file_hits=$(grep -rls $real / --exclude-dir=proc --exclude-dir=sys 2>/dev/null | wc -l)"
"""


@pytest.fixture
def github_provider(internet: Internet) -> Iterator[OAuthServer]:
    server = OAuthServer(GH_TOKEN_HOST, GH_TOKEN_PATH,
                         TokenState(INITIAL_ACCESS, INITIAL_REFRESH), answer_as="form",
                         lenient=True)
    server.install(internet.origin)
    yield server
    internet.origin.unroute(GH_TOKEN_HOST)


def test_a_form_encoded_provider_attacked_from_a_sandbox_never_hands_it_a_real_token(
        kit_factory: Callable[..., Path], sbx_cli: Any, oauth_env: dict[str, str],
        github_provider: OAuthServer, internet: Internet, state_home: Path) -> None:
    kit = kit_factory("ghoauth", f"FROM {BOOKWORM}\nUSER agent\nWORKDIR /home/agent/work\n",
                      GH_POLICY)
    OAuthStore(state_home).set("github", Tokens(INITIAL_ACCESS, INITIAL_REFRESH))
    script = (GH_SCRIPT.replace("GH_REFRESH", GH_REFRESH).replace("GH_ACCESS", GH_ACCESS)
              .replace("CODE", github_provider.code))
    result = sbx_cli(["run", "--json", str(kit), "--timeout", "180", "--", "bash", "-c",
                      script], env=oauth_env)
    envelope = result.envelope()
    assert envelope["status"] == "ok", envelope
    values = _values(envelope["data"]["stdout"])
    for prefix in REAL_PREFIXES:
        assert prefix not in result.stdout + result.stderr
    # every spelling was a refresh sbx swapped and rewrote: 200, no real token, the sentinel
    assert [values[f"refresh{n}"] for n in range(1, 7)] == ["200 0 1"] * 6, values
    assert github_provider.state.generation >= 6
    code, named = values["ambiguous"].split()
    assert code == "403" and int(named) >= 1
    assert values["get"].split() == ["200", "0", "1"]
    assert values["login"].split() == ["200", "0", "1"]
    # the user's login was refreshed (it is theirs); the sandbox's own login did not replace it
    refreshes = [OAuthServer.form(s) for s in github_provider.requests
                 if OAuthServer.form(s).get("grant_type") == "refresh_token"]
    assert refreshes and all(f["refresh_token"] != GH_REFRESH for f in refreshes)
    stored = OAuthStore(state_home).get("github")
    login_access = github_provider.state.access_token
    assert stored is not None and stored.access_token != login_access
    assert stored.access_token.startswith("real-access-token-")
    # the API got the sandbox's own login, for the rest of that run, and nothing real leaked
    assert values["api"] == "200"
    [api] = [s for s in internet.origin.requests() if s.header("host") == "api.github.com"]
    assert api.header("authorization") == f"Bearer {login_access}"
    assert (values["environ_hits"], values["file_hits"]) == ("0", "0")
