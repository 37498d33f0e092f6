"""The credentials in the egress proxy's config: where each one is injected, what the sandbox
holds instead (a sentinel, never a secret), and an OAuth credential's token endpoint and
sentinels."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from sbx.domain.credentials.oauth import OAuthConfig
from sbx.domain.egress.configfields import (
    ProxyConfigError,
    as_map,
    check_keys,
    has_controls,
    read_int,
    read_opt_str,
    read_phase,
    read_str,
    read_strs,
)
from sbx.domain.kits.compose import PHASES, Credential, Phase

DEFAULT_HEADER: Final = "Authorization"
DEFAULT_FORMAT: Final = "Bearer %s"
SENTINEL_PREFIX: Final = "sbx-proxy-managed-"
_TOKEN_CHARS: Final = frozenset("!#$%&'*+-.^_`|~0123456789"
                                "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def sentinel_for(service: str) -> str:
    """The value a proxy-managed variable holds inside the sandbox: non-empty, never a secret."""
    return f"{SENTINEL_PREFIX}{service}"


@dataclass(frozen=True)
class Inject:
    """Where and how one credential is presented: a header (``format`` with one ``%s``), or
    basic auth (``scheme="basic"`` with ``username``)."""

    domain: str
    header: str = DEFAULT_HEADER
    format: str = DEFAULT_FORMAT
    scheme: Literal["header", "basic"] = "header"
    username: str | None = None

    def __post_init__(self) -> None:
        if not self.domain or any(c.isspace() for c in self.domain):
            raise ProxyConfigError(f"inject domain {self.domain!r} is not a host")
        if not self.header or not set(self.header) <= _TOKEN_CHARS:
            raise ProxyConfigError(f"inject header {self.header!r} is not a header name")
        if self.scheme == "basic":
            if self.username is None or ":" in self.username or has_controls(self.username):
                raise ProxyConfigError("basic auth needs a username without ':' or controls")
        elif self.scheme != "header":
            raise ProxyConfigError(f"inject scheme {self.scheme!r} is not 'header' or 'basic'")
        elif self.format.count("%s") != 1 or has_controls(self.format):
            raise ProxyConfigError(f"inject format {self.format!r} must hold exactly one %s")

    def as_dict(self) -> dict[str, Any]:
        if self.scheme == "basic":
            return {"domain": self.domain, "scheme": "basic", "username": self.username,
                    "header": self.header}
        return {"domain": self.domain, "header": self.header, "format": self.format}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Inject:
        check_keys(data, {"domain", "header", "format", "scheme", "username"}, "inject")
        scheme = data.get("scheme") or "header"
        if isinstance(scheme, str) and scheme.lower() == "basic":
            return cls(domain=read_str(data, "domain"), scheme="basic",
                       username=read_str(data, "username"),
                       header=read_str(data, "header", DEFAULT_HEADER))
        if scheme != "header":
            raise ProxyConfigError(f"inject scheme {scheme!r} is not 'header' or 'basic'")
        header = read_str(data, "header", DEFAULT_HEADER)
        # Without a format: a bearer token in Authorization, the bare value in any other header.
        default = DEFAULT_FORMAT if header.lower() == DEFAULT_HEADER.lower() else "%s"
        return cls(domain=read_str(data, "domain"), header=header,
                   format=read_str(data, "format", default))


@dataclass(frozen=True)
class OAuthSpec:
    """A credential used in its OAuth mode (:mod:`sbx.domain.credentials.oauth`): the token
    endpoint the proxy
    answers with sentinels, the hosts where the access sentinel becomes the real access token,
    and the sentinels. The tokens themselves are read from
    ``sbx.domain.credentials.oauthstore.OAuthStore``."""

    token_host: str | None
    token_path: str | None  # None: any path on the token host
    hosts: tuple[str, ...]  # resourceHosts + the apiKey inject domains
    access_sentinel: str
    refresh_sentinel: str
    access_field: str = "access_token"
    refresh_field: str = "refresh_token"
    expires_field: str = "expires_in"
    # Where the access sentinel may travel: Authorization and the apiKey inject headers.
    headers: tuple[str, ...] = ("authorization",)
    # Only the token endpoint is the proxy's (the credential is bound by its API key, or not
    # at all): a login inside the sandbox is still rewritten and kept for the sandbox.
    login_only: bool = False

    def __post_init__(self) -> None:
        if not self.headers or not all(h and set(h) <= _TOKEN_CHARS for h in self.headers):
            raise ProxyConfigError("oauth headers must be header names")
        for name in ("access_sentinel", "refresh_sentinel", "access_field", "refresh_field",
                     "expires_field"):
            value = getattr(self, name)
            if not value or has_controls(value) or any(c.isspace() for c in value):
                raise ProxyConfigError(f"oauth {name} must be a non-empty word")
        if self.access_sentinel == self.refresh_sentinel:
            raise ProxyConfigError("oauth access and refresh sentinels must differ")

    def as_dict(self) -> dict[str, Any]:
        return {"token_host": self.token_host, "token_path": self.token_path,
                "hosts": list(self.hosts), "access_sentinel": self.access_sentinel,
                "refresh_sentinel": self.refresh_sentinel, "access_field": self.access_field,
                "refresh_field": self.refresh_field, "expires_field": self.expires_field,
                "headers": list(self.headers), "login_only": self.login_only}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> OAuthSpec:
        check_keys(data, {"token_host", "token_path", "hosts", "access_sentinel",
                     "refresh_sentinel", "access_field", "refresh_field", "expires_field",
                     "headers", "login_only"}, "oauth")
        login_only = data.get("login_only", False)
        if not isinstance(login_only, bool):
            raise ProxyConfigError("oauth.login_only must be true or false")
        return cls(token_host=read_opt_str(data, "token_host"),
                   token_path=read_opt_str(data, "token_path"),
                   hosts=tuple(read_strs(data, "hosts")),
                   access_sentinel=read_str(data, "access_sentinel"),
                   refresh_sentinel=read_str(data, "refresh_sentinel"),
                   access_field=read_str(data, "access_field", "access_token"),
                   refresh_field=read_str(data, "refresh_field", "refresh_token"),
                   expires_field=read_str(data, "expires_field", "expires_in"),
                   headers=tuple(h.lower() for h in read_strs(data, "headers"))
                   or ("authorization",), login_only=login_only)

    def config(self) -> Any:
        """The :class:`sbx.domain.credentials.oauth.OAuthConfig` view (token parsing uses its field
        names)."""
        return OAuthConfig(self.token_host, self.token_path, self.hosts, self.access_sentinel,
                           self.refresh_sentinel, None, self.access_field, self.refresh_field,
                           self.expires_field)


@dataclass(frozen=True)
class CredentialSpec:
    """One (service, phase) credential: where to inject it and what the sandbox holds instead.

    In OAuth mode (``oauth`` set) nothing is injected from the secret store: the proxy answers
    the token endpoint and swaps the access sentinel for the stored access token instead."""

    service: str
    phase: Phase
    domains: tuple[Inject, ...]
    sentinel: str | None = None  # None: inject-only (no variable in the sandbox at all)
    env: str | None = None  # the variable that holds the sentinel, if any
    kit: str = ""
    index: int = -1
    oauth: OAuthSpec | None = None

    def __post_init__(self) -> None:
        if self.phase not in PHASES:
            raise ProxyConfigError(f"credential {self.service!r}: phase {self.phase!r}")
        if self.sentinel == "":
            raise ProxyConfigError(f"credential {self.service!r}: empty sentinel")

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
                "service": self.service, "phase": self.phase,
                "domains": [d.as_dict() for d in self.domains], "sentinel": self.sentinel,
                "env": self.env, "kit": self.kit, "index": self.index}
        if self.oauth is not None:
            data["oauth"] = self.oauth.as_dict()
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CredentialSpec:
        check_keys(data, {"service", "phase", "domains", "sentinel", "env", "kit", "index",
                          "oauth"}, "credential")
        domains = data.get("domains")
        if not isinstance(domains, list):
            raise ProxyConfigError("credential.domains must be a list")
        oauth = data.get("oauth")
        return cls(service=read_str(data, "service"), phase=read_phase(data.get("phase")),
                   domains=tuple(Inject.from_dict(as_map(d, "inject")) for d in domains),
                   sentinel=read_opt_str(data, "sentinel"), env=read_opt_str(data, "env"),
                   kit=read_str(data, "kit", ""), index=read_int(data, "index", -1),
                   oauth=None if oauth is None else OAuthSpec.from_dict(as_map(oauth, "oauth")))

    @classmethod
    def from_credential(cls, credential: Credential, *, sentinel: str | None = None,
                        mode: str = "apikey") -> CredentialSpec:
        """From a composed ``credential@1``: its apiKey half (the sentinel defaults to
        :func:`sentinel_for` when the kit names a variable; inject-only gets none), or with
        ``mode="oauth"`` its OAuth half (no variable, nothing injected from the store)."""
        api = credential.config.get("apiKey")
        api = api if isinstance(api, Mapping) else {}
        raw = api.get("inject")
        injects: list[Any] = raw if isinstance(raw, list) else []
        domains = tuple(Inject.from_dict(as_map(i, "inject")) for i in injects)
        if mode == "oauth":
            declared = OAuthConfig.from_credential(credential.service, credential.config)
            if declared is None:
                raise ProxyConfigError(f"credential {credential.service!r} declares no oauth")
            hosts = tuple(dict.fromkeys((*declared.resource_hosts,
                                         *(d.domain.lower() for d in domains))))
            return cls(service=credential.service, phase=credential.phase, domains=(),
                       kit=credential.kit, index=credential.index, oauth=OAuthSpec(
                           token_host=declared.token_host, token_path=declared.token_path,
                           hosts=hosts, access_sentinel=declared.access_sentinel,
                           refresh_sentinel=declared.refresh_sentinel,
                           access_field=declared.access_field,
                           refresh_field=declared.refresh_field,
                           expires_field=declared.expires_field,
                           headers=tuple(dict.fromkeys(
                               ["authorization", *(d.header.lower() for d in domains
                                                   if d.scheme == "header")]))))
        env = api.get("name") or None
        if env is not None and sentinel is None:
            sentinel = sentinel_for(credential.service)
        return cls(service=credential.service, phase=credential.phase, domains=domains,
                   sentinel=sentinel if env is not None else None,
                   env=str(env) if env is not None else None,
                   kit=credential.kit, index=credential.index,
                   oauth=_login_only(credential))

    @classmethod
    def token_endpoint_only(cls, credential: Credential) -> CredentialSpec | None:
        """A credential that is not bound but declares an OAuth token endpoint: the proxy
        still answers that endpoint (a login inside the sandbox never reaches it raw)."""
        oauth = _login_only(credential)
        if oauth is None:
            return None
        return cls(service=credential.service, phase=credential.phase, domains=(),
                   kit=credential.kit, index=credential.index, oauth=oauth)


def _login_only(credential: Credential) -> OAuthSpec | None:
    """The token-endpoint half of a declared ``oauth`` block, for a credential not bound in
    its OAuth mode."""
    declared = OAuthConfig.from_credential(credential.service, credential.config)
    if declared is None or declared.token_host is None:
        return None
    return OAuthSpec(token_host=declared.token_host, token_path=declared.token_path, hosts=(),
                     access_sentinel=declared.access_sentinel,
                     refresh_sentinel=declared.refresh_sentinel,
                     access_field=declared.access_field, refresh_field=declared.refresh_field,
                     expires_field=declared.expires_field, login_only=True)


def credentials_from(composed: Iterable[Credential]) -> tuple[CredentialSpec, ...]:
    """The proxy's credential list from a composition's ``credentials``."""
    return tuple(CredentialSpec.from_credential(c) for c in composed)
