"""A second Docker engine host on this machine, for tests of remote engines.

Its own network namespace joined to the machine by a veth pair on a private /30, its own
dockerd (unix socket, and tcp+TLS with certificates made here), and an sshd bound to its veth
address whose sessions reach that dockerd (``SetEnv DOCKER_HOST``), so ``ssh://root@ADDRESS``
is a real remote engine. The ssh client side is a config file of its own (key, known_hosts)
handed to sbx as ``SBX_SSH_CONFIG``. Every wait is bounded; :meth:`EngineHost.close` removes
exactly what :meth:`EngineHost.start` made (TESTING.md, "A second engine host").
"""

from __future__ import annotations

import contextlib
import datetime as dt
import ipaddress
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

SSHD = "/usr/sbin/sshd"
TLS_PORT = 2376
# Debian's crun (scripts/setup.sh installs it), registered with a far engine started with
# ``crun=True`` as a second OCI runtime; the machine's own engine is never reconfigured.
CRUN = "/usr/bin/crun"
# crun 1.8 refuses cgroup v1 hosts whose cgroup2 hierarchy is mounted too ("cgroups in hybrid
# mode not supported"): such a far engine runs in a mount namespace of its own without it (the
# machine's mounts and cgroups are untouched; the engine then sees plain cgroup v1).
UNIFIED = "/sys/fs/cgroup/unified"


class EngineHostUnavailable(Exception):
    """The machine cannot host a second engine (not root, a tool missing)."""


def _run(argv: list[str], *, timeout: float = 30.0, check: bool = True,
         input_data: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(argv, input=input_data, capture_output=True, timeout=timeout,
                          check=check)


def _free_subnet() -> int:
    """A third octet N such that 10.201.N.0/30 is on no interface of the machine."""
    used = _run(["ip", "-4", "-o", "addr", "show"]).stdout.decode()
    routes = _run(["ip", "-4", "route", "show"]).stdout.decode()
    for _ in range(200):
        n = random.randrange(1, 255)
        if f"10.201.{n}." not in used and f"10.201.{n}." not in routes:
            return n
    raise EngineHostUnavailable("no free 10.201.N.0/30 subnet")


@dataclass(frozen=True)
class TLSFiles:
    """What a docker client needs for tcp+TLS (DOCKER_CERT_PATH's three files)."""

    directory: Path  # ca.pem, cert.pem, key.pem
    ca: Path
    server_cert: Path
    server_key: Path


def _tls_files(directory: Path, address: str) -> TLSFiles:
    directory.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    pem = serialization.Encoding.PEM

    def name(common: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])

    def key_bytes(key: ec.EllipticCurvePrivateKey) -> bytes:
        return key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(name("sbx test engine CA"))
          .issuer_name(name("sbx test engine CA")).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number())
          .not_valid_before(now - dt.timedelta(days=1))
          .not_valid_after(now + dt.timedelta(days=7))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                       key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, key_cert_sign=True, crl_sign=True,
                                       encipher_only=False, decipher_only=False),
                         critical=True)
          .sign(ca_key, hashes.SHA256()))

    def leaf(common: str, usage: x509.ObjectIdentifier,
             sans: list[x509.GeneralName]) -> tuple[bytes, bytes]:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (x509.CertificateBuilder().subject_name(name(common))
                   .issuer_name(ca.subject).public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(now - dt.timedelta(days=1))
                   .not_valid_after(now + dt.timedelta(days=7))
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None),
                                  critical=True)
                   .add_extension(x509.ExtendedKeyUsage([usage]), critical=False))
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        return builder.sign(ca_key, hashes.SHA256()).public_bytes(pem), key_bytes(key)

    server_cert, server_key = leaf(address, ExtendedKeyUsageOID.SERVER_AUTH,
                                   [x509.IPAddress(ipaddress.ip_address(address))])
    client_cert, client_key = leaf("sbx test client", ExtendedKeyUsageOID.CLIENT_AUTH, [])
    files = {"ca.pem": ca.public_bytes(pem), "cert.pem": client_cert, "key.pem": client_key,
             "server-cert.pem": server_cert, "server-key.pem": server_key}
    for file_name, data in files.items():
        (directory / file_name).write_bytes(data)
        (directory / file_name).chmod(0o600)
    return TLSFiles(directory, directory / "ca.pem", directory / "server-cert.pem",
                    directory / "server-key.pem")


@dataclass
class EngineHost:
    """One second engine host; :meth:`start` it, :meth:`close` it (idempotent)."""

    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="sbxh-",
                                                                     dir="/tmp")))
    netns: str = ""
    address: str = ""  # the host's veth address (sshd, tcp+TLS)
    local_address: str = ""  # this machine's end
    veth: str = ""
    cgroup_parent: str = ""
    tls: TLSFiles | None = None
    crun: bool = False  # register crun (CRUN) as a runtime of this engine
    _dockerd: subprocess.Popen[bytes] | None = None
    _sshd: subprocess.Popen[bytes] | None = None

    # -- what tests use ----------------------------------------------------------------------

    @property
    def socket_path(self) -> Path:
        return self.root / "docker.sock"

    @property
    def local_docker_host(self) -> str:
        """The far engine seen directly (the test's own look at it, never sbx's way)."""
        return f"unix://{self.socket_path}"

    @property
    def ssh_host(self) -> str:
        return f"ssh://root@{self.address}"

    @property
    def tcp_host(self) -> str:
        return f"tcp://{self.address}:{TLS_PORT}"

    @property
    def ssh_config(self) -> Path:
        return self.root / "ssh" / "config"

    @property
    def known_hosts(self) -> Path:
        return self.root / "ssh" / "known_hosts"

    def docker(self, *args: str, timeout: float = 60.0,
               input_data: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
        """The docker CLI on the far engine, through its socket."""
        return _run(["docker", "-H", self.local_docker_host, *args], timeout=timeout,
                    check=False, input_data=input_data)

    def ssh_env(self, base: dict[str, str]) -> dict[str, str]:
        """``base`` with sbx pointed at this host over ssh:// (its own ssh config)."""
        env = {k: v for k, v in base.items() if k not in ("DOCKER_HOST", "DOCKER_CONTEXT")}
        return {**env, "DOCKER_HOST": self.ssh_host, "SBX_SSH_CONFIG": str(self.ssh_config)}

    def load_image(self, ref: str, timeout: float = 120.0) -> None:
        """Copy ``ref`` from the machine's engine onto this one (it has no image at first)."""
        saved = subprocess.run(["docker", "save", ref], capture_output=True, timeout=timeout,
                               check=True).stdout
        loaded = self.docker("load", input_data=saved, timeout=timeout)
        if loaded.returncode != 0:
            raise EngineHostUnavailable(f"loading {ref}: {loaded.stderr.decode()[-300:]}")

    # -- start ---------------------------------------------------------------------------------

    def start(self, *, timeout: float = 60.0) -> EngineHost:
        if os.geteuid() != 0:
            raise EngineHostUnavailable("a second engine host needs root")
        for tool in ("ip", "nsenter", "dockerd", "ssh", "ssh-keygen", SSHD):
            if shutil.which(tool) is None:
                raise EngineHostUnavailable(f"{tool} is missing: run scripts/setup.sh")
        tag = f"{os.getpid() % 100000}{random.randrange(100, 999)}"
        n = _free_subnet()
        self.netns, self.veth = f"sbxh{tag}", f"sbxh{tag}"
        self.local_address, self.address = f"10.201.{n}.1", f"10.201.{n}.2"
        self.cgroup_parent = f"/sbxh{tag}"
        try:
            self._network()
            self.tls = _tls_files(self.root / "tls", self.address)
            self._start_dockerd(timeout)
            self._start_sshd(timeout)
        except BaseException:
            self.close()
            raise
        return self

    def _network(self) -> None:
        _run(["ip", "netns", "add", self.netns])
        _run(["ip", "link", "add", self.veth, "type", "veth", "peer", "name", "eth-far"])
        _run(["ip", "link", "set", "eth-far", "netns", self.netns])
        _run(["ip", "addr", "add", f"{self.local_address}/30", "dev", self.veth])
        _run(["ip", "link", "set", self.veth, "up"])
        inside = ["ip", "netns", "exec", self.netns]
        _run([*inside, "ip", "addr", "add", f"{self.address}/30", "dev", "eth-far"])
        _run([*inside, "ip", "link", "set", "eth-far", "up"])
        _run([*inside, "ip", "link", "set", "lo", "up"])

    def _nsenter(self) -> list[str]:
        return ["nsenter", f"--net=/var/run/netns/{self.netns}"]

    def _start_dockerd(self, timeout: float) -> None:
        assert self.tls is not None
        log = (self.root / "dockerd.log").open("wb")
        wrap: list[str] = []
        if self.crun:
            if not os.access(CRUN, os.X_OK):
                raise EngineHostUnavailable(f"{CRUN} is missing: run scripts/setup.sh")
            wrap = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                    f'umount {UNIFIED} 2>/dev/null; exec "$@"', "sh"]
        self._dockerd = subprocess.Popen(
            [*self._nsenter(), *wrap, "dockerd", "--data-root", str(self.root / "data"),
             "--exec-root", str(self.root / "exec"), "-H", self.local_docker_host,
             "-H", f"tcp://{self.address}:{TLS_PORT}", "--tlsverify",
             "--tlscacert", str(self.tls.ca), "--tlscert", str(self.tls.server_cert),
             "--tlskey", str(self.tls.server_key),
             "--pidfile", str(self.root / "docker.pid"), "--cgroup-parent", self.cgroup_parent,
             "--bip", "10.202.0.1/24",
             *(("--add-runtime", f"crun={CRUN}") if self.crun else ())],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._dockerd.poll() is not None:
                raise EngineHostUnavailable("the far dockerd exited: "
                                            + self._log("dockerd.log"))
            if self.docker("version", timeout=10).returncode == 0:
                return
            time.sleep(0.3)
        raise EngineHostUnavailable(f"the far dockerd did not answer in {timeout:g}s: "
                                    + self._log("dockerd.log"))

    def _start_sshd(self, timeout: float) -> None:
        ssh_dir = self.root / "ssh"
        ssh_dir.mkdir(mode=0o700)
        host_key, client_key = ssh_dir / "host_ed25519", ssh_dir / "id_ed25519"
        for key in (host_key, client_key):
            _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)])
        (ssh_dir / "authorized_keys").write_bytes(Path(f"{client_key}.pub").read_bytes())
        host_public = Path(f"{host_key}.pub").read_text().split()
        self.known_hosts.write_text(f"{self.address} {host_public[0]} {host_public[1]}\n")
        (ssh_dir / "sshd_config").write_text(
            f"ListenAddress {self.address}:22\nHostKey {host_key}\n"
            f"AuthorizedKeysFile {ssh_dir / 'authorized_keys'}\n"
            "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
            f"PidFile {ssh_dir / 'sshd.pid'}\nSetEnv DOCKER_HOST={self.local_docker_host}\n"
            "MaxStartups 100:30:200\nMaxSessions 100\nLogLevel VERBOSE\n")
        self.ssh_config.write_text(
            f"Host {self.address}\n  IdentityFile {client_key}\n  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {self.known_hosts}\n  GlobalKnownHostsFile /dev/null\n")
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation
        log = (self.root / "sshd.log").open("wb")
        self._sshd = subprocess.Popen(
            [*self._nsenter(), SSHD, "-D", "-e", "-f", str(ssh_dir / "sshd_config")],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._sshd.poll() is not None:
                raise EngineHostUnavailable("the far sshd exited: " + self._log("sshd.log"))
            with contextlib.suppress(OSError), socket.create_connection((self.address, 22),
                                                                        timeout=2):
                return
            time.sleep(0.2)
        raise EngineHostUnavailable(f"the far sshd did not listen in {timeout:g}s")

    def _log(self, name: str) -> str:
        with contextlib.suppress(OSError):
            return (self.root / name).read_text(errors="replace")[-1500:]
        return ""

    # -- close ---------------------------------------------------------------------------------

    def close(self) -> None:
        """Stop what :meth:`start` started and remove what it made, nothing else."""
        if self._sshd is not None:
            _stop(self._sshd)
            self._sshd = None
        if self._dockerd is not None:
            if self._dockerd.poll() is None:
                listed = self.docker("ps", "-aq", timeout=30).stdout.decode().split()
                if listed:
                    self.docker("rm", "-f", *listed, timeout=60)
            _stop(self._dockerd, grace=30.0)
            self._dockerd = None
        if self.netns:
            _run(["ip", "netns", "del", self.netns], check=False)
            _run(["ip", "link", "del", self.veth], check=False)
            self.netns = ""
        if self.cgroup_parent:
            for hierarchy in Path("/sys/fs/cgroup").glob("*"):
                group = hierarchy / self.cgroup_parent.lstrip("/")
                with contextlib.suppress(OSError):
                    for child in sorted(group.rglob("*"), reverse=True):
                        if child.is_dir():
                            child.rmdir()
                    group.rmdir()
            with contextlib.suppress(OSError):
                (Path("/sys/fs/cgroup") / self.cgroup_parent.lstrip("/")).rmdir()
            self.cgroup_parent = ""
        self._unmount_under_root()
        shutil.rmtree(self.root, ignore_errors=True)

    def _unmount_under_root(self) -> None:
        prefix = str(self.root) + "/"
        with contextlib.suppress(OSError):
            points = [line.split()[4] for line in
                      Path("/proc/self/mountinfo").read_text().splitlines()]
            for point in sorted((p for p in points if p.startswith(prefix)), reverse=True):
                _run(["umount", "-l", point], check=False)


def _stop(proc: subprocess.Popen[bytes], grace: float = 10.0) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


__all__ = ["CRUN", "TLS_PORT", "EngineHost", "EngineHostUnavailable", "TLSFiles"]
