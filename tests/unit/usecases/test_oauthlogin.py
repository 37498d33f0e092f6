"""`sbx secret login|ls|rm` for OAuth tokens, and the login parsing behind them."""

from __future__ import annotations

import json
import os
import stat
import textwrap
from pathlib import Path
from typing import Any

import pytest

from sbx.base.errors import SbxError
from sbx.domain.credentials.oauthparse import parse_login
from sbx.domain.credentials.oauthstore import OAuthStore

ACCESS = "sk-ant-oat01-REAL-access-0123456789abcdef"
REFRESH = "sk-ant-ort01-REAL-refresh-0123456789abcdef"
CLAUDE_FILE = {"claudeAiOauth": {"accessToken": ACCESS, "refreshToken": REFRESH,
                                 "expiresAt": 1_900_000_000_000,
                                 "scopes": ["user:inference", "user:profile"]}}
CODEX_FILE = {"OPENAI_API_KEY": None, "tokens": {"id_token": "x.y.z", "access_token": ACCESS,
                                                 "refresh_token": REFRESH, "account_id": "a"},
              "last_refresh": "2026-11-30T10:00:00Z"}


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "state"


def test_known_agent_files_and_token_responses_parse() -> None:
    claude = parse_login(json.dumps(CLAUDE_FILE))
    assert (claude.access_token, claude.refresh_token, claude.expires_at) == (
        ACCESS, REFRESH, 1_900_000_000.0)
    assert claude.scopes == ("user:inference", "user:profile")
    codex = parse_login(json.dumps(CODEX_FILE))
    assert (codex.access_token, codex.refresh_token) == (ACCESS, REFRESH)
    response = parse_login(json.dumps({"access_token": ACCESS, "refresh_token": REFRESH,
                                       "expires_in": 60, "scope": "a b"}), now=100.0)
    assert (response.expires_at, response.scopes) == (160.0, ("a", "b"))


def test_a_kit_structure_reads_its_own_shape() -> None:
    structure = {"auth": {"token": "{{.AccessToken}}", "renew": "{{.RefreshToken}}"}}
    tokens = parse_login(json.dumps({"auth": {"token": ACCESS, "renew": REFRESH}}),
                         structure=structure)
    assert (tokens.access_token, tokens.refresh_token) == (ACCESS, REFRESH)


@pytest.mark.parametrize("text", ["", "not json", "[1]", '{"claudeAiOauth": {}}',
                                  '{"access_token": "has a space"}'])
def test_bad_login_input_is_invalid_argument_without_a_value(text: str) -> None:
    with pytest.raises(SbxError) as raised:
        parse_login(text)
    assert raised.value.reason == "invalid_argument"
    assert "has a space" not in raised.value.message


@pytest.mark.slow
def test_login_ls_rm(sbx_cli: Any, home: Path, tmp_path: Path) -> None:
    login = tmp_path / "credentials.json"
    login.write_text(json.dumps(CLAUDE_FILE), encoding="utf-8")
    stored = sbx_cli(["secret", "login", "anthropic", "--from-file", str(login), "--json"])
    assert stored.exit_code == 0, stored.stderr
    data = stored.envelope()["data"]
    assert data["action"] == "login" and data["service"] == "anthropic"
    assert data["expires_at"] == "2030-03-17T17:46:40Z" and data["refresh_token"] is True
    record = OAuthStore(home).path("anthropic")
    assert stat.S_IMODE(os.stat(record).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(record.parent).st_mode) == 0o700
    listed = sbx_cli(["secret", "ls", "--json"]).envelope()["data"]
    [entry] = listed["oauth"]
    assert entry["service"] == "anthropic"
    assert entry["access_token"] == "sk-an****"  # noqa: S105 - a mask, not a password
    human = sbx_cli(["secret", "ls"])
    assert "oauth anthropic: access sk-an****" in human.stdout
    assert "expires 2030-03-17T17:46:40Z" in human.stdout
    for result in (stored, human):
        assert ACCESS not in result.stdout + result.stderr
        assert REFRESH not in result.stdout + result.stderr
    removed = sbx_cli(["secret", "rm", "anthropic"])
    assert removed.exit_code == 0 and "removed OAuth tokens for anthropic" in removed.stdout
    assert not record.exists()
    again = sbx_cli(["secret", "rm", "anthropic"])
    assert again.exit_code == 2 and "(invalid_argument)" in again.stderr


@pytest.mark.slow
def test_login_through_a_kit_structure(sbx_cli: Any, home: Path, tmp_path: Path) -> None:
    kit = tmp_path / "agent"
    kit.mkdir()
    (kit / "agent.yaml").write_text(textwrap.dedent("""\
        # syntax=docker/sandbox-kit:3
        schemaVersion: "3"
        kind: workload
        capabilities:
          - type: com.docker.sandbox/network-policy@1
            config: {runtime: {allow: [api.example.com]}}
          - type: com.docker.sandbox/credential@1
            config:
              service: example
              phase: runtime
              oauth:
                tokenEndpoint: {host: api.example.com, path: /token}
                credentialFile:
                  path: ~/.agent/auth.json
                  structure:
                    session: {bearer: "{{.AccessToken}}", renew: "{{.RefreshToken}}"}
        """), encoding="utf-8")
    (kit / "agent.dockerfile").write_text("FROM scratch\n", encoding="utf-8")
    login = tmp_path / "auth.json"
    login.write_text(json.dumps({"session": {"bearer": ACCESS, "renew": REFRESH}}),
                     encoding="utf-8")
    result = sbx_cli(["secret", "login", "example", "--from-file", str(login), "--kit",
                      str(kit)])
    assert result.exit_code == 0, result.stderr
    tokens = OAuthStore(home).get("example")
    assert tokens is not None and tokens.refresh_token == REFRESH
    missing = sbx_cli(["secret", "login", "other", "--from-file", str(login), "--kit",
                       str(kit)])
    assert missing.exit_code == 2 and "declares no oauth.credentialFile" in missing.stderr


@pytest.mark.slow
@pytest.mark.parametrize("args", [["secret", "login", "anthropic", "--from-file", "/nonexistent"],
                                  ["secret", "login", "Bad/Name", "--from-file", "/dev/null"]])
def test_bad_logins_are_reason_coded(sbx_cli: Any, args: list[str]) -> None:
    result = sbx_cli(args)
    assert result.exit_code == 2 and "(invalid_argument)" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_login_from_a_token_response_on_stdin(sbx_cli: Any, home: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import io
    import sys

    response = json.dumps({"access_token": ACCESS, "refresh_token": REFRESH,
                           "expires_in": 3600}).encode()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(response)))
    result = sbx_cli(["secret", "login", "example"])
    assert result.exit_code == 0, result.stderr
    assert "stored OAuth tokens for example" in result.stdout
    assert ACCESS not in result.stdout + result.stderr
    tokens = OAuthStore(home).get("example")
    assert tokens is not None and tokens.access_token == ACCESS


@pytest.mark.slow
def test_a_sandbox_login_is_listed_as_its_own_and_promoted_only_on_request(
        sbx_cli: Any, home: Path) -> None:
    from sbx.domain.credentials.oauth import Tokens
    from sbx.domain.sandbox import runrecord
    from sbx.domain.sandbox.records import SandboxRecord
    from sbx.usecases.sandboxstore import SandboxStore

    OAuthStore(home).set("github", Tokens("user-own-access-token", "user-own-refresh"))
    run_id = "a" * 32
    SandboxStore(home).save(SandboxRecord(name="dev", run_id=run_id, created=0.0,
                                          workload="./agent", kits=[], workspace=None,
                                          access="none", request={}))
    kept = OAuthStore.at(runrecord.login_dir(home, run_id))
    kept.set("github", Tokens(ACCESS, REFRESH))
    listed = sbx_cli(["secret", "ls", "--json"]).envelope()["data"]["oauth"]
    assert [(e["service"], e["sandbox"]) for e in listed] == [("github", None),
                                                               ("github", "dev")]
    human = sbx_cli(["secret", "ls"]).stdout
    assert "oauth github (logged in inside sandbox dev, used by it alone; `sbx secret login " \
           "github --from-sandbox dev` makes it yours)" in human
    assert ACCESS not in human
    # the user's login stays theirs until they ask
    user = OAuthStore(home).get("github")
    assert user is not None and user.access_token == "user-own-access-token"  # noqa: S105
    promoted = sbx_cli(["secret", "login", "github", "--from-sandbox", "dev"])
    assert promoted.exit_code == 0, promoted.stderr
    assert ACCESS not in promoted.stdout + promoted.stderr
    user = OAuthStore(home).get("github")
    assert user is not None and (user.access_token, user.refresh_token) == (ACCESS, REFRESH)
    assert kept.get("github") is None  # moved, not copied: one rotating refresh token
    again = sbx_cli(["secret", "login", "github", "--from-sandbox", "dev"])
    assert again.exit_code == 2 and "holds no OAuth login of github" in again.stderr
    nobody = sbx_cli(["secret", "login", "github", "--from-sandbox", "nope"])
    assert nobody.exit_code == 2 and "no sandbox named nope" in nobody.stderr
    both = sbx_cli(["secret", "login", "github", "--from-sandbox", "dev", "--from-file", "x"])
    assert both.exit_code == 2 and "(invalid_argument)" in both.stderr


@pytest.mark.slow
@pytest.mark.parametrize(("agent", "service", "document"), [
    ("claude", "anthropic", CLAUDE_FILE),
    ("codex", "openai", CODEX_FILE),
    ("gemini", "gemini", {"access_token": ACCESS, "refresh_token": REFRESH,
                          "scope": "openid", "token_type": "Bearer",
                          "expiry_date": 1_900_000_000_000}),
])
def test_an_agents_own_login_file_is_imported_for_its_service(
        sbx_cli: Any, home: Path, tmp_path: Path, agent: str, service: str,
        document: dict[str, Any]) -> None:
    login = tmp_path / "login.json"
    login.write_text(json.dumps(document), encoding="utf-8")
    stored = sbx_cli(["secret", "login", agent, "--from-file", str(login), "--json"])
    assert stored.exit_code == 0, stored.stderr
    assert stored.envelope()["data"]["service"] == service
    tokens = OAuthStore(home).get(service)
    assert tokens is not None and (tokens.access_token, tokens.refresh_token) == (ACCESS,
                                                                                 REFRESH)
    assert tokens.source == f"--from-file {login}"
    human = sbx_cli(["secret", "ls"])
    assert f"oauth {service}: " in human.stdout and "not refreshed since the login" in \
        human.stdout and f"from --from-file {login}" in human.stdout
    assert ACCESS not in human.stdout + stored.stdout
