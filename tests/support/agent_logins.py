"""Stand-ins of the agents' account services on the local "internet" (tests/support/origin.py).

What a subscription login of each bundled agent talks to, answering just well enough for the
real client and recording what crossed the boundary:

- :class:`Provider` (one per agent): the vendor's OAuth token endpoint (an
  :class:`~tests.support.agent_api.OAuthServer`: rotating tokens, refresh and
  authorization-code grants, PKCE checked against the challenge the test saw in the authorize
  URL) and the API hosts, which accept only the *current* real access token (anything else is
  401, as a real provider answers an expired token: the client then refreshes);
- Codex's device-code endpoints (``/api/accounts/deviceauth/*`` on auth.openai.com);
- Google's ``tokeninfo`` and ``userinfo`` and the Code Assist API Gemini CLI uses with a
  Google account (``cloudcode-pa.googleapis.com/v1internal:*``, its answers wrapped in
  ``{"response": ...}``);
- ChatGPT's Codex backend (``chatgpt.com/backend-api/codex/responses``: the Responses API).
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from tests.support.agent_api import (
    JSON,
    SSE,
    AnthropicAPI,
    GeminiAPI,
    OAuthServer,
    OpenAIAPI,
    StandIn,
    TokenState,
    _json_body,
)
from tests.support.origin import Origin, Reply, Seen

UNAUTHORIZED = Reply(401, JSON, b'{"error": {"code": 401, "message": "invalid or expired '
                                b'credentials", "status": "UNAUTHENTICATED"}}')


def _jwt(claims: dict[str, Any]) -> str:
    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    return f"{part({'alg': 'RS256', 'typ': 'JWT'})}.{part(claims)}.c2lnbmF0dXJl"


def _challenge(verifier: str) -> str:
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


@dataclass
class PkceOAuthServer(OAuthServer):
    """An :class:`OAuthServer` whose authorization codes are bound to a PKCE challenge: the
    test (playing the browser) grants :attr:`code` for a challenge; the exchange must carry
    the matching verifier, the client id and the redirect URI the authorize URL named."""

    client_id: str = ""
    redirect_uri: str = ""
    challenge: str | None = None
    id_token: str | None = None  # added to every answer (Codex and Google send one)
    needs_secret: str | None = None  # Google's installed-app client secret

    def __call__(self, seen: Seen) -> Reply:
        form = self.form(seen)
        if form.get("grant_type") == "authorization_code":
            verifier = form.get("code_verifier") or ""
            if (self.challenge is None or _challenge(verifier) != self.challenge
                    or form.get("client_id") != self.client_id
                    or form.get("redirect_uri") != self.redirect_uri
                    or (self.needs_secret and form.get("client_secret") != self.needs_secret)):
                with self._lock:
                    self.requests.append(seen)
                return Reply(400, JSON, b'{"error": "invalid_grant"}')
        reply = super().__call__(seen)
        if self.id_token is None or reply.status != 200:
            return reply
        data = json.loads(reply.body)
        data["id_token"] = self.id_token
        return Reply(reply.status, reply.headers, json.dumps(data).encode())


class Gated(StandIn):
    """An API that takes only the provider's current access token as ``Authorization:
    Bearer`` (401 otherwise); what it lets through is ``inner``'s (recorded there too)."""

    def __init__(self, inner: StandIn, server: OAuthServer) -> None:
        super().__init__(inner.script)
        self.inner = inner
        self.server = server
        self.hosts = inner.hosts

    def answer(self, seen: Seen) -> Reply | None:
        if seen.header("authorization") != f"Bearer {self.server.state.access_token}":
            return UNAUTHORIZED
        return self.inner(seen)

    def model_requests(self) -> list[Seen]:
        return self.inner.model_requests()

    def tool_results(self) -> list[str]:
        return self.inner.tool_results()

    def results_in(self, body: Any) -> list[str]:
        return self.inner.results_in(body)


class AnthropicAccount(AnthropicAPI):
    """api.anthropic.com for a Claude subscription: the Messages API and the account
    endpoints Claude Code reads after a login (its profile and roles)."""

    def answer(self, seen: Seen) -> Reply | None:
        path = seen.path.rstrip("/")
        if path == "/api/oauth/profile":
            return Reply(200, JSON, json.dumps({
                "account": {"uuid": "00000000-0000-4000-8000-000000000001",
                            "email": "sbx-test@example.com", "full_name": "sbx test",
                            "display_name": "sbx", "has_claude_max": True,
                            "has_claude_pro": False},
                "organization": {"uuid": "00000000-0000-4000-8000-000000000002",
                                 "name": "sbx test", "organization_type": "claude_max",
                                 "billing_type": "stripe_subscription",
                                 "rate_limit_tier": "default_claude_max_5x"}}).encode())
        if path == "/api/oauth/claude_cli/roles":
            return Reply(200, JSON, b'{"organization_role": "admin", "workspace_role": null}')
        return super().answer(seen)


class ChatGPTBackend(OpenAIAPI):
    """chatgpt.com: Codex's backend for a ChatGPT login (/backend-api/codex/responses), and
    the workspace discovery its TUI reads before the first turn (the login's account, on this
    origin: ``NO_CONSTRAINT``)."""

    hosts = ("chatgpt.com",)
    account_id = "acct-sbx-test"  # the id_token's chatgpt_account_id (openai_id_token)

    def answer(self, seen: Seen) -> Reply | None:
        if seen.method == "GET" and seen.path.rstrip("/") == "/backend-api/wham/accounts/check":
            account = {"id": self.account_id, "account_id": self.account_id,
                       "account_user_id": f"user-sbx-test__{self.account_id}",
                       "account_user_role": "account-owner", "structure": "personal",
                       "plan_type": "plus", "name": "sbx test", "is_deactivated": False,
                       "is_zdr": False, "is_openai_internal": False,
                       "is_fedramp_compliant_workspace": False,
                       "workspace_backend_origin": "NO_CONSTRAINT",
                       "account_routing_override": "NO_CONSTRAINT",
                       "can_access_with_session": True}
            return Reply(200, JSON, json.dumps({
                "accounts": [account], "default_account_id": self.account_id,
                "account_ordering": [self.account_id]}).encode())
        return super().answer(seen)


class CodeAssistAPI(GeminiAPI):
    """cloudcode-pa.googleapis.com: the Code Assist API behind Gemini CLI's Google login. The
    account is onboarded (free tier, a project of its own); generateContent answers are
    Gemini's, wrapped as ``{"response": ...}``."""

    hosts = ("cloudcode-pa.googleapis.com",)
    project = "sbx-test-project"

    def model_requests(self) -> list[Seen]:
        return [s for s in self.recorded() if s.method == "POST" and "enerateContent" in s.path
                and not self._wants_json(self._request(s))]

    def results_in(self, body: Any) -> list[str]:
        request = body.get("request") if isinstance(body, dict) else None
        return super().results_in(request if isinstance(request, dict) else body)

    @staticmethod
    def _request(seen: Seen) -> Any:
        body = _json_body(seen)
        return body.get("request", body) if isinstance(body, dict) else body

    def answer(self, seen: Seen) -> Reply | None:
        path = unquote(seen.path)
        if path.endswith(":loadCodeAssist"):
            tier = {"id": "free-tier", "name": "Gemini Code Assist for individuals",
                    "description": "sbx stand-in", "userDefinedCloudaicompanionProject": False}
            return Reply(200, JSON, json.dumps({
                "currentTier": tier, "allowedTiers": [{**tier, "isDefault": True}],
                "cloudaicompanionProject": self.project}).encode())
        if path.endswith(":onboardUser"):
            return Reply(200, JSON, json.dumps({"done": True, "response": {
                "cloudaicompanionProject": {"id": self.project}}}).encode())
        if "enerateContent" not in path and not path.endswith(":countTokens"):
            return Reply(200, JSON, b"{}")
        inner = Seen(seen.method, seen.target, seen.headers,
                     json.dumps(self._request(seen)).encode(), seen.tls, seen.sni)
        reply = super().answer(inner)
        if reply is None or reply.status != 200:
            return reply
        if ":streamGenerateContent" in path:
            events = [line[len("data: "):] for line in reply.body.decode().split("\r\n")
                      if line.startswith("data: ")]
            body = "".join(f"data: {json.dumps({'response': json.loads(e)})}\r\n\r\n"
                           for e in events)
            return Reply(200, SSE, body.encode())
        return Reply(200, JSON, json.dumps({"response": json.loads(reply.body)}).encode())


@dataclass
class DeviceAuth:
    """auth.openai.com's device-code endpoints (Codex's ``login --device-auth``): a user code,
    "pending" (403) until :meth:`approve`, then an authorization code bound to a PKCE pair."""

    user_code: str = "SBXT-4242"
    device_auth_id: str = "deviceauth_sbx_test"
    code: str = "sbx-device-authorization-code"
    verifier: str = "sbx-device-code-verifier-0123456789abcdefghijklmnopqrstuvwxyz"
    approved: threading.Event = field(default_factory=threading.Event)
    polls: int = 0

    def handle(self, seen: Seen) -> Reply | None:
        path = seen.path.rstrip("/")
        body = _json_body(seen)
        if path == "/api/accounts/deviceauth/usercode":
            return Reply(200, JSON, json.dumps({"device_auth_id": self.device_auth_id,
                                                "user_code": self.user_code,
                                                "interval": "1"}).encode())
        if path == "/api/accounts/deviceauth/token":
            self.polls += 1
            if body.get("device_auth_id") != self.device_auth_id \
                    or body.get("user_code") != self.user_code:
                return Reply(400, JSON, b'{"error": "bad_device_code"}')
            if not self.approved.is_set():
                return Reply(403, JSON, b'{"error": "authorization_pending"}')
            return Reply(200, JSON, json.dumps({
                "authorization_code": self.code, "code_verifier": self.verifier,
                "code_challenge": _challenge(self.verifier)}).encode())
        return None


class GoogleAccount:
    """www.googleapis.com's userinfo and oauth2.googleapis.com's tokeninfo: both take only the
    current access token (as google-auth-library sends it, ``Authorization: Bearer``)."""

    def __init__(self, server: OAuthServer) -> None:
        self.server = server
        self.requests: list[Seen] = []

    def handle(self, seen: Seen) -> Reply | None:
        path = seen.path.rstrip("/")
        if path not in ("/tokeninfo", "/oauth2/v2/userinfo"):
            return None
        self.requests.append(seen)
        if seen.header("authorization") != f"Bearer {self.server.state.access_token}":
            return Reply(400 if path == "/tokeninfo" else 401, JSON,
                         b'{"error": "invalid_token"}')
        if path == "/tokeninfo":
            return Reply(200, JSON, json.dumps({
                "azp": self.server.client_id if isinstance(self.server, PkceOAuthServer)
                else "", "scope": self.server.state.scope, "expires_in": 3000,
                "email": "sbx-test@example.com", "email_verified": "true"}).encode())
        return Reply(200, JSON, b'{"id": "1", "email": "sbx-test@example.com"}')


def route(origin: Origin, host: str, *handlers: Callable[[Seen], Reply | None]) -> None:
    """Answer ``host`` with the first handler that answers."""

    def handler(seen: Seen) -> Reply | None:
        for each in handlers:
            reply = each(seen)
            if reply is not None:
                return reply
        return Reply(404, JSON, b'{"error": "not_found"}')

    origin.route(host, handler)


def initial_state() -> TokenState:
    return TokenState("real-access-token-0-initial-0123456789",
                      "real-refresh-token-0-initial-0123456789",
                      scope="user:inference user:profile")


def openai_id_token() -> str:
    """An id_token as auth.openai.com issues it for a ChatGPT account (claims only)."""
    return _jwt({"email": "sbx-test@example.com", "exp": 4_102_444_800,
                 "https://api.openai.com/auth": {"chatgpt_plan_type": "plus",
                                                 "chatgpt_account_id": "acct-sbx-test",
                                                 "chatgpt_user_id": "user-sbx-test"}})


__all__ = ["UNAUTHORIZED", "AnthropicAccount", "ChatGPTBackend", "CodeAssistAPI",
           "DeviceAuth", "Gated", "GoogleAccount", "PkceOAuthServer", "initial_state",
           "openai_id_token", "route"]
