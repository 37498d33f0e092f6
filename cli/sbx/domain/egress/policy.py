"""The one egress decision (KIT-SPEC-V3 §3; SPEC §8).

:func:`decide` is what the egress proxy enforces and what ``sbx explain`` explains: one function,
so the two can never disagree. It is pure (no I/O, no environment) and cheap enough to run per
request; host and path patterns are compiled once and cached.

Semantics, all decided here and nowhere else:

- Deny by default. No network policy in the composition: everything is denied (the sandbox has
  no network at all). A phase without allow rules grants nothing in that phase, and a rule of
  one phase is never consulted for the other.
- Deny wins, across kits: a deny rule that applies refuses the request whatever any allow says.
  A bare (unbounded) deny refuses every connection to its hosts; a bounded deny (``methods`` /
  ``paths``) refuses the HTTP requests it matches.
- Host patterns: an exact host (case-insensitive, one trailing dot ignored, unicode names
  IDNA-encoded, IP literals compared canonically), ``host:port`` (that port only; a bare host is
  every port), ``*.example.com`` (exactly one label: not ``example.com``, not ``a.b.example.com``;
  a ``*`` label matches one label wherever it stands), ``**.example.com`` (one or more labels),
  ``*`` and ``**`` (every host, names and addresses). Wildcards never match an IP literal except
  the universal patterns. A pattern that cannot be read (a label like ``foo*``, a bad port)
  matches nothing; the kit rules pass reports such patterns before anything runs.
- ``network-policy@2`` bounded entries apply per request. A host granted only by bounded allows
  admits only the HTTP requests one of them matches (method, then path); anything else is
  refused, and so is any connection sbx cannot see into (a CONNECT tunnel it does not
  intercept, non-HTTP): ``needs_inspection``. A host some unbounded allow covers is granted
  outright whatever bounded allows say about it (compose already drops the bounded allows it
  supersedes; a wildcard unbounded allow covering a bounded host wins here too). A bounded deny
  covering a host means even an unbounded host must be inspected, because the deny can only be
  applied to requests sbx sees.
- Methods: the request's method is upper-cased (``delete`` is ``DELETE``); omitted methods and
  ``ANY`` mean every method. A connection sbx cannot see into has no method (``None``), which
  is not the ``CONNECT`` method: a bounded entry naming ``CONNECT`` never admits a tunnel.
- Paths: matched after :func:`normalize_path` (query and fragment dropped, unreserved escapes
  decoded, ``//`` collapsed, ``.``/``..`` resolved; an encoded ``/`` or ``\\``, a ``..`` above
  the root, a control character or a malformed escape make the target invalid and refused, never
  matched leniently). **Path parameters** (``;`` in a segment, raw or as ``%3B``) are read the
  way servers that strip them (Tomcat, Spring, Jetty) read them *and* the way servers that keep
  them read them: a segment whose part before the first ``;`` is ``.`` or ``..`` (``..;x``,
  ``%2e%2e;``, ``.%3bx``) *is* ``.``/``..`` and is resolved (so the forwarded path no longer
  holds it), and every other segment is matched both with and without its parameters — a deny
  applies when either reading matches, an allow only when both do. Path patterns: ``*`` is
  exactly one segment (inside a segment it matches any run of characters within that segment),
  ``**`` any number of segments including none,
  anchored at both ends; a trailing ``/`` is ignored for matching. **Paths are case-sensitive**
  (``/REPOS/x`` is not ``/repos/x``), as HTTP origins treat them. An invalid path only matters
  when a rule with ``paths`` covers the host: to a host granted outright it is forwarded
  untouched. The proxy should forward the normalised path (``Decision.path``), so what was
  checked is what the origin receives.
- A request with a method but no path (an ``explain`` question without a URL path) is judged
  conservatively: an allow bounded by paths does not admit it, a deny bounded by paths refuses
  it.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Final, Literal

from sbx.domain.kits.compose import METHOD_ANY, Network, NetworkPhase, Phase, Rule

Effect = Literal["allow", "deny", "bounded-miss"]
Code = Literal["allowed", "default_deny", "deny_rule", "method_not_allowed", "path_not_allowed",
               "needs_inspection", "invalid_target"]
Handling = Literal["denied", "unbounded", "bounded"]

CODES: Final[tuple[Code, ...]] = ("allowed", "default_deny", "deny_rule", "method_not_allowed",
                                  "path_not_allowed", "needs_inspection", "invalid_target")
DEFAULT_PORTS: Final = {"https": 443, "http": 80}
UNIVERSAL: Final = frozenset({"*", "**"})


# --- the request and the decision ----------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    """One connection or HTTP request leaving the sandbox.

    ``method`` is ``None`` for a connection sbx cannot see into (a CONNECT tunnel it does not
    intercept, any non-HTTP traffic); ``path`` is the request-target's path as sent (origin
    form, query allowed), ignored when ``method`` is ``None``.
    """

    phase: Phase
    host: str
    port: int
    method: str | None = None
    path: str | None = None
    scheme: str = "https"

    def as_dict(self) -> dict[str, Any]:
        return {"phase": self.phase, "host": self.host, "port": self.port,
                "method": self.method, "path": self.path, "scheme": self.scheme}


@dataclass(frozen=True)
class Match:
    """A rule whose host pattern covers the request, and what it did.

    ``allow``/``deny``: the rule applies to this request. ``bounded-miss``: a bounded rule covers
    the host but not this request (another method or path, or a connection it cannot see into).
    """

    rule: Rule
    effect: Effect

    def as_dict(self) -> dict[str, Any]:
        return {"effect": self.effect, "rule": rule_dict(self.rule)}


@dataclass(frozen=True)
class Decision:
    """The verdict on one :class:`Request`, with everything ``explain`` shows.

    ``matched``: every rule whose host pattern covers the request, allows before denies, each in
    composition order. ``deciding``: the rule the verdict rests on (``None`` for default deny and
    invalid targets; the bounding rule for method/path misses and inspection refusals).
    ``suggestion``: when denied, the smallest change that would allow it (or, for a deny rule,
    which rule refuses it). ``host``/``path``: the normalised target that was judged.
    ``superseded``: bounded allows for this host that compose dropped because another rule grants
    the host outright.
    """

    allowed: bool
    request: Request
    matched: tuple[Match, ...]
    deciding: Rule | None
    reason: str
    code: Code
    suggestion: str | None
    host: str | None = None
    path: str | None = None
    superseded: tuple[Rule, ...] = field(default=())

    def as_dict(self) -> dict[str, Any]:
        return {
            "allowed": self.allowed,
            "code": self.code,
            "reason": self.reason,
            "suggestion": self.suggestion,
            "request": self.request.as_dict(),
            "host": self.host,
            "path": self.path,
            "deciding": None if self.deciding is None else rule_dict(self.deciding),
            "matched": [m.as_dict() for m in self.matched],
            "superseded": [rule_dict(r) for r in self.superseded],
        }


# --- helpers the proxy and explain share ---------------------------------------------------------


def rules_for(network: Network | None, phase: Phase) -> tuple[Rule, ...]:
    """A phase's effective rules: allows then denies, in composition order."""
    if network is None:
        return ()
    rules = network.phase(phase)
    return (*rules.allow, *rules.deny)


def rule_where(rule: Rule) -> str:
    """``<kit> capabilities[i] runtime.allow``: where a kit author edits this rule (``user
    policy, rule ID (runtime.allow)`` for a rule of ``sbx policy``)."""
    if rule.user_rule:
        return f"user policy, rule {rule.user_rule} ({rule.phase}.{rule.action})"
    declared = rule.declared_at or f"capabilities[{rule.index}]"
    return f"{rule.kit} {declared} {rule.phase}.{rule.action}"


def describe_rule(rule: Rule) -> str:
    """``<kit> capabilities[i] runtime.allow: api.github.com GET,POST /repos/**``."""
    text = f"{rule_where(rule)}: {rule.host}"
    if rule.bounded:
        text += " " + (",".join(rule.methods) or METHOD_ANY)
        if rule.paths:
            text += " " + ",".join(rule.paths)
    return text


def rule_dict(rule: Rule) -> dict[str, Any]:
    return {"host": rule.host, "methods": list(rule.methods), "paths": list(rule.paths),
            "action": rule.action, "phase": rule.phase, "kit": rule.kit, "index": rule.index,
            "declared_at": rule.declared_at, "bounded": rule.bounded,
            "source": "user" if rule.user_rule else "kit",
            "user_rule": rule.user_rule or None, "description": describe_rule(rule)}


def valid_host_pattern(text: str) -> bool:
    """Whether ``text`` is a host pattern the evaluator can match (``host``, ``host:port``,
    ``*.domain``, ``**.domain``, ``*``, an IP literal, ``[v6]:port``)."""
    return _host_pattern(text).kind != "never"


def valid_path_pattern(text: str) -> bool:
    """Whether ``text`` is a path glob the evaluator can match (starts with ``/``)."""
    return _path_pattern(text) is not None


def names_address(network: Network | None, phase: Phase, host: str, port: int) -> Rule | None:
    """The first allow rule of ``phase`` that names ``host`` literally (no wildcard), if any.

    The proxy refuses loopback, link-local, private and multicast destinations unless a rule
    names that address (or name) explicitly (SPEC §8); ``*`` never counts as naming it.
    """
    name = normalize_host(host)
    if network is None or name is None:
        return None
    for rule in network.phase(phase).allow:
        pattern = _host_pattern(rule.host)
        if pattern.kind == "exact" and _pattern_covers(pattern, name, port):
            return rule
    return None


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
    if name is None or _is_ip(name):
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


def address_denied(network: Network | None, phase: Phase, address: str,
                   port: int) -> Rule | None:
    """The first bare deny rule of ``phase`` naming the IP ``address`` literally, if any.

    :func:`decide` judges the name the sandbox asked for; the proxy calls this with the address
    the name resolved to, so a deny written as an address is not defeated by a name for it.
    """
    name = normalize_host(address)
    if network is None or name is None or not _is_ip(name):
        return None
    for rule in network.phase(phase).deny:
        pattern = _host_pattern(rule.host)
        if not rule.bounded and pattern.kind == "exact" and _pattern_covers(pattern, name, port):
            return rule
    return None


# --- hosts ---------------------------------------------------------------------------------------


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
class _HostPattern:
    kind: Literal["any", "exact", "wild", "never"]
    port: int | None = None
    host: str = ""  # exact
    labels: tuple[str, ...] = ()  # wild: "*" one label, leading "**" one or more, else literal


_NEVER: Final = _HostPattern("never")


def _port(text: str) -> int | None:
    if not text.isascii() or not text.isdigit():
        return None
    value = int(text)
    return value if 0 < value < 65536 else None


@lru_cache(maxsize=8192)
def _host_pattern(text: str) -> _HostPattern:
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
        return _NEVER if address is None else _HostPattern("exact", port, address)
    if text.count(":") == 1:
        name, _, port_text = text.partition(":")
        port = _port(port_text)
        if port is None:
            return _NEVER
    if name.removesuffix(".") in UNIVERSAL:
        return _HostPattern("any", port)
    if "*" not in name:
        exact = normalize_host(name)
        return _NEVER if exact is None else _HostPattern("exact", port, exact)
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
    return _HostPattern("wild", port, labels=out)


def _pattern_covers(pattern: _HostPattern, host: str, port: int) -> bool:
    if pattern.port is not None and pattern.port != port:
        return False
    if pattern.kind == "any":
        return True
    if pattern.kind == "exact":
        return pattern.host == host
    if pattern.kind == "never" or _is_ip(host):
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
def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def host_matches(pattern: str, host: str, port: int) -> bool:
    """Whether the host pattern ``pattern`` covers ``host`` on ``port`` (host normalised here)."""
    name = normalize_host(host)
    return name is not None and _pattern_covers(_host_pattern(pattern), name, port)


# --- paths ---------------------------------------------------------------------------------------


_UNRESERVED: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
# RFC 3986 pchar minus the escapes: kept as they are; anything else is percent-encoded.
_PATH_SAFE: Final = _UNRESERVED | frozenset("!$&'()*+,;=:@/")
_HEX: Final = frozenset("0123456789abcdefABCDEF")


def normalize_path(raw: str) -> str | None:
    """The canonical form of a request path, or ``None`` when it cannot be judged safely.

    Drops the query and fragment; decodes escapes of unreserved characters (``%2e`` is ``.``,
    ``%41`` is ``A``) and upper-cases the others; percent-encodes characters a path may not hold
    raw (spaces, non-ASCII as UTF-8); collapses ``//``; resolves ``.`` and ``..`` (a trailing
    ``/`` is kept). ``None`` for a path that does not start with ``/``, an encoded ``/`` or
    ``\\`` (it would split or join segments differently at the origin), a raw ``\\``, a ``..``
    above the root, a control character raw or encoded, or a malformed escape.
    """
    return _normalize_path(raw)[0]


def _normalize_path(raw: str, *, pattern: bool = False) -> tuple[str | None, str]:
    """``(path, "")`` or ``(None, what is wrong)``; a pattern keeps ``?``/``#`` as characters."""
    if not pattern:
        for mark in "?#":
            raw = raw.split(mark, 1)[0]
    if not raw.startswith("/"):
        return None, "it does not start with `/`"
    out: list[str] = []
    i = 0
    while i < len(raw):
        char = raw[i]
        if char == "%":
            digits = raw[i + 1:i + 3]
            if len(digits) != 2 or not set(digits) <= _HEX:
                return None, "it holds a malformed percent escape"
            byte = int(digits, 16)
            if byte < 0x20 or byte == 0x7F:
                return None, "it holds an encoded control character"
            if byte in (0x2F, 0x5C):
                return None, "it holds an encoded `/` or `\\`, which origins split differently"
            decoded = chr(byte)
            out.append(decoded if decoded in _UNRESERVED else "%" + digits.upper())
            i += 3
            continue
        code = ord(char)
        if code < 0x20 or code == 0x7F:
            return None, "it holds a control character"
        if char == "\\":
            return None, "it holds a `\\`, which some origins read as `/`"
        if char in _PATH_SAFE:
            out.append(char)
        else:
            try:
                encoded = char.encode("utf-8")
            except UnicodeEncodeError:
                return None, "it holds a character that is not valid unicode"
            out.append("".join(f"%{b:02X}" for b in encoded))
        i += 1
    text = "".join(out)
    stack: list[str] = []
    parts = [_dot_segment(segment) for segment in text.split("/")[1:]]
    for segment in parts:
        if segment in ("", "."):
            continue
        if segment == "..":
            if not stack:
                return None, "its `..` climbs above the root"
            stack.pop()
        else:
            stack.append(segment)
    trailing = bool(stack) and parts[-1] in ("", ".", "..")
    return "/" + "/".join(stack) + ("/" if trailing else ""), ""


_PARAMETERS: Final = re.compile(r";|%3B")  # where a segment's path parameters start


def _bare(segment: str) -> str:
    """A segment without its path parameters (``a;jsessionid=1`` → ``a``; ``;x`` → ``""``)."""
    return _PARAMETERS.split(segment, maxsplit=1)[0]


def without_parameters(segment: str) -> str:
    """A normalised path segment as parameter-stripping servers read it (``token;x`` and
    ``token%3Bx`` are ``token``)."""
    return _bare(segment)


def _dot_segment(segment: str) -> str:
    """``.``/``..`` carrying parameters (``..;x``, ``.%3Bx``) or an empty segment carrying
    them (``;x``) are what parameter-stripping servers make of them: ``..``, ``.``, ``""``."""
    bare = _bare(segment)
    return bare if bare in ("", ".", "..") else segment


def _segments(path: str) -> tuple[str, ...]:
    return tuple(s for s in path.split("/") if s)


@lru_cache(maxsize=8192)
def _path_pattern(text: str) -> tuple[str, ...] | None:
    if not text.startswith("/"):
        return None
    canonical, _ = _normalize_path(text, pattern=True)
    return None if canonical is None else _segments(canonical)


@lru_cache(maxsize=4096)
def _segment_regex(glob: str) -> re.Pattern[str]:
    return re.compile("[^/]*".join(re.escape(piece) for piece in glob.split("*")))


def _segment_matches(glob: str, segment: str) -> bool:
    if glob == "*":
        return True
    if "*" in glob:
        return _segment_regex(glob).fullmatch(segment) is not None
    return glob == segment


def _glob_segments(pattern: tuple[str, ...], segments: tuple[str, ...]) -> bool:
    # reach[j]: the pattern so far can consume exactly the first j segments.
    reach = [True] + [False] * len(segments)
    for glob in pattern:
        if glob == "**":
            seen = False
            for j, ok in enumerate(reach):
                seen = seen or ok
                reach[j] = seen
        else:
            reach = [False] + [reach[j] and _segment_matches(glob, segments[j])
                               for j in range(len(segments))]
    return reach[-1]


def path_matches(pattern: str, path: str, *, deny: bool = False) -> bool:
    """Whether the path glob ``pattern`` covers the already-normalised ``path``.

    Segments with path parameters are read both as sent and without their parameters (the
    two ways origins read them): for an allow (``deny=False``) both readings must match, for
    a deny either one does, so neither kind of origin can be reached around a rule.
    """
    compiled = _path_pattern(pattern)
    if compiled is None:
        return False
    segments = _segments(path)
    raw = _glob_segments(compiled, segments)
    if not any(_PARAMETERS.search(s) for s in (*segments, *compiled)):
        return raw
    stripped = _glob_segments(tuple(_bare(g) for g in compiled),
                              tuple(_bare(s) for s in segments))
    return (raw or stripped) if deny else (raw and stripped)


# --- the decision --------------------------------------------------------------------------------


_TOKEN: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


@dataclass(frozen=True)
class _Outcome:
    code: Code
    deciding: Rule | None
    matched: tuple[Match, ...]
    problem: str = ""  # invalid_target: what is wrong
    path_known: bool = False


def _method_applies(rule: Rule, method: str | None) -> bool:
    if method is None:
        return False
    methods = {m.upper() for m in rule.methods}
    return not methods or METHOD_ANY in methods or method in methods


def _applies(rule: Rule, method: str | None, path: str | None, *, known: bool,
             conservative: bool) -> bool:
    """Whether a host-matching rule applies to the request (a bounded one needs HTTP)."""
    if not rule.bounded:
        return True
    if not _method_applies(rule, method):
        return False
    if not rule.paths:
        return True
    if path is None:
        # Unknown path: a deny must assume it applies; an allow may not assume it does.
        return conservative and not known
    return any(path_matches(p, path, deny=rule.action == "deny") for p in rule.paths)


def _evaluate(rules: NetworkPhase, host: str, port: int, method: str | None,
              raw_path: str | None) -> tuple[_Outcome, str | None]:
    allows = [r for r in rules.allow if _pattern_covers(_host_pattern(r.host), host, port)]
    denies = [r for r in rules.deny if _pattern_covers(_host_pattern(r.host), host, port)]
    path: str | None = None
    problem = ""
    known = method is not None and raw_path is not None
    if known and raw_path is not None:
        path, problem = _normalize_path(raw_path)
    # An unreadable path leaves path-bounded rules unjudged: they are left out of the deny pass
    # and refuse the request below, as an invalid target.
    deny_hits = [r for r in denies if _applies(r, method, path, known=known, conservative=True)]
    allow_hits = [r for r in allows if _applies(r, method, path, known=known, conservative=False)]
    matched = (*(Match(r, "allow" if r in allow_hits else "bounded-miss") for r in allows),
               *(Match(r, "deny" if r in deny_hits else "bounded-miss") for r in denies))

    def outcome(code: Code, deciding: Rule | None = None) -> tuple[_Outcome, str | None]:
        return _Outcome(code, deciding, matched, problem, known and path is not None), path

    if deny_hits:
        return outcome("deny_rule", deny_hits[0])
    outright = [r for r in allows if not r.bounded]
    if known and path is None and any(
            r.paths and _method_applies(r, method)
            for r in (*denies, *(() if outright else allows))):
        return outcome("invalid_target")
    if not allows:
        return outcome("default_deny")
    bounded_denies = [r for r in denies if r.bounded]
    if method is None:
        if bounded_denies:
            return outcome("needs_inspection", bounded_denies[0])
        if outright:
            return outcome("allowed", outright[0])
        return outcome("needs_inspection", allows[0])
    if outright:
        return outcome("allowed", outright[0])
    if allow_hits:
        return outcome("allowed", allow_hits[0])
    method_ok = [r for r in allows if _method_applies(r, method)]
    path_ok = [r for r in allows if not r.paths or (path is not None and any(
        path_matches(p, path) for p in r.paths))]
    if method_ok and not path_ok:
        return outcome("path_not_allowed", method_ok[0])
    return outcome("method_not_allowed", (path_ok or allows)[0])


def classify(network: Network | None, phase: Phase, host: str, port: int) -> Handling:
    """What a CONNECT to ``host:port`` needs: refuse it, tunnel it, or intercept TLS.

    ``bounded`` means some bounded rule (an allow that bounds the host, or a deny that could
    refuse some of its requests) must see each request, so the proxy terminates TLS and calls
    :func:`decide` per request. Agrees with :func:`decide` for a request without a method:
    ``unbounded`` exactly when that is allowed, ``bounded`` exactly when it needs inspection.
    """
    name = normalize_host(host)
    if network is None or name is None or not 0 < port < 65536:
        return "denied"
    result, _ = _evaluate(network.phase(phase), name, port, None, None)
    if result.code == "allowed":
        return "unbounded"
    return "bounded" if result.code == "needs_inspection" else "denied"


def decide(network: Network | None, request: Request) -> Decision:
    """Judge one request against the composed network policy (see the module docstring)."""
    target = _target(normalize_host(request.host) or request.host, request.port, request.scheme)
    if network is None:
        return Decision(
            False, request, (), None,
            "no network-policy capability is composed, so the sandbox has no network "
            "(everything is denied)",
            "default_deny",
            f"declare a network-policy capability with `{target}` in {request.phase}.allow",
        )
    host = normalize_host(request.host)
    if host is None:
        return _invalid(request, f"the host {request.host!r} is not a valid host name or address")
    if not 0 < request.port < 65536:
        return _invalid(request, f"the port {request.port} is not between 1 and 65535", host)
    method: str | None = None
    if request.method is not None:
        if not _TOKEN.fullmatch(request.method):
            return _invalid(request, f"the method {request.method!r} is not an HTTP method", host)
        method = request.method.upper()
    rules = network.phase(request.phase)
    result, path = _evaluate(rules, host, request.port, method, request.path)
    superseded = tuple(r for r in rules.superseded
                       if _pattern_covers(_host_pattern(r.host), host, request.port))
    target = _target(host, request.port, request.scheme)
    what = _what(method, path, request.path, result.path_known)
    reason, suggestion = _explain(network, request, result, host, target, method, what, path)
    return Decision(result.code == "allowed", request, result.matched, result.deciding, reason,
                    result.code, suggestion, host, path, superseded)


def _invalid(request: Request, problem: str, host: str | None = None) -> Decision:
    return Decision(False, request, (), None, f"{problem}; an unreadable target is refused",
                    "invalid_target", "send a well-formed host, port and method", host)


def _target(host: str, port: int, scheme: str) -> str:
    """The smallest host pattern naming this target: the host alone on its scheme's port."""
    shown = f"[{host}]" if ":" in host else host
    if DEFAULT_PORTS.get(scheme.lower()) == port:
        return shown
    return f"{shown}:{port}"


def _what(method: str | None, path: str | None, raw: str | None, known: bool) -> str:
    if method is None:
        return "a connection sbx cannot inspect"
    if known and path is not None:
        return f"{method} {path}"
    if raw is not None:
        return f"{method} {raw!r}"
    return f"{method} (no path given)"


def _grants(rules: Sequence[Rule]) -> str:
    parts: list[str] = []
    for rule in rules:
        methods = ", ".join(rule.methods) if rule.methods and METHOD_ANY not in rule.methods \
            else "any method"
        paths = ", ".join(rule.paths) if rule.paths else "any path"
        parts.append(f"{methods} on {paths}")
    return "; ".join(dict.fromkeys(parts))


def _explain(network: Network, request: Request, result: _Outcome, host: str, target: str,
             method: str | None, what: str, path: str | None) -> tuple[str, str | None]:
    phase = request.phase
    rule = result.deciding
    applied = [m.rule for m in result.matched if m.effect == "allow"]
    bounded = [m.rule for m in result.matched if m.rule.action == "allow" and m.rule.bounded]
    code = result.code
    if code == "allowed" and rule is not None:
        reason = f"allowed by rule {describe_rule(rule)}"
        if rule.bounded:
            reason += f": {what} matches it"
        spared = [m.rule for m in result.matched if m.rule.action == "deny"]
        if spared:
            reason += (f"; {len(spared)} bounded deny rule{'s' if len(spared) > 1 else ''} "
                       f"cover{'' if len(spared) > 1 else 's'} {host} but not {what}")
        return reason, None
    if code == "deny_rule" and rule is not None:
        denies = [m.rule for m in result.matched if m.effect == "deny"]
        over = f"; it overrides {describe_rule(applied[0])}" if applied else ""
        maybe = ("; no path was given, so it may apply"
                 if rule.paths and method is not None and not result.path_known else "")
        where = "; ".join(rule_where(r) for r in denies)
        kits = ", ".join(dict.fromkeys(r.kit for r in denies))
        one = len(denies) == 1
        return (f"denied by rule {describe_rule(rule)} (deny wins{over}){maybe}",
                f"{'a deny rule at' if one else 'deny rules at'} {where} "
                f"{'refuses' if one else 'refuse'} it; deny wins, so remove "
                f"{'that rule' if one else 'those rules'} or do not compose {kits}")
    if code == "invalid_target":
        return (f"the path {request.path!r} cannot be judged safely: {result.problem}; a rule "
                f"bounded by paths covers {host}, so the request is refused",
                "send the request with a plain path (no encoded `/`, no `..` above the root, "
                "no control characters)")
    if code == "default_deny":
        reason = f"no allow rule in the {phase} phase matches {target} (deny by default)"
        other: Phase = "runtime" if phase == "install" else "install"
        if any(_pattern_covers(_host_pattern(r.host), host, request.port)
               for r in network.phase(other).allow):
            reason += (f"; the {other} phase allows it, but {other} rules do not apply in the "
                       f"{phase} phase")
        return reason, f"add `{target}` to network-policy {phase}.allow"
    if code == "needs_inspection" and rule is not None:
        if rule.action == "deny":
            return (f"a bounded deny rule {describe_rule(rule)} covers {host}, and {what} "
                    "cannot be checked against it, so it is refused (fail closed)",
                    f"send it as HTTP(S) through the proxy so sbx can check method and path; no "
                    f"allow rule tunnels {host} while the deny rule at {rule_where(rule)} stands")
        return (f"{host} is bounded (allowed only for {_grants(bounded)} in the {phase} phase), "
                f"so {what} is refused (fail closed)",
                f"send it as HTTP(S) through the proxy so sbx can check method and path, or add "
                f"`{target}` as a bare host (no methods or paths) to network-policy "
                f"{phase}.allow")
    if rule is None or method is None:  # pragma: no cover - every other code has a rule
        return "denied", f"add `{target}` to network-policy {phase}.allow"
    reason = (f"{host} is only allowed for {_grants(bounded)} in the {phase} phase; {what} is "
              "not among them")
    if code == "path_not_allowed":
        if path is None or not result.path_known:
            return (reason + " (no path was given)",
                    "give the request's path to judge it against the rule at "
                    f"{rule_where(rule)} (hosts: {rule.host})")
        return reason, (f"add `{path}` to the paths of the rule at {rule_where(rule)} "
                        f"(hosts: {rule.host})")
    if not rule.paths or (path is not None and any(path_matches(p, path) for p in rule.paths)):
        return reason, (f"add {method} to the methods of the rule at {rule_where(rule)} "
                        f"(hosts: {rule.host})")
    entry = f"{{hosts: [{host}], methods: [{method}]" + (f", paths: [{path}]}}" if path else "}")
    return reason, f"add the entry `{entry}` to network-policy {phase}.allow"


__all__ = [
    "Request",
    "Decision",
    "Match",
    "Effect",
    "Code",
    "Handling",
    "CODES",
    "decide",
    "classify",
    "normalize_host",
    "normalize_path",
    "is_literal_address",
    "host_matches",
    "path_matches",
    "without_parameters",
    "rules_for",
    "rule_where",
    "describe_rule",
    "rule_dict",
    "valid_host_pattern",
    "valid_path_pattern",
    "names_address",
    "address_denied",
    "internal_name",
    "is_metadata_name",
    "METADATA_NAMES",
    "METADATA_ADDRESSES",
    "INTERNAL_SUFFIXES",
]
