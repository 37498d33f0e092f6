"""Host firewall rules that close host services to a sandbox's network.

A container on an ``internal`` Docker network still reaches the host itself at the network's
gateway address — and with it every host service listening on all interfaces (measured on these
machines, TESTING.md). INPUT rules on the network's bridge close that: packets of connections
the host opened (the port forwarder's) are accepted, TCP to the egress proxy's own address and
port is accepted, anything else from the bridge is dropped. Every rule names the run's bridge
(``-i``), and carries a comment naming the run, so a crashed run's rules can be found and
removed by ``sbx gc``.

Concurrent runs: each run's rules go in as one ``iptables-restore --noflush`` transaction
(waiting for the xtables lock), every rule inserted at the top of INPUT in reverse order, so the
run's accept always precedes its drop, whatever other runs (or Docker) insert at the same time —
inserting rule by rule at fixed positions let another run's insertion slip between a run's
accept and its drop and leave the drop first (4 of 30 concurrent runs lost their network).
Without ``iptables-restore`` the same reverse-order inserts run one by one (the order still
holds; only the all-or-nothing is lost).

Installing rules needs root and iptables; without them the gap stays open and is reported
(``sbx doctor`` names it too), never silently ignored.

A named sandbox whose recorded proxy port is taken when it starts again (another local user
listening there) gets its proxy on a free port, and a ``nat PREROUTING`` rule on its bridge
sends the recorded port (which its environment names) to it (``redirect``): the other
listener never sees the sandbox's traffic.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import os
import re
import shlex
import shutil
import socket
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.seams.host import processes

COMMENT_PREFIX: Final = "sbx-run-"
IPTABLES_TIMEOUT_S: Final = 10
_MAX_LISTING_BYTES: Final = 64 * 1024 * 1024  # `iptables -S` of a host with many rules
# gc waits this long for the xtables lock (Docker edits the tables too) before giving up.
LOCK_WAIT_S: Final = 5
CHAIN: Final = "INPUT"
NAT_CHAIN: Final = "PREROUTING"  # the nat table's, where a moved proxy port is redirected
# Where iptables lives when cron's PATH lacks the sbin directories.
_SBIN_CANDIDATES: Final = ("/usr/sbin/iptables", "/sbin/iptables")
_SIOCGIFADDR: Final = 0x8915  # Linux ioctls: an interface's IPv4 address and netmask
_SIOCGIFNETMASK: Final = 0x891B
_RUN_ID: Final = re.compile(r"^[0-9a-f]{32}$")
_IFNAME: Final = re.compile(r"^[A-Za-z0-9_.:@+-]{1,15}$")


@dataclass
class BridgeGuard:
    bridge: str
    run_id: str
    allow_tcp_ports: Sequence[int] = ()  # host ports the sandbox may open (the egress proxy)
    proxy_address: str | None = None  # the proxy's address: the only one those ports open on
    # (port the sandbox dials, port the proxy listens on): a recorded port that was taken
    redirect: tuple[int, int] | None = None
    installed: list[list[str]] = field(default_factory=list)
    installed_nat: list[list[str]] = field(default_factory=list)

    @property
    def comment(self) -> str:
        return f"{COMMENT_PREFIX}{self.run_id}"

    def rules(self) -> list[list[str]]:
        """The run's rules in the order they must end up in INPUT (accepts before the drop)."""
        base = ["-i", self.bridge, "-m", "comment", "--comment", self.comment]
        rules = [[*base, "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"]]
        to = ["-d", f"{self.proxy_address}/32"] if self.proxy_address is not None else []
        rules += [[*base, *to, "-p", "tcp", "--dport", str(port), "-j", "ACCEPT"]
                  for port in self.allow_tcp_ports]
        rules.append([*base, "-j", "DROP"])
        return rules

    def nat_rules(self) -> list[list[str]]:
        """The redirect of the port the sandbox dials to the proxy's (none without one)."""
        if self.redirect is None or self.proxy_address is None:
            return []
        dialled, listening = self.redirect
        return [["-i", self.bridge, "-m", "comment", "--comment", self.comment,
                 "-d", f"{self.proxy_address}/32", "-p", "tcp", "--dport", str(dialled),
                 "-j", "DNAT", "--to-destination", f"{self.proxy_address}:{listening}"]]

    def restore_script(self) -> str:
        """One ``iptables-restore --noflush`` transaction: every rule inserted at the top in
        reverse order, so the final order is :meth:`rules`' whatever else is inserted."""
        lines = []
        if self.nat_rules():
            lines.append("*nat")
            lines += [shlex.join(["-I", NAT_CHAIN, "1", *rule]) for rule in self.nat_rules()]
            lines.append("COMMIT")
        lines.append("*filter")
        lines += [shlex.join(["-I", CHAIN, "1", *rule]) for rule in reversed(self.rules())]
        lines.append("COMMIT")
        return "\n".join(lines) + "\n"

    def install(self) -> str | None:
        """Install the rules; returns a warning when sbx cannot manage the firewall at all
        (no iptables, not root), raises ``create_failed`` when iptables refuses them."""
        with _refusals_as_reasons(self.bridge):
            return self._install()

    def _install(self) -> str | None:
        iptables = iptables_binary()
        if iptables is None or os.geteuid() != 0:
            why = "iptables is missing" if iptables is None else "sbx is not running as root"
            return (f"host services listening on all interfaces are reachable from the sandbox "
                    f"network ({why}, so bridge {self.bridge} could not be closed)")
        if self.proxy_address is not None:
            ipaddress.IPv4Address(self.proxy_address)  # never a rule with a malformed address
        rules = self.rules()
        restore = _restore_binary(iptables)
        if restore is not None:
            try:
                processes.run([restore, "-w", str(LOCK_WAIT_S), "--noflush"],
                             input_data=self.restore_script().encode("ascii"), check=True,
                             timeout=IPTABLES_TIMEOUT_S)
            except processes.CalledProcessError:
                pass  # all or nothing: nothing was applied; try rule by rule below
            else:
                self.installed.extend(rules)
                self.installed_nat.extend(self.nat_rules())
                return None
        for rule in self.nat_rules():  # before the accept that lets the redirected port in
            _iptables([iptables, "-w", str(LOCK_WAIT_S), "-t", "nat", "-I", NAT_CHAIN, "1",
                       *rule])
            self.installed_nat.append(rule)
        for rule in reversed(rules):  # one by one: still always on top, still in order
            _iptables([iptables, "-w", str(LOCK_WAIT_S), "-I", CHAIN, "1", *rule])
            self.installed.insert(0, rule)
        return None

    def ensure(self) -> str | None:
        """For a named sandbox's later start: install the rules unless every one is there
        already (they outlive a stop, not a host reboot)."""
        with _refusals_as_reasons(self.bridge):
            return self._ensure()

    def _ensure(self) -> str | None:
        iptables = iptables_binary()
        if iptables is not None and os.geteuid() == 0:
            wanted = [(None, r) for r in self.rules()] + [("nat", r) for r in self.nat_rules()]
            present = all(_present(iptables, table, rule) for table, rule in wanted)
            listed = self.listed()
            if present and len(listed[0]) == len(self.rules()) \
                    and len(listed[1]) == len(self.nat_rules()):
                self.installed, self.installed_nat = self.rules(), self.nat_rules()
                return None
            # Anything else of this run's (another start's port, half a set): out, then anew.
            self.installed, self.installed_nat = listed
            errors = self.remove()
            if errors:
                raise processes.SubprocessError("; ".join(errors))
        return self._install()

    def listed(self) -> tuple[list[list[str]], list[list[str]]]:
        """This run's rules now in INPUT and in nat PREROUTING (as ``-S`` prints them), found
        by their comment; empty without root or iptables."""
        iptables = iptables_binary()
        if iptables is None or os.geteuid() != 0:
            return [], []
        found: list[list[list[str]]] = []
        for table, chain in (("filter", CHAIN), ("nat", NAT_CHAIN)):
            done = processes.run([iptables, "-w", str(LOCK_WAIT_S), "-t", table, "-S", chain],
                                timeout=IPTABLES_TIMEOUT_S, max_output=_MAX_LISTING_BYTES)
            rules = []
            for line in done.stdout.decode("utf-8", "replace").splitlines():
                parts = shlex.split(line)
                if parts[:2] == ["-A", chain] and self.comment in parts:
                    rules.append(parts[2:])
            found.append(rules)
        return found[0], found[1]

    def remove(self) -> list[str]:
        iptables = iptables_binary()
        errors: list[str] = []
        while self.installed and iptables is not None:
            rule = self.installed.pop()  # the drop first
            try:
                _iptables([iptables, "-w", str(LOCK_WAIT_S), "-D", CHAIN, *rule])
            except processes.CalledProcessError as error:
                errors.append(f"iptables -D INPUT {' '.join(rule)}: {error}")
        while self.installed_nat and iptables is not None:
            rule = self.installed_nat.pop()
            try:
                _iptables([iptables, "-w", str(LOCK_WAIT_S), "-t", "nat", "-D", NAT_CHAIN,
                           *rule])
            except processes.CalledProcessError as error:
                errors.append(f"iptables -t nat -D PREROUTING {' '.join(rule)}: {error}")
        return errors


def _present(iptables: str, table: str | None, rule: list[str]) -> bool:
    where = ["-t", table] if table else []
    chain = NAT_CHAIN if table == "nat" else CHAIN
    done = processes.run([iptables, "-w", str(LOCK_WAIT_S), *where, "-C", chain, *rule],
                        timeout=IPTABLES_TIMEOUT_S)
    return done.returncode == 0


@contextlib.contextmanager
def _refusals_as_reasons(bridge: str) -> Iterator[None]:
    """iptables refusing, hanging or missing half-way is the host's state, not a bug: a reason
    (fail closed: the caller must not start a sandbox behind rules that are not all there)."""
    try:
        yield
    except (processes.SubprocessError, OSError) as error:
        raise SbxError(Reason.CREATE_FAILED,
                       f"could not install the firewall rules of bridge {bridge}: {error}",
                       hint="Check that iptables works on this host (`iptables -S INPUT`), "
                            "then run again.") from error


def _iptables(argv: list[str]) -> None:
    processes.run(argv, check=True, timeout=IPTABLES_TIMEOUT_S)


def _restore_binary(iptables: str) -> str | None:
    """``iptables-restore`` of the same flavour as ``iptables`` (next to it), if present."""
    candidate = str(Path(iptables).with_name(Path(iptables).name + "-restore"))
    if os.access(candidate, os.X_OK):
        return candidate
    return shutil.which("iptables-restore")


def bridge_network(bridge: str) -> str | None:
    """The IPv4 network (CIDR) of a host interface, read from its address and netmask
    (Linux); None when it has none or cannot be read. The egress proxy accepts clients only
    from inside its run's network."""
    if not _IFNAME.match(bridge):
        return None
    request = struct.pack("256s", bridge.encode("ascii"))
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            address = fcntl.ioctl(sock.fileno(), _SIOCGIFADDR, request)[20:24]
            netmask = fcntl.ioctl(sock.fileno(), _SIOCGIFNETMASK, request)[20:24]
    except OSError:
        return None
    with contextlib.suppress(ValueError):
        return str(ipaddress.IPv4Network(
            f"{socket.inet_ntoa(address)}/{socket.inet_ntoa(netmask)}", strict=False))
    return None


# -- finding and removing the rules a killed run left (sbx gc) ------------------------------------


class FirewallUnavailable(Exception):
    """This process cannot read or change the host firewall (no iptables, not root): it could
    not have installed rules either. ``str()`` says why."""


class FirewallError(Exception):
    """iptables failed (listing or removing); ``str()`` says how."""


class RuleListingInvalid(ValueError):
    """A line of ``iptables -S`` sbx cannot parse: no rule is removed on such a listing."""


@dataclass(frozen=True)
class SbxRule:
    """One INPUT rule whose comment names a run (``sbx-run-<run id>``)."""

    spec: tuple[str, ...]  # the tokens after ``-A INPUT``: exactly what ``-D INPUT`` takes
    run_id: str
    bridge: str | None  # the ``-i`` interface (None when absent or negated)

    @property
    def text(self) -> str:
        return shlex.join(self.spec)


def parse_rules(text: str, chain: str = CHAIN) -> list[SbxRule]:
    """The sbx rules of an ``iptables -S CHAIN`` listing, parsed strictly.

    Every line must be the chain's policy (``-P CHAIN POLICY``, exactly once) or one of its
    rules (``-A CHAIN ...``); blank lines and ``#`` notes (iptables-nft warnings) are skipped.
    A rule belongs to sbx when a ``--comment`` value starts with ``sbx-run-``; that comment must
    then be ``sbx-run-`` + a 32-hex run id, and only one per rule. Anything else raises
    :class:`RuleListingInvalid`, so a listing sbx does not fully understand removes nothing.
    """
    rules: list[SbxRule] = []
    policies = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            tokens = shlex.split(line)
        except ValueError as exc:
            raise RuleListingInvalid(f"line {number}: {exc}") from exc
        if len(tokens) == 3 and tokens[:2] == ["-P", chain]:
            policies += 1
            continue
        if tokens[:2] != ["-A", chain]:
            raise RuleListingInvalid(f"line {number} is neither {chain}'s policy nor one of its "
                                     f"rules: {_clip(line)}")
        rule = _parse_rule(tuple(tokens[2:]), number)
        if rule is not None:
            rules.append(rule)
    if policies != 1:
        raise RuleListingInvalid(f"expected one policy line for {chain}, found {policies} "
                                 "(a truncated or foreign listing)")
    return rules


def _parse_rule(spec: tuple[str, ...], number: int) -> SbxRule | None:
    comments: list[str] = []
    values: set[int] = set()  # positions of comment values, never read as options
    for index, token in enumerate(spec):
        if token == "--comment" and index not in values:  # noqa: S105 - an option
            if index + 1 >= len(spec):
                raise RuleListingInvalid(f"line {number}: --comment without a value")
            comments.append(spec[index + 1])
            values.add(index + 1)
    ours = [value for value in comments if value.startswith(COMMENT_PREFIX)]
    if not ours:
        return None
    if len(ours) > 1:
        raise RuleListingInvalid(f"line {number}: more than one sbx comment")
    run_id = ours[0][len(COMMENT_PREFIX):]
    if not _RUN_ID.match(run_id):
        raise RuleListingInvalid(f"line {number}: the sbx comment {_clip(ours[0])} does not "
                                 "name a run id")
    interfaces = [index for index, token in enumerate(spec)
                  if token in ("-i", "--in-interface") and index not in values]
    if len(interfaces) > 1:
        raise RuleListingInvalid(f"line {number}: more than one input interface")
    bridge = None
    if interfaces:
        index = interfaces[0]
        if index + 1 >= len(spec):
            raise RuleListingInvalid(f"line {number}: -i without an interface")
        name = spec[index + 1]
        if not _IFNAME.match(name):
            raise RuleListingInvalid(f"line {number}: unreadable interface {_clip(name)}")
        negated = index > 0 and spec[index - 1] == "!"
        bridge = None if negated or name.endswith("+") else name
    return SbxRule(spec, run_id, bridge)


def _clip(text: str) -> str:
    return repr(text) if len(text) <= 60 else repr(text[:57] + "...")


def iptables_binary() -> str | None:
    found = shutil.which("iptables")
    if found is not None:
        return found
    return next((path for path in _SBIN_CANDIDATES if os.access(path, os.X_OK)), None)


def _managing_iptables() -> str:
    iptables = iptables_binary()
    if iptables is None:
        raise FirewallUnavailable("iptables is missing")
    if os.geteuid() != 0:
        raise FirewallUnavailable("not running as root")
    return iptables


def _run_iptables(argv: list[str], action: str) -> str:
    try:
        done = processes.run(argv, timeout=IPTABLES_TIMEOUT_S, max_output=_MAX_LISTING_BYTES)
    except processes.TimeoutExpired as exc:
        raise FirewallError(f"{action}: iptables did not answer within "
                            f"{IPTABLES_TIMEOUT_S}s") from exc
    except OSError as exc:
        raise FirewallError(f"{action}: cannot run iptables: {exc.strerror}") from exc
    if done.overflow:
        raise FirewallError(f"{action}: iptables printed more than {_MAX_LISTING_BYTES} bytes")
    if done.returncode != 0:
        errors = done.stderr.decode("utf-8", "replace")
        detail = " ".join(errors.split())[:300] or f"exit status {done.returncode}"
        if "permission denied" in detail.lower():
            # Root without CAP_NET_ADMIN (a container): no rule could have been installed.
            raise FirewallUnavailable(f"iptables refused: {detail}")
        raise FirewallError(f"{action}: {detail}")
    return done.stdout.decode("utf-8", "replace")


def list_sbx_rules() -> list[SbxRule]:
    """Every INPUT rule carrying an ``sbx-run-`` comment (any state home's).

    Raises :class:`FirewallUnavailable` (no iptables, not root), :class:`FirewallError`
    (iptables failed) or :class:`RuleListingInvalid` (a line does not parse).
    """
    iptables = _managing_iptables()
    text = _run_iptables([iptables, "-w", str(LOCK_WAIT_S), "-S", CHAIN],
                         f"listing the {CHAIN} rules")
    return parse_rules(text)


def remove_rule(rule: SbxRule) -> None:
    """Delete one rule by its exact spec (``iptables -D INPUT <spec>``: the first identical
    rule goes, so each listed duplicate takes one call)."""
    if COMMENT_PREFIX + rule.run_id not in rule.spec:  # only ever a rule sbx parsed as its own
        raise FirewallError(f"refusing to remove a rule without its sbx comment: {rule.text}")
    iptables = _managing_iptables()
    _run_iptables([iptables, "-w", str(LOCK_WAIT_S), "-D", CHAIN, *rule.spec],
                  f"removing the rule {rule.text}")


def bridge_exists(name: str) -> bool:
    """Whether a network interface of that name exists on this host."""
    if not _IFNAME.match(name) or name in (".", ".."):
        return True  # never conclude "gone" from a name that cannot be looked up
    return Path("/sys/class/net", name).exists()


__all__ = ["CHAIN", "COMMENT_PREFIX", "NAT_CHAIN", "BridgeGuard", "FirewallError",
           "FirewallUnavailable", "RuleListingInvalid", "SbxRule", "bridge_exists",
           "bridge_network", "iptables_binary", "list_sbx_rules", "parse_rules", "remove_rule"]
