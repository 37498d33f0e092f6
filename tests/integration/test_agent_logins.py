"""`sbx secret login claude|codex|gemini`: each agent's own login, run on the host by the
installed console script against stand-ins of the vendors' login services on the test
"internet" (reached through ``[network] upstream_proxy``), then the agent started with it.

The test plays the user's browser: it reads the URL (or Codex's device code) sbx prints, checks
it carries the agent's own client and a PKCE challenge, grants a code for that challenge at the
stand-in, and pastes the code back (Claude Code's ``CODE#STATE``, Gemini CLI's bare code). The
stand-in issues tokens only for the matching verifier, client id and redirect URI. Nothing real
is printed, and the client then starts logged in: its API call carries the access token of
this login, with no refresh needed.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from sbx.domain.credentials.oauthstore import OAuthStore
from tests.support.agent_api import Script, TokenState
from tests.support.agent_logins import (
    DeviceAuth,
    Gated,
    GoogleAccount,
    PkceOAuthServer,
    openai_id_token,
    route,
)
from tests.support.agent_logins import _challenge as challenge_of
from tests.support.origin import Internet

from .test_agents import CLAUDE as TUI_CLAUDE
from .test_agents import CODEX as TUI_CODEX
from .test_agents import GEMINI as TUI_GEMINI
from .test_agents import SBX, SCREEN_S, SCRIPT, _say, agent_pane, agent_versions  # noqa: F401
from .test_agents_oauth import CLAUDE, CODEX, GEMINI, REAL, Login, _run
from .test_session_tty import Pane

pytestmark = pytest.mark.docker

WAIT_S = 60.0


def _login(login: Login, env: dict[str, str],
           answer: Callable[[str], str | None]) -> tuple[int, str, str]:
    """Run `sbx secret login AGENT --json`; ``answer(stderr_so_far)`` is called as the
    instructions arrive and returns what to paste (None: nothing yet)."""
    lines: list[str] = []
    with subprocess.Popen([SBX, "secret", "login", login.agent, "--json"], env=env,
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as proc:
        assert proc.stdin is not None and proc.stderr is not None and proc.stdout is not None
        stderr = proc.stderr
        reader = threading.Thread(target=lambda: lines.extend(iter(stderr.readline, "")),
                                  daemon=True)
        reader.start()
        deadline = time.monotonic() + WAIT_S
        pasted = False
        try:
            while not pasted and time.monotonic() < deadline and proc.poll() is None:
                reply = answer("".join(lines))
                if reply is not None:
                    proc.stdin.write(reply)
                    proc.stdin.flush()
                    pasted = True
                time.sleep(0.1)
            proc.stdin.close()
            out = proc.stdout.read()
            proc.wait(timeout=WAIT_S)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
            reader.join(timeout=10)
    return proc.returncode, out, "".join(lines)


def _browser(server: PkceOAuthServer, login: Login, text: str) -> tuple[str, str] | None:
    """The authorize URL sbx printed, checked as the vendor would; grants a code for its PKCE
    challenge and returns (code, state)."""
    match = re.search(r"https://\S+/oauth2?/\S*auth\S*\?\S+", text)
    if match is None:
        return None
    url = urlsplit(match.group(0))
    query = {k: v[0] for k, v in parse_qs(url.query).items()}
    assert query["client_id"] == login.client_id
    assert query["redirect_uri"] == server.redirect_uri
    assert query["response_type"] == "code" and query["code_challenge_method"] == "S256"
    server.challenge = query["code_challenge"]
    server.code = "sbx-browser-authorization-code"
    return server.code, query["state"]


@contextlib.contextmanager
def _stand_ins(login: Login, internet: Internet) -> Iterator[tuple[PkceOAuthServer, DeviceAuth,
                                                                   Gated]]:
    """The vendor's login service (token endpoint, Codex's device code, Google's account
    endpoints) and its API, which takes only the access token this login is issued."""
    redirect = {"claude": "https://platform.claude.com/oauth/code/callback",
                "codex": "https://auth.openai.com/deviceauth/callback",
                "gemini": "https://codeassist.google.com/authcode"}[login.agent]
    server = PkceOAuthServer(login.token_host, login.token_path,
                             TokenState("real-access-token-0-unused-0123456789",
                                        "real-refresh-token-0-unused-0123456789"),
                             client_id=login.client_id, redirect_uri=redirect)
    device = DeviceAuth()
    handlers = [lambda s: server(s) if server.routes_here(s.path) else None]
    if login is CODEX:
        server.id_token = openai_id_token()
        server.challenge = challenge_of(device.verifier)
        server.code = device.code
        handlers.append(device.handle)
    google = GoogleAccount(server)
    if login is GEMINI:
        server.needs_secret = "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"  # noqa: S105 - public
        handlers.append(google.handle)
        route(internet.origin, "www.googleapis.com", google.handle)
    route(internet.origin, login.token_host, *handlers)
    api = Gated(login.api(Script()), server)
    api.install(internet.origin)
    try:
        yield server, device, api
    finally:
        api.uninstall(internet.origin)
        internet.origin.unroute(login.token_host)
        internet.origin.unroute("www.googleapis.com")


@pytest.mark.usefixtures("agent_versions")
@pytest.mark.parametrize("login", [pytest.param(x, id=x.agent) for x in (CLAUDE, CODEX, GEMINI)])
def test_agent_login_on_the_host_then_the_client_starts_logged_in(
        login: Login, internet: Internet, state_home: Path, tmp_path: Path) -> None:
    env = {**os.environ, "SBX_HOME": str(state_home), "NO_COLOR": "1",
           "SBX_CONFIG": str(internet.sbx_config(tmp_path / "config.toml"))}
    with _stand_ins(login, internet) as (server, device, api):
        def answer(text: str) -> str | None:
            if login is CODEX:
                if device.user_code in text and "auth.openai.com/codex/device" in text:
                    device.approved.set()
                return None
            granted = _browser(server, login, text)
            if granted is None:
                return None
            code, state = granted
            return f"{code}#{state}\n" if login is CLAUDE else f"{code}\n"

        code, out, err = _login(login, env, answer)
        assert code == 0, err
        data = json.loads(out)["data"]
        assert (data["service"], data["refresh_token"]) == (login.service, True)
        assert not any(prefix in out + err for prefix in REAL)
        [exchange] = [r for r in server.requests
                      if server.form(r).get("grant_type") == "authorization_code"]
        assert ("json" in (exchange.header("content-type") or "")) is (login is CLAUDE)
        if login is CODEX:
            assert device.polls >= 1
        stored = OAuthStore(state_home).get(login.service)
        assert stored is not None and stored.access_token == server.state.access_token
        assert stored.source == f"sbx secret login {login.agent} " \
            f"({'device-code' if login is CODEX else 'paste-code'})"
        assert (stored.account == "acct-sbx-test") is (login is CODEX)

        # The client starts logged in: no refresh, its API call carries this login's token.
        server.requests.clear()
        internet.origin.clear()
        status, out, err = _run(login, env, *login.one_shot, "Say hello.")
        assert status == 0, err[-3000:]
        assert SCRIPT.reply in out
        assert not [r for r in server.requests
                    if server.form(r).get("grant_type") == "refresh_token"]
        assert api.model_requests()
        assert {r.header("authorization") for r in api.inner.recorded()} == \
            {f"Bearer {stored.access_token}"}


def test_a_pasted_code_of_another_login_is_refused_and_nothing_is_stored(
        internet: Internet, state_home: Path, tmp_path: Path) -> None:
    server = PkceOAuthServer(CLAUDE.token_host, CLAUDE.token_path,
                             TokenState("real-access-token-0-x-0123456789",
                                        "real-refresh-token-0-x-0123456789"),
                             client_id=CLAUDE.client_id)
    server.install(internet.origin)
    env = {**os.environ, "SBX_HOME": str(state_home), "NO_COLOR": "1",
           "SBX_CONFIG": str(internet.sbx_config(tmp_path / "config.toml"))}
    try:
        code, out, err = _login(CLAUDE, env, lambda text: "some-code#not-this-state\n"
                                if "claude.com" in text else None)
    finally:
        internet.origin.unroute(CLAUDE.token_host)
    assert code == 126 and "login_failed" in out + err and "state does not match" in out + err
    assert server.requests == [] and OAuthStore(state_home).get("anthropic") is None


# -- in a real terminal ------------------------------------------------------------------------

LOGIN_SCRIPT = """\
#!/bin/sh
# login.sh AGENT: `sbx secret login AGENT` in this terminal.
export SBX_HOME={home} SBX_CONFIG={config} PATH={bin}:$PATH NO_COLOR=1
exec {sbx} secret login "$@"
"""
TUI = {"claude": TUI_CLAUDE, "codex": TUI_CODEX, "gemini": TUI_GEMINI}


@pytest.mark.usefixtures("agent_versions")
@pytest.mark.parametrize("login", [pytest.param(x, id=x.agent) for x in (CLAUDE, CODEX, GEMINI)])
def test_login_in_a_terminal_then_the_tui_answers_with_the_login(
        login: Login, internet: Internet, agent_pane: Pane, state_home: Path,  # noqa: F811
        tmp_path: Path) -> None:
    """The user's way: the login in a terminal (the code pasted without echo, or the device
    code shown), then the agent's TUI in the same terminal, logged in by that login."""
    pane, agent = agent_pane, TUI[login.agent]
    script = tmp_path / "login.sh"
    script.write_text(LOGIN_SCRIPT.format(
        home=shlex.quote(str(state_home)), config=shlex.quote(str(tmp_path / "config.toml")),
        bin=shlex.quote(str(Path(SBX).parent)), sbx=shlex.quote(SBX)), encoding="utf-8")
    script.chmod(0o755)
    with _stand_ins(login, internet) as (server, device, api):
        pane.type(f"./login.sh {login.agent}; echo login:RC=$?")
        if login is CODEX:
            pane.wait(re.escape(device.user_code), timeout=WAIT_S)
            assert "auth.openai.com/codex/device" in pane.screen(joined=True)
            device.approved.set()
        else:
            pane.wait(r"^Code: ", timeout=WAIT_S)
            granted = _browser(server, login, pane.screen(joined=True).replace("\n", " "))
            assert granted is not None, pane.screen()
            code, state = granted
            pasted = f"{code}#{state}" if login is CLAUDE else code
            pane.type(pasted)
        assert pane.status("login", timeout=WAIT_S) == 0, pane.screen()
        screen = pane.screen(joined=True)
        assert server.code not in screen  # typed without echo (Codex's never reaches it)
        assert not any(prefix in screen for prefix in REAL)
        stored = OAuthStore(state_home).get(login.service)
        assert stored is not None and stored.access_token == server.state.access_token

        pane.type("clear")
        pane.started.append("run")
        pane.type(f"./sbx.sh run {shlex.quote(str(agent.directory))} --arg source=staged "
                  "--timeout 600; rc=$?; printf '\\n\\033[2Krun:RC=%s\\n' \"$rc\"")
        pane.wait(agent.banner.format(version=re.escape(agent.version)), timeout=SCREEN_S)
        _say(pane, agent, api, "Say hello.")
        pane.wait(re.escape(SCRIPT.reply), timeout=SCREEN_S)
        assert {r.header("authorization") for r in api.inner.recorded()} == \
            {f"Bearer {stored.access_token}"}
        pane.keys("C-p", "C-q")  # sbx's detach keys end the session from the host
        assert pane.status("run", timeout=SCREEN_S) == 130
        assert not any(prefix in pane.screen() for prefix in REAL)
        assert OAuthStore(state_home).get(login.service) == stored  # no refresh was needed
