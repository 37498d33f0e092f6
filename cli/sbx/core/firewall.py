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
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

COMMENT_PREFIX: Final = "sbx-run-"
IPTABLES_TIMEOUT_S: Final = 10


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
        iptables = shutil.which("iptables")
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
        iptables = shutil.which("iptables")
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


__all__ = ["COMMENT_PREFIX", "BridgeGuard"]
