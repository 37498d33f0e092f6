"""The run side of the egress boundary: plan it, start the proxy, switch phases, stop it.

With a network policy in the composition, the sandbox joins a per-run ``internal`` network whose
only way out is an egress proxy that sbx runs for that sandbox (a separate process, so ``sbx gc``
can still find it by the run id in its command line). The proxy binds the network's gateway
address; firewall rules on the bridge let the sandbox reach that one address and port and
nothing else of the host. If the proxy dies, there is no other route: egress stops.

Only the sandbox may use it: a random per-run token (never the credential secret) travels to
the proxy on its stdin — the **owner pipe**, whose write end only this ``sbx`` process holds, so
the proxy exits as soon as this process is gone, even after a SIGKILL — and to the sandbox
inside the proxy URL (``http://sbx:<token>@gateway:port``); the proxy also refuses clients from
outside the run's network. The token is never in argv, the config file, logs or ``--json``.

Credentials come only from sbx's store. A required credential with no secret refuses the run
before anything starts (``credential_unbound``); an optional one is skipped and recorded. Values
the ``sbx`` process resolved itself (the OS keyring, a host variable, a host command:
:func:`sbx.domain.credentials.secrets.resolve_for_run`) follow the token on the owner pipe's first
line, so they
are never written anywhere; the proxy reads the file store itself.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.credentials.oauth import (
    OAuthConfig,
    credential_mode,
    has_api_key,
    mode_env_name,
    passthrough_refusal,
)
from sbx.domain.credentials.secrets import encode_provided
from sbx.domain.egress.proxyauth import proxy_url
from sbx.domain.kits.selectionrecord import SelectionRecord
from sbx.domain.kits.types import CREDENTIAL
from sbx.seams import owned
from sbx.seams.host import private, processes
from sbx.seams.host.handshake import PROXY
from sbx.seams.host.processes import Program

if TYPE_CHECKING:
    from sbx.domain.kits.compose import Composition

START_TIMEOUT_S: Final = 15.0
STOP_TIMEOUT_S: Final = 5.0
PHASE_ACK_TIMEOUT_S: Final = 5.0
CA_DIR: Final = "/etc/sbx"
CA_FILE: Final = f"{CA_DIR}/ca.pem"
CA_BUNDLE: Final = f"{CA_DIR}/ca-bundle.pem"
LOOPBACK_NAMES: Final = "localhost,127.0.0.1,::1"  # NO_PROXY: the sandbox's own loopback
SYSTEM_BUNDLES: Final = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt",
                         "/etc/ssl/cert.pem")


@dataclass(frozen=True)
class EgressPlan:
    composition: Composition
    bound: tuple[str, ...]  # services with a secret in the store
    skipped: tuple[SelectionRecord, ...] = ()
    initial_phase: str = "runtime"
    # Values resolved in this process for the proxy's owner pipe; never shown or compared.
    provided: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)
    modes: Mapping[str, str] = field(default_factory=dict)  # service -> "apikey" | "oauth"

    @property
    def credentials(self) -> tuple[object, ...]:
        return tuple(c for c in self.composition.credentials if c.service in self.bound)


def plan_egress(composition: Composition, *, has_install_hooks: bool,
                secret_available: Mapping[str, bool],
                provided: Mapping[str, str] | None = None,
                oauth_available: Mapping[str, bool] | None = None,
                ssh_agent_phases: Sequence[str] = (),
                kit_registry: bool = False) -> EgressPlan | None:
    """None without a network policy, an SSH agent relay or the kit registry (the sandbox
    then has no network at all); either of those without a policy gets a proxy that allows
    nothing else.

    Each credential is bound in one mode (:func:`sbx.domain.credentials.oauth.credential_mode`):
    ``oauth`` when it
    declares an OAuth half and ``oauth_available`` says tokens are stored, else ``apikey`` when
    it declares an API key and ``secret_available`` says one is stored."""
    if composition.network is None and not ssh_agent_phases and not kit_registry:
        return None
    unbound_required: list[str] = []
    hints: list[str] = []
    skipped: list[SelectionRecord] = []
    bound: list[str] = []
    modes: dict[str, str] = {}
    for credential in composition.credentials:
        service = credential.service
        mode = credential_mode(service, credential.config,
                               api_key=bool(secret_available.get(service)),
                               oauth=bool((oauth_available or {}).get(service)))
        where = credential.declared_at or f"capabilities[{credential.index}]"
        refusal = passthrough_refusal(credential)
        if refusal is not None and mode is None:
            if not credential.optional:
                raise refusal
            skipped.append(SelectionRecord(credential.kit, where, CREDENTIAL, refusal.message))
            continue
        if mode is not None:
            bound.append(service)
            modes[service] = mode
            continue
        oauth = OAuthConfig.from_credential(service, credential.config) is not None
        missing = ("no OAuth login and no secret" if oauth and has_api_key(credential.config)
                   else "no OAuth login" if oauth else "no secret")
        if credential.optional:
            skipped.append(SelectionRecord(credential.kit, where, CREDENTIAL,
                                           f"{missing} for service {service!r} in sbx's store"))
            continue
        unbound_required.append(f"{service} ({credential.kit}, {credential.phase} phase)")
        hints.append(f"`sbx secret login {service}`" if oauth and not has_api_key(
            credential.config) else f"`printf %s \"$TOKEN\" | sbx secret set {service}`"
            + (f" or `sbx secret login {service}`" if oauth else ""))
    if unbound_required:
        raise SbxError(
            Reason.CREDENTIAL_UNBOUND,
            "required credentials have no secret in sbx's store: " + ", ".join(unbound_required),
            hint=f"Store each one first, e.g. {hints[0]}.",
            details={"services": [u.split(" ", 1)[0] for u in unbound_required]})
    network = composition.network
    wants_install = (network is not None and bool(network.install.allow)) or any(
        c.phase == "install" for c in composition.credentials if c.service in bound
    ) or "install" in ssh_agent_phases
    phase = "install" if has_install_hooks and wants_install else "runtime"
    values = {s: v for s, v in (provided or {}).items()
              if s in bound and modes.get(s) == "apikey"}
    return EgressPlan(composition, tuple(sorted(set(bound))), tuple(skipped), phase, values,
                      modes)


def proxy_env(address: str, port: int, token: str | None = None) -> dict[str, str]:
    """What the sandbox sees: the proxy (with the run's credentials when a token is given) in
    both spellings, and the CA. Only the sandbox's own loopback is exempt (agents talk to
    servers they start themselves there; that traffic never leaves the sandbox's network
    namespace, and the proxy would refuse a loopback destination anyway)."""
    url = proxy_url(address, port, token)
    return {
        "HTTP_PROXY": url, "HTTPS_PROXY": url, "http_proxy": url, "https_proxy": url,
        "NO_PROXY": LOOPBACK_NAMES, "no_proxy": LOOPBACK_NAMES,
        "SSL_CERT_FILE": CA_BUNDLE, "REQUESTS_CA_BUNDLE": CA_BUNDLE, "CURL_CA_BUNDLE": CA_BUNDLE,
        "NODE_EXTRA_CA_CERTS": CA_FILE,
    }


def trust_bundle(ca_pem: bytes, system_bundle: bytes | None) -> bytes:
    """The image's own CA bundle plus sbx's CA (so both public and intercepted TLS verify)."""
    base = (system_bundle or b"").rstrip(b"\n")
    return (base + b"\n" if base else b"") + ca_pem


_PEM_CERTIFICATE: Final = re.compile(
    rb"-----BEGIN CERTIFICATE-----\r?\n[A-Za-z0-9+/=\r\n]+?-----END CERTIFICATE-----")


def upstream_certificates(path: Path) -> bytes:
    """The CA certificates of ``[network] upstream_ca_file``, for the sandbox to trust beside
    sbx's CA: a TLS-intercepting corporate proxy signs the tunnelled hosts' certificates with
    them. Certificate blocks only, each parsed (a private key or anything else in the file
    never reaches the sandbox); ``invalid_config`` when the file has none or cannot be read."""
    from cryptography import x509

    try:
        data = path.read_bytes()
    except OSError as error:
        raise _bad_ca_file(path, f"cannot be read ({error.strerror})") from None
    blocks = _PEM_CERTIFICATE.findall(data)
    for block in blocks:
        try:
            x509.load_pem_x509_certificate(block)
        except ValueError:
            raise _bad_ca_file(path, "holds a certificate that does not parse") from None
    if not blocks:
        raise _bad_ca_file(path, "holds no PEM certificate")
    return b"\n".join(blocks) + b"\n"


def _bad_ca_file(path: Path, problem: str) -> SbxError:
    return SbxError(Reason.INVALID_CONFIG, f"[network] upstream_ca_file {path} {problem}",
                    hint="Point upstream_ca_file at the PEM file of your proxy's CA "
                         "certificates (e.g. /etc/ssl/corp-ca.pem), or remove the key.",
                    details={"key": "network.upstream_ca_file", "path": str(path)})


@dataclass
class ProxyProcess:
    program: Program  # stdin: the owner pipe (its EOF ends the proxy)
    port: int
    phase_file: Path
    stderr_path: Path
    client_token: str | None = field(default=None, repr=False)  # never shown

    @property
    def pid(self) -> int:
        return self.program.pid

    @property
    def closed(self) -> bool:
        return self.program.stopped

    def alive(self) -> bool:
        return self.program.alive()

    def wait_ready(self) -> None:
        """Started ready: :func:`launch_proxy` returns once it listens."""
        return

    def switch_to_runtime(self) -> None:
        """Close the install phase before the workload starts; wait for the proxy's ack."""
        self.program.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + PHASE_ACK_TIMEOUT_S
        while time.monotonic() < deadline:  # bounded: the proxy acknowledges in milliseconds
            try:  # the proxy's own acknowledgement only (sbx.seams.owned)
                phase = owned.read_bytes(self.phase_file, max_bytes=64)
                if phase is not None and phase.strip() == b"runtime":
                    return
            except OSError:
                pass
            if not self.alive():
                break
            time.sleep(0.02)
        raise SbxError(Reason.PROXY_FAILED,
                       "the egress proxy did not confirm closing the install phase",
                       details={"stderr": _tail(self.stderr_path)})

    def stop(self) -> None:
        self.program.stop(STOP_TIMEOUT_S)


def start_proxy(config_json: str, run_dir: Path, run_id: str, *,
                client_token: str | None = None,
                secrets: Mapping[str, str] | None = None) -> ProxyProcess:
    """Start ``python -m sbx.proxy CONFIG`` and wait for its ready line (bounded).

    Its stdin is a pipe whose write end stays in this process (Python's pipes are not
    inherited by other children): the first line is ``client_token`` (empty for none), and
    the proxy exits when the pipe closes — when :meth:`ProxyProcess.stop` closes it, or when
    this process dies by any means. ``secrets`` (service → value) follow the token on that
    line, encoded (:func:`sbx.domain.credentials.secrets.encode_provided`)."""
    config_path = write_proxy_config(config_json, run_dir)
    return launch_proxy(config_path, run_dir, run_id, client_token=client_token,
                        secrets=secrets)


def write_proxy_config(config_json: str, run_dir: Path) -> Path:
    """``<run_dir>/proxy.json`` (0600, never overwritten: a run writes its own once)."""
    config_path = run_dir / "proxy.json"
    private.create_new(config_path, config_json.encode("utf-8"))
    return config_path


def launch_proxy(config_path: Path, run_dir: Path, run_id: str, *,
                 client_token: str | None = None,
                 secrets: Mapping[str, str] | None = None) -> ProxyProcess:
    """Start the proxy on an existing config file; see :func:`start_proxy`."""
    stderr_path = run_dir / "proxy.log"
    # The run id is in argv, so gc can recognise an orphaned proxy by its command line.
    program = processes.start_program(
        PROXY, (str(config_path), run_id), owner_line=owner_line(client_token, secrets),
        log=stderr_path, env=_proxy_environment(), ready_timeout=START_TIMEOUT_S,
        stop_timeout=STOP_TIMEOUT_S)
    if program is None:
        raise SbxError(Reason.PROXY_FAILED,
                       "the egress proxy did not start; the sandbox does not start without it",
                       hint="See the proxy's log in the run directory; `sbx doctor` checks "
                            "that a proxy can bind.",
                       details={"stderr": _tail(stderr_path)})
    return ProxyProcess(program, program.ready[0], run_dir / "proxy.phase", stderr_path,
                        client_token=client_token)


def owner_line(client_token: str | None, secrets: Mapping[str, str] | None) -> bytes:
    """The owner pipe's first line: the token, then the encoded secrets when there are any."""
    line = client_token or ""
    if secrets:
        line += "|" + encode_provided(secrets)
    return f"{line}\n".encode("ascii")


def _proxy_environment() -> dict[str, str]:
    # The proxy needs no host secrets or proxies of its own: a minimal, explicit environment.
    keep = ("PATH", "LANG", "LC_ALL", "PYTHONPATH", "SSL_CERT_FILE", "SSL_CERT_DIR")
    return {k: v for k, v in os.environ.items() if k in keep}


def _tail(path: Path, limit: int = 2000) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")[-limit:]
    except OSError:
        return ""


def credential_env(specs: Sequence[object]) -> dict[str, str]:
    """Each proxy-managed credential's variable holds its sentinel; inject-only sets nothing.
    ``SBX_CRED_<SERVICE>_MODE`` says which half of each credential is bound (``apikey`` or
    ``oauth``), for kit hooks that configure the agent accordingly."""
    out: dict[str, str] = {}
    for spec in specs:
        env = getattr(spec, "env", None)
        sentinel = getattr(spec, "sentinel", None)
        if env and sentinel:
            out[str(env)] = str(sentinel)
        service = getattr(spec, "service", None)
        oauth = getattr(spec, "oauth", None)
        if not service:
            continue
        if oauth is not None and not oauth.login_only:
            out[mode_env_name(str(service))] = "oauth"
        elif getattr(spec, "domains", None) or env:
            out[mode_env_name(str(service))] = "apikey"
    return out


__all__ = ["CA_BUNDLE", "CA_FILE", "SYSTEM_BUNDLES", "EgressPlan", "ProxyProcess",
           "credential_env", "launch_proxy", "owner_line", "plan_egress", "proxy_env",
           "start_proxy", "trust_bundle", "upstream_certificates", "write_proxy_config"]
