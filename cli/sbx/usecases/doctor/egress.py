"""The egress checks (SPEC §2.2, §8): the state home's CA, a proxy started and stopped, and
the host services a sandbox could reach."""

from __future__ import annotations

import math
import os
import shutil
import time
import uuid
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Final

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.egress.ca import CA_CERT_FILE, CA_DIR, CertificateAuthority
from sbx.domain.egress.ca import _load as load_ca  # read-only: no lock, no rotation
from sbx.domain.egress.proxyconfig import ProxyConfig
from sbx.domain.sandbox import runrecord
from sbx.seams import owned
from sbx.usecases import runstore
from sbx.usecases.doctor import farplane
from sbx.usecases.doctor.model import DoctorState, Status, Verdict
from sbx.usecases.doctor.probes import DoctorProxy

PROXY_RUN_KIT: Final = "doctor-proxy"
# Starting (bounded by the ready line's wait) plus stopping (terminate, then kill) the proxy.
PROXY_CHECK_TIMEOUT_S: Final = 30.0
HOST_SERVICES_TIMEOUT_S: Final = 15.0  # `iptables -w 5 -S INPUT`, bounded at 10 s
_TCP_LISTEN: Final = "0A"
_ANY_ADDRESSES: Final = frozenset({"00000000", "0" * 32})  # 0.0.0.0 and :: in /proc/net/tcp*


def check_egress_ca(state: DoctorState) -> Verdict:
    """The state home's CA: shown when valid, created when missing, never replaced here."""
    now = state.egress.now()
    directory = state.ctx.state_home / CA_DIR
    loaded, problem = load_ca(directory, now)
    if loaded is not None or problem == "missing":
        if loaded is not None:
            certificate, key = loaded
            ca = CertificateAuthority(directory, certificate, key, origin="loaded")
            prefix = ""
        else:
            ca = CertificateAuthority.load_or_create(state.ctx.state_home, now=now)
            prefix = "created now (runs with a network policy use it): "
        info = ca.info(now)
        return Verdict(Status.OK, f"{prefix}{info['subject']}, valid until "
                       f"{ca.not_after:%Y-%m-%d} ({_days(info['days_left'])} left)",
                       data={**info, "created": bool(prefix)})
    replaced = (f"Nothing to do: the next run with a network policy replaces it (sandboxes "
                f"trust the new CA from then on); or remove {directory} to replace it now.")
    shown = _ca_summary(directory / CA_CERT_FILE, now)
    data: dict[str, Any] = {"path": str(directory / CA_CERT_FILE), "problem": problem}
    if problem == "expiring" and shown is not None:
        return Verdict(Status.WARN, f"{shown[0]} expires within 7 days", Reason.PROXY_FAILED,
                       replaced, {**data, "days_left": shown[1]})
    if problem in ("expired", "not_yet_valid"):
        what = "has expired" if problem == "expired" else "is not valid yet (check the clock)"
        return Verdict(Status.WARN, f"{shown[0] if shown else 'the CA'} {what}",
                       Reason.PROXY_FAILED, replaced, data)
    why = "unsafe (a symlink, another owner, or group/other access)" if problem == "unsafe" \
        else "unreadable (not a valid CA key and certificate)"
    return Verdict(Status.WARN, f"{directory} is {why}", Reason.PROXY_FAILED,
                   f"Remove {directory} (or make it and its files yours, mode 0700/0600); the "
                   f"next run with a network policy creates a new CA.", data)


def _ca_summary(path: Path, now: datetime) -> tuple[str, int] | None:
    from cryptography import x509

    try:  # what is reported is the CA sbx would use: this user's own file
        raw = owned.read_bytes(path, max_bytes=1024 * 1024)
        certificate = x509.load_pem_x509_certificate(raw or b"")
    except (OSError, ValueError, SbxError):
        return None
    after = certificate.not_valid_after_utc
    days = (after - now).days
    return (f"{certificate.subject.rfc4514_string()}, valid until {after:%Y-%m-%d} "
            f"({_days(days)} left)", days)


def _days(days: int) -> str:
    return f"{days} day{'s' if days != 1 else ''}"


def check_egress_proxy(state: DoctorState) -> Verdict:
    """Start a deny-everything proxy on 127.0.0.1, see its ready line, stop it.

    It runs like a run's proxy (its own process, the run id in its command line) from a run
    directory that records doctor's pid and the proxy's, so ``sbx gc`` stops it should doctor be
    killed in between; its CA is a throwaway one in that directory (the real one is the CA
    check's business, and doctor never rotates it).
    """
    if not state.ctx.driver.location().local:
        return farplane.proxy_beside_engine(state)
    run_id = uuid.uuid4().hex
    run_dir = runrecord.run_dir(state.ctx.state_home, run_id)
    try:
        runstore.create(state.ctx.state_home, runrecord.RunRecord(
            run_id=run_id, workload=PROXY_RUN_KIT, pid=os.getpid(),
            deadline=math.ceil(time.time() + PROXY_CHECK_TIMEOUT_S)))
    except SbxError as error:
        shutil.rmtree(run_dir, ignore_errors=True)
        return Verdict(Status.FAIL, f"cannot write the run directory {run_dir}: "
                       f"{error.message}", Reason.PROXY_FAILED,
                       "Make the state home writable (or point SBX_HOME elsewhere).",
                       {"run_id": run_id})
    proxy: DoctorProxy | None = None
    data: dict[str, Any] = {"run_id": run_id}
    try:
        home = run_dir / "home"
        home.mkdir(mode=0o700)
        config = ProxyConfig(run_id=run_id, state_home=home, audit_log=run_dir / "audit.jsonl",
                             network=None, listen_host="127.0.0.1", listen_port=0,
                             phase_file=run_dir / "proxy.phase")
        try:
            proxy = state.egress.start_proxy(config.to_json(), run_dir, run_id)
        except SbxError as error:
            if error.reason is not Reason.PROXY_FAILED:
                raise
            tail = str(error.details.get("stderr") or "").strip()
            last = tail.splitlines()[-1].strip() if tail else "no output"
            return Verdict(Status.FAIL, f"the proxy did not start: {last}", Reason.PROXY_FAILED,
                           "Read the proxy's error above; it must be able to import "
                           "sbx.proxy with this Python and bind a port on 127.0.0.1.",
                           {**data, "stderr": tail[-2000:]})
        runstore.update(run_dir, proxy_pid=proxy.pid)
        port = proxy.port
        proxy.stop()
        if proxy.alive():
            return Verdict(Status.FAIL, f"the proxy (pid {proxy.pid}) did not stop",
                           Reason.PROXY_FAILED, "Run `sbx gc`: it stops orphaned proxies.",
                           {**data, "pid": proxy.pid})
        return Verdict(Status.OK, f"a deny-all proxy started, bound 127.0.0.1:{port} and "
                       "stopped", data={**data, "port": port})
    finally:
        if proxy is not None and proxy.alive():
            proxy.stop()
        if proxy is None or not proxy.alive():
            shutil.rmtree(run_dir, ignore_errors=True)  # else kept: `sbx gc` stops the proxy


def listening_ports(texts: Sequence[str]) -> list[int]:
    """TCP ports in LISTEN on 0.0.0.0 or :: in /proc/net/tcp and /proc/net/tcp6 text."""
    ports: set[int] = set()
    for text in texts:
        for line in text.splitlines()[1:]:
            fields = line.split()
            if len(fields) < 4 or fields[3] != _TCP_LISTEN:
                continue
            address, sep, port = fields[1].rpartition(":")
            if sep and address in _ANY_ADDRESSES:
                try:
                    ports.add(int(port, 16))
                except ValueError:
                    continue
    return sorted(ports)


def check_egress_host_services(state: DoctorState) -> Verdict:
    """Whether a sandbox network could reach host services on the gateway (SPEC §8)."""
    if not state.ctx.driver.location().local:
        return farplane.host_services_beside_engine(state)
    iptables = state.egress.iptables()
    euid = state.host.euid
    if euid == 0 and iptables is not None:
        problem = state.egress.iptables_problem()
        if problem is None:
            return Verdict(Status.OK, "closed per run by bridge firewall rules (root, "
                           f"{iptables})", data={"closed": True})
        why = f"iptables does not work here: {problem}"
        remedy = "give sbx CAP_NET_ADMIN on the host's network namespace"
    elif euid != 0:
        why, remedy = "sbx is not root", "run sbx as root"
    else:
        why, remedy = "iptables is missing", "install iptables"
    ports = listening_ports(state.egress.proc_net_tcp())
    data = {"closed": False, "why": why, "ports": ports}
    if not ports:
        return Verdict(Status.OK, f"no host TCP service listens on all interfaces (bridges stay "
                       f"open: {why})", data=data)
    listed = ", ".join(str(port) for port in ports)
    noun = f"ports {listed} listen" if len(ports) > 1 else f"port {listed} listens"
    return Verdict(Status.WARN, f"{noun} on all interfaces and a sandbox network could reach "
                   f"{'them' if len(ports) > 1 else 'it'} ({why}: cannot install bridge rules)",
                   Reason.HOST_SERVICES_EXPOSED, f"{remedy[0].upper()}{remedy[1:]}, or bind "
                   "those services to 127.0.0.1.", data)
