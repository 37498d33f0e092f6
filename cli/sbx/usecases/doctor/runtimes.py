"""The engine's OCI runtimes, and whether the configured one is among them."""

from __future__ import annotations

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.sandbox.runtimes import check_runtime, choose_runtime
from sbx.usecases.doctor.model import DoctorState, Status, Verdict


def check_runtimes(state: DoctorState) -> Verdict:
    """Lists the engine's runtimes; fails as `sbx run` would refuse when ``[sandbox] runtime``
    names one the engine lacks (the rule of sbx.domain.sandbox.runtimes)."""
    info = state.engine
    assert info is not None  # noqa: S101 - needs_engine: run only once the engine answered
    listed = ", ".join(info.runtimes) or "none listed"
    default = info.default_runtime or "unknown"
    data: dict[str, object] = {"runtimes": list(info.runtimes),
                               "default": info.default_runtime or None, "configured": None}
    detail = f"{listed} (default {default})"
    if state.config is None:
        return Verdict(Status.WARN, f"{detail}; the configured runtime is unknown (the config "
                       "is invalid)", Reason.INVALID_CONFIG,
                       "Fix the config file, then run `sbx doctor` again.", data)
    choice = choose_runtime(None, state.config)
    if choice is None:
        return Verdict(Status.OK, f"{detail}; sandboxes run on the default", data=data)
    data["configured"] = choice.name
    try:
        check_runtime(info, choice)
    except SbxError as error:
        return Verdict(Status.FAIL, f"{detail}; {error.message}", error.reason,
                       error.hint or error.reason.info.fix, data)
    return Verdict(Status.OK, f"{detail}; sandboxes run on {choice.name} ({choice.source})",
                   data=data)


__all__ = ["check_runtimes"]
