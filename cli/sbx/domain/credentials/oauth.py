"""The OAuth half of ``credential@1``: tokens stay on the host, the sandbox holds sentinels.

A kit's ``oauth`` block (KIT-SPEC-V3 §2.1, ``spec/types.go`` ``OAuth``) names the provider's
token endpoint, the hosts that take the access token (``resourceHosts``, plus the ``apiKey``
inject domains), the sentinels the sandbox sees, and a ``credentialFile`` the agent reads. sbx
honours it like this:

- **On the host**, a service's tokens live in ``<state>/oauth/<service>.json`` (directory 0700,
  file 0600, written atomically; :class:`OAuthStore`), put there by ``sbx secret login``
  (from a token response or the agent's own credential file, see :func:`parse_login`) or by
  the egress proxy when the agent logs in or refreshes through it.
- **In the sandbox**, the ``credentialFile`` is rendered with the sentinels
  (:func:`render_credential_file`: JSON or TOML, ``{{.ExpiresAt}}`` a number of milliseconds
  since the epoch, ``{{.Scopes}}`` an array, ``{{.PrimaryApiKey}}``'s key omitted: sbx never
  captures one) and ``SBX_CRED_<SERVICE>_MODE`` says ``oauth`` (or ``apikey``).
- **At the boundary** (``sbx.proxy``), a POST to the token endpoint is answered with
  sentinels: a refresh-token grant carrying the refresh sentinel is sent upstream with the real
  refresh token, an authorization-code grant (a login inside the sandbox) is sent as it is, and
  in both cases the real tokens of the answer are stored here and replaced by the sentinels
  before the answer reaches the sandbox. On the resource hosts and inject domains the access
  sentinel is replaced by the real access token in whatever header carries it. The real tokens
  are masked out of what those hosts send back.

Which half is used (:func:`credential_mode`): OAuth when the kit declares ``oauth`` and tokens
are stored for the service, else the API key when declared and stored; neither is unbound. In
OAuth mode the API key's variable is not set (an agent would prefer it over its OAuth login).
``oauth.passthrough: true`` (hand the real token to the sandbox, a downgrade the spec lets a
runtime refuse) is refused by name (``unsupported_capability``).

Nothing here prints, logs or audits a token: :class:`Tokens` masks itself in ``repr``, and audit
events carry the service name only.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.credentials.secretvalues import mask

OAUTH_DIR: Final = "oauth"
MAX_RECORD_BYTES: Final = 64 * 1024
ACCESS_SENTINEL_PREFIX: Final = "sbx-oauth-access-"
REFRESH_SENTINEL_PREFIX: Final = "sbx-oauth-refresh-"
MODE_ENV_PREFIX: Final = "SBX_CRED_"
Mode = Literal["apikey", "oauth"]
PLACEHOLDER: Final = re.compile(r"\{\{\s*\.([A-Za-z0-9_]+)\s*\}\}")
SERVICE: Final = re.compile(r"^[a-z0-9]([a-z0-9-]{0,62}[a-z0-9])?$")
TOKEN_CHARS: Final = re.compile(r"^[\x21-\x7e]{1,8192}$")  # what a header can carry
# The credential files agents write on the host after their own login, read when no kit says
# the shape: Claude Code's ~/.claude/.credentials.json, Codex's ~/.codex/auth.json, Gemini
# CLI's ~/.gemini/oauth_creds.json is a token response with `expiry_date` (ms), read as one.
KNOWN_SHAPES: Final[tuple[tuple[str, Any], ...]] = (
    ("Claude Code ~/.claude/.credentials.json", {"claudeAiOauth": {
        "accessToken": "{{.AccessToken}}", "refreshToken": "{{.RefreshToken}}",
        "expiresAt": "{{.ExpiresAt}}", "scopes": "{{.Scopes}}"}}),
    ("Codex ~/.codex/auth.json", {"tokens": {
        "access_token": "{{.AccessToken}}", "refresh_token": "{{.RefreshToken}}",
        "account_id": "{{.AccountId}}", "id_token": "{{.IdToken}}"}}),
)


# -- the kit's declaration -------------------------------------------------------------------


@dataclass(frozen=True)
class CredentialFile:
    path: str  # "~/..." (the sandbox's HOME) or absolute
    structure: Any
    format: Literal["json", "toml"] = "json"


@dataclass(frozen=True)
class OAuthConfig:
    """A credential's ``oauth`` block, with sbx's defaults filled in."""

    token_host: str | None
    token_path: str | None  # None: every path on the token host
    resource_hosts: tuple[str, ...]
    access_sentinel: str
    refresh_sentinel: str
    credential_file: CredentialFile | None
    access_field: str = "access_token"
    refresh_field: str = "refresh_token"
    expires_field: str = "expires_in"
    passthrough: bool = False

    @classmethod
    def from_credential(cls, service: str, config: Mapping[str, Any]) -> OAuthConfig | None:
        raw = config.get("oauth")
        if not isinstance(raw, Mapping):
            return None
        endpoint = raw.get("tokenEndpoint")
        endpoint = endpoint if isinstance(endpoint, Mapping) else {}
        sentinels = raw.get("sentinels")
        sentinels = sentinels if isinstance(sentinels, Mapping) else {}
        fields = raw.get("responseFields")
        fields = fields if isinstance(fields, Mapping) else {}
        cf_raw = raw.get("credentialFile")
        credential_file = None
        if isinstance(cf_raw, Mapping) and isinstance(cf_raw.get("path"), str):
            fmt = "toml" if cf_raw.get("format") == "toml" else "json"
            credential_file = CredentialFile(str(cf_raw["path"]), cf_raw.get("structure"),
                                             fmt)  # type: ignore[arg-type]
        host = endpoint.get("host")
        path = endpoint.get("path")
        hosts = raw.get("resourceHosts")
        return cls(
            token_host=str(host).lower() if isinstance(host, str) and host else None,
            token_path=str(path) if isinstance(path, str) and path else None,
            resource_hosts=tuple(str(h).lower() for h in hosts if isinstance(h, str))
            if isinstance(hosts, list) else (),
            access_sentinel=str(sentinels.get("accessToken") or
                                f"{ACCESS_SENTINEL_PREFIX}{service}"),
            refresh_sentinel=str(sentinels.get("refreshToken") or
                                 f"{REFRESH_SENTINEL_PREFIX}{service}"),
            credential_file=credential_file,
            access_field=str(fields.get("accessToken") or "access_token"),
            refresh_field=str(fields.get("refreshToken") or "refresh_token"),
            expires_field=str(fields.get("expiresIn") or "expires_in"),
            passthrough=raw.get("passthrough") is True,
        )


def has_api_key(config: Mapping[str, Any]) -> bool:
    return isinstance(config.get("apiKey"), Mapping)


def credential_mode(service: str, config: Mapping[str, Any], *, api_key: bool,
                    oauth: bool) -> Mode | None:
    """Which half of a credential is used: OAuth when declared (and not passthrough) with
    tokens stored, else the API key when declared and stored, else None (unbound)."""
    declared = OAuthConfig.from_credential(service, config)
    if declared is not None and not declared.passthrough and oauth:
        return "oauth"
    if has_api_key(config) and api_key:
        return "apikey"
    return None


def passthrough_refusal(credential: Any) -> SbxError | None:
    """The refusal of a credential that could only be used by handing the sandbox the real
    token (``oauth.passthrough: true`` and no API key half), else None."""
    config = credential.config
    declared = OAuthConfig.from_credential(credential.service, config)
    if declared is None or not declared.passthrough or has_api_key(config):
        return None
    where = getattr(credential, "declared_at", "") or f"capabilities[{credential.index}]"
    return SbxError(
        Reason.UNSUPPORTED_CAPABILITY,
        f"refused: {credential.kit} {where} (com.docker.sandbox/credential@1) "
        f"oauth.passthrough: {credential.service}'s real OAuth token would be handed to the "
        "sandbox, which sbx never does",
        hint="Drop `passthrough: true` (sbx then serves sentinels and keeps the token on the "
             "host), give the credential an apiKey half, or mark it optional.",
        details={"kit": credential.kit, "path": where, "service": credential.service,
                 "field": "oauth.passthrough"})


def mode_env_name(service: str) -> str:
    """``SBX_CRED_<SERVICE>_MODE`` (Docker's name): which half of the credential is bound."""
    return f"{MODE_ENV_PREFIX}{service.upper().replace('-', '_')}_MODE"


# -- tokens --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tokens:
    access_token: str = field(repr=False)
    refresh_token: str | None = field(default=None, repr=False)
    expires_at: float | None = None  # unix seconds; None: unknown
    scopes: tuple[str, ...] = ()
    token_type: str = "Bearer"  # noqa: S105 - the scheme's name, not a secret
    source: str = ""  # how the login was made (`sbx secret login claude`, a file...)
    refreshes: int = 0  # refreshes sbx made at the boundary since that login
    refreshed_at: float | None = None  # unix seconds of the last one
    account: str | None = None  # the account the login is of (an identifier, not a secret)
    identity: str | None = field(default=None, repr=False)  # its id_token, signature removed

    def __post_init__(self) -> None:
        for name, value in (("access token", self.access_token),
                            ("refresh token", self.refresh_token)):
            if value is not None and not TOKEN_CHARS.fullmatch(value):
                raise SbxError(Reason.INVALID_ARGUMENT,
                               f"the {name} is empty, too long or not printable ASCII")

    def as_dict(self) -> dict[str, Any]:
        return {"access_token": self.access_token, "refresh_token": self.refresh_token,
                "expires_at": self.expires_at, "scopes": list(self.scopes),
                "token_type": self.token_type, "source": self.source,
                "refreshes": self.refreshes, "refreshed_at": self.refreshed_at,
                "account": self.account, "identity": self.identity}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Tokens:
        access = data.get("access_token")
        refresh = data.get("refresh_token")
        expires = data.get("expires_at")
        scopes = data.get("scopes") or ()
        if not isinstance(access, str) or (refresh is not None and not isinstance(refresh, str)):
            raise ValueError("tokens need an access_token string")
        if expires is not None and (isinstance(expires, bool)
                                    or not isinstance(expires, int | float)):
            raise ValueError("expires_at must be a number")
        if not isinstance(scopes, list | tuple) or not all(isinstance(s, str) for s in scopes):
            raise ValueError("scopes must be a list of strings")
        refreshes = data.get("refreshes", 0)
        refreshed_at = data.get("refreshed_at")
        if isinstance(refreshes, bool) or not isinstance(refreshes, int) or refreshes < 0:
            raise ValueError("refreshes must be a count")
        if refreshed_at is not None and (isinstance(refreshed_at, bool)
                                         or not isinstance(refreshed_at, int | float)):
            raise ValueError("refreshed_at must be a number")
        account = data.get("account")
        return cls(access, refresh, float(expires) if expires is not None else None,
                   tuple(scopes), str(data.get("token_type") or "Bearer"),
                   str(data.get("source") or ""), refreshes,
                   float(refreshed_at) if refreshed_at is not None else None,
                   _account(account), unsigned_id_token(data.get("identity")))

    def with_identity(self, id_token: Any, account: Any = None) -> Tokens:
        """With the login's identity: its id_token without signature, and the account it
        names (or ``account``, as an agent's file records it)."""
        identity = unsigned_id_token(id_token) or self.identity
        return dataclasses.replace(self, identity=identity, account=_account(account)
                                   or account_from_id_token(identity) or self.account)

    def secrets(self) -> list[str]:
        return [t for t in (self.access_token, self.refresh_token) if t]

    def describe(self) -> str:
        """For humans: masked, with the expiry; never a token."""
        expiry = "unknown expiry" if self.expires_at is None else time.strftime(
            "expires %Y-%m-%d %H:%M:%S UTC", time.gmtime(self.expires_at))
        refresh = "with a refresh token" if self.refresh_token else "no refresh token"
        return f"access {mask(self.access_token)}, {refresh}, {expiry}"

    def with_source(self, source: str) -> Tokens:
        return dataclasses.replace(self, source=source)


def _account(value: Any) -> str | None:
    """An account identifier as an agent file may carry it: a short printable word."""
    return value if isinstance(value, str) and 0 < len(value) <= 256 \
        and TOKEN_CHARS.fullmatch(value) else None


# A JWT header that names no algorithm and a signature that verifies nothing: what is left of
# an id_token once its signature is gone (the signature is what makes it a credential).
UNSIGNED_HEADER: Final = "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0"  # {"alg":"none","typ":"JWT"}
UNSIGNED_SIGNATURE: Final = "c2J4"
WITHHELD_ID_TOKEN: Final = f"{UNSIGNED_HEADER}.eyJzYngiOiJ3aXRoaGVsZCJ9.{UNSIGNED_SIGNATURE}"


def _claims(token: Any) -> dict[str, Any] | None:
    import base64

    if not isinstance(token, str) or token.count(".") != 2 or len(token) > 16384:
        return None
    payload = token.split(".")[1]
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (ValueError, TypeError):
        return None
    return claims if isinstance(claims, dict) else None


def unsigned_id_token(id_token: Any) -> str | None:
    """An OpenID ``id_token`` with its signature removed: the same claims (who the user is,
    which an agent such as Codex reads and compares across refreshes), no longer a token any
    verifier accepts. None when it is not a JWT with a JSON object of claims."""
    if _claims(id_token) is None:
        return None
    return f"{UNSIGNED_HEADER}.{str(id_token).split('.')[1]}.{UNSIGNED_SIGNATURE}"


def account_from_id_token(id_token: Any) -> str | None:
    """The ChatGPT account an OpenAI ``id_token`` names (its unverified claims: only an
    identifier, written where Codex keeps it; nothing is trusted because of it)."""
    claims = _claims(id_token)
    auth = claims.get("https://api.openai.com/auth") if claims else None
    return _account(auth.get("chatgpt_account_id")) if isinstance(auth, Mapping) else None


# -- the credential file ---------------------------------------------------------------------

_OMIT: Final = object()


def render_credential_file(config: OAuthConfig, tokens: Tokens | None, *,
                           now: float | None = None) -> str:
    """The ``credentialFile`` with sentinels in place of tokens, in its declared format.

    ``{{.ExpiresAt}}`` is the stored token's expiry in epoch milliseconds (an hour from now when
    unknown), so the agent refreshes — through the boundary — when the real token would expire.
    """
    if config.credential_file is None:
        raise ValueError("the credential declares no credentialFile")
    now = time.time() if now is None else now
    expires = tokens.expires_at if tokens is not None and tokens.expires_at else now + 3600
    values: dict[str, Any] = {
        "AccessToken": config.access_sentinel,
        "RefreshToken": config.refresh_sentinel,
        "ExpiresAt": int(expires * 1000),
        "Scopes": list(tokens.scopes) if tokens is not None else [],
        "PrimaryApiKey": _OMIT,
        "AccountId": tokens.account if tokens is not None and tokens.account else _OMIT,
        "IdToken": tokens.identity if tokens is not None and tokens.identity
        else WITHHELD_ID_TOKEN,
    }

    def fill(shape: Any) -> Any:
        if isinstance(shape, str):
            whole = PLACEHOLDER.fullmatch(shape.strip())
            if whole:
                return values[whole.group(1)]
            return PLACEHOLDER.sub(
                lambda m: "" if values[m.group(1)] is _OMIT else str(values[m.group(1)]), shape)
        if isinstance(shape, Mapping):
            out: dict[str, Any] = {}
            for key, child in shape.items():
                filled = fill(child)
                if filled is not _OMIT:
                    out[str(key)] = filled
            return out
        if isinstance(shape, list):
            return [item for item in (fill(c) for c in shape) if item is not _OMIT]
        return shape

    document = fill(config.credential_file.structure)
    if document is _OMIT or document is None:
        document = {}
    if config.credential_file.format == "toml":
        import tomlkit

        return tomlkit.dumps(document)
    return json.dumps(document, indent=2) + "\n"


def home_relative(path: str) -> str | None:
    """``~/x`` → ``x`` (a path in the sandbox's HOME); None for anything else."""
    if path == "~" or path.startswith("~/"):
        rest = path[2:].strip("/")
        return rest or None
    return None


def credential_file_targets(files: Sequence[tuple[str, str]]) -> list[str]:
    return [path for path, _content in files]


__all__ = [
    "ACCESS_SENTINEL_PREFIX",
    "KNOWN_SHAPES",
    "OAUTH_DIR",
    "REFRESH_SENTINEL_PREFIX",
    "CredentialFile",
    "Mode",
    "OAuthConfig",
    "UNSIGNED_HEADER",
    "WITHHELD_ID_TOKEN",
    "Tokens",
    "account_from_id_token",
    "credential_mode",
    "has_api_key",
    "home_relative",
    "mode_env_name",
    "passthrough_refusal",
    "render_credential_file",
    "unsigned_id_token",
]
