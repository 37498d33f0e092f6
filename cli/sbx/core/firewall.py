"""Host firewall rules that close host services to a sandbox's network.

A container on an ``internal`` Docker network still reaches the host itself at the network's
gateway address — and with it every host service listening on all interfaces (measured on these
machines, TESTING.md). Two INPUT rules on the network's bridge close that: packets of
connections the host opened (the port forwarder's, later the proxy's) are accepted, anything else
from the bridge is dropped. Each rule carries a comment naming the run, so a crashed run's rules
can be found and removed by ``sbx gc``.

Installing rules needs root and iptables; without them the gap stays open and is reported
(``sbx doctor`` names it too), never silently ignored.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

COMMENT_PREFIX: Final = "sbx-run-"
IPTABLES_TIMEOUT_S: Final = 10
# gc waits this long for the xtables lock (Docker edits the tables too) before giving up.
LOCK_WAIT_S: Final = 5
CHAIN: Final = "INPUT"
# Where iptables lives when cron's PATH lacks the sbin directories.
_SBIN_CANDIDATES: Final = ("/usr/sbin/iptables", "/sbin/iptables")
_RUN_ID: Final = re.compile(r"^[0-9a-f]{32}$")
_IFNAME: Final = re.compile(r"^[A-Za-z0-9_.:@+-]{1,15}$")


@dataclass
class BridgeGuard:
    bridge: str
    run_id: str
    allow_tcp_ports: Sequence[int] = ()  # host ports the sandbox may open (the egress proxy)
    installed: list[list[str]] = field(default_factory=list)

    @property
    def comment(self) -> str:
        return f"{COMMENT_PREFIX}{self.run_id}"

    def rules(self) -> list[list[str]]:
        base = ["-i", self.bridge, "-m", "comment", "--comment", self.comment]
        rules = [[*base, "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"]]
        rules += [[*base, "-p", "tcp", "--dport", str(port), "-j", "ACCEPT"]
                  for port in self.allow_tcp_ports]
        rules.append([*base, "-j", "DROP"])
        return rules

    def install(self) -> str | None:
        """Install the rules; returns a warning when they cannot be installed."""
        iptables = iptables_binary()
        if iptables is None or os.geteuid() != 0:
            why = "iptables is missing" if iptables is None else "sbx is not running as root"
            return (f"host services listening on all interfaces are reachable from the sandbox "
                    f"network ({why}, so bridge {self.bridge} could not be closed)")
        # Inserted in order at the top of INPUT, so they precede any broad ACCEPT.
        for position, rule in enumerate(self.rules(), start=1):
            _iptables([iptables, "-I", "INPUT", str(position), *rule])
            self.installed.append(rule)
        return None

    def remove(self) -> list[str]:
        iptables = iptables_binary()
        errors: list[str] = []
        while self.installed and iptables is not None:
            rule = self.installed.pop()
            try:
                _iptables([iptables, "-D", "INPUT", *rule])
            except subprocess.CalledProcessError as error:
                errors.append(f"iptables -D INPUT {' '.join(rule)}: {error}")
        return errors


def _iptables(argv: list[str]) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=IPTABLES_TIMEOUT_S,
                   stdin=subprocess.DEVNULL)


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
        done = subprocess.run(argv, check=False, capture_output=True, text=True,
                              timeout=IPTABLES_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        raise FirewallError(f"{action}: iptables did not answer within "
                            f"{IPTABLES_TIMEOUT_S}s") from exc
    except OSError as exc:
        raise FirewallError(f"{action}: cannot run iptables: {exc.strerror}") from exc
    if done.returncode != 0:
        detail = " ".join(done.stderr.split())[:300] or f"exit status {done.returncode}"
        if "permission denied" in detail.lower():
            # Root without CAP_NET_ADMIN (a container): no rule could have been installed.
            raise FirewallUnavailable(f"iptables refused: {detail}")
        raise FirewallError(f"{action}: {detail}")
    return done.stdout


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


__all__ = ["CHAIN", "COMMENT_PREFIX", "BridgeGuard", "FirewallError", "FirewallUnavailable",
           "RuleListingInvalid", "SbxRule", "bridge_exists", "iptables_binary",
           "list_sbx_rules", "parse_rules", "remove_rule"]
