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
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Final, cast
from urllib.parse import urlsplit

from sbx.base.errors import SbxError
from sbx.domain.egress.configfields import (
    ProxyConfigError,
    as_map,
    check_keys,
    read_bool,
    read_int,
    read_opt_str,
    read_phase,
    read_str,
    read_strs,
)
from sbx.domain.egress.kitregistry import MAX_STORE_BYTES
from sbx.domain.egress.proxycreds import CredentialSpec
from sbx.domain.egress.sshagent import RelayConfig
from sbx.domain.kits.compose import PHASES, Network, NetworkPhase, Origin, Phase, Rule
from sbx.seams import owned
from sbx.seams.host.private import write_private_file

CONFIG_FORMAT: Final = 1
MAX_CONFIG_BYTES: Final = 16 * 1024 * 1024  # a policy of thousands of rules is a few MiB


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
    kit_registry_bytes: int = MAX_STORE_BYTES  # the kit store, every sandbox's pushes together

    def __post_init__(self) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise ProxyConfigError(f"limits.{item.name} must be a positive number")


def _rule_dict(rule: Rule, superseded: bool) -> dict[str, Any]:
    return {"host": rule.host, "methods": list(rule.methods), "paths": list(rule.paths),
            "action": rule.action, "kit": rule.kit, "index": rule.index, "phase": rule.phase,
            "declared_at": rule.declared_at, "superseded": superseded}


def _rule_from(data: Mapping[str, Any]) -> tuple[Rule, bool]:
    check_keys(data, {"host", "methods", "paths", "action", "kit", "index", "phase", "declared_at",
                 "superseded"}, "rule")
    action = data.get("action")
    if action not in ("allow", "deny"):
        raise ProxyConfigError(f"rule action {action!r}")
    rule = Rule(host=read_str(data, "host"), methods=tuple(read_strs(data, "methods")),
                paths=tuple(read_strs(data, "paths")), action=cast(Any, action),
                kit=read_str(data, "kit"), index=read_int(data, "index"),
                phase=read_phase(data.get("phase")), declared_at=read_str(data, "declared_at", ""))
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
    check_keys(data, {"version", "optional", "rules", "origins"}, "network")
    version = read_int(data, "version")
    if version not in (1, 2):
        raise ProxyConfigError(f"network.version {version} is not 1 or 2")
    raw_rules = data.get("rules")
    if not isinstance(raw_rules, list):
        raise ProxyConfigError("network.rules must be a list")
    buckets: dict[tuple[str, str], list[Rule]] = {}
    for raw in raw_rules:
        rule, superseded = _rule_from(as_map(raw, "rule"))
        key = (rule.phase, "superseded" if superseded else rule.action)
        buckets.setdefault(key, []).append(rule)
    phases = {name: NetworkPhase(allow=tuple(buckets.get((name, "allow"), ())),
                                 deny=tuple(buckets.get((name, "deny"), ())),
                                 superseded=tuple(buckets.get((name, "superseded"), ())))
              for name in PHASES}
    origins_raw = data.get("origins", [])
    if not isinstance(origins_raw, list):
        raise ProxyConfigError("network.origins must be a list")
    origins = tuple(Origin(kit=read_str(o, "kit"), index=read_int(o, "index"),
                           path=read_str(o, "path"))
                    for o in (as_map(x, "origin") for x in origins_raw))
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
    # The kit store this proxy answers as the kit registry (kit-registry@1; None: refused).
    kit_registry: Path | None = None
    # Records, audit events and the phase as tagged lines on stdout instead of files (a proxy
    # in a container, whose owner keeps them: sbx.domain.egress.proxystream).
    stream_records: bool = False

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
            "kit_registry": None if self.kit_registry is None else str(self.kit_registry),
            "stream_records": self.stream_records,
        }

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProxyConfig:
        check_keys(data, {"format", "run_id", "state_home", "audit_log", "network", "phase",
                     "credentials", "listen_host", "listen_port", "upstream_proxy",
                     "upstream_ca_file", "explain_command", "phase_file", "limits",
                     "peer_network", "login_dir", "sandbox", "request_log", "user_policy",
                     "kit_files", "ssh_agent", "kit_registry", "stream_records"}, "config")
        if data.get("format") != CONFIG_FORMAT:
            raise ProxyConfigError(f"format {data.get('format')!r} is not {CONFIG_FORMAT}")
        network = data.get("network")
        credentials = data.get("credentials", [])
        if not isinstance(credentials, list):
            raise ProxyConfigError("credentials must be a list")
        limits_raw = as_map(data.get("limits", {}), "limits")
        check_keys(limits_raw, {f.name for f in fields(ProxyLimits)}, "limits")
        upstream_ca = read_opt_str(data, "upstream_ca_file")
        phase_file = read_opt_str(data, "phase_file")
        login_dir = read_opt_str(data, "login_dir")
        request_log = read_opt_str(data, "request_log")
        user_policy = read_opt_str(data, "user_policy")
        kit_files = as_map(data.get("kit_files", {}), "kit_files")
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in kit_files.items()):
            raise ProxyConfigError("kit_files must map kit references to file paths")
        relay = data.get("ssh_agent")
        kit_registry = read_opt_str(data, "kit_registry")
        try:
            ssh_agent = None if relay is None else RelayConfig.from_dict(as_map(relay, "ssh_agent"))
        except ValueError as error:
            raise ProxyConfigError(str(error)) from None
        return cls(
            run_id=read_str(data, "run_id"),
            state_home=Path(read_str(data, "state_home")),
            audit_log=Path(read_str(data, "audit_log")),
            network=None if network is None else network_from_dict(as_map(network, "network")),
            phase=read_phase(data.get("phase", "runtime")),
            credentials=tuple(CredentialSpec.from_dict(as_map(c, "credential"))
                              for c in credentials),
            listen_host=read_str(data, "listen_host", "127.0.0.1"),
            listen_port=read_int(data, "listen_port", 0),
            upstream_proxy=read_opt_str(data, "upstream_proxy"),
            upstream_ca_file=None if upstream_ca is None else Path(upstream_ca),
            explain_command=read_str(data, "explain_command", "sbx explain"),
            phase_file=None if phase_file is None else Path(phase_file),
            limits=ProxyLimits(**dict(limits_raw)),
            peer_network=read_opt_str(data, "peer_network"),
            login_dir=None if login_dir is None else Path(login_dir),
            sandbox=read_opt_str(data, "sandbox"),
            request_log=None if request_log is None else Path(request_log),
            user_policy=None if user_policy is None else Path(user_policy),
            kit_files=dict(kit_files),
            ssh_agent=ssh_agent,
            kit_registry=None if kit_registry is None else Path(kit_registry),
            stream_records=read_bool(data, "stream_records"),
        )

    @classmethod
    def from_json(cls, text: str) -> ProxyConfig:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise ProxyConfigError(f"not JSON ({error.msg} at line {error.lineno})") from None
        return cls.from_dict(as_map(data, "config"))

    @classmethod
    def load(cls, path: Path) -> ProxyConfig:
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
        write_private_file(path, self.to_json().encode("utf-8"))


__all__ = [
    "CONFIG_FORMAT",
    "ProxyLimits",
    "ProxyConfig",
    "network_from_dict",
    "network_to_dict",
]
