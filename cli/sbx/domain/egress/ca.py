"""The per-state-home certificate authority that the egress proxy uses to intercept TLS (SPEC §8).

``network-policy@2`` rules match method and path, so the proxy must see inside HTTPS. It
terminates the sandbox's TLS with a leaf certificate for the requested host, signed by a CA that
sbx generates once per state home and installs in the sandbox's trust store.

Files, under ``<state home>/ca/`` (a 0700 directory):

- ``ca.pem`` (0644): the CA certificate — EC P-256, self-signed, CN ``sbx sandbox CA <hash>``
  (the first 8 hex digits of the state home hash), basicConstraints CA:true pathlen:0,
  keyUsage keyCertSign+cRLSign, valid one year (back-dated a day for clock skew);
- ``ca.key`` (0600): its private key, PKCS#8 PEM;
- ``leaves/<sha256(host)>.pem`` (0600): a leaf's key, its certificate and the CA certificate,
  reused while valid (90 days, capped by the CA's own expiry);
- ``.lock``: serialises creation between sbx processes.

Regeneration: a CA that is missing, unreadable, corrupt, unsafe (the key is a symlink or readable
by others), not yet valid, expired or within 7 days of expiry is replaced by a new one; the
previous files are kept as ``ca.pem.old`` / ``ca.key.old`` and the leaf cache is emptied.
Sandboxes started earlier keep working: their proxy holds the CA it started with in memory.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import ipaddress
import os
import re
import ssl
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from sbx.base import paths
from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.seams.host.private import ensure_private_dir, read_private_file, write_private_file

CA_DIR: Final = "ca"
CA_CERT_FILE: Final = "ca.pem"
CA_KEY_FILE: Final = "ca.key"
LEAVES_DIR: Final = "leaves"
LOCK_FILE: Final = ".lock"
OLD_SUFFIX: Final = ".old"

CA_VALIDITY: Final = timedelta(days=365)
# Regenerate this long before expiry, so every leaf issued lives at least this long.
CA_RENEW_BEFORE: Final = timedelta(days=7)
# Sandbox clocks may lag the host's a little; a CA or leaf "from the future" is rejected.
CA_BACKDATE: Final = timedelta(days=1)
LEAF_BACKDATE: Final = timedelta(hours=1)
LEAF_VALIDITY: Final = timedelta(days=90)
LEAF_RENEW_BEFORE: Final = timedelta(days=1)
MAX_PEM_BYTES: Final = 64 * 1024
# Bounds the in-memory caches of a long-lived proxy; the disk cache still serves evicted hosts.
MAX_CACHED_LEAVES: Final = 4096
_CN_MAX: Final = 64  # RFC 5280 ub-common-name
_DNS_LABEL: Final = r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?"
_DNS_NAME: Final = re.compile(rf"^{_DNS_LABEL}(?:\.{_DNS_LABEL})*$")

_CREATE_LOCK: Final = threading.Lock()


def _utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class LeafCert:
    """A server certificate for one host, signed by the CA."""

    host: str
    cert_pem: bytes
    key_pem: bytes
    chain_pem: bytes  # the leaf certificate followed by the CA certificate
    not_before: datetime
    not_after: datetime
    path: Path  # key + chain, the file ssl.SSLContext.load_cert_chain reads

    def usable_at(self, now: datetime) -> bool:
        return self.not_before <= now < self.not_after - LEAF_RENEW_BEFORE


def normalize_host(host: str) -> str:
    """The canonical form of a DNS name or IP address for a certificate: lowercase, no trailing
    dot, IDNA (punycode) for non-ASCII names, compressed IPv6 without brackets.

    Raises ``invalid_argument`` for anything else.
    """
    text = host.strip()
    invalid = SbxError(Reason.INVALID_ARGUMENT, f"{host!r} is not a valid host name or IP address",
                       details={"host": host})
    bracketed = text.startswith("[") and text.endswith("]")
    try:
        address = ipaddress.ip_address(text[1:-1] if bracketed else text)
    except ValueError:
        if bracketed:
            raise invalid from None
    else:
        if (bracketed and address.version != 6) or getattr(address, "scope_id", None):
            raise invalid
        return address.compressed
    name = text.rstrip(".").lower()
    try:
        name = name.encode("idna").decode("ascii")
    except UnicodeError:
        name = ""
    if len(name) > 253 or not _DNS_NAME.fullmatch(name):
        raise invalid
    return name


class CertificateAuthority:
    """The CA of one state home; issues (and caches) leaf certificates. Thread-safe."""

    def __init__(self, directory: Path, certificate: x509.Certificate,
                 key: ec.EllipticCurvePrivateKey, *, origin: str,
                 clock: Callable[[], datetime] = _utcnow) -> None:
        self.directory = directory
        self._cert = certificate
        self._key = key
        self._clock = clock
        self._cert_pem = certificate.public_bytes(serialization.Encoding.PEM)
        # "loaded", or why a new CA was made: missing, corrupt, unsafe, expired, expiring...
        self.origin = origin
        self._lock = threading.Lock()
        self._leaves: dict[str, LeafCert] = {}
        self._contexts: dict[str, tuple[LeafCert, ssl.SSLContext]] = {}

    # -- loading -------------------------------------------------------------------------------

    @classmethod
    def load_or_create(cls, state_home: Path, now: datetime | None = None,
                       ) -> CertificateAuthority:
        """Load the state home's CA, or create (or replace) it; see the module docstring.

        ``now`` fixes the clock (for tests); by default the real UTC time is read at each use.
        Raises ``proxy_failed`` when the CA directory is unusable or cannot be written.
        """
        directory = state_home / CA_DIR
        clock = _utcnow if now is None else _fixed_clock(now)
        current = clock()
        with _CREATE_LOCK, _directory_lock(directory):
            loaded, problem = _load(directory, current)
            if loaded is not None:
                certificate, key = loaded
                return cls(directory, certificate, key, origin="loaded", clock=clock)
            certificate, key = _generate(paths.home_hash(state_home), current)
            try:
                _retire(directory)
                write_private_file(directory / CA_KEY_FILE, _key_pem(key))
                write_private_file(directory / CA_CERT_FILE,
                                   certificate.public_bytes(serialization.Encoding.PEM),
                                   mode=0o644)
            except OSError as error:
                raise _failed(directory, f"cannot write the CA ({error.strerror})") from None
            return cls(directory, certificate, key, origin=problem, clock=clock)

    # -- the CA ----------------------------------------------------------------------------------

    @property
    def cert_path(self) -> Path:
        return self.directory / CA_CERT_FILE

    @property
    def certificate(self) -> x509.Certificate:
        return self._cert

    def certificate_pem(self) -> bytes:
        return self._cert_pem

    @property
    def not_after(self) -> datetime:
        return self._cert.not_valid_after_utc

    @property
    def fingerprint_sha256(self) -> str:
        return self._cert.fingerprint(hashes.SHA256()).hex()

    @property
    def subject(self) -> str:
        return self._cert.subject.rfc4514_string()

    def info(self, now: datetime | None = None) -> dict[str, Any]:
        """A summary for ``sbx doctor``."""
        current = now or self._clock()
        return {"path": str(self.cert_path), "subject": self.subject,
                "not_after": self.not_after.isoformat(timespec="seconds"),
                "days_left": (self.not_after - current).days,
                "fingerprint_sha256": self.fingerprint_sha256}

    # -- leaves ----------------------------------------------------------------------------------

    def leaf(self, host: str, now: datetime | None = None) -> LeafCert:
        """A valid leaf for ``host`` (DNS name or IP): from memory, else from the disk cache,
        else newly issued and written to the disk cache."""
        name = normalize_host(host)
        current = now or self._clock()
        with self._lock:
            cached = self._leaves.get(name)
            if cached is not None and cached.usable_at(current):
                return cached
            path = self.directory / LEAVES_DIR / f"{hashlib.sha256(name.encode()).hexdigest()}.pem"
            leaf = self._load_leaf(path, name, current)
            if leaf is None:
                leaf = self._issue(name, path, current)
            if len(self._leaves) >= MAX_CACHED_LEAVES:
                self._leaves.pop(next(iter(self._leaves)))
            self._leaves[name] = leaf
            return leaf

    def ssl_context_for(self, host: str) -> ssl.SSLContext:
        """A server-side TLS context presenting ``host``'s leaf and the CA (TLS 1.2+)."""
        leaf = self.leaf(host)
        with self._lock:
            cached = self._contexts.get(leaf.host)
            if cached is not None and cached[0] is leaf:
                return cached[1]
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(leaf.path)
        with self._lock:
            if len(self._contexts) >= MAX_CACHED_LEAVES:
                self._contexts.pop(next(iter(self._contexts)))
            self._contexts[leaf.host] = (leaf, context)
        return context

    def _issue(self, name: str, path: Path, now: datetime) -> LeafCert:
        key = ec.generate_private_key(ec.SECP256R1())
        try:
            address = ipaddress.ip_address(name)
        except ValueError:
            san: x509.GeneralName = x509.DNSName(name)
        else:
            san = x509.IPAddress(address)
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]
                            if len(name) <= _CN_MAX else [])
        not_before = max(now - LEAF_BACKDATE, self._cert.not_valid_before_utc)
        not_after = min(now + LEAF_VALIDITY, self.not_after)
        certificate = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(not_before)
            .not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_key_usage(digital_signature=True), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            # RFC 5280 §4.2.1.6: with an empty subject the SAN must be critical.
            .add_extension(x509.SubjectAlternativeName([san]), critical=not subject)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                self._key.public_key()), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        leaf = self._leaf_from(name, certificate, _key_pem(key), path)
        try:
            ensure_private_dir(path.parent)
            write_private_file(path, leaf.key_pem + leaf.chain_pem)
        except (OSError, SbxError) as error:
            problem = error.message if isinstance(error, SbxError) else error.strerror
            raise _failed(path.parent, f"cannot cache the leaf certificate ({problem})") from None
        return leaf

    def _leaf_from(self, name: str, certificate: x509.Certificate, key_pem: bytes,
                   path: Path) -> LeafCert:
        cert_pem = certificate.public_bytes(serialization.Encoding.PEM)
        return LeafCert(host=name, cert_pem=cert_pem, key_pem=key_pem,
                        chain_pem=cert_pem + self._cert_pem,
                        not_before=certificate.not_valid_before_utc,
                        not_after=certificate.not_valid_after_utc, path=path)

    def _load_leaf(self, path: Path, name: str, now: datetime) -> LeafCert | None:
        """The cached leaf at ``path`` if it is safe, intact, issued by this CA for ``name`` and
        still usable; None otherwise (it is then re-issued and overwritten)."""
        try:
            loaded = read_private_file(path, max_bytes=MAX_PEM_BYTES)
        except SbxError:
            return None
        if loaded is None:
            return None
        data = loaded[0]
        try:
            certificates = x509.load_pem_x509_certificates(data)
            key = serialization.load_pem_private_key(data, password=None)
            certificate = certificates[0]
            certificate.verify_directly_issued_by(self._cert)
            names = certificate.extensions.get_extension_for_class(
                x509.SubjectAlternativeName).value
        except (ValueError, TypeError, IndexError, InvalidSignature, x509.ExtensionNotFound):
            return None
        if key.public_key() != certificate.public_key() or _san_text(names) != [name]:
            return None
        leaf = self._leaf_from(name, certificate, _key_pem(key), path)
        return leaf if leaf.usable_at(now) else None


# -- helpers ---------------------------------------------------------------------------------------


def _failed(directory: Path, problem: str) -> SbxError:
    return SbxError(Reason.PROXY_FAILED, f"sbx CA in {directory}: {problem}",
                    hint="Make the state home writable (or point SBX_HOME elsewhere).",
                    details={"path": str(directory)})


@contextlib.contextmanager
def _directory_lock(directory: Path) -> Iterator[None]:
    try:
        ensure_private_dir(directory)
        fd = os.open(directory / LOCK_FILE,
                     os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except SbxError as error:
        raise SbxError(Reason.PROXY_FAILED, error.message, hint=error.hint,
                       details=error.details) from None
    except OSError as error:
        raise _failed(directory, f"cannot lock it ({error.strerror})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _load(directory: Path, now: datetime,
          ) -> tuple[tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None, str]:
    """The CA in ``directory`` if usable at ``now``, else None and why not."""
    try:
        key_file = read_private_file(directory / CA_KEY_FILE, max_bytes=MAX_PEM_BYTES)
        cert_file = read_private_file(directory / CA_CERT_FILE, max_bytes=MAX_PEM_BYTES,
                                      forbidden_bits=0o022)
    except SbxError:
        return None, "unsafe"
    if key_file is None or cert_file is None:
        return None, "missing"
    try:
        key = serialization.load_pem_private_key(key_file[0], password=None)
        certificate = x509.load_pem_x509_certificate(cert_file[0])
        constraints = certificate.extensions.get_extension_for_class(x509.BasicConstraints).value
        certificate.verify_directly_issued_by(certificate)
    except (ValueError, TypeError, InvalidSignature, x509.ExtensionNotFound):
        return None, "corrupt"
    if (not isinstance(key, ec.EllipticCurvePrivateKey) or not constraints.ca
            or key.public_key() != certificate.public_key()):
        return None, "corrupt"
    if now < certificate.not_valid_before_utc:
        return None, "not_yet_valid"
    if now >= certificate.not_valid_after_utc:
        return None, "expired"
    if now >= certificate.not_valid_after_utc - CA_RENEW_BEFORE:
        return None, "expiring"
    return (certificate, key), "loaded"


def _generate(home_hash: str, now: datetime,
              ) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([
        x509.NameAttribute(NameOID.COMMON_NAME, f"sbx sandbox CA {home_hash[:8]}"),
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "sbx"),
    ])
    public = key.public_key()
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CA_BACKDATE)
        .not_valid_after(now + CA_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(key_cert_sign=True, crl_sign=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(public),
                       critical=False)
        .sign(key, hashes.SHA256())
    )
    return certificate, key


def _retire(directory: Path) -> None:
    """Keep the current CA files as ``.old`` and empty the leaf cache (signed by that CA)."""
    for name in (CA_KEY_FILE, CA_CERT_FILE):
        current = directory / name
        if current.exists() or current.is_symlink():
            old = directory / (name + OLD_SUFFIX)
            os.replace(current, old)
            if name == CA_KEY_FILE and not old.is_symlink():
                os.chmod(old, 0o600)
    leaves = directory / LEAVES_DIR
    if leaves.is_dir() and not leaves.is_symlink():
        for entry in leaves.iterdir():
            if entry.is_file() or entry.is_symlink():
                entry.unlink(missing_ok=True)


def _key_usage(*, digital_signature: bool = False, key_cert_sign: bool = False,
               crl_sign: bool = False) -> x509.KeyUsage:
    return x509.KeyUsage(digital_signature=digital_signature, content_commitment=False,
                         key_encipherment=False, data_encipherment=False, key_agreement=False,
                         key_cert_sign=key_cert_sign, crl_sign=crl_sign, encipher_only=False,
                         decipher_only=False)


def _key_pem(key: PrivateKeyTypes) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _fixed_clock(now: datetime) -> Callable[[], datetime]:
    return lambda: now


def _san_text(names: x509.SubjectAlternativeName) -> list[str]:
    texts: list[str] = []
    for general in names:
        value = general.value
        texts.append(value.compressed if isinstance(value, ipaddress.IPv4Address
                                                    | ipaddress.IPv6Address) else str(value))
    return texts


__all__ = [
    "CA_CERT_FILE",
    "CA_DIR",
    "CA_KEY_FILE",
    "CA_RENEW_BEFORE",
    "CA_VALIDITY",
    "LEAF_VALIDITY",
    "CertificateAuthority",
    "LeafCert",
    "normalize_host",
]
