"""How the egress checks look at the host: iptables, listening sockets, a started proxy
(replaced by tests)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.egress import plan as egress_plan
from sbx.seams.host.firewall import (
    FirewallError,
    FirewallUnavailable,
    RuleListingInvalid,
    iptables_binary,
    list_sbx_rules,
)
from sbx.seams.host.procfs import tcp_tables


class DoctorProxy(Protocol):
    """What the proxy check needs of a started proxy
    (:class:`sbx.domain.egress.plan.ProxyProcess`)."""

    @property
    def port(self) -> int: ...

    @property
    def pid(self) -> int: ...

    def alive(self) -> bool: ...

    def stop(self) -> None: ...


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _which_iptables() -> str | None:
    # The lookup BridgeGuard.install itself makes: what `sbx run` would find.
    return iptables_binary()


def _iptables_problem() -> str | None:
    """None when iptables can list the INPUT chain here (root with CAP_NET_ADMIN)."""
    try:
        list_sbx_rules()
    except RuleListingInvalid:
        return None  # iptables answered; only an odd line did not parse
    except (FirewallUnavailable, FirewallError) as error:
        return str(error)
    return None


def _read_proc_net_tcp() -> tuple[str, ...]:
    return tcp_tables()


def _start_proxy(config_json: str, run_dir: Path, run_id: str) -> DoctorProxy:
    try:
        return egress_plan.start_proxy(config_json, run_dir, run_id)
    except OSError as error:  # the interpreter cannot be executed, the run dir not written...
        raise SbxError(Reason.PROXY_FAILED, f"cannot start the proxy: {error}",
                       details={"stderr": f"{type(error).__name__}: {error}"}) from None


@dataclass(frozen=True)
class EgressProbes:
    """How the egress checks look at the host (injected by tests)."""

    iptables: Callable[[], str | None] = _which_iptables
    iptables_problem: Callable[[], str | None] = _iptables_problem
    proc_net_tcp: Callable[[], Sequence[str]] = _read_proc_net_tcp
    start_proxy: Callable[[str, Path, str], DoctorProxy] = _start_proxy
    now: Callable[[], datetime] = _utcnow


DEFAULT_EGRESS_PROBES: EgressProbes = EgressProbes()
