"""The bundled agents' own logins, done on the host by ``sbx secret login claude|codex|gemini``.

Each agent's login is its vendor's OAuth flow with the agent's own public client, as its
published npm release performs it (read from Claude Code 2.1's bundled JavaScript, Codex
0.171's ``codex-login`` and Gemini CLI 0.61's ``code_assist/oauth2``). sbx runs the same flow
on the host, so the real tokens go from the provider to the host's store and never through a
sandbox; sandboxes get sentinels (:mod:`sbx.domain.credentials.oauth`):

- **claude** (service ``anthropic``): authorization code with PKCE and Claude Code's manual
  redirect. The browser on the host opens the authorize URL; the callback page shows
  ``CODE#STATE``, which the user pastes; sbx exchanges it (JSON) at ``platform.claude.com``.
- **codex** (service ``openai``): Codex's device-code login (``codex login --device-auth``):
  a user code to enter at ``auth.openai.com/codex/device``, polled until the issuer hands out
  an authorization code and its PKCE verifier, exchanged (form) at ``/oauth/token``.
- **gemini** (service ``gemini``): authorization code with PKCE and Gemini CLI's
  ``NO_BROWSER`` redirect (``codeassist.google.com/authcode`` shows the code to paste),
  exchanged (form, with the installed-app client secret Google publishes for it) at
  ``oauth2.googleapis.com``. Google offers no device flow for this client type.

Everything here is pure: the URLs and bodies to send and the reading of what comes back. The
requests are :mod:`sbx.seams.oauth_http`'s, the conversation with the user the use case's.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal
from urllib.parse import urlencode

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason

Flow = Literal["paste-code", "device-code"]


@dataclass(frozen=True)
class AgentLogin:
    """One agent's OAuth login, as the agent itself performs it."""

    agent: str  # the name `sbx secret login` takes
    service: str  # the credential@1 service of the agent's kit
    kit: str  # its directory under examples/agents
    flow: Flow
    client_id: str
    exchange_url: str
    exchange_as: Literal["json", "form"]
    redirect_uri: str
    scopes: tuple[str, ...] = ()
    authorize_url: str = ""
    authorize_extra: tuple[tuple[str, str], ...] = ()
    client_secret: str | None = None  # a public installed-app secret the vendor publishes
    device_base: str = ""  # device-code flow: the issuer's /api/accounts
    verification_url: str = ""
    credential_file: str = ""  # the agent's own login file on a host, for --from-file
    send_state: bool = False  # the token request repeats the state (Claude Code does)

    @property
    def token_host(self) -> str:
        return self.exchange_url.split("/", 3)[2]

    @property
    def token_path(self) -> str:
        return "/" + self.exchange_url.split("/", 3)[3]


CLAUDE: Final = AgentLogin(
    agent="claude", service="anthropic", kit="claude-code", flow="paste-code",
    client_id="9d1c250a-e61b-44d9-88ed-5944d1962f5e",
    exchange_url="https://platform.claude.com/v1/oauth/token", exchange_as="json",
    redirect_uri="https://platform.claude.com/oauth/code/callback",
    authorize_url="https://claude.com/cai/oauth/authorize",
    authorize_extra=(("code", "true"),),
    scopes=("org:create_api_key", "user:profile", "user:inference",
            "user:sessions:claude_code", "user:mcp_servers", "user:file_upload"),
    credential_file="~/.claude/.credentials.json", send_state=True)
CODEX: Final = AgentLogin(
    agent="codex", service="openai", kit="codex", flow="device-code",
    client_id="app_EMoamEEZ73f0CkXaXp7hrann",
    exchange_url="https://auth.openai.com/oauth/token", exchange_as="form",
    redirect_uri="https://auth.openai.com/deviceauth/callback",
    device_base="https://auth.openai.com/api/accounts",
    verification_url="https://auth.openai.com/codex/device",
    credential_file="~/.codex/auth.json")
GEMINI: Final = AgentLogin(
    agent="gemini", service="gemini", kit="gemini-cli", flow="paste-code",
    client_id="681255809395-oo8ft2oprdrnp9e3aqf6av3hmdib135j.apps.googleusercontent.com",
    client_secret="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",  # noqa: S106 - published, public
    exchange_url="https://oauth2.googleapis.com/token", exchange_as="form",
    redirect_uri="https://codeassist.google.com/authcode",
    authorize_url="https://accounts.google.com/o/oauth2/v2/auth",
    authorize_extra=(("access_type", "offline"),),
    scopes=("https://www.googleapis.com/auth/cloud-platform",
            "https://www.googleapis.com/auth/userinfo.email",
            "https://www.googleapis.com/auth/userinfo.profile"),
    credential_file="~/.gemini/oauth_creds.json")
AGENTS: Final[Mapping[str, AgentLogin]] = {a.agent: a for a in (CLAUDE, CODEX, GEMINI)}


def agent_login(name: str) -> AgentLogin | None:
    """The agent login named ``name`` (``claude``, ``codex``, ``gemini``), else None."""
    return AGENTS.get(name)


# -- PKCE and the authorize URL ----------------------------------------------------------------


@dataclass(frozen=True)
class Pkce:
    verifier: str = ""
    challenge: str = ""
    state: str = ""

    @classmethod
    def new(cls) -> Pkce:
        """RFC 7636 S256: a 43-character verifier, its SHA-256 challenge, and a state."""
        verifier = _b64(secrets.token_bytes(32))
        challenge = _b64(hashlib.sha256(verifier.encode("ascii")).digest())
        return cls(verifier, challenge, _b64(secrets.token_bytes(32)))


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def authorize_url(login: AgentLogin, pkce: Pkce) -> str:
    """The URL the user opens in a browser on the host, with the agent's own parameters."""
    params = [*login.authorize_extra, ("client_id", login.client_id),
              ("response_type", "code"), ("redirect_uri", login.redirect_uri),
              ("scope", " ".join(login.scopes)), ("code_challenge", pkce.challenge),
              ("code_challenge_method", "S256"), ("state", pkce.state)]
    return f"{login.authorize_url}?{urlencode(params)}"


def pasted_code(login: AgentLogin, text: str, pkce: Pkce) -> str:
    """The authorization code from what the user pasted: ``CODE#STATE`` (Claude's callback
    page), the bare code, or the whole callback URL; a state that is not ours is refused."""
    from urllib.parse import parse_qs, urlsplit

    value = text.strip()
    state: str | None = None
    if value.startswith(("http://", "https://")):
        query = parse_qs(urlsplit(value).query)
        value = (query.get("code") or [""])[0]
        state = query["state"][0] if query.get("state") else None
    elif "#" in value:
        value, state = value.split("#", 1)
    if not value or any(c.isspace() for c in value) or len(value) > 4096:
        raise SbxError(Reason.LOGIN_FAILED, f"no {login.agent} authorization code was pasted",
                       hint=f"Run `sbx secret login {login.agent}` again and paste the code the "
                            "page shows after you sign in.")
    if state is not None and state != pkce.state:
        raise SbxError(Reason.LOGIN_FAILED, "the pasted code belongs to another login (its "
                       "state does not match this one's)",
                       hint=f"Run `sbx secret login {login.agent}` again and open the URL it "
                            "prints, not an older one.")
    return value


# -- the token request -------------------------------------------------------------------------


@dataclass(frozen=True)
class Post:
    """One POST of the flow: where, its content type and its body."""

    url: str
    content_type: str
    body: bytes


def _post(url: str, kind: Literal["json", "form"], fields: Mapping[str, str]) -> Post:
    if kind == "json":
        return Post(url, "application/json", json.dumps(dict(fields)).encode("utf-8"))
    return Post(url, "application/x-www-form-urlencoded", urlencode(list(fields.items()))
                .encode("ascii"))


def code_exchange(login: AgentLogin, code: str, verifier: str, state: str = "") -> Post:
    """The authorization-code grant the agent sends for ``code`` (RFC 6749 §4.1.3 + PKCE)."""
    fields = {"grant_type": "authorization_code", "code": code,
              "redirect_uri": login.redirect_uri, "client_id": login.client_id,
              "code_verifier": verifier}
    if login.send_state and state:
        fields["state"] = state
    if login.client_secret:
        fields["client_secret"] = login.client_secret
    return _post(login.exchange_url, login.exchange_as, fields)


# -- the device-code flow (Codex) ------------------------------------------------------------


@dataclass(frozen=True)
class DeviceCode:
    user_code: str
    device_auth_id: str = ""
    interval: float = 5.0


def device_code_request(login: AgentLogin) -> Post:
    return _post(f"{login.device_base}/deviceauth/usercode", "json",
                 {"client_id": login.client_id})


def read_device_code(login: AgentLogin, answer: Any) -> DeviceCode:
    """The user code and polling interval from the issuer's answer (``usercode`` or
    ``user_code``; the interval a number or a string of seconds, bounded to 1..60)."""
    if not isinstance(answer, Mapping):
        raise _bad(login, "the device-code answer is not a JSON object")
    code = answer.get("user_code", answer.get("usercode"))
    device = answer.get("device_auth_id")
    if not isinstance(code, str) or not code or not isinstance(device, str) or not device:
        raise _bad(login, "the device-code answer has no user code")
    try:
        interval = float(str(answer.get("interval", "5")).strip() or "5")
    except ValueError:
        interval = 5.0
    return DeviceCode(code, device, min(max(interval, 1.0), 60.0))


def device_poll_request(login: AgentLogin, device: DeviceCode) -> Post:
    return _post(f"{login.device_base}/deviceauth/token", "json",
                 {"device_auth_id": device.device_auth_id, "user_code": device.user_code})


def read_device_grant(login: AgentLogin, answer: Any) -> tuple[str, str]:
    """(authorization code, PKCE verifier) the issuer hands out once the user approved."""
    if isinstance(answer, Mapping):
        code, verifier = answer.get("authorization_code"), answer.get("code_verifier")
        if isinstance(code, str) and code and isinstance(verifier, str) and verifier:
            return code, verifier
    raise _bad(login, "the approved device code came without an authorization code")


def device_pending(status: int) -> bool:
    """Whether a poll's status means "not approved yet" (Codex keeps polling on 403/404)."""
    return status in (403, 404)


def _bad(login: AgentLogin, why: str) -> SbxError:
    return SbxError(Reason.LOGIN_FAILED, f"the {login.agent} login failed: {why}",
                    hint=f"Run `sbx secret login {login.agent}` again; if it keeps failing, "
                         f"log in with the agent on the host and import its file: sbx secret "
                         f"login {login.agent} --from-file {login.credential_file}")


__all__ = ["AGENTS", "CLAUDE", "CODEX", "GEMINI", "AgentLogin", "DeviceCode", "Pkce", "Post",
           "agent_login", "authorize_url", "code_exchange", "device_code_request",
           "device_pending", "device_poll_request", "pasted_code", "read_device_code",
           "read_device_grant"]
