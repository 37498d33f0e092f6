"""The per-state-home CA: generation, reuse, regeneration, leaves and real TLS handshakes."""

from __future__ import annotations

import ipaddress
import os
import socket
import ssl
import stat
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from sbx.base.errors import SbxError
from sbx.base.paths import home_hash
from sbx.base.reasons import Reason
from sbx.domain.egress.ca import (
    CA_RENEW_BEFORE,
    LEAF_VALIDITY,
    CertificateAuthority,
    normalize_host,
)

T0 = datetime(2030, 1, 15, 12, 0, tzinfo=UTC)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def ca(home: Path) -> CertificateAuthority:
    return CertificateAuthority.load_or_create(home)


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def _handshake(ca: CertificateAuthority, served: str, asked: str) -> bytes:
    """Serve ``served``'s leaf on 127.0.0.1 and connect as a client that trusts only the CA
    and asks for ``asked``; return what the server sent over TLS."""
    server_context = ca.ssl_context_for(served)
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(10)
    port = listener.getsockname()[1]

    def serve() -> None:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        conn.settimeout(10)
        try:
            with server_context.wrap_socket(conn, server_side=True) as tls:
                tls.sendall(b"hello")
        except (ssl.SSLError, OSError):
            conn.close()

    thread = threading.Thread(target=serve)
    thread.start()
    client = ssl.create_default_context(cadata=ca.certificate_pem().decode("ascii"))
    client.verify_flags |= ssl.VERIFY_X509_STRICT  # what Python 3.13+ enforces by default
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
                client.wrap_socket(raw, server_hostname=asked) as tls:
            return tls.recv(5)
    finally:
        thread.join(10)
        listener.close()


# --- the CA -----------------------------------------------------------------------------------


def test_generation(home: Path, ca: CertificateAuthority) -> None:
    cert = ca.certificate
    assert ca.origin == "missing"
    assert cert.subject == cert.issuer
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == \
        f"sbx sandbox CA {home_hash(home)[:8]}"
    constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints)
    assert constraints.critical and constraints.value.ca and constraints.value.path_length == 0
    usage = cert.extensions.get_extension_for_class(x509.KeyUsage)
    assert usage.critical and usage.value.key_cert_sign and usage.value.crl_sign
    assert not usage.value.digital_signature
    public = cert.public_key()
    assert isinstance(public, ec.EllipticCurvePublicKey) and public.curve.name == "secp256r1"
    now = datetime.now(UTC)
    assert cert.not_valid_before_utc < now
    assert timedelta(days=364) < cert.not_valid_after_utc - now <= timedelta(days=365)
    assert ca.not_after == cert.not_valid_after_utc
    assert (home / "ca" / "ca.pem").read_bytes() == ca.certificate_pem()
    assert len(ca.fingerprint_sha256) == 64


def test_file_modes(home: Path, ca: CertificateAuthority) -> None:
    ca.leaf("example.com")
    assert _mode(home / "ca") == 0o700
    assert _mode(home / "ca" / "ca.pem") == 0o644
    assert _mode(home / "ca" / "ca.key") == 0o600
    assert _mode(home / "ca" / "leaves") == 0o700
    [leaf_file] = (home / "ca" / "leaves").iterdir()
    assert _mode(leaf_file) == 0o600
    assert not [p for p in (home / "ca").rglob("*") if p.name.startswith(".tmp-")]


def test_second_load_reuses_the_ca(home: Path, ca: CertificateAuthority) -> None:
    again = CertificateAuthority.load_or_create(home)
    assert again.origin == "loaded"
    assert again.fingerprint_sha256 == ca.fingerprint_sha256
    assert not (home / "ca" / "ca.pem.old").exists()


def test_concurrent_creation_yields_one_ca(home: Path) -> None:
    results: list[str] = []

    def load() -> None:
        results.append(CertificateAuthority.load_or_create(home).fingerprint_sha256)

    threads = [threading.Thread(target=load) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(results)) == 1


@pytest.mark.parametrize(("later", "why"), [
    (timedelta(days=366), "expired"),
    (timedelta(days=365) - CA_RENEW_BEFORE + timedelta(hours=1), "expiring"),
    (-timedelta(days=2), "not_yet_valid"),
])
def test_regeneration_keeps_the_old_files(home: Path, later: timedelta, why: str) -> None:
    first = CertificateAuthority.load_or_create(home, now=T0)
    first.leaf("example.com")
    old_key = (home / "ca" / "ca.key").read_bytes()
    second = CertificateAuthority.load_or_create(home, now=T0 + later)
    assert second.origin == why
    assert second.fingerprint_sha256 != first.fingerprint_sha256
    assert (home / "ca" / "ca.pem.old").read_bytes() == first.certificate_pem()
    assert (home / "ca" / "ca.key.old").read_bytes() == old_key
    assert _mode(home / "ca" / "ca.key.old") == 0o600
    assert list((home / "ca" / "leaves").iterdir()) == []  # signed by the retired CA


def test_still_valid_a_week_and_a_day_before_expiry(home: Path) -> None:
    first = CertificateAuthority.load_or_create(home, now=T0)
    later = first.not_after - CA_RENEW_BEFORE - timedelta(days=1)
    assert CertificateAuthority.load_or_create(home, now=later).origin == "loaded"


@pytest.mark.parametrize(("damage", "why"), [
    ("garbage-cert", "corrupt"),
    ("garbage-key", "corrupt"),
    ("other-key", "corrupt"),
    ("no-key", "missing"),
    ("loose-key", "unsafe"),
    ("symlinked-key", "unsafe"),
])
def test_unusable_ca_files_are_replaced(home: Path, tmp_path: Path, damage: str,
                                        why: str) -> None:
    first = CertificateAuthority.load_or_create(home)
    key, cert = home / "ca" / "ca.key", home / "ca" / "ca.pem"
    if damage == "garbage-cert":
        cert.write_bytes(b"-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----\n")
    elif damage == "garbage-key":
        key.write_bytes(b"not a key")
    elif damage == "other-key":
        other = CertificateAuthority.load_or_create(tmp_path / "other")
        key.write_bytes((tmp_path / "other" / "ca" / "ca.key").read_bytes())
        assert other.fingerprint_sha256 != first.fingerprint_sha256
    elif damage == "no-key":
        key.unlink()
    elif damage == "loose-key":
        os.chmod(key, 0o644)
    else:
        target = tmp_path / "key-elsewhere"
        target.write_bytes(key.read_bytes())
        os.chmod(target, 0o600)
        key.unlink()
        key.symlink_to(target)
    second = CertificateAuthority.load_or_create(home)
    assert second.origin == why
    assert second.fingerprint_sha256 != first.fingerprint_sha256
    assert _mode(key) == 0o600 and not key.is_symlink()


def test_an_unusable_ca_directory_is_a_proxy_failure(home: Path, tmp_path: Path) -> None:
    home.mkdir()
    (tmp_path / "real").mkdir()
    (home / "ca").symlink_to(tmp_path / "real")
    with pytest.raises(SbxError) as error:
        CertificateAuthority.load_or_create(home)
    assert error.value.reason is Reason.PROXY_FAILED


def test_info_for_doctor(home: Path) -> None:
    ca = CertificateAuthority.load_or_create(home, now=T0)
    info = ca.info()
    assert info == {
        "path": str(home / "ca" / "ca.pem"),
        "subject": ca.subject,
        "not_after": ca.not_after.isoformat(timespec="seconds"),
        "days_left": 365,
        "fingerprint_sha256": ca.fingerprint_sha256,
    }
    assert ca.info(now=T0 + timedelta(days=100))["days_left"] == 265


# --- leaves -----------------------------------------------------------------------------------


def test_leaf_shape(ca: CertificateAuthority) -> None:
    leaf = ca.leaf("Example.COM.")
    assert leaf.host == "example.com"
    cert = x509.load_pem_x509_certificate(leaf.cert_pem)
    cert.verify_directly_issued_by(ca.certificate)
    assert cert.issuer == ca.certificate.subject
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["example.com"]
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert leaf.not_after - leaf.not_before <= LEAF_VALIDITY + timedelta(hours=1)
    assert leaf.chain_pem == leaf.cert_pem + ca.certificate_pem()
    assert b"PRIVATE KEY" in leaf.key_pem


def test_leaf_for_an_ip_address(ca: CertificateAuthority) -> None:
    for host, address in (("10.1.2.3", "10.1.2.3"), ("[::1]", "::1"),
                          ("2001:DB8:0:0::1", "2001:db8::1")):
        leaf = ca.leaf(host)
        assert leaf.host == address
        cert = x509.load_pem_x509_certificate(leaf.cert_pem)
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address(address)]
        assert san.get_values_for_type(x509.DNSName) == []


def test_a_long_name_gets_an_empty_subject_and_a_critical_san(ca: CertificateAuthority) -> None:
    host = ".".join(["a" * 60] * 3)
    cert = x509.load_pem_x509_certificate(ca.leaf(host).cert_pem)
    assert len(cert.subject) == 0
    assert cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).critical


def test_leaf_validity_is_capped_by_the_ca(home: Path) -> None:
    ca = CertificateAuthority.load_or_create(home, now=T0)
    late = ca.leaf("example.com", now=T0 + timedelta(days=300))
    assert late.not_after == ca.not_after
    early = ca.leaf("example.org", now=T0)
    assert early.not_after == (T0 + LEAF_VALIDITY).replace(microsecond=0)


def test_leaf_cache_in_memory_and_on_disk(home: Path, ca: CertificateAuthority) -> None:
    first = ca.leaf("example.com")
    assert ca.leaf("EXAMPLE.com") is first
    reloaded = CertificateAuthority.load_or_create(home)
    assert reloaded.leaf("example.com").cert_pem == first.cert_pem
    assert ca.leaf("example.org").cert_pem != first.cert_pem
    assert len(list((home / "ca" / "leaves").iterdir())) == 2


def test_an_expiring_leaf_is_reissued(home: Path) -> None:
    ca = CertificateAuthority.load_or_create(home, now=T0)
    first = ca.leaf("example.com", now=T0)
    assert ca.leaf("example.com", now=T0 + timedelta(days=30)) is first
    renewed = ca.leaf("example.com", now=T0 + LEAF_VALIDITY - timedelta(hours=1))
    assert renewed.cert_pem != first.cert_pem
    reloaded = CertificateAuthority.load_or_create(home, now=T0 + LEAF_VALIDITY)
    assert reloaded.leaf("example.com").cert_pem == renewed.cert_pem


def test_a_foreign_or_damaged_cached_leaf_is_not_reused(home: Path, tmp_path: Path) -> None:
    ca = CertificateAuthority.load_or_create(home)
    other = CertificateAuthority.load_or_create(tmp_path / "other")
    foreign = other.leaf("example.com")
    path = ca.leaf("example.com").path
    path.write_bytes(foreign.key_pem + foreign.chain_pem)
    fresh = CertificateAuthority.load_or_create(home)
    reissued = fresh.leaf("example.com")
    x509.load_pem_x509_certificate(reissued.cert_pem).verify_directly_issued_by(fresh.certificate)
    path.write_bytes(b"garbage")
    assert CertificateAuthority.load_or_create(home).leaf("example.com").path == path
    os.chmod(path, 0o644)
    again = CertificateAuthority.load_or_create(home).leaf("example.com")
    assert _mode(again.path) == 0o600


def test_concurrent_leaves_for_one_host_are_one_leaf(ca: CertificateAuthority) -> None:
    leaves: list[bytes] = []
    threads = [threading.Thread(target=lambda: leaves.append(ca.leaf("example.com").cert_pem))
               for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(leaves)) == 1


@pytest.mark.parametrize("bad", ["", "exa mple.com", "a..b", "-", "a/b", "ex_ample.com:443",
                                 "a" * 64 + ".com", "[1.2.3]",
                                 "[10.0.0.1]", "fe80::1%eth0"])
def test_invalid_hosts(ca: CertificateAuthority, bad: str) -> None:
    with pytest.raises(SbxError) as error:
        ca.leaf(bad)
    assert error.value.reason is Reason.INVALID_ARGUMENT


def test_normalize_host() -> None:
    assert normalize_host("Bücher.Example.") == "xn--bcher-kva.example"
    assert normalize_host(" 127.0.0.1 ") == "127.0.0.1"
    assert normalize_host("_acme.example.com") == "_acme.example.com"


# --- real TLS ---------------------------------------------------------------------------------


def test_handshake_succeeds_for_the_served_name(ca: CertificateAuthority) -> None:
    assert _handshake(ca, "example.com", "example.com") == b"hello"


def test_handshake_fails_on_a_hostname_mismatch(ca: CertificateAuthority) -> None:
    with pytest.raises(ssl.SSLCertVerificationError, match=r"[Hh]ostname mismatch"):
        _handshake(ca, "example.com", "other.com")


def test_handshake_with_an_ip_san(ca: CertificateAuthority) -> None:
    assert _handshake(ca, "127.0.0.1", "127.0.0.1") == b"hello"
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(ca, "127.0.0.1", "127.0.0.2")


def test_a_client_trusting_another_ca_refuses(home: Path, tmp_path: Path) -> None:
    ca = CertificateAuthority.load_or_create(home)
    other = CertificateAuthority.load_or_create(tmp_path / "other")
    server_context = ca.ssl_context_for("example.com")
    assert ca.ssl_context_for("example.com") is server_context  # cached
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake_with(server_context, other)


def _handshake_with(server_context: ssl.SSLContext, trusted: CertificateAuthority) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(10)

    def serve() -> None:
        try:
            conn, _ = listener.accept()
            conn.settimeout(10)
            with server_context.wrap_socket(conn, server_side=True) as tls:
                tls.sendall(b"x")
        except (ssl.SSLError, OSError):
            pass

    thread = threading.Thread(target=serve)
    thread.start()
    client = ssl.create_default_context(cadata=trusted.certificate_pem().decode("ascii"))
    try:
        with socket.create_connection(listener.getsockname()[:2], timeout=10) as raw, \
                client.wrap_socket(raw, server_hostname="example.com"):
            pass
    finally:
        thread.join(10)
        listener.close()


def test_the_upstream_ca_file_gives_the_sandbox_its_certificates_and_nothing_else(
        tmp_path: Path) -> None:
    from sbx.domain.egress.plan import upstream_certificates

    one = CertificateAuthority.load_or_create(tmp_path / "a").certificate_pem()
    two = CertificateAuthority.load_or_create(tmp_path / "b").certificate_pem()
    from cryptography.hazmat.primitives import serialization

    key = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption())
    corp = tmp_path / "corp.pem"
    corp.write_bytes(b"# our proxy\n" + one + key + b"junk\n" + two)
    got = upstream_certificates(corp)
    assert got.count(b"BEGIN CERTIFICATE") == 2 and b"PRIVATE" not in got
    assert got == one.rstrip(b"\n") + b"\n" + two.rstrip(b"\n") + b"\n"
    for content, problem in ((b"no certificate here\n", "holds no PEM certificate"),
                             (b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
                              "does not parse")):
        corp.write_bytes(content)
        with pytest.raises(SbxError) as caught:
            upstream_certificates(corp)
        assert caught.value.reason is Reason.INVALID_CONFIG and problem in caught.value.message
    with pytest.raises(SbxError) as missing:
        upstream_certificates(tmp_path / "absent.pem")
    assert missing.value.reason is Reason.INVALID_CONFIG
    assert "upstream_ca_file" in missing.value.message
