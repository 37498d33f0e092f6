"""Egress host names and host patterns: how a request's host is read and which rules cover it.

Host patterns: an exact host (case-insensitive, one trailing dot ignored, unicode names
IDNA-encoded, IP literals compared canonically), ``host:port`` (that port only; a bare host is
every port), ``*.example.com`` (exactly one label: not ``example.com``, not ``a.b.example.com``;
a ``*`` label matches one label wherever it stands), ``**.example.com`` (one or more labels),
``*`` and ``**`` (every host, names and addresses). Wildcards never match an IP literal except
the universal patterns. A pattern that cannot be read (a label like ``foo*``, a bad port)
matches nothing; the kit rules pass reports such patterns before anything runs.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Final, Literal

UNIVERSAL: Final = frozenset({"*", "**"})


# Names of cloud instance-metadata services (what 169.254.169.254 and friends answer as). They
# are refused even when an upstream proxy resolves names (and so the proxy never sees the
# address): a sandbox must not reach the host's cloud identity through a name.
METADATA_NAMES: Final = frozenset({
    "metadata", "metadata.google.internal", "metadata.goog",  # Google Cloud
    "instance-data", "instance-data.ec2.internal",  # AWS (regional forms below)
    "metadata.azure.com", "metadata.azure.internal",  # Azure
    "metadata.packet.net", "metadata.platformequinix.com",  # Equinix Metal
    "metadata.tencentyun.com",  # Tencent Cloud
    "api.metadata.cloud.ibm.com",  # IBM Cloud
})
# Addresses of cloud instance-metadata services. Most are link-local or private and refused as
# such anyway; 192.0.0.192 (Oracle Cloud Classic) is one Python's ``is_global`` lets through.
METADATA_ADDRESSES: Final = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254", "169.254.170.2", "169.254.169.123", "169.254.169.250",
    "169.254.169.251", "169.254.169.253", "169.254.0.23", "169.254.42.42",
    "100.100.100.200", "192.0.0.192", "fd00:ec2::254", "fd00:ec2::23", "fd20:ce::254",
))
# Special-use suffixes that never name a public host (RFC 6761/6762/8375, ICANN .internal).
INTERNAL_SUFFIXES: Final = ("internal", "local", "localdomain", "home.arpa")


def is_metadata_name(host: str) -> bool:
    """Whether ``host`` is a cloud metadata service's name (:data:`METADATA_NAMES`, and the
    regional ``instance-data.<region>.compute.internal`` / ``metadata.*.internal`` forms)."""
    name = normalize_host(host)
    if name is None:
        return False
    labels = name.split(".")
    return name in METADATA_NAMES or (labels[0] in ("metadata", "instance-data")
                                      and labels[-1] == "internal")


def internal_name(host: str) -> str | None:
    """Why the *name* ``host`` is internal (a cloud metadata name, a single-label name, a
    special-use suffix), or None. The proxy refuses such names unless an allow rule names
    that exact host (:func:`names_address`), whoever resolves them: with an upstream proxy the
    proxy never sees their address, and a search domain turns a single label into anything."""
    name = normalize_host(host)
    if name is None or is_ip(name):
        return None
    labels = name.split(".")
    if is_metadata_name(name):
        return "a cloud metadata service name"
    if len(labels) == 1:
        return ("a single-label name (completed by search domains or by an upstream proxy's "
                "network, never a public host)")
    for suffix in INTERNAL_SUFFIXES:
        if name.endswith("." + suffix):
            return f"a name under .{suffix}, which never names a public host"
    return None

_LABEL: Final = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")
_IPV4_PART: Final = re.compile(r"0x[0-9a-f]*|0[0-7]*|[1-9][0-9]*")
_NUMERIC: Final = re.compile(r"[0-9]+|0x[0-9a-f]*")


def normalize_host(host: str) -> str | None:
    """The canonical form of a request host, or ``None`` when it is not a host.

    Names are lower-cased, lose one trailing dot and are IDNA-encoded; labels must be letters,
    digits, ``-`` or ``_`` (1-63 characters, no leading/trailing ``-``), 253 characters at most.
    IP literals come back canonical: IPv6 without brackets and compressed (an IPv4-mapped one as
    its IPv4 address), IPv4 dotted-quad, including the numeric forms resolvers accept
    (``0x7f.1`` and ``2130706433`` are ``127.0.0.1``), so no spelling slips past a rule.
    """
    if not host or len(host) > 300:
        return None
    if host.startswith("["):
        return _ipv6(host[1:-1]) if host.endswith("]") else None
    if ":" in host:
        return _ipv6(host)
    name = host
    if not name.isascii():
        try:
            name = name.encode("idna").decode("ascii")
        except UnicodeError:
            return None
    name = name.lower()
    if name.endswith("."):
        name = name[:-1]
    labels = name.split(".")
    if _NUMERIC.fullmatch(labels[-1]):
        return _ipv4(labels)
    if not name or len(name) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        return None
    return name


def is_literal_address(host: str) -> bool:
    """Whether ``host`` is an IP address (in any spelling :func:`normalize_host` accepts)."""
    name = normalize_host(host)
    if name is None:
        return False
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _ipv6(text: str) -> str | None:
    if "%" in text:  # a zone id names a local interface, never an egress destination
        return None
    try:
        address = ipaddress.IPv6Address(text)
    except ValueError:
        return None
    if address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return address.compressed


def _ipv4(labels: Sequence[str]) -> str | None:
    # The WHATWG URL IPv4 parser (what inet_aton accepts too): 1-4 parts, each decimal, octal
    # (leading 0) or hex (0x); every part but the last is one byte, the last fills the rest.
    if not 1 <= len(labels) <= 4:
        return None
    numbers: list[int] = []
    for part in labels:
        if not _IPV4_PART.fullmatch(part):
            return None
        if part.startswith("0x"):
            numbers.append(int(part[2:] or "0", 16))
        elif len(part) > 1 and part.startswith("0"):
            numbers.append(int(part[1:], 8))
        else:
            numbers.append(int(part))
    if any(n > 255 for n in numbers[:-1]) or numbers[-1] >= 256 ** (5 - len(numbers)):
        return None
    value = numbers[-1] + sum(n << (8 * (3 - i)) for i, n in enumerate(numbers[:-1]))
    return str(ipaddress.IPv4Address(value))


@dataclass(frozen=True)
class HostPattern:
    kind: Literal["any", "exact", "wild", "never"]
    port: int | None = None
    host: str = ""  # exact
    labels: tuple[str, ...] = ()  # wild: "*" one label, leading "**" one or more, else literal


_NEVER: Final = HostPattern("never")


def _port(text: str) -> int | None:
    if not text.isascii() or not text.isdigit():
        return None
    value = int(text)
    return value if 0 < value < 65536 else None


@lru_cache(maxsize=8192)
def host_pattern(text: str) -> HostPattern:
    port: int | None = None
    name = text
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            return _NEVER
        name, rest = text[1:end], text[end + 1:]
        if rest:
            port = _port(rest[1:]) if rest.startswith(":") else None
            if port is None:
                return _NEVER
        address = _ipv6(name)
        return _NEVER if address is None else HostPattern("exact", port, address)
    if text.count(":") == 1:
        name, _, port_text = text.partition(":")
        port = _port(port_text)
        if port is None:
            return _NEVER
    if name.removesuffix(".") in UNIVERSAL:
        return HostPattern("any", port)
    if "*" not in name:
        exact = normalize_host(name)
        return _NEVER if exact is None else HostPattern("exact", port, exact)
    labels = name.lower().removesuffix(".").split(".")
    wild = [label in ("*", "**") for label in labels]
    if "**" in labels[1:] or any("*" in label and not w for label, w in zip(labels, wild,
                                                                              strict=True)):
        return _NEVER  # ``**`` only leads; partial-label globs are not host patterns
    # Normalise the literal labels as one name (IDNA, case), with a stand-in for each wildcard.
    stand_in = normalize_host(".".join("x" if w else label for label, w in zip(labels, wild,
                                                                               strict=True)))
    if stand_in is None or is_literal_address(stand_in):
        return _NEVER
    literal = stand_in.split(".")
    if len(literal) != len(labels):
        return _NEVER
    out = tuple(label if w else lit for label, w, lit in zip(labels, wild, literal, strict=True))
    return HostPattern("wild", port, labels=out)


def pattern_covers(pattern: HostPattern, host: str, port: int) -> bool:
    if pattern.port is not None and pattern.port != port:
        return False
    if pattern.kind == "any":
        return True
    if pattern.kind == "exact":
        return pattern.host == host
    if pattern.kind == "never" or is_ip(host):
        return False
    labels = host.split(".")
    want = pattern.labels
    if want[0] == "**":
        want = want[1:]
        if len(labels) <= len(want):
            return False
        labels = labels[len(labels) - len(want):]
    elif len(labels) != len(want):
        return False
    return all(w in ("*", h) for w, h in zip(want, labels, strict=True))


@lru_cache(maxsize=8192)
def is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def host_matches(pattern: str, host: str, port: int) -> bool:
    """Whether the host pattern ``pattern`` covers ``host`` on ``port`` (host normalised here)."""
    name = normalize_host(host)
    return name is not None and pattern_covers(host_pattern(pattern), name, port)


def valid_host_pattern(text: str) -> bool:
    """Whether ``text`` is a host pattern the evaluator can match (``host``, ``host:port``,
    ``*.domain``, ``**.domain``, ``*``, an IP literal, ``[v6]:port``)."""
    return host_pattern(text).kind != "never"
