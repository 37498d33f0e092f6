"""What the SSH agent relay lets through: one agent-protocol request at a time, judged against
the phase's ``ssh-agent@1`` grant (draft-miller-ssh-agent message numbers).

Only list-identities and sign requests are ever forwarded, so no key is added, removed, locked
or exported through the relay. A bounded grant signs only ``SSHSIG`` blobs (``ssh-keygen -Y
sign``, git's ssh signing) of a namespace it names. Extensions (``session-bind@openssh.com``
included) are refused: without a verified binding sbx cannot tell which server a login
signature is for, so bounded ``authenticate`` grants are refused before the sandbox starts.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Final

from sbx.domain.kits.captypes.ssh_agent import SANDBOX_DIR, SANDBOX_SOCKET

REQUEST_IDENTITIES: Final = 11
IDENTITIES_ANSWER: Final = 12
SIGN_REQUEST: Final = 13
SIGN_RESPONSE: Final = 14
FAILURE: Final = 5
MAX_MESSAGE_BYTES: Final = 256 * 1024  # the OpenSSH agent's own bound on one message
SSHSIG_MAGIC: Final = b"SSHSIG"
SOCKET_NAME: Final = PurePosixPath(SANDBOX_SOCKET).name
FAILURE_MESSAGE: Final = struct.pack(">IB", 1, FAILURE)

_NAMES: Final = {17: "add-identity", 18: "remove-identity", 19: "remove-all-identities",
                 20: "add-smartcard-key", 21: "remove-smartcard-key", 22: "lock", 23: "unlock",
                 25: "add-identity-constrained", 26: "add-smartcard-key-constrained",
                 27: "extension"}


@dataclass(frozen=True)
class PhaseGrant:
    """What one phase may ask of the agent: everything it lists and signs, or only SSHSIG
    signatures in ``sign``'s namespaces."""

    phase: str
    unrestricted: bool
    sign: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"phase": self.phase, "unrestricted": self.unrestricted, "sign": list(self.sign)}


@dataclass(frozen=True)
class RelayConfig:
    """The relay's part of the proxy config: where it listens (a directory sbx made for it,
    mounted read-only into the sandbox), the host agent it speaks to, and the grants."""

    socket_dir: Path
    upstream: Path
    grants: tuple[PhaseGrant, ...]

    def grant(self, phase: str) -> PhaseGrant | None:
        return next((g for g in self.grants if g.phase == phase), None)

    def as_dict(self) -> dict[str, Any]:
        return {"socket_dir": str(self.socket_dir), "upstream": str(self.upstream),
                "grants": [g.as_dict() for g in self.grants]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RelayConfig:
        """Raises ValueError on anything but the shape :meth:`as_dict` writes."""
        if set(data) != {"socket_dir", "upstream", "grants"}:
            raise ValueError("ssh_agent needs exactly socket_dir, upstream and grants")
        socket_dir, upstream, grants = data["socket_dir"], data["upstream"], data["grants"]
        if not isinstance(socket_dir, str) or not isinstance(upstream, str) \
                or not socket_dir.startswith("/") or not upstream.startswith("/"):
            raise ValueError("ssh_agent socket_dir and upstream must be absolute paths")
        if not isinstance(grants, list):
            raise ValueError("ssh_agent grants must be a list")
        parsed: list[PhaseGrant] = []
        for grant in grants:
            if not isinstance(grant, Mapping) or set(grant) != {"phase", "unrestricted", "sign"}:
                raise ValueError("an ssh_agent grant needs exactly phase, unrestricted, sign")
            phase, unrestricted, sign = grant["phase"], grant["unrestricted"], grant["sign"]
            if phase not in ("install", "runtime") or not isinstance(unrestricted, bool) \
                    or not isinstance(sign, list) \
                    or not all(isinstance(s, str) and s for s in sign):
                raise ValueError("an ssh_agent grant is malformed")
            parsed.append(PhaseGrant(phase, unrestricted, tuple(sign)))
        return cls(Path(socket_dir), Path(upstream), tuple(parsed))


@dataclass(frozen=True)
class Verdict:
    forward: bool
    why: str = ""


def judge(body: bytes, grant: PhaseGrant | None, phase: str) -> Verdict:
    """Whether one request (its body: type byte and payload, without the length) is
    forwarded to the host's agent; a refusal's ``why`` names what was asked."""
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
        return Verdict(False, "a signature that is not an SSHSIG blob (a login, or raw data); "
                              "this bounded grant signs only namespaces "
                              + ", ".join(grant.sign))
    if namespace not in grant.sign:
        return Verdict(False, f"an SSHSIG signature in namespace {namespace!r}; this grant "
                              "signs only " + ", ".join(grant.sign))
    return Verdict(True)


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
    expected = IDENTITIES_ANSWER if request_kind == REQUEST_IDENTITIES else SIGN_RESPONSE
    return answer[0] in (expected, FAILURE)


def grants_of(phases: Sequence[tuple[str, bool, Sequence[str]]]) -> tuple[PhaseGrant, ...]:
    return tuple(PhaseGrant(phase, unrestricted, tuple(sign))
                 for phase, unrestricted, sign in phases)


__all__ = ["FAILURE_MESSAGE", "MAX_MESSAGE_BYTES", "SANDBOX_DIR", "SANDBOX_SOCKET",
           "SOCKET_NAME", "PhaseGrant", "RelayConfig", "Verdict", "answer_allowed", "grants_of",
           "judge", "sshsig_namespace"]
