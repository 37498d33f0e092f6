"""What the SSH agent relay lets through: one agent-protocol request at a time, judged against
the phase's ``ssh-agent@1`` grant (draft-miller-ssh-agent message numbers).

Only list-identities, sign requests and a verified ``session-bind@openssh.com`` are ever
forwarded, so no key is added, removed, locked or exported through the relay. A bounded grant
signs only ``SSHSIG`` blobs (``ssh-keygen -Y sign``, git's ssh signing) of a namespace it names
and logins (RFC 4252 §7 publickey payloads) on a connection bound to a verified session whose
host key the host user's known_hosts knows for a granted ``host`` / ``user@host``
(:mod:`sbx.domain.egress.sshbind`). Every other extension is refused.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Final

from sbx.domain.egress.sshbind import (
    KnownHost,
    Login,
    WireError,
    known_names,
    parse_login,
    parse_session_bind,
    verify_binding,
)
from sbx.domain.kits.captypes.ssh_agent import SANDBOX_DIR, SANDBOX_SOCKET

REQUEST_IDENTITIES: Final = 11
IDENTITIES_ANSWER: Final = 12
SIGN_REQUEST: Final = 13
SIGN_RESPONSE: Final = 14
FAILURE: Final = 5
SUCCESS: Final = 6
EXTENSION: Final = 27
MAX_MESSAGE_BYTES: Final = 256 * 1024  # the OpenSSH agent's own bound on one message
SSHSIG_MAGIC: Final = b"SSHSIG"
SOCKET_NAME: Final = PurePosixPath(SANDBOX_SOCKET).name
FAILURE_MESSAGE: Final = struct.pack(">IB", 1, FAILURE)
# What ssh itself reads by default (ssh_config UserKnownHostsFile, GlobalKnownHostsFile).
USER_KNOWN_HOSTS: Final = (".ssh/known_hosts", ".ssh/known_hosts2")
GLOBAL_KNOWN_HOSTS: Final = ("/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2")
_DESTINATION: Final = re.compile(
    r"(?:[^@\s]+@)?[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*")

_NAMES: Final = {17: "add-identity", 18: "remove-identity", 19: "remove-all-identities",
                 20: "add-smartcard-key", 21: "remove-smartcard-key", 22: "lock", 23: "unlock",
                 25: "add-identity-constrained", 26: "add-smartcard-key-constrained",
                 27: "extension"}


@dataclass(frozen=True)
class PhaseGrant:
    """What one phase may ask of the agent: everything it lists and signs, or only SSHSIG
    signatures in ``sign``'s namespaces and logins to ``authenticate``'s destinations."""

    phase: str
    unrestricted: bool
    sign: tuple[str, ...] = ()
    authenticate: tuple[str, ...] = ()  # ``host`` (any user) or ``user@host``

    def as_dict(self) -> dict[str, Any]:
        return {"phase": self.phase, "unrestricted": self.unrestricted, "sign": list(self.sign),
                "authenticate": list(self.authenticate)}

    def login_hosts(self, user: str) -> tuple[str, ...]:
        """The hosts this grant lets ``user`` log in to."""
        out: list[str] = []
        for destination in self.authenticate:
            who, at, host = destination.rpartition("@")
            if not at or who == user:
                out.append(host)
        return tuple(out)


@dataclass(frozen=True)
class Binding:
    """One relay connection's verified session: the server's host key, the key exchange's
    session identifier, and the known_hosts lines read when it was bound."""

    hostkey: bytes
    session_id: bytes
    known: tuple[KnownHost, ...]


@dataclass(frozen=True)
class RelayConfig:
    """The relay's part of the proxy config: where it listens (a directory sbx made for it,
    mounted read-only into the sandbox), the host agent it speaks to, and the grants."""

    socket_dir: Path
    upstream: Path
    grants: tuple[PhaseGrant, ...]
    known_hosts: tuple[Path, ...] = ()  # read on the host at each binding, in this order

    def grant(self, phase: str) -> PhaseGrant | None:
        return next((g for g in self.grants if g.phase == phase), None)

    def as_dict(self) -> dict[str, Any]:
        return {"socket_dir": str(self.socket_dir), "upstream": str(self.upstream),
                "grants": [g.as_dict() for g in self.grants],
                "known_hosts": [str(p) for p in self.known_hosts]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RelayConfig:
        """Raises ValueError on anything but the shape :meth:`as_dict` writes (a named
        sandbox's config from before logins were bounded has no known_hosts or
        authenticate: none, then)."""
        if not {"socket_dir", "upstream", "grants"} <= set(data) \
                <= {"socket_dir", "upstream", "grants", "known_hosts"}:
            raise ValueError("ssh_agent needs exactly socket_dir, upstream, grants, known_hosts")
        socket_dir, upstream, grants = data["socket_dir"], data["upstream"], data["grants"]
        known_hosts = data.get("known_hosts", [])
        if not isinstance(socket_dir, str) or not isinstance(upstream, str) \
                or not socket_dir.startswith("/") or not upstream.startswith("/"):
            raise ValueError("ssh_agent socket_dir and upstream must be absolute paths")
        if not isinstance(known_hosts, list) \
                or not all(isinstance(p, str) and p.startswith("/") for p in known_hosts):
            raise ValueError("ssh_agent known_hosts must be a list of absolute paths")
        if not isinstance(grants, list):
            raise ValueError("ssh_agent grants must be a list")
        return cls(Path(socket_dir), Path(upstream), tuple(_grant(g) for g in grants),
                   tuple(Path(p) for p in known_hosts))


def _grant(grant: Any) -> PhaseGrant:
    keys = {"phase", "unrestricted", "sign"}
    if not isinstance(grant, Mapping) or not keys <= set(grant) <= keys | {"authenticate"}:
        raise ValueError("an ssh_agent grant needs exactly phase, unrestricted, sign, "
                         "authenticate")
    phase, unrestricted, sign = grant["phase"], grant["unrestricted"], grant["sign"]
    authenticate = grant.get("authenticate", [])
    if phase not in ("install", "runtime") or not isinstance(unrestricted, bool) \
            or not isinstance(sign, list) or not all(isinstance(s, str) and s for s in sign) \
            or not isinstance(authenticate, list) \
            or not all(isinstance(d, str) and _DESTINATION.fullmatch(d) for d in authenticate):
        raise ValueError("an ssh_agent grant is malformed")
    return PhaseGrant(phase, unrestricted, tuple(sign), tuple(authenticate))


@dataclass(frozen=True)
class Verdict:
    forward: bool
    why: str = ""


def judge(body: bytes, grant: PhaseGrant | None, phase: str,
          binding: Binding | None = None) -> Verdict:
    """Whether one request (its body: type byte and payload, without the length) is
    forwarded to the host's agent, on a connection bound to ``binding`` (None: unbound); a
    refusal's ``why`` names what was asked. Session bindings go to :func:`bind`."""
    if not body:
        return Verdict(False, "an empty message")
    kind = body[0]
    if grant is None:
        return Verdict(False, f"no ssh-agent@1 grant for the {phase} phase")
    if kind == REQUEST_IDENTITIES:
        return Verdict(len(body) == 1, "" if len(body) == 1 else "a malformed identity request")
    if kind != SIGN_REQUEST:
        name = _NAMES.get(kind, f"message type {kind}")
        return Verdict(False, f"{name} is never relayed (only list and sign requests are)")
    fields = _strings(body[1:], 2)
    if fields is None or len(fields[2]) != 4:
        return Verdict(False, "a malformed sign request")
    if grant.unrestricted:
        return Verdict(True)
    namespace = sshsig_namespace(fields[1])
    if namespace is None:
        login = parse_login(fields[1])
        if login is not None:
            return _judge_login(login, fields[0], grant, binding)
        return Verdict(False, "a signature that is neither an SSHSIG blob nor a publickey "
                              "login (raw data); this bounded grant signs only "
                              + _bounds(grant))
    if namespace not in grant.sign:
        return Verdict(False, f"an SSHSIG signature in namespace {namespace!r}; this grant "
                              "signs only " + ", ".join(grant.sign))
    return Verdict(True)


def _judge_login(login: Login, key: bytes, grant: PhaseGrant,
                 binding: Binding | None) -> Verdict:
    what = f"a login as {login.user!r}"
    if not grant.authenticate:
        return Verdict(False, f"{what}; this bounded grant makes no logins, it signs only "
                              + _bounds(grant))
    if login.key != key:
        return Verdict(False, f"{what} naming another key than the one asked to sign")
    if binding is None:
        return Verdict(False, f"{what} on an agent connection bound to no verified session "
                              "(session-bind@openssh.com)")
    if login.session_id != binding.session_id:
        return Verdict(False, f"{what} for another session than the one this connection is "
                              "bound to")
    if login.hostkey is not None and login.hostkey != binding.hostkey:
        return Verdict(False, f"{what} naming another host key than the bound one")
    hosts = grant.login_hosts(login.user)
    if not hosts:
        return Verdict(False, f"{what}; this grant logs in only as "
                              + ", ".join(grant.authenticate))
    known = known_names(binding.hostkey, binding.known, hosts)
    if known is None:
        return Verdict(False, f"{what} to a server whose host key known_hosts marks @revoked")
    if not known:
        return Verdict(False, f"{what} to a server whose host key the host's known_hosts "
                              "knows for none of " + ", ".join(hosts))
    return Verdict(True)


def bind(body: bytes, grant: PhaseGrant | None, phase: str, current: Binding | None,
         known: Sequence[KnownHost]) -> tuple[Verdict, Binding | None]:
    """A ``session-bind@openssh.com`` request: forwarded, and the connection's binding, when
    its signature verifies; ``known`` is the host's known_hosts as it is now."""
    if grant is None:
        return Verdict(False, f"no ssh-agent@1 grant for the {phase} phase"), current
    if current is not None:
        # As OpenSSH's agent: a connection bound for a login is not bound again.
        return Verdict(False, "a second session binding on one agent connection"), current
    try:
        request = parse_session_bind(body)
    except WireError as error:
        return Verdict(False, f"a malformed session binding ({error})"), None
    if request.forwarding:
        return Verdict(False, "a session binding for agent forwarding (a relayed agent is "
                              "not forwarded further)"), None
    why = verify_binding(request)
    if why is not None:
        return Verdict(False, f"a session binding: {why}"), None
    return Verdict(True), Binding(request.hostkey, request.session_id, tuple(known))


def _bounds(grant: PhaseGrant) -> str:
    parts = [f"namespaces {', '.join(grant.sign)}"] if grant.sign else []
    if grant.authenticate:
        parts.append(f"logins to {', '.join(grant.authenticate)}")
    return " and ".join(parts) or "nothing"


def sshsig_namespace(data: bytes) -> str | None:
    """The namespace of an SSHSIG to-be-signed blob (magic, namespace, reserved, hash
    algorithm, hash); None when ``data`` is not exactly one."""
    if not data.startswith(SSHSIG_MAGIC):
        return None
    fields = _strings(data[len(SSHSIG_MAGIC):], 4)
    if fields is None or fields[-1]:
        return None
    try:
        namespace = fields[0].decode("utf-8")
    except UnicodeDecodeError:
        return None
    return namespace or None


def _strings(data: bytes, count: int) -> list[bytes] | None:
    """``count`` SSH strings (uint32 length + bytes) and then the rest; None when short."""
    out: list[bytes] = []
    offset = 0
    for _ in range(count):
        if len(data) < offset + 4:
            return None
        (length,) = struct.unpack_from(">I", data, offset)
        offset += 4
        if len(data) < offset + length:
            return None
        out.append(data[offset:offset + length])
        offset += length
    out.append(data[offset:])
    return out


def answer_allowed(request_kind: int, answer: bytes) -> bool:
    """Whether the agent's answer is one a forwarded request may get back."""
    if not answer:
        return False
    if request_kind == EXTENSION:  # a session binding's answer carries nothing
        return answer in (bytes([SUCCESS]), bytes([FAILURE]))
    expected = IDENTITIES_ANSWER if request_kind == REQUEST_IDENTITIES else SIGN_RESPONSE
    return answer[0] in (expected, FAILURE)


def grants_of(phases: Sequence[tuple[str, bool, Sequence[str], Sequence[str]]],
              ) -> tuple[PhaseGrant, ...]:
    return tuple(PhaseGrant(phase, unrestricted, tuple(sign), tuple(authenticate))
                 for phase, unrestricted, sign, authenticate in phases)


def known_hosts_files(home: str | None) -> tuple[Path, ...]:
    """The known_hosts the relay reads, the user's (under ``home``) before the machine's: the
    files ssh reads by default, all on the host, none the sandbox can write."""
    user = tuple(Path(home) / name for name in USER_KNOWN_HOSTS) \
        if home and home.startswith("/") else ()
    return (*user, *(Path(p) for p in GLOBAL_KNOWN_HOSTS))


__all__ = ["FAILURE_MESSAGE", "MAX_MESSAGE_BYTES", "SANDBOX_DIR", "SANDBOX_SOCKET",
           "SOCKET_NAME", "Binding", "PhaseGrant", "RelayConfig", "Verdict", "answer_allowed",
           "bind", "grants_of", "judge", "known_hosts_files", "sshsig_namespace"]
