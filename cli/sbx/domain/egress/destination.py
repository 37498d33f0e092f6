"""Where the proxy may connect: the address-level half of the egress decision (SPEC §8).

After the policy allowed a host, the proxy checks the destination itself: loopback,
link-local (cloud metadata), private, multicast, reserved and other non-public addresses are
refused unless an allow rule names that address (or name) literally; localhost names, cloud
metadata names and — when an upstream proxy resolves names — other internal-only names are
refused by name. The proxy calls these functions on the name and then on every address it
resolved; ``sbx explain`` calls the same ones (:func:`judge`) on what it can resolve, so the
two cannot disagree about a destination.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

from sbx.domain.egress.hosts import METADATA_ADDRESSES, internal_name, is_metadata_name
from sbx.domain.egress.policy import names_address
from sbx.domain.kits.compose import Network, Phase

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

LOCAL_NAMES: Final = ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback")
_NAT64: Final = ipaddress.IPv6Network("64:ff9b::/96")
_IETF_PROTOCOL: Final = ipaddress.IPv4Network("192.0.0.0/24")  # RFC 6890; not all non-global
_NAT64_LOCAL: Final = ipaddress.IPv6Network("64:ff9b:1::/48")


def blocked_address(address: Address) -> str | None:
    """Why the proxy must not connect to ``address`` by default, or None for a public address.

    IPv6 forms that carry an IPv4 address (mapped, 6to4, NAT64, Teredo) are judged by it too.
    """
    if isinstance(address, ipaddress.IPv6Address):
        embedded: list[ipaddress.IPv4Address] = []
        if address.ipv4_mapped is not None:
            embedded.append(address.ipv4_mapped)
        if address.sixtofour is not None:
            embedded.append(address.sixtofour)
        if address.teredo is not None:
            embedded.extend(address.teredo)
        if address in _NAT64 or address in _NAT64_LOCAL:
            embedded.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
        for inner in embedded:
            why = blocked_address(inner)
            if why is not None:
                return why
    checks: tuple[tuple[bool, str], ...] = (
        (address.is_unspecified, "an unspecified address"),
        (address.is_loopback, "a loopback address"),
        (address.is_link_local, "a link-local address (cloud metadata lives there)"),
        (address.is_multicast, "a multicast address"),
        (address.is_private, "a private address"),
        (address.is_reserved, "a reserved address"),
        (address in METADATA_ADDRESSES, "a cloud metadata address"),
        (address in _IETF_PROTOCOL, "an IETF protocol assignment (not a public host)"),
        (not address.is_global, "not a public address"),
    )
    for hit, why in checks:
        if hit:
            return why
    return None


@dataclass(frozen=True)
class Blocked:
    """A destination the proxy does not connect to; ``address`` None: refused by its name."""

    host: str
    port: int
    why: str
    address: str | None = None

    @property
    def metadata(self) -> bool:
        """Cloud metadata: a fix is never suggested for it."""
        return is_metadata_name(self.host) or (
            self.address is not None and ipaddress.ip_address(self.address) in METADATA_ADDRESSES)

    @property
    def named(self) -> str:
        """What an allow rule must name literally to open it (``host`` or ``address:port``)."""
        if self.address is None:
            return self.host
        shown = f"[{self.address}]" if ":" in self.address else self.address
        return f"{shown}:{self.port}"

    @property
    def reason(self) -> str:
        if self.address is None:
            return (f"{self.host} is {self.why}; the proxy does not connect there, whoever "
                    "resolves it, unless an allow rule names that exact host")
        if self.address == self.host:
            return (f"{self.host} is {self.why}; the proxy does not connect there unless an "
                    "allow rule names that address")
        return (f"{self.host} resolves to {self.address}, {self.why}; the proxy does not "
                "connect there unless an allow rule names that address")

    @property
    def suggestion(self) -> str:
        what = "exact host" if self.address is None else "literal address"
        return f"if this is intended, add the {what} `{self.named}` to network-policy allow"


def check_name(network: Network | None, phase: Phase, host: str, port: int, *,
               upstream: bool) -> tuple[list[Address] | None, Blocked | None]:
    """The name or literal ``host`` before any resolution: (the address, for a literal that may
    be reached | None for a name to resolve, the refusal | None)."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        if (host in LOCAL_NAMES or host.endswith(".localhost")) \
                and names_address(network, phase, host, port) is None:
            return None, Blocked(host, port, "a loopback name")
        # Metadata names always; other internal-only names when an upstream proxy resolves
        # them (resolved here, the addresses they resolve to are checked instead).
        why = internal_name(host) if upstream or is_metadata_name(host) else None
        if why is not None and names_address(network, phase, host, port) is None:
            return None, Blocked(host, port, why)
        return None, None
    why = blocked_address(address)
    if why is not None and names_address(network, phase, str(address), port) is None:
        return None, Blocked(host, port, why, str(address))
    return [address], None


def check_addresses(network: Network | None, phase: Phase, host: str, port: int,
                    answers: Sequence[str]) -> tuple[list[Address], Blocked | None]:
    """The addresses ``host`` resolved to, each checked: one internal answer not named by a
    rule taints the name (it may be a rebinding attempt)."""
    addresses: list[Address] = []
    for text in answers:
        address = ipaddress.ip_address(text.split("%", 1)[0])
        if address.version == 6 and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        if address not in addresses:
            addresses.append(address)
    for address in addresses:
        why = blocked_address(address)
        if why is not None and names_address(network, phase, str(address), port) is None:
            return addresses, Blocked(host, port, why, str(address))
    return addresses, None


Resolution = Literal["literal", "resolved", "upstream", "unresolved"]


@dataclass(frozen=True)
class DestinationVerdict:
    """What ``sbx explain`` says about a destination: blocked or not, and on what it rests
    (``unresolved``: the name could not be resolved here, so the answer depends on what it
    resolves to when the proxy asks)."""

    blocked: Blocked | None
    resolution: Resolution
    addresses: tuple[str, ...] = ()


def judge(network: Network | None, phase: Phase, host: str, port: int, *, upstream: bool,
          answers: Sequence[str] | None) -> DestinationVerdict:
    """The proxy's destination checks for ``host`` (``answers``: what it resolves to, None when
    unknown). With ``upstream`` names are left to the upstream proxy, as the proxy does."""
    literal, blocked = check_name(network, phase, host, port, upstream=upstream)
    if blocked is not None:
        return DestinationVerdict(blocked, "literal" if blocked.address else "resolved")
    if literal is not None:
        return DestinationVerdict(None, "literal", tuple(str(a) for a in literal))
    if upstream:
        return DestinationVerdict(None, "upstream")
    if not answers:
        return DestinationVerdict(None, "unresolved")
    addresses, blocked = check_addresses(network, phase, host, port, answers)
    return DestinationVerdict(blocked, "resolved", tuple(str(a) for a in addresses))


__all__ = ["LOCAL_NAMES", "Address", "Blocked", "DestinationVerdict", "blocked_address",
           "check_addresses", "check_name", "judge"]
