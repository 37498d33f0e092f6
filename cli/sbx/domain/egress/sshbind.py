"""Bounded SSH logins through the agent relay: the ``session-bind@openssh.com`` extension
(OpenSSH PROTOCOL.agent), its verification against the server's host key, the RFC 4252 §7
publickey payload a login signs, and the host user's known_hosts that names the server.

A login signature is worth something only to the server whose key exchange produced its
session identifier. The client binds its agent connection to that exchange (host key, session
identifier, the host key's signature over it); once the signature verifies and a known_hosts
supplied from outside the sandbox knows that key for a granted host, a publickey payload for
the same session identifier may be signed for a granted user.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

SESSION_BIND: Final = b"session-bind@openssh.com"
USERAUTH_REQUEST: Final = 50
PUBLICKEY: Final = b"publickey"
# OpenSSH ≥ 8.9 signs this method when the server offers it: the payload ends with the
# server's host key, which must be the bound one.
PUBLICKEY_HOSTBOUND: Final = b"publickey-hostbound-v00@openssh.com"
MIN_RSA_BITS: Final = 2048
_CURVES: Final = {b"ecdsa-sha2-nistp256": (b"nistp256", "sha256"),
                  b"ecdsa-sha2-nistp384": (b"nistp384", "sha384"),
                  b"ecdsa-sha2-nistp521": (b"nistp521", "sha512")}
_RSA_SIGNATURES: Final = {b"rsa-sha2-256": "sha256", b"rsa-sha2-512": "sha512"}


class WireError(ValueError):
    """Bytes that are not the message they claim to be."""


class _Reader:
    """SSH wire fields (RFC 4251 §5) read strictly from one buffer."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.offset = 0

    def string(self) -> bytes:
        if len(self.data) < self.offset + 4:
            raise WireError("a truncated length")
        (length,) = struct.unpack_from(">I", self.data, self.offset)
        start = self.offset + 4
        if len(self.data) - start < length:
            raise WireError("a string longer than its message")
        self.offset = start + length
        return self.data[start:self.offset]

    def byte(self) -> int:
        if len(self.data) <= self.offset:
            raise WireError("a truncated byte")
        self.offset += 1
        return self.data[self.offset - 1]

    def boolean(self) -> bool:
        return self.byte() != 0

    def mpint(self) -> int:
        raw = self.string()
        if raw and raw[0] & 0x80:
            raise WireError("a negative integer")
        return int.from_bytes(raw, "big")

    def end(self) -> None:
        if self.offset != len(self.data):
            raise WireError("bytes after the message's last field")


@dataclass(frozen=True)
class SessionBind:
    """One ``session-bind@openssh.com`` request's fields."""

    hostkey: bytes  # the server's public key blob
    session_id: bytes
    signature: bytes  # an SSH signature blob: string algorithm, string signature
    forwarding: bool


@dataclass(frozen=True)
class Login:
    """The fields of an RFC 4252 §7 publickey payload that decide a login."""

    session_id: bytes
    user: str
    key: bytes
    hostkey: bytes | None  # only in the hostbound method


def extension_name(body: bytes) -> bytes | None:
    """The name of an extension request (type 27), None when it is not one."""
    if not body or body[0] != 27:
        return None
    try:
        return _Reader(body[1:]).string()
    except WireError:
        return None


def parse_session_bind(body: bytes) -> SessionBind:
    """The fields of a whole session-bind request (type byte included); WireError otherwise."""
    reader = _Reader(body[1:])
    if body[:1] != b"\x1b" or reader.string() != SESSION_BIND:
        raise WireError("not a session-bind request")
    bind = SessionBind(reader.string(), reader.string(), reader.string(), reader.boolean())
    reader.end()
    if not bind.session_id or len(bind.session_id) > 64:
        raise WireError("a session identifier that no key exchange produces")
    return bind


def parse_login(data: bytes) -> Login | None:
    """A publickey userauth payload signed with a key (the data of a sign request), None when
    ``data`` is anything else, a prefix of one or one with bytes after it."""
    reader = _Reader(data)
    try:
        session_id = reader.string()
        if reader.byte() != USERAUTH_REQUEST:
            return None
        user = reader.string()
        if reader.string() != b"ssh-connection":
            return None
        method = reader.string()
        if method not in (PUBLICKEY, PUBLICKEY_HOSTBOUND) or not reader.boolean():
            return None
        reader.string()  # the signature algorithm, the agent's to honour
        key = reader.string()
        hostkey = reader.string() if method == PUBLICKEY_HOSTBOUND else None
        reader.end()
        return Login(session_id, user.decode("utf-8"), key, hostkey)
    except (WireError, UnicodeDecodeError):
        return None


def key_type(blob: bytes) -> bytes:
    return _Reader(blob).string()


def verify_binding(bind: SessionBind) -> str | None:
    """None when ``bind.signature`` is the host key's signature over the session identifier;
    otherwise why not. Only ed25519, the NIST ECDSA curves and RSA with SHA-2 are taken."""
    # The proxy process alone verifies; the CLI's paths never pay for this import.
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa, utils

    try:
        key = _Reader(bind.hostkey)
        kind = key.string()
        sig = _Reader(bind.signature)
        algorithm, raw = sig.string(), sig.string()
        sig.end()
        data = bind.session_id
        if kind == b"ssh-ed25519":
            public = key.string()
            key.end()
            if algorithm != kind or len(public) != 32:
                return "an ed25519 host key with a foreign or malformed signature"
            ed25519.Ed25519PublicKey.from_public_bytes(public).verify(raw, data)
            return None
        if kind in _CURVES:
            curve_name, digest = _CURVES[kind]
            if key.string() != curve_name or algorithm != kind:
                return "an ECDSA host key with a foreign curve or signature"
            point = key.string()
            key.end()
            parts = _Reader(raw)
            r, s = parts.mpint(), parts.mpint()
            parts.end()
            curve: ec.EllipticCurve = {"sha256": ec.SECP256R1(), "sha384": ec.SECP384R1(),
                                       "sha512": ec.SECP521R1()}[digest]
            public_ec = ec.EllipticCurvePublicKey.from_encoded_point(curve, point)
            public_ec.verify(utils.encode_dss_signature(r, s), data,
                             ec.ECDSA(getattr(hashes, digest.upper())()))
            return None
        if kind == b"ssh-rsa":
            e, n = key.mpint(), key.mpint()
            key.end()
            if algorithm not in _RSA_SIGNATURES:
                return (f"an RSA binding signed with {algorithm.decode('ascii', 'replace')!r} "
                        "(only rsa-sha2-256 and rsa-sha2-512 are taken)")
            if n.bit_length() < MIN_RSA_BITS:
                return f"an RSA host key of {n.bit_length()} bits (at least {MIN_RSA_BITS})"
            public_rsa = rsa.RSAPublicNumbers(e, n).public_key()
            public_rsa.verify(raw, data, padding.PKCS1v15(),
                              getattr(hashes, _RSA_SIGNATURES[algorithm].upper())())
            return None
        return f"a host key of type {kind.decode('ascii', 'replace')!r}, which sbx does not take"
    except InvalidSignature:
        return "a binding whose signature is not the host key's over the session identifier"
    except (WireError, ValueError):
        return "a malformed host key or signature"


# -- known_hosts -----------------------------------------------------------------------------


@dataclass(frozen=True)
class KnownHost:
    """One known_hosts line: its host patterns (or one hashed name) and its key."""

    patterns: tuple[str, ...]
    key: bytes
    revoked: bool = False

    def names(self, host: str) -> bool:
        """Whether this line is for ``host`` (lowercase): a hashed entry by its HMAC, else a
        positive pattern (``*``/``?`` wildcards, ``[host]:port`` forms) and no negated one."""
        matched = False
        for pattern in self.patterns:
            if pattern.startswith("|1|"):
                matched = matched or _hashed(pattern, host)
                continue
            negated = pattern.startswith("!")
            if _pattern(pattern.removeprefix("!"), host):
                if negated:
                    return False
                matched = True
        return matched


def parse_known_hosts(text: str) -> list[KnownHost]:
    """The plain-key lines of a known_hosts file; ``@cert-authority`` lines are left out
    (host certificates are not taken) and malformed lines are skipped as ssh skips them."""
    out: list[KnownHost] = []
    for line in text.splitlines():
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        revoked = fields[0] == "@revoked"
        if fields[0].startswith("@"):
            if not revoked:
                continue
            fields = fields[1:]
        if len(fields) < 3:
            continue
        try:
            blob = base64.b64decode(fields[2], validate=True)
            if key_type(blob) != fields[1].encode("ascii"):
                continue
        except (ValueError, WireError, UnicodeEncodeError):
            continue
        # Hashed names are base64 (case matters); every other name compares lowercase.
        patterns = tuple(p if p.startswith("|1|") else p.lower() for p in fields[0].split(","))
        out.append(KnownHost(patterns, blob, revoked))
    return out


def known_names(hostkey: bytes, entries: Sequence[KnownHost],
                candidates: Iterable[str]) -> frozenset[str] | None:
    """Which of ``candidates`` (lowercase DNS names) ``hostkey`` is known for; None when a
    ``@revoked`` line names the key (then it is known for nothing)."""
    if any(e.revoked and e.key == hostkey for e in entries):
        return None
    mine = [e for e in entries if not e.revoked and e.key == hostkey]
    return frozenset(h for h in candidates if any(e.names(h) for e in mine))


def _hashed(pattern: str, host: str) -> bool:
    parts = pattern.split("|")
    if len(parts) != 4:
        return False
    try:
        salt = base64.b64decode(parts[2], validate=True)
        digest = base64.b64decode(parts[3], validate=True)
    except ValueError:
        return False
    return hmac.compare_digest(hmac.new(salt, host.encode(), hashlib.sha1).digest(), digest)


def _pattern(pattern: str, host: str) -> bool:
    """ssh's pattern match of one known_hosts name; ``[host]:port`` stands for ``host`` (a
    login payload carries no port)."""
    bracketed = re.fullmatch(r"\[([^\]]+)\]:\d+", pattern)
    if bracketed is not None:
        pattern = bracketed.group(1)
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, host) is not None


__all__ = ["PUBLICKEY", "PUBLICKEY_HOSTBOUND", "SESSION_BIND", "KnownHost", "Login",
           "SessionBind", "WireError", "extension_name", "key_type", "known_names",
           "parse_known_hosts", "parse_login", "parse_session_bind", "verify_binding"]
