"""Bounded logins through the SSH agent relay, decided without an engine: the session-bind
wire format and its signature (real keys of every taken type), the RFC 4252 publickey payload,
known_hosts (plain, hashed, wildcards, revoked) and the relay's verdict on hostile input."""

from __future__ import annotations

import base64
import hashlib
import hmac
import struct
from collections.abc import Callable

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa, utils

from sbx.domain.egress.sshagent import (
    Binding,
    PhaseGrant,
    RelayConfig,
    answer_allowed,
    bind,
    judge,
    known_hosts_files,
)
from sbx.domain.egress.sshbind import (
    KnownHost,
    WireError,
    extension_name,
    known_names,
    parse_known_hosts,
    parse_login,
    parse_session_bind,
    verify_binding,
)

SESSION = hashlib.sha256(b"one key exchange").digest()
GRANT = PhaseGrant("runtime", False, ("git",), ("git@git.test", "ci.test"))


def _s(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def _mpint(value: int) -> bytes:
    raw = value.to_bytes((value.bit_length() + 8) // 8, "big")  # a leading zero if the top bit
    return _s(raw)


Signer = Callable[[bytes], bytes]


def _ed25519() -> tuple[bytes, Signer]:
    key = ed25519.Ed25519PrivateKey.generate()
    public = key.public_key().public_bytes(serialization.Encoding.Raw,
                                           serialization.PublicFormat.Raw)
    return (_s(b"ssh-ed25519") + _s(public),
            lambda data: _s(b"ssh-ed25519") + _s(key.sign(data)))


def _ecdsa(curve: ec.EllipticCurve, name: bytes, digest: hashes.HashAlgorithm
           ) -> tuple[bytes, Signer]:
    key = ec.generate_private_key(curve)
    point = key.public_key().public_bytes(serialization.Encoding.X962,
                                          serialization.PublicFormat.UncompressedPoint)
    kind = b"ecdsa-sha2-" + name

    def sign(data: bytes) -> bytes:
        r, s = utils.decode_dss_signature(key.sign(data, ec.ECDSA(digest)))
        return _s(kind) + _s(_mpint(r) + _mpint(s))

    return _s(kind) + _s(name) + _s(point), sign


def _rsa(bits: int = 2048, algorithm: bytes = b"rsa-sha2-256") -> tuple[bytes, Signer]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=bits)
    numbers = key.public_key().public_numbers()
    digest: hashes.HashAlgorithm = (hashes.SHA512() if algorithm == b"rsa-sha2-512"
                                    else hashes.SHA256())
    if algorithm == b"ssh-rsa":
        digest = hashes.SHA1()  # noqa: S303 - the signature sbx must refuse
    return (_s(b"ssh-rsa") + _mpint(numbers.e) + _mpint(numbers.n),
            lambda data: _s(algorithm) + _s(key.sign(data, padding.PKCS1v15(), digest)))


def _bind_body(hostkey: bytes, session: bytes, signature: bytes, forwarding: bool = False
               ) -> bytes:
    return (bytes([27]) + _s(b"session-bind@openssh.com") + _s(hostkey) + _s(session)
            + _s(signature) + bytes([forwarding]))


def _login(user: bytes, key: bytes, session: bytes = SESSION,
           hostkey: bytes | None = None) -> bytes:
    method = b"publickey" if hostkey is None else b"publickey-hostbound-v00@openssh.com"
    data = (_s(session) + bytes([50]) + _s(user) + _s(b"ssh-connection") + _s(method)
            + b"\x01" + _s(b"ssh-ed25519") + _s(key))
    return data + (_s(hostkey) if hostkey is not None else b"")


def _sign_request(data: bytes, key: bytes) -> bytes:
    return bytes([13]) + _s(key) + _s(data) + struct.pack(">I", 0)


def _known_line(names: str, hostkey: bytes) -> str:
    kind = struct.unpack(">I", hostkey[:4])[0]
    return f"{names} {hostkey[4:4 + kind].decode()} {base64.b64encode(hostkey).decode()}"


def _hashed(name: str, salt: bytes = b"s" * 20) -> str:
    digest = hmac.new(salt, name.encode(), hashlib.sha1).digest()
    return f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"


USER_KEY = _s(b"ssh-ed25519") + _s(b"u" * 32)


@pytest.mark.parametrize("make", [
    _ed25519,
    lambda: _ecdsa(ec.SECP256R1(), b"nistp256", hashes.SHA256()),
    lambda: _ecdsa(ec.SECP384R1(), b"nistp384", hashes.SHA384()),
    lambda: _ecdsa(ec.SECP521R1(), b"nistp521", hashes.SHA512()),
    lambda: _rsa(2048, b"rsa-sha2-256"),
    lambda: _rsa(2048, b"rsa-sha2-512"),
], ids=["ed25519", "p256", "p384", "p521", "rsa-sha2-256", "rsa-sha2-512"])
def test_a_binding_verifies_by_the_host_keys_own_signature(
        make: Callable[[], tuple[bytes, Signer]]) -> None:
    hostkey, sign = make()
    good = parse_session_bind(_bind_body(hostkey, SESSION, sign(SESSION)))
    assert verify_binding(good) is None
    forged = parse_session_bind(_bind_body(hostkey, SESSION, sign(b"another session")))
    assert "not the host key's" in (verify_binding(forged) or "")


def test_a_binding_signed_by_a_different_key_is_refused() -> None:
    hostkey, _ = _ed25519()
    _, other = _ed25519()
    request = parse_session_bind(_bind_body(hostkey, SESSION, other(SESSION)))
    assert verify_binding(request) is not None
    # Another type's signature under this key's name is refused before any arithmetic.
    ec_key, ec_sign = _ecdsa(ec.SECP256R1(), b"nistp256", hashes.SHA256())
    mixed = parse_session_bind(_bind_body(hostkey, SESSION, ec_sign(SESSION)))
    assert "foreign" in (verify_binding(mixed) or "")
    assert ec_key != hostkey


def test_weak_and_unknown_host_keys_are_refused() -> None:
    hostkey, sign = _rsa(2048, b"ssh-rsa")
    assert "rsa-sha2-256" in (verify_binding(parse_session_bind(
        _bind_body(hostkey, SESSION, sign(SESSION)))) or "")
    small, small_sign = _rsa(1024)
    assert "1024 bits" in (verify_binding(parse_session_bind(
        _bind_body(small, SESSION, small_sign(SESSION)))) or "")
    dss = _s(b"ssh-dss") + _mpint(7) * 4
    assert "ssh-dss" in (verify_binding(parse_session_bind(
        _bind_body(dss, SESSION, _s(b"ssh-dss") + _s(b"x" * 40)))) or "")
    cert = _s(b"ssh-ed25519-cert-v01@openssh.com") + _s(b"n" * 32)
    assert verify_binding(parse_session_bind(_bind_body(cert, SESSION, b""))) is not None


@pytest.mark.parametrize("hostile", [
    _s(b"ssh-ed25519") + _s(b"k" * 31),  # a short public key
    _s(b"ssh-ed25519") + _s(b"k" * 32) + b"x",  # bytes after the key
    _s(b"ecdsa-sha2-nistp256") + _s(b"nistp256") + _s(b"\x04" + b"\x00" * 64),  # off-curve
    _s(b"ssh-rsa") + _s(b"\x80") + _mpint(3),  # a negative exponent
    b"\xff\xff\xff\xff",  # a huge length
    b"",
])
def test_malformed_host_keys_are_refused_not_crashed_on(hostile: bytes) -> None:
    _, sign = _ed25519()
    request = parse_session_bind(_bind_body(hostile, SESSION, sign(SESSION)))
    assert verify_binding(request) is not None


@pytest.mark.parametrize("body", [
    bytes([27]),
    bytes([27]) + _s(b"session-bind@openssh.com"),
    bytes([27]) + _s(b"session-bind@openssh.com") + _s(b"k") + _s(b"sid") + _s(b"sig"),  # no bool
    bytes([27]) + _s(b"session-bind@openssh.com") + b"\xff\xff\xff\xf0" + b"k" * 64,
    bytes([27]) + _s(b"session-bind@openssh.com") + _s(b"k") + _s(b"") + _s(b"sig") + b"\0",
    bytes([27]) + _s(b"session-bind@openssh.com") + _s(b"k") + _s(b"s" * 65) + _s(b"") + b"\0",
    bytes([27]) + _s(b"session-bind@openssh.com") + _s(b"k") + _s(b"s") + _s(b"") + b"\0\0",
    bytes([27]) + _s(b"query"),
])
def test_truncated_or_oversized_bindings_are_wire_errors(body: bytes) -> None:
    with pytest.raises(WireError):
        parse_session_bind(body)


def test_extension_names_are_read_strictly() -> None:
    assert extension_name(bytes([27]) + _s(b"session-bind@openssh.com")) \
        == b"session-bind@openssh.com"
    assert extension_name(bytes([27]) + b"\x00\x00\x10") is None
    assert extension_name(bytes([13]) + _s(b"x")) is None


def test_login_payloads_are_parsed_exactly() -> None:
    login = parse_login(_login(b"git", USER_KEY))
    assert login is not None and login.user == "git" and login.session_id == SESSION
    assert login.key == USER_KEY and login.hostkey is None
    bound = parse_login(_login(b"git", USER_KEY, hostkey=b"HK"))
    assert bound is not None and bound.hostkey == b"HK"
    whole = _login(b"git", USER_KEY)
    for cut in range(len(whole)):
        assert parse_login(whole[:cut]) is None  # every prefix
    assert parse_login(whole + b"x") is None
    assert parse_login(whole.replace(b"\x01" + _s(b"ssh-ed25519"), b"\x00"
                                     + _s(b"ssh-ed25519"))) is None  # a query is not signed
    assert parse_login(whole.replace(b"publickey", b"password\0")) is None
    assert parse_login(_s(SESSION) + bytes([50]) + b"\xff\xff\xff\xff") is None


def test_known_hosts_plain_hashed_wildcard_bracketed_and_revoked() -> None:
    hostkey, _ = _ed25519()
    other, _ = _ed25519()
    entries = parse_known_hosts("\n".join([
        "# a comment", "",
        _known_line(_hashed("git.test"), hostkey),
        _known_line("[ci.test]:2222,Mirror.Test", hostkey),
        _known_line("*.wild.test,!bad.wild.test", hostkey),
        _known_line("git.test", other),
        "@cert-authority *.test " + _known_line("x", hostkey).split(" ", 1)[1],
        "junk line", "git.test ssh-ed25519 !!!notbase64",
        "git.test ssh-rsa " + base64.b64encode(hostkey).decode(),  # type and key disagree
    ]))
    assert len(entries) == 4
    names = known_names(hostkey, entries, ["git.test", "ci.test", "mirror.test", "a.wild.test",
                                           "bad.wild.test", "other.test", "git.tes"])
    assert names == frozenset({"git.test", "ci.test", "mirror.test", "a.wild.test"})
    assert known_names(other, entries, ["ci.test"]) == frozenset()
    revoked = [*entries, KnownHost(("*",), hostkey, revoked=True)]
    assert known_names(hostkey, revoked, ["git.test"]) is None
    assert parse_known_hosts("@revoked * " + _known_line("x", other).split(" ", 1)[1])[0].revoked


def _bound(hostkey: bytes, known: str) -> Binding:
    return Binding(hostkey, SESSION, tuple(parse_known_hosts(known)))


def test_a_login_is_signed_only_on_a_bound_session_for_a_granted_destination() -> None:
    hostkey, _ = _ed25519()
    binding = _bound(hostkey, _known_line(_hashed("git.test") + ",ci.test", hostkey))

    def verdict(data: bytes, b: Binding | None = binding, grant: PhaseGrant = GRANT) -> str:
        v = judge(_sign_request(data, USER_KEY), grant, "runtime", b)
        return "forward" if v.forward else v.why

    assert verdict(_login(b"git", USER_KEY)) == "forward"
    assert verdict(_login(b"git", USER_KEY, hostkey=hostkey)) == "forward"
    assert verdict(_login(b"anyone", USER_KEY)) == "forward"  # `ci.test`: any user there
    assert "bound to no verified session" in verdict(_login(b"git", USER_KEY), None)
    assert "another session" in verdict(_login(b"git", USER_KEY, session=b"x" * 32))
    assert "another host key" in verdict(_login(b"git", USER_KEY, hostkey=b"other"))
    assert "another key" in verdict(_login(b"git", b"not-the-signing-key"))
    only_git = PhaseGrant("runtime", False, (), ("git@git.test",))
    assert "logs in only as git@git.test" in verdict(_login(b"root", USER_KEY), grant=only_git)
    unknown = _bound(hostkey, _known_line("elsewhere.test", hostkey))
    assert "knows for none of git.test" in verdict(_login(b"git", USER_KEY), unknown,
                                                   only_git)
    sign_only = PhaseGrant("runtime", False, ("git",))
    assert "makes no logins" in verdict(_login(b"git", USER_KEY), grant=sign_only)
    assert "neither an SSHSIG blob" in verdict(b"raw bytes")
    # An unrestricted grant signs anything, bound or not (as before).
    assert verdict(_login(b"root", USER_KEY), None, PhaseGrant("runtime", True)) == "forward"


def test_binding_a_connection_verifies_once_and_never_for_forwarding() -> None:
    hostkey, sign = _ed25519()
    body = _bind_body(hostkey, SESSION, sign(SESSION))
    verdict, binding = bind(body, GRANT, "runtime", None, ())
    assert verdict.forward and binding is not None and binding.session_id == SESSION
    again, kept = bind(body, GRANT, "runtime", binding, ())
    assert not again.forward and "second session binding" in again.why and kept is binding
    forwarding, none = bind(_bind_body(hostkey, SESSION, sign(SESSION), True), GRANT,
                            "runtime", None, ())
    assert not forwarding.forward and "forwarding" in forwarding.why and none is None
    forged, none = bind(_bind_body(hostkey, SESSION, sign(b"other")), GRANT, "runtime", None,
                        ())
    assert not forged.forward and none is None
    assert not bind(body, None, "install", None, ())[0].forward
    assert "malformed" in bind(body[:-3], GRANT, "runtime", None, ())[0].why


def test_a_binding_answer_is_only_success_or_failure() -> None:
    assert answer_allowed(27, bytes([6])) and answer_allowed(27, bytes([5]))
    assert not answer_allowed(27, bytes([12]) + b"keys") and not answer_allowed(27, b"")


def test_known_hosts_files_are_the_users_then_the_machines() -> None:
    assert [str(p) for p in known_hosts_files("/home/u")] == [
        "/home/u/.ssh/known_hosts", "/home/u/.ssh/known_hosts2", "/etc/ssh/ssh_known_hosts",
        "/etc/ssh/ssh_known_hosts2"]
    assert str(known_hosts_files(None)[0]) == "/etc/ssh/ssh_known_hosts"
    assert str(known_hosts_files("relative")[0]) == "/etc/ssh/ssh_known_hosts"


def test_the_relay_config_carries_destinations_and_known_hosts() -> None:
    from pathlib import Path

    config = RelayConfig(Path("/d"), Path("/a.sock"), (GRANT,), known_hosts_files("/h"))
    assert RelayConfig.from_dict(config.as_dict()) == config
    old = {"socket_dir": "/d", "upstream": "/a.sock",
           "grants": [{"phase": "runtime", "unrestricted": False, "sign": ["git"]}]}
    assert RelayConfig.from_dict(old).grants == (PhaseGrant("runtime", False, ("git",)),)
    for bad in ("git@", "Git.Test", "git@host:22", "a b", "*.test"):
        data = config.as_dict()
        data["grants"][0]["authenticate"] = [bad]
        with pytest.raises(ValueError, match="malformed"):
            RelayConfig.from_dict(data)
