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
before anything starts (``credential_unbound``); an optional one is skipped and recorded.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from sbx.errors import SbxError
from sbx.kits.compose import Composition
from sbx.kits.selection import SelectionRecord
from sbx.kits.types import CREDENTIAL
from sbx.reasons import Reason

READY_PREFIX: Final = "SBX-PROXY-READY "
START_TIMEOUT_S: Final = 15.0
STOP_TIMEOUT_S: Final = 5.0
PHASE_ACK_TIMEOUT_S: Final = 5.0
CA_DIR: Final = "/etc/sbx"
CA_FILE: Final = f"{CA_DIR}/ca.pem"
CA_BUNDLE: Final = f"{CA_DIR}/ca-bundle.pem"
SYSTEM_BUNDLES: Final = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt",
                         "/etc/ssl/cert.pem")


@dataclass(frozen=True)
class EgressPlan:
    composition: Composition
    bound: tuple[str, ...]  # services with a secret in the store
    skipped: tuple[SelectionRecord, ...] = ()
    initial_phase: str = "runtime"

    @property
    def credentials(self) -> tuple[object, ...]:
        return tuple(c for c in self.composition.credentials if c.service in self.bound)


def plan_egress(composition: Composition, *, has_install_hooks: bool,
                secret_available: Mapping[str, bool]) -> EgressPlan | None:
    """None without a network policy (the sandbox then has no network at all)."""
    if composition.network is None:
        return None
    unbound_required: list[str] = []
    skipped: list[SelectionRecord] = []
    bound: list[str] = []
    for credential in composition.credentials:
        if secret_available.get(credential.service):
            bound.append(credential.service)
        elif credential.optional:
            skipped.append(SelectionRecord(
                credential.kit, credential.declared_at or f"capabilities[{credential.index}]",
                CREDENTIAL, f"no secret for service {credential.service!r} in sbx's store"))
        else:
            unbound_required.append(f"{credential.service} ({credential.kit}, "
                                    f"{credential.phase} phase)")
    if unbound_required:
        first = unbound_required[0].split(" ", 1)[0]
        raise SbxError(
            Reason.CREDENTIAL_UNBOUND,
            "required credentials have no secret in sbx's store: " + ", ".join(unbound_required),
            hint=f"Store each one first, e.g. `printf %s \"$TOKEN\" | sbx secret set {first}`.",
            details={"services": [u.split(" ", 1)[0] for u in unbound_required]})
    network = composition.network
    wants_install = bool(network.install.allow) or any(
        c.phase == "install" for c in composition.credentials if c.service in bound)
    phase = "install" if has_install_hooks and wants_install else "runtime"
    return EgressPlan(composition, tuple(sorted(set(bound))), tuple(skipped), phase)


def proxy_env(address: str, port: int, token: str | None = None) -> dict[str, str]:
    """What the sandbox sees: the proxy (with the run's credentials when a token is given) in
    both spellings, nothing exempt, and the CA."""
    from sbx.egress.proxyauth import proxy_url

    url = proxy_url(address, port, token)
    return {
        "HTTP_PROXY": url, "HTTPS_PROXY": url, "http_proxy": url, "https_proxy": url,
        "NO_PROXY": "", "no_proxy": "",
        "SSL_CERT_FILE": CA_BUNDLE, "REQUESTS_CA_BUNDLE": CA_BUNDLE, "CURL_CA_BUNDLE": CA_BUNDLE,
        "NODE_EXTRA_CA_CERTS": CA_FILE,
    }


def trust_bundle(ca_pem: bytes, system_bundle: bytes | None) -> bytes:
    """The image's own CA bundle plus sbx's CA (so both public and intercepted TLS verify)."""
    base = (system_bundle or b"").rstrip(b"\n")
    return (base + b"\n" if base else b"") + ca_pem


@dataclass
class ProxyProcess:
    process: subprocess.Popen[bytes]  # stdin: the owner pipe (its EOF ends the proxy)
    port: int
    phase_file: Path
    stderr_path: Path
    closed: bool = field(default=False)
    client_token: str | None = field(default=None, repr=False)  # never shown

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def switch_to_runtime(self) -> None:
        """Close the install phase before the workload starts; wait for the proxy's ack."""
        self.process.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + PHASE_ACK_TIMEOUT_S
        while time.monotonic() < deadline:  # bounded: the proxy acknowledges in milliseconds
            try:
                if self.phase_file.read_text(encoding="utf-8").strip() == "runtime":
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
        if self.closed:
            return
        self.closed = True
        _close_owner_pipe(self.process)
        if self.alive():
            self.process.terminate()
            try:
                self.process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(STOP_TIMEOUT_S)
        if self.process.stdout is not None:
            self.process.stdout.close()


def start_proxy(config_json: str, run_dir: Path, run_id: str, *,
                client_token: str | None = None) -> ProxyProcess:
    """Start ``python -m sbx.egress.proxy CONFIG`` and wait for its ready line (bounded).

    Its stdin is a pipe whose write end stays in this process (Python's pipes are not
    inherited by other children): the first line is ``client_token`` (empty for none), and
    the proxy exits when the pipe closes — when :meth:`ProxyProcess.stop` closes it, or when
    this process dies by any means."""
    config_path = run_dir / "proxy.json"
    fd = os.open(config_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(config_json)
    stderr_path = run_dir / "proxy.log"
    from sbx.egress.proxy import proxy_argv

    with stderr_path.open("wb") as stderr:
        # The run id is in argv, so gc can recognise an orphaned proxy by its command line.
        process = subprocess.Popen(
            proxy_argv(config_path, run_id),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
            env=_proxy_environment(), start_new_session=True)
    assert process.stdout is not None and process.stdin is not None  # noqa: S101 - PIPE above
    try:
        process.stdin.write(f"{client_token or ''}\n".encode("ascii"))
        process.stdin.flush()
    except OSError:
        pass  # it died already: the ready line below never comes, and that is reported
    deadline = time.monotonic() + START_TIMEOUT_S
    line = b""
    while time.monotonic() < deadline and process.poll() is None:
        ready, _, _ = select.select([process.stdout], [], [], 0.1)
        if ready:
            line = process.stdout.readline()
            break
    text = line.decode("utf-8", "replace").strip()
    if not text.startswith(READY_PREFIX):
        _close_owner_pipe(process)
        if process.poll() is None:
            process.kill()
            process.wait(STOP_TIMEOUT_S)
        raise SbxError(Reason.PROXY_FAILED,
                       "the egress proxy did not start; the sandbox does not start without it",
                       hint="See the proxy's log in the run directory; `sbx doctor` checks "
                            "that a proxy can bind.",
                       details={"stderr": _tail(stderr_path)})
    return ProxyProcess(process, int(text[len(READY_PREFIX):].split()[0]),
                        run_dir / "proxy.phase", stderr_path, client_token=client_token)


def _close_owner_pipe(process: subprocess.Popen[bytes]) -> None:
    if process.stdin is not None and not process.stdin.closed:
        with contextlib.suppress(OSError):
            process.stdin.close()


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
    """Each proxy-managed credential's variable holds its sentinel; inject-only sets nothing."""
    out: dict[str, str] = {}
    for spec in specs:
        env = getattr(spec, "env", None)
        sentinel = getattr(spec, "sentinel", None)
        if env and sentinel:
            out[str(env)] = str(sentinel)
    return out


__all__ = ["CA_BUNDLE", "CA_FILE", "SYSTEM_BUNDLES", "EgressPlan", "ProxyProcess",
           "credential_env", "plan_egress", "proxy_env", "start_proxy", "trust_bundle"]
