"""The egress proxy's configuration: one JSON file that ``sbx run`` writes and the proxy reads.

Everything the proxy process needs and nothing it must not have: the composed network rules per
phase (each with its kit, capability index and phase, so a refusal can name them), the starting
phase, the credentials to inject (service, phase, domains, header format, sentinel) — but never a
secret value: the proxy reads values from
``sbx.domain.credentials.secrets.SecretStore(state_home)`` when it starts,
never from its environment or this file — the upstream (corporate) proxy, the network its
clients must come from (``peer_network``), and the bounds. The run's proxy token is not here
either: it reaches the proxy over its owner pipe (``sbx.proxy``).

What the proxy reads and writes beside it is named by path, never found in the state home:
``request_log`` (where it appends one record per decision,
:mod:`sbx.domain.egress.requestlog`) and ``user_policy`` (the ``sbx policy`` rules file it
re-reads when it changes, :mod:`sbx.domain.egress.userpolicy`; the rules for every sandbox
and for ``sandbox``, the named sandbox it serves, apply), so the proxy can run elsewhere with
those paths mounted.

The format is versioned (``format``); unknown keys are refused so that a newer sbx and an older
proxy never silently disagree about what is enforced. Loading validates every field and raises
:class:`ProxyConfigError` (``proxy_failed``) naming the first bad key.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Final, Literal, cast
from urllib.parse import urlsplit

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.egress.sshagent import RelayConfig
from sbx.domain.kits.compose import PHASES, Credential, Network, NetworkPhase, Origin, Phase, Rule

CONFIG_FORMAT: Final = 1
MAX_CONFIG_BYTES: Final = 16 * 1024 * 1024  # a policy of thousands of rules is a few MiB
DEFAULT_HEADER: Final = "Authorization"
DEFAULT_FORMAT: Final = "Bearer %s"
SENTINEL_PREFIX: Final = "sbx-proxy-managed-"
_TOKEN_CHARS: Final = frozenset("!#$%&'*+-.^_`|~0123456789"
                                "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


class ProxyConfigError(SbxError):
    def __init__(self, message: str) -> None:
        super().__init__(Reason.PROXY_FAILED, f"invalid egress proxy config: {message}",
                         hint="The file is written by `sbx run`; re-run it rather than editing.")


def sentinel_for(service: str) -> str:
    """The value a proxy-managed variable holds inside the sandbox: non-empty, never a secret."""
    return f"{SENTINEL_PREFIX}{service}"


# -- parts -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProxyLimits:
    """Bounds on everything a client controls (sizes in bytes, times in seconds)."""

    max_head_bytes: int = 64 * 1024  # request line + headers of one request (and of responses)
    max_target_bytes: int = 8 * 1024  # request target (URL)
    max_headers: int = 128  # header fields in one request or response
    max_connections: int = 512  # concurrent client connections
    max_audit_records: int = 10_000  # egress_denied records per proxy process
    log_segment_bytes: int = 4 * 1024 * 1024  # the request log rotates at this size...
    log_segments: int = 3  # ...keeping this many files (the live one included)
    connect_timeout: float = 15.0  # DNS + TCP connect (+ upstream CONNECT)
    handshake_timeout: float = 15.0  # TLS handshakes, both sides
    head_timeout: float = 30.0  # to receive a complete request or response head
    idle_timeout: float = 300.0  # no byte in either direction
    shutdown_timeout: float = 3.0  # SIGTERM: how long open connections may take to close

    def __post_init__(self) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise ProxyConfigError(f"limits.{item.name} must be a positive number")


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
            if self.username is None or ":" in self.username or _controls(self.username):
                raise ProxyConfigError("basic auth needs a username without ':' or controls")
        elif self.scheme != "header":
            raise ProxyConfigError(f"inject scheme {self.scheme!r} is not 'header' or 'basic'")
        elif self.format.count("%s") != 1 or _controls(self.format):
            raise ProxyConfigError(f"inject format {self.format!r} must hold exactly one %s")

    def as_dict(self) -> dict[str, Any]:
        if self.scheme == "basic":
            return {"domain": self.domain, "scheme": "basic", "username": self.username,
                    "header": self.header}
        return {"domain": self.domain, "header": self.header, "format": self.format}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Inject:
        _keys(data, {"domain", "header", "format", "scheme", "username"}, "inject")
        scheme = data.get("scheme") or "header"
        if isinstance(scheme, str) and scheme.lower() == "basic":
            return cls(domain=_str(data, "domain"), scheme="basic",
                       username=_str(data, "username"),
                       header=_str(data, "header", DEFAULT_HEADER))
        if scheme != "header":
            raise ProxyConfigError(f"inject scheme {scheme!r} is not 'header' or 'basic'")
        header = _str(data, "header", DEFAULT_HEADER)
        # Without a format: a bearer token in Authorization, the bare value in any other header.
        default = DEFAULT_FORMAT if header.lower() == DEFAULT_HEADER.lower() else "%s"
        return cls(domain=_str(data, "domain"), header=header,
                   format=_str(data, "format", default))


@dataclass(frozen=True)
class OAuthSpec:
    """A credential used in its OAuth mode (:mod:`sbx.domain.credentials.oauth`): the token
    endpoint the proxy
    answers with sentinels, the hosts where the access sentinel becomes the real access token,
    and the sentinels. The tokens themselves are read from
    ``sbx.domain.credentials.oauth.OAuthStore``."""

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
            if not value or _controls(value) or any(c.isspace() for c in value):
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
        _keys(data, {"token_host", "token_path", "hosts", "access_sentinel",
                     "refresh_sentinel", "access_field", "refresh_field", "expires_field",
                     "headers", "login_only"}, "oauth")
        login_only = data.get("login_only", False)
        if not isinstance(login_only, bool):
            raise ProxyConfigError("oauth.login_only must be true or false")
        return cls(token_host=_opt_str(data, "token_host"),
                   token_path=_opt_str(data, "token_path"), hosts=tuple(_strs(data, "hosts")),
                   access_sentinel=_str(data, "access_sentinel"),
                   refresh_sentinel=_str(data, "refresh_sentinel"),
                   access_field=_str(data, "access_field", "access_token"),
                   refresh_field=_str(data, "refresh_field", "refresh_token"),
                   expires_field=_str(data, "expires_field", "expires_in"),
                   headers=tuple(h.lower() for h in _strs(data, "headers"))
                   or ("authorization",), login_only=login_only)

    def config(self) -> Any:
        """The :class:`sbx.domain.credentials.oauth.OAuthConfig` view (token parsing uses its field
        names)."""
        from sbx.domain.credentials.oauth import OAuthConfig

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
        _keys(data, {"service", "phase", "domains", "sentinel", "env", "kit", "index", "oauth"},
              "credential")
        domains = data.get("domains")
        if not isinstance(domains, list):
            raise ProxyConfigError("credential.domains must be a list")
        oauth = data.get("oauth")
        return cls(service=_str(data, "service"), phase=_phase(data.get("phase")),
                   domains=tuple(Inject.from_dict(_map(d, "inject")) for d in domains),
                   sentinel=_opt_str(data, "sentinel"), env=_opt_str(data, "env"),
                   kit=_str(data, "kit", ""), index=_int(data, "index", -1),
                   oauth=None if oauth is None else OAuthSpec.from_dict(_map(oauth, "oauth")))

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
        domains = tuple(Inject.from_dict(_map(i, "inject")) for i in injects)
        if mode == "oauth":
            from sbx.domain.credentials.oauth import OAuthConfig

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
    from sbx.domain.credentials.oauth import OAuthConfig

    declared = OAuthConfig.from_credential(credential.service, credential.config)
    if declared is None or declared.token_host is None:
        return None
    return OAuthSpec(token_host=declared.token_host, token_path=declared.token_path, hosts=(),
                     access_sentinel=declared.access_sentinel,
                     refresh_sentinel=declared.refresh_sentinel,
                     access_field=declared.access_field, refresh_field=declared.refresh_field,
                     expires_field=declared.expires_field, login_only=True)


def _rule_dict(rule: Rule, superseded: bool) -> dict[str, Any]:
    return {"host": rule.host, "methods": list(rule.methods), "paths": list(rule.paths),
            "action": rule.action, "kit": rule.kit, "index": rule.index, "phase": rule.phase,
            "declared_at": rule.declared_at, "superseded": superseded}


def _rule_from(data: Mapping[str, Any]) -> tuple[Rule, bool]:
    _keys(data, {"host", "methods", "paths", "action", "kit", "index", "phase", "declared_at",
                 "superseded"}, "rule")
    action = data.get("action")
    if action not in ("allow", "deny"):
        raise ProxyConfigError(f"rule action {action!r}")
    rule = Rule(host=_str(data, "host"), methods=tuple(_strs(data, "methods")),
                paths=tuple(_strs(data, "paths")), action=cast(Any, action),
                kit=_str(data, "kit"), index=_int(data, "index"),
                phase=_phase(data.get("phase")), declared_at=_str(data, "declared_at", ""))
    superseded = data.get("superseded", False)
    if not isinstance(superseded, bool):
        raise ProxyConfigError("rule.superseded must be true or false")
    return rule, superseded


def network_to_dict(network: Network) -> dict[str, Any]:
    rules: list[dict[str, Any]] = []
    for name in PHASES:
        phase = network.phase(name)
        rules.extend(_rule_dict(r, False) for r in (*phase.allow, *phase.deny))
        rules.extend(_rule_dict(r, True) for r in phase.superseded)
    return {"version": network.version, "optional": network.optional, "rules": rules,
            "origins": [{"kit": o.kit, "index": o.index, "path": o.path}
                        for o in network.origins]}


def network_from_dict(data: Mapping[str, Any]) -> Network:
    _keys(data, {"version", "optional", "rules", "origins"}, "network")
    version = _int(data, "version")
    if version not in (1, 2):
        raise ProxyConfigError(f"network.version {version} is not 1 or 2")
    raw_rules = data.get("rules")
    if not isinstance(raw_rules, list):
        raise ProxyConfigError("network.rules must be a list")
    buckets: dict[tuple[str, str], list[Rule]] = {}
    for raw in raw_rules:
        rule, superseded = _rule_from(_map(raw, "rule"))
        key = (rule.phase, "superseded" if superseded else rule.action)
        buckets.setdefault(key, []).append(rule)
    phases = {name: NetworkPhase(allow=tuple(buckets.get((name, "allow"), ())),
                                 deny=tuple(buckets.get((name, "deny"), ())),
                                 superseded=tuple(buckets.get((name, "superseded"), ())))
              for name in PHASES}
    origins_raw = data.get("origins", [])
    if not isinstance(origins_raw, list):
        raise ProxyConfigError("network.origins must be a list")
    origins = tuple(Origin(kit=_str(o, "kit"), index=_int(o, "index"), path=_str(o, "path"))
                    for o in (_map(x, "origin") for x in origins_raw))
    optional = data.get("optional", False)
    if not isinstance(optional, bool):
        raise ProxyConfigError("network.optional must be true or false")
    return Network(version=version, install=phases["install"], runtime=phases["runtime"],
                   optional=optional, origins=origins)


# -- the config ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProxyConfig:
    run_id: str
    state_home: Path
    audit_log: Path
    network: Network | None  # None: nothing is allowed (deny by default)
    phase: Phase = "runtime"
    credentials: tuple[CredentialSpec, ...] = ()
    listen_host: str = "127.0.0.1"
    listen_port: int = 0  # 0: any free port; the proxy prints the one it got
    upstream_proxy: str | None = None  # http(s):// URL of the corporate proxy (userinfo = auth)
    upstream_ca_file: Path | None = None  # extra CAs trusted for origins and that proxy
    explain_command: str = "sbx explain"  # refusal bodies append "METHOD URL" to this
    phase_file: Path | None = None  # the proxy writes its current phase here (an acknowledgement)
    limits: ProxyLimits = field(default_factory=ProxyLimits)
    # Clients must come from inside this network (CIDR), never from listen_host itself: the
    # run's internal network, where only the sandbox lives (None: any client, loopback only).
    peer_network: str | None = None
    # Where OAuth logins made inside the sandbox are kept (0600), apart from the user's own
    # (None: in the proxy's memory only, for its life).
    login_dir: Path | None = None
    sandbox: str | None = None  # the named sandbox served (None: a one-shot run)
    request_log: Path | None = None  # the request log file (None: no log)
    user_policy: Path | None = None  # the user policy rules file (None: kits' rules only)
    # Local kits' descriptor files (reference -> path): where a refusal tells a kit author to
    # add a rule. Registry kits have none.
    kit_files: Mapping[str, str] = field(default_factory=dict)
    # The SSH agent relay this process serves beside the proxy (ssh-agent@1), if any.
    ssh_agent: RelayConfig | None = None

    def __post_init__(self) -> None:
        if self.sandbox is not None and (not self.sandbox
                                         or any(c.isspace() for c in self.sandbox)):
            raise ProxyConfigError("sandbox must be a name")
        if not self.run_id or any(c.isspace() for c in self.run_id):
            raise ProxyConfigError("run_id must be a non-empty word")
        if self.phase not in PHASES:
            raise ProxyConfigError(f"phase {self.phase!r} is not install or runtime")
        if not 0 <= self.listen_port <= 65535:
            raise ProxyConfigError(f"listen_port {self.listen_port} is out of range")
        if self.upstream_proxy is not None:
            parts = urlsplit(self.upstream_proxy)
            try:
                port = parts.port
            except ValueError:
                port = None
            if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or \
                    (parts.path not in ("", "/")) or (port is None and parts.netloc.endswith(":")):
                raise ProxyConfigError("upstream_proxy must be an http:// or https:// URL with a "
                                       "host (and optionally user:password@ and :port), nothing "
                                       "after")
        if self.peer_network is not None:
            try:
                ipaddress.ip_network(self.peer_network, strict=False)
            except ValueError:
                raise ProxyConfigError(f"peer_network {self.peer_network!r} is not a network "
                                       "(CIDR)") from None
        seen: set[tuple[str, str]] = set()
        for credential in self.credentials:
            key = (credential.service, credential.phase)
            if key in seen:
                raise ProxyConfigError(f"credential {key} is listed twice")
            seen.add(key)

    def with_phase(self, phase: Phase) -> ProxyConfig:
        return replace(self, phase=phase)

    def as_dict(self) -> dict[str, Any]:
        return {
            "format": CONFIG_FORMAT,
            "run_id": self.run_id,
            "state_home": str(self.state_home),
            "audit_log": str(self.audit_log),
            "network": None if self.network is None else network_to_dict(self.network),
            "phase": self.phase,
            "credentials": [c.as_dict() for c in self.credentials],
            "listen_host": self.listen_host,
            "listen_port": self.listen_port,
            "upstream_proxy": self.upstream_proxy,
            "upstream_ca_file": None if self.upstream_ca_file is None
            else str(self.upstream_ca_file),
            "explain_command": self.explain_command,
            "phase_file": None if self.phase_file is None else str(self.phase_file),
            "limits": {f.name: getattr(self.limits, f.name) for f in fields(self.limits)},
            "peer_network": self.peer_network,
            "login_dir": None if self.login_dir is None else str(self.login_dir),
            "sandbox": self.sandbox,
            "request_log": None if self.request_log is None else str(self.request_log),
            "user_policy": None if self.user_policy is None else str(self.user_policy),
            "kit_files": dict(self.kit_files),
            "ssh_agent": None if self.ssh_agent is None else self.ssh_agent.as_dict(),
        }

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProxyConfig:
        _keys(data, {"format", "run_id", "state_home", "audit_log", "network", "phase",
                     "credentials", "listen_host", "listen_port", "upstream_proxy",
                     "upstream_ca_file", "explain_command", "phase_file", "limits",
                     "peer_network", "login_dir", "sandbox", "request_log", "user_policy",
                     "kit_files", "ssh_agent"}, "config")
        if data.get("format") != CONFIG_FORMAT:
            raise ProxyConfigError(f"format {data.get('format')!r} is not {CONFIG_FORMAT}")
        network = data.get("network")
        credentials = data.get("credentials", [])
        if not isinstance(credentials, list):
            raise ProxyConfigError("credentials must be a list")
        limits_raw = _map(data.get("limits", {}), "limits")
        _keys(limits_raw, {f.name for f in fields(ProxyLimits)}, "limits")
        upstream_ca = _opt_str(data, "upstream_ca_file")
        phase_file = _opt_str(data, "phase_file")
        login_dir = _opt_str(data, "login_dir")
        request_log = _opt_str(data, "request_log")
        user_policy = _opt_str(data, "user_policy")
        kit_files = _map(data.get("kit_files", {}), "kit_files")
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in kit_files.items()):
            raise ProxyConfigError("kit_files must map kit references to file paths")
        relay = data.get("ssh_agent")
        try:
            ssh_agent = None if relay is None else RelayConfig.from_dict(_map(relay, "ssh_agent"))
        except ValueError as error:
            raise ProxyConfigError(str(error)) from None
        return cls(
            run_id=_str(data, "run_id"),
            state_home=Path(_str(data, "state_home")),
            audit_log=Path(_str(data, "audit_log")),
            network=None if network is None else network_from_dict(_map(network, "network")),
            phase=_phase(data.get("phase", "runtime")),
            credentials=tuple(CredentialSpec.from_dict(_map(c, "credential"))
                              for c in credentials),
            listen_host=_str(data, "listen_host", "127.0.0.1"),
            listen_port=_int(data, "listen_port", 0),
            upstream_proxy=_opt_str(data, "upstream_proxy"),
            upstream_ca_file=None if upstream_ca is None else Path(upstream_ca),
            explain_command=_str(data, "explain_command", "sbx explain"),
            phase_file=None if phase_file is None else Path(phase_file),
            limits=ProxyLimits(**dict(limits_raw)),
            peer_network=_opt_str(data, "peer_network"),
            login_dir=None if login_dir is None else Path(login_dir),
            sandbox=_opt_str(data, "sandbox"),
            request_log=None if request_log is None else Path(request_log),
            user_policy=None if user_policy is None else Path(user_policy),
            kit_files=dict(kit_files),
            ssh_agent=ssh_agent,
        )

    @classmethod
    def from_json(cls, text: str) -> ProxyConfig:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise ProxyConfigError(f"not JSON ({error.msg} at line {error.lineno})") from None
        return cls.from_dict(_map(data, "config"))

    @classmethod
    def load(cls, path: Path) -> ProxyConfig:
        from sbx.base.errors import SbxError
        from sbx.seams import owned

        try:  # the run's own config only (sbx.seams.owned): its policy is the boundary
            raw = owned.read_bytes(path, max_bytes=MAX_CONFIG_BYTES)
            if raw is None:
                raise FileNotFoundError(2, "No such file or directory")
            text = raw.decode("utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise ProxyConfigError(f"cannot read {path} ({error})") from None
        except SbxError as error:
            raise ProxyConfigError(error.message) from None
        return cls.from_json(text)

    def write(self, path: Path) -> None:
        """Write the config (0600: it names the run's credentials, though no value)."""
        from sbx.seams.host.private import write_private_file

        write_private_file(path, self.to_json().encode("utf-8"))


def credentials_from(composed: Iterable[Credential]) -> tuple[CredentialSpec, ...]:
    """The proxy's credential list from a composition's ``credentials``."""
    return tuple(CredentialSpec.from_credential(c) for c in composed)


# -- field readers ---------------------------------------------------------------------------------


def _controls(text: str) -> bool:
    return any((ord(c) < 0x20 and c != "\t") or ord(c) == 0x7F for c in text)


def _keys(data: Mapping[str, Any], allowed: set[str], what: str) -> None:
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ProxyConfigError(f"unknown key {unknown[0]!r} in {what}")


def _map(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ProxyConfigError(f"{what} must be an object")
    return value


_MISSING: Final = object()


def _str(data: Mapping[str, Any], key: str, default: Any = _MISSING) -> str:
    value = data.get(key, default)
    if value is _MISSING:
        raise ProxyConfigError(f"{key} is required")
    if not isinstance(value, str):
        raise ProxyConfigError(f"{key} must be a string")
    return value


def _opt_str(data: Mapping[str, Any], key: str) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise ProxyConfigError(f"{key} must be a string or null")
    return value


def _int(data: Mapping[str, Any], key: str, default: Any = _MISSING) -> int:
    value = data.get(key, default)
    if value is _MISSING:
        raise ProxyConfigError(f"{key} is required")
    if isinstance(value, bool) or not isinstance(value, int):
        raise ProxyConfigError(f"{key} must be an integer")
    return value


def _strs(data: Mapping[str, Any], key: str) -> Sequence[str]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ProxyConfigError(f"{key} must be a list of strings")
    return value


def _phase(value: Any) -> Phase:
    if value not in PHASES:
        raise ProxyConfigError(f"phase {value!r} is not install or runtime")
    return cast(Phase, value)


__all__ = [
    "CONFIG_FORMAT",
    "DEFAULT_FORMAT",
    "DEFAULT_HEADER",
    "CredentialSpec",
    "Inject",
    "OAuthSpec",
    "ProxyLimits",
    "ProxyConfig",
    "ProxyConfigError",
    "credentials_from",
    "network_from_dict",
    "network_to_dict",
    "sentinel_for",
]
