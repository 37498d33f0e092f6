"""What a doctor check is, what it finds and what a run of them reports."""

from __future__ import annotations

import enum
import os
import platform
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from sbx.base.errors import SbxError
from sbx.base.reasons import ExitStatus, Reason
from sbx.usecases.doctor import probes
from sbx.usecases.doctor.probes import EgressProbes

if TYPE_CHECKING:
    from sbx.base.config import Config
    from sbx.seams.engine import EngineInfo
    from sbx.usecases.context import AppContext

CHECK_TIMEOUT_S: Final = 10.0
PROBE_TIMEOUT_S: Final = 20.0  # the limit probe: create + start + wait + logs + remove


class Status(enum.StrEnum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"


@dataclass(frozen=True)
class Verdict:
    """What a check function returns."""

    status: Status
    detail: str
    reason: Reason | None = None
    fix: str | None = None
    data: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CheckResult:
    id: str
    title: str
    status: Status
    detail: str
    reason: Reason | None
    fix: str | None
    duration_s: float
    data: Mapping[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "title": self.title, "status": self.status.value,
                "detail": self.detail, "reason": self.reason.value if self.reason else None,
                "fix": self.fix, "duration_s": round(self.duration_s, 3),
                "data": dict(self.data)}


@dataclass(frozen=True)
class HostFacts:
    """The facts about this process that checks read (injected by tests)."""

    os_name: str
    system: str
    euid: int | None
    egid: int | None

    @classmethod
    def current(cls) -> HostFacts:
        geteuid = getattr(os, "geteuid", None)
        getegid = getattr(os, "getegid", None)
        return cls(os.name, platform.system() or "unknown",
                   geteuid() if geteuid else None, getegid() if getegid else None)


@dataclass(frozen=True)
class DoctorRequest:
    check_timeout_s: float = CHECK_TIMEOUT_S
    probe_timeout_s: float = PROBE_TIMEOUT_S
    workload: str | None = None  # with it: `sbx run`'s planning for it, creating nothing
    kits: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    allow_privileged: bool = False


@dataclass
class DoctorState:
    """Facts shared between checks (each check runs after the ones before it finished)."""

    ctx: AppContext
    host: HostFacts
    request: DoctorRequest
    config: Config | None = None
    config_error: SbxError | None = None
    engine: EngineInfo | None = None
    egress: EgressProbes = field(default_factory=lambda: probes.DEFAULT_EGRESS_PROBES)
    engine_error: SbxError | None = None  # why the engine check did not pass


@dataclass(frozen=True)
class Check:
    id: str
    title: str
    run: Callable[[DoctorState], Verdict]
    needs_engine: bool = False
    # When the check times out, this is the reason given (a hung engine is unreachable).
    timeout_reason: Reason = Reason.DOCKER_UNREACHABLE
    # Seconds; None means DoctorRequest.check_timeout_s.
    timeout_s: Callable[[DoctorRequest], float] | None = None
    # Verdict used without running the check when the engine check did not pass.
    without_engine: Verdict | None = None


@dataclass(frozen=True)
class DoctorReport:
    checks: tuple[CheckResult, ...]

    @property
    def failed(self) -> bool:
        return any(check.status is Status.FAIL for check in self.checks)

    @property
    def exit_status(self) -> ExitStatus:
        # DENIED (1): "doctor found a failure", documented with ExitStatus; warnings pass.
        return ExitStatus.DENIED if self.failed else ExitStatus.OK

    def counts(self) -> dict[str, int]:
        return {status.value: sum(1 for c in self.checks if c.status is status)
                for status in Status}

    def as_dict(self) -> dict[str, Any]:
        return {"checks": [check.as_dict() for check in self.checks], "summary": self.counts()}


ENGINE_DOWN: Final = "the engine check did not pass"
