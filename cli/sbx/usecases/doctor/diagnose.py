"""The table of checks and their run, each in its own thread with its own timeout."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.usecases.doctor import probes
from sbx.usecases.doctor.checks import (
    PLAN_TIMEOUT_S,
    check_config,
    check_engine,
    check_gc,
    check_identity,
    check_platform,
    check_workload,
)
from sbx.usecases.doctor.egress import (
    HOST_SERVICES_TIMEOUT_S,
    PROXY_CHECK_TIMEOUT_S,
    check_egress_ca,
    check_egress_host_services,
    check_egress_proxy,
)
from sbx.usecases.doctor.limits import check_limits
from sbx.usecases.doctor.model import (
    ENGINE_DOWN,
    Check,
    CheckResult,
    DoctorReport,
    DoctorRequest,
    DoctorState,
    HostFacts,
    Status,
    Verdict,
)
from sbx.usecases.doctor.probes import EgressProbes
from sbx.usecases.doctor.runtimes import check_runtimes

if TYPE_CHECKING:
    from sbx.usecases.context import AppContext

KIT_CHECKS: Final[tuple[Check, ...]] = (
    Check("workload", "workload", check_workload,
          timeout_s=lambda request: max(request.check_timeout_s, PLAN_TIMEOUT_S)),
)


CHECKS: Final[tuple[Check, ...]] = (
    Check("platform", "platform", check_platform, timeout_reason=Reason.UNSUPPORTED_PLATFORM),
    Check("config", "config", check_config, timeout_reason=Reason.INVALID_CONFIG),
    Check("identity", "identity", check_identity, timeout_reason=Reason.ROOT_USER),
    Check("engine", "engine", check_engine),
    Check("runtimes", "runtimes", check_runtimes, needs_engine=True,
          without_engine=Verdict(Status.WARN, f"not listed: {ENGINE_DOWN}",
                                 Reason.DOCKER_UNREACHABLE,
                                 "Fix the engine first (see the engine check).")),
    Check("limits", "resource limits", check_limits, needs_engine=True,
          timeout_s=lambda request: request.probe_timeout_s,
          without_engine=Verdict(Status.FAIL, f"not probed: {ENGINE_DOWN}",
                                 Reason.DOCKER_UNREACHABLE,
                                 "Fix the engine first (see the engine check).")),
    Check("gc", "stale objects", check_gc, needs_engine=True,
          without_engine=Verdict(Status.WARN, f"not counted: {ENGINE_DOWN}",
                                 Reason.DOCKER_UNREACHABLE,
                                 "Fix the engine first (see the engine check).")),
    Check("egress-ca", "egress CA", check_egress_ca, timeout_reason=Reason.PROXY_FAILED),
    Check("egress-proxy", "egress proxy", check_egress_proxy, timeout_reason=Reason.PROXY_FAILED,
          timeout_s=lambda request: max(request.check_timeout_s, PROXY_CHECK_TIMEOUT_S)),
    Check("egress-host-services", "host services", check_egress_host_services,
          timeout_reason=Reason.PROXY_FAILED,
          timeout_s=lambda request: max(request.check_timeout_s, HOST_SERVICES_TIMEOUT_S)),
)


def diagnose(ctx: AppContext, request: DoctorRequest | None = None, *,
             checks: Sequence[Check] = CHECKS, host: HostFacts | None = None,
             egress: EgressProbes | None = None) -> DoctorReport:
    """Run ``checks`` in order, each bounded by its timeout; never hangs, never raises
    :class:`SbxError` (a check's error becomes its finding)."""
    req = request or DoctorRequest()
    state = DoctorState(ctx, host or HostFacts.current(), req,
                        egress=egress or probes.DEFAULT_EGRESS_PROBES)
    results: list[CheckResult] = []
    if req.workload is not None:
        checks = (*checks, *KIT_CHECKS)
    for check in checks:
        if check.needs_engine and state.engine is None and check.without_engine is not None:
            results.append(_result(check, check.without_engine, 0.0))
            continue
        results.append(run_check(check, state))
    return DoctorReport(tuple(results))


def run_check(check: Check, state: DoctorState) -> CheckResult:
    timeout = check.timeout_s(state.request) if check.timeout_s else state.request.check_timeout_s
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["finding"] = check.run(state)
        except SbxError as error:
            box["finding"] = Verdict(Status.FAIL, error.message.replace("\n", " "),
                                     error.reason, error.hint or error.reason.info.fix)
        except BaseException as exc:  # re-raised in the caller: a bug gets a crash report
            box["error"] = exc

    started = time.monotonic()
    # A daemon thread: if the check hangs for good, doctor still exits.
    worker = threading.Thread(target=target, name=f"sbx-doctor-{check.id}", daemon=True)
    worker.start()
    worker.join(timeout)
    elapsed = time.monotonic() - started
    if worker.is_alive():
        return _result(check, Verdict(
            Status.FAIL, f"timed out after {timeout:g}s", check.timeout_reason,
            check.timeout_reason.info.fix), elapsed)
    if "error" in box:
        raise box["error"]
    finding: Verdict = box["finding"]
    return _result(check, finding, elapsed)


def _result(check: Check, finding: Verdict, elapsed: float) -> CheckResult:
    return CheckResult(check.id, check.title, finding.status, finding.detail, finding.reason,
                       finding.fix if finding.status is not Status.OK else None, elapsed,
                       finding.data)
