"""A run's egress proxy as a container on the engine that runs its sandbox, reached only over
the engine's API (so it works on every engine sbx speaks to: local, ssh://, tcp+TLS).

The proxy container (:mod:`sbx.domain.egress.proxycontainer`) gets its state and the run's
secrets on its attached stdin, which is also its owner pipe: when this process ends, by any
means, the engine closes that stdin and the proxy stops, so the sandbox has no way out left.
Its stdout comes back on the same connection: the ready line, then its request records, audit
events and phase acknowledgements, written into the state home as a local proxy writes them
itself (:mod:`sbx.domain.egress.proxystream`); its stderr goes to the run's ``proxy.log``.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from sbx.base import labels
from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.egress import proxycontainer, proxycontrol, proxystream
from sbx.domain.egress.ca import CA_CERT_FILE, CA_DIR, CA_KEY_FILE, CertificateAuthority
from sbx.domain.egress.plan import owner_line, upstream_certificates
from sbx.domain.egress.proxyconfig import ProxyConfig
from sbx.domain.egress.requestlog import JsonlSink
from sbx.domain.egress.userpolicy import FORMAT as POLICY_FORMAT
from sbx.seams import audit, owned
from sbx.seams.engine import Driver
from sbx.seams.host.handshake import PROXY
from sbx.seams.session.frames import FrameDecoder, FrameError
from sbx.seams.session.stream import AttachedStream
from sbx.seams.signals import deferred_interrupts

READY_TIMEOUT_S: Final = 30.0
POLICY_CHECK_S: Final = 0.1
MAX_POLICY_BYTES: Final = 8 * 1024 * 1024
PHASE_ACK_TIMEOUT_S: Final = 5.0
STOP_TIMEOUT_S: Final = 5.0
LOG_LIMIT_BYTES: Final = 1024 * 1024  # of the proxy's stderr kept in proxy.log
AUDITED: Final = frozenset({audit.EGRESS_DENIED, audit.EGRESS_FAILED})


class ProxyOutput:
    """The proxy's attach stream, read on a thread until it ends: stderr into the log, the
    ready line and the phase noted, records and audit events written where this host keeps
    them."""

    def __init__(self, stream: AttachedStream, *, log: Path, request_log: Path | None,
                 audit_log: Path, run_id: str) -> None:
        self._stream = stream
        self._log = log
        self._log_fd: int | None = None
        self._logged = 0
        self._sink = None if request_log is None else JsonlSink(request_log)
        self._audit_log = audit_log
        self._run_id = run_id
        self.port: int | None = None
        self.ready = threading.Event()
        self.phase: str | None = None
        self.phase_seen = threading.Condition()
        self.ended = threading.Event()
        self._thread = threading.Thread(target=self._read, name="sbx-proxy-output",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)

    def _read(self) -> None:
        decoder = FrameDecoder()
        buffer = bytearray(65536)
        pending = bytearray()
        try:
            while True:
                try:
                    count = self._stream.recv_into(buffer)
                except OSError:
                    break
                if count == 0:
                    break
                for name, payload in decoder.feed(memoryview(buffer)[:count]):
                    if name == "stderr":
                        self._write_log(bytes(payload))
                        continue
                    pending += payload
                    while (end := pending.find(b"\n")) >= 0:
                        self._line(bytes(pending[:end + 1]))
                        del pending[:end + 1]
                    if len(pending) > proxystream.MAX_LINE_BYTES:
                        pending.clear()  # not a line the proxy wrote
        except FrameError as error:
            self._write_log(f"sbx: the proxy's stream broke: {error}\n".encode())
        finally:
            if self._sink is not None:
                self._sink.close()
            if self._log_fd is not None:
                with contextlib.suppress(OSError):
                    os.close(self._log_fd)
            self.ended.set()
            self.ready.set()  # a waiter sees no port: the proxy did not start
            with self.phase_seen:
                self.phase_seen.notify_all()

    def _line(self, line: bytes) -> None:
        if self.port is None:
            ready = PROXY.parse_ready(line)
            if ready is not None:
                self.port = ready[0]
                self.ready.set()
                return
        decoded = proxystream.decode(line)
        if decoded is None:
            self._write_log(line)
            return
        tag, value = decoded
        if tag == proxystream.PHASE:
            with self.phase_seen:
                self.phase = str(value)
                self.phase_seen.notify_all()
        elif tag == proxystream.RECORD and self._sink is not None:
            self._sink.write(value)
        elif tag == proxystream.AUDIT:
            self._audit(value)

    def _audit(self, entry: Mapping[str, Any]) -> None:
        """An egress event of this run only, in the shape the audit log holds."""
        if entry.get("event_type") not in AUDITED or entry.get("run_id") != self._run_id \
                or not isinstance(entry.get("details"), Mapping):
            return
        try:
            audit.append_entry(self._audit_log, entry)
        except OSError as error:
            self._write_log(f"sbx: cannot write the audit log: {error.strerror}\n".encode())

    def _write_log(self, data: bytes) -> None:
        room = LOG_LIMIT_BYTES - self._logged
        if room <= 0:
            return
        self._logged += min(len(data), room)
        with contextlib.suppress(OSError, SbxError):
            if self._log_fd is None:
                self._log_fd = owned.open_file(self._log, flags=os.O_WRONLY | os.O_APPEND,
                                               create=True)
            if self._log_fd is not None:
                view = memoryview(data[:room])
                while view:
                    view = view[os.write(self._log_fd, view):]


class PolicyFollower:
    """The user policy file of this host, followed while the proxy lives: each change is
    sent to the proxy (sbx.domain.egress.proxycontrol), so ``sbx policy allow|deny|rm``
    reaches a sandbox on any engine by its next request, as it does on this host."""

    def __init__(self, path: Path, send: Callable[[bytes], None], ended: threading.Event,
                 ) -> None:
        self._path = path
        self._send = send
        self._ended = ended
        self._stop = threading.Event()
        self.signature = _signature(path)
        self._thread = threading.Thread(target=self._follow, name="sbx-policy-follower",
                                        daemon=True)

    def text(self) -> bytes | None:
        """The file as it is now (None: there is none), its signature kept."""
        self.signature = _signature(self._path)
        try:
            return owned.read_bytes(self._path, max_bytes=MAX_POLICY_BYTES)
        except (OSError, SbxError):
            return None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(STOP_TIMEOUT_S)

    def _follow(self) -> None:
        while not self._stop.wait(POLICY_CHECK_S) and not self._ended.is_set():
            if _signature(self._path) == self.signature:
                continue
            text = self.text()
            if text is None:
                text = json.dumps({"format": POLICY_FORMAT, "rules": []}).encode()
            try:
                self._send(proxycontrol.encode_policy(text))
            except OSError:
                return


def _signature(path: Path) -> tuple[int, int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (info.st_ino, info.st_mtime_ns, info.st_size)


@dataclass
class EngineProxy:
    """The proxy container of one run and what it needs; :meth:`stop` removes all of it."""

    driver: Driver
    run_id: str
    client_token: str | None = field(default=None, repr=False)
    container: str | None = None
    log: Path | None = None
    stream: AttachedStream | None = None
    output: ProxyOutput | None = None
    follower: PolicyFollower | None = None
    address: str = ""
    port: int = proxycontainer.PORT
    pid: int | None = None  # no process of this host

    def alive(self) -> bool:
        return self.output is not None and not self.output.ended.is_set()

    def wait_ready(self) -> None:
        """Return once the proxy listens; ``proxy_failed`` when it ended or never did."""
        output = self.output
        if output is None or not output.ready.wait(READY_TIMEOUT_S) or output.port is None:
            log = self.log
            raise SbxError(Reason.PROXY_FAILED,
                           "the egress proxy's container did not start; the sandbox does not "
                           "start without it",
                           hint=f"See the proxy's log: {log}." if log else None,
                           details={"stderr": _tail(log) if log else ""})
        self.port = output.port

    def switch_to_runtime(self) -> None:
        """Close the install phase before the workload starts; wait for the proxy's ack."""
        self.wait_ready()
        output = self.output
        if output is None or self.container is None:
            raise SbxError(Reason.PROXY_FAILED, "the egress proxy is not running")
        self.driver.send_signal(self.container, "SIGUSR1")
        with output.phase_seen:
            output.phase_seen.wait_for(lambda: output.phase == "runtime"
                                       or output.ended.is_set(), PHASE_ACK_TIMEOUT_S)
        if output.phase != "runtime":
            raise SbxError(Reason.PROXY_FAILED,
                           "the egress proxy did not confirm closing the install phase")

    def stop(self) -> None:
        """End its stdin (the proxy stops), then remove its container."""
        if self.follower is not None:
            self.follower.stop()
        if self.stream is not None:
            self.stream.close_write()
            if self.output is not None:
                self.output.join(STOP_TIMEOUT_S)
            self.stream.close()
        if self.container is not None:
            self.driver.remove_container(self.container)
            self.container = None


def start_engine_proxy(proxy: EngineProxy, config: ProxyConfig, *, state_home: Path,
                       home_hash: str, image: str, network: str,
                       run_labels: Mapping[str, str], runtime: str | None,
                       secrets: Mapping[str, str], run_dir: Path,
                       request_log: Path | None) -> None:
    """Create and start ``proxy``'s container on the run's internal ``network`` and the state
    home's egress network, and hand it its state; :meth:`EngineProxy.wait_ready` waits for it
    to listen, so its start overlaps the sandbox's. Each object is kept on ``proxy`` as it is
    made, so the run's cleanup (:meth:`EngineProxy.stop`) removes exactly what exists."""
    driver = proxy.driver
    egress = _egress_network(driver, home_hash)
    spec = proxycontainer.proxy_spec(image, run_id=proxy.run_id, network=network,
                                     labels={**run_labels, labels.ROLE: labels.ROLE_PROXY},
                                     runtime=runtime)
    with deferred_interrupts():
        proxy.container = driver.create(spec)
    driver.connect_network(egress, proxy.container)
    with deferred_interrupts():
        proxy.stream = driver.attach(proxy.container, stdin=True)
    proxy.output = ProxyOutput(proxy.stream, log=run_dir / "proxy.log", request_log=request_log,
                               audit_log=audit.audit_path(state_home), run_id=proxy.run_id)
    proxy.output.start()
    proxy.log = run_dir / "proxy.log"
    driver.start(proxy.container)
    endpoint = driver.network_endpoint(proxy.container, network)
    if endpoint is None:
        raise SbxError(Reason.PROXY_FAILED,
                       "the egress proxy's container has no address on the sandbox network")
    proxy.address, prefix = endpoint
    # The sandbox's network, read off the proxy's own address there: its only clients.
    peer = str(ipaddress.ip_network(f"{proxy.address}/{prefix}", strict=False))
    inside = proxycontainer.in_container(config, peer_network=peer,
                                         upstream_ca=config.upstream_ca_file is not None)
    files = _state_files(config, state_home)
    if config.user_policy is not None:
        stream = proxy.stream
        proxy.follower = PolicyFollower(config.user_policy, stream.sendall, proxy.output.ended)
        policy = proxy.follower.text()  # what is sent and the signature followed, together
        if policy is not None:
            files[f"state/{proxycontainer.POLICY}"] = policy
    proxy.stream.sendall(proxycontainer.state_message(
        inside, files, owner_line(proxy.client_token, secrets)))
    if proxy.follower is not None:
        proxy.follower.start()


def _egress_network(driver: Driver, home_hash: str) -> str:
    """The state home's egress network on this engine, made by its first run: an ordinary
    bridge where only proxies live (each sandbox has a network of its own)."""
    name = proxycontainer.egress_network_name(home_hash)
    found = driver.find_network(name)
    if found is not None:
        return found
    made = {labels.MANAGED: "true", labels.HOME: home_hash, labels.ROLE: labels.ROLE_PROXY}
    try:
        return driver.create_network(name, made, bridge=None, internal=False)
    except SbxError:
        found = driver.find_network(name)  # another run made it at the same moment
        if found is None:
            raise
        return found


def _state_files(config: ProxyConfig, state_home: Path) -> dict[str, bytes]:
    """The files the proxy reads from its state home, by their path under its tmpfs: the
    CA (made here first if this home has none) and the upstream CA file."""
    CertificateAuthority.load_or_create(state_home)
    files: dict[str, bytes] = {}
    for name in (CA_CERT_FILE, CA_KEY_FILE):
        data = owned.read_bytes(state_home / CA_DIR / name, max_bytes=64 * 1024)
        if data is None:
            raise SbxError(Reason.PROXY_FAILED, f"the CA file {name} of the state home is "
                                                "missing")
        files[f"state/{CA_DIR}/{name}"] = data
    if config.upstream_ca_file is not None:
        files[proxycontainer.UPSTREAM_CA] = upstream_certificates(config.upstream_ca_file)
    return files


def _tail(path: Path, limit: int = 2000) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")[-limit:]
    except OSError:
        return ""


__all__ = ["EngineProxy", "ProxyOutput", "start_engine_proxy"]
