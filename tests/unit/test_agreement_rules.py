"""The rules of the host and the engine, against a fake engine: `sbx run`'s preparation,
`sbx explain WORKLOAD`'s plan and `sbx doctor` (its engine check and its workload check) refuse
for the same reason (issue #13, item 1; the kit matrix is tests/integration/test_agreement.py,
which cannot make a real engine rootless or Windows)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import cast

import pytest

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.sandbox.requirements import check_engine, check_host
from sbx.seams.engine import EngineInfo
from sbx.usecases.context import AppContext
from sbx.usecases.doctor.checks import check_platform
from sbx.usecases.doctor.diagnose import diagnose
from sbx.usecases.doctor.model import DoctorRequest, DoctorState, HostFacts, Status
from sbx.usecases.pipeline import WorkloadRequest, dry_plan
from sbx.usecases.run.fromkits import prepare
from sbx.usecases.run.request import RunRequest
from tests.support.kits import write_kit
from tests.unit.usecases.test_doctor import V1_OK
from tests.unit.usecases.test_gc import Harness

ENGINES = {
    "windows-containers": (EngineInfo("20.10", "1.41", "windows", "", "", False, ()),
                           Reason.UNSUPPORTED_PLATFORM),
    "rootless-cgroup-v1": (EngineInfo("20.10", "1.41", "linux", "1", "cgroupfs", True, ()),
                           Reason.RESOURCE_LIMITS_UNENFORCED),
}


@contextmanager
def _no_progress(_title: str) -> Iterator[Callable[[str], None]]:
    yield lambda _line: None


def _kit(root: Path) -> Path:
    return write_kit(root, "kit", recipe="FROM sbx-test/busybox:1\n")


def test_the_host_rule_is_doctors() -> None:
    with pytest.raises(SbxError) as refused:
        check_host("nt")
    finding = check_platform(_state(HostFacts("nt", "Windows", None, None)))
    assert (finding.status, finding.reason) == (Status.FAIL, refused.value.reason)
    assert refused.value.reason is Reason.UNSUPPORTED_PLATFORM
    check_host("posix")


def _state(host: HostFacts) -> DoctorState:
    # The platform check reads only the host facts: no context is built for it, so this
    # passes None where an AppContext goes, on purpose.
    return DoctorState(ctx=cast("AppContext", None), host=host, request=DoctorRequest())


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(ENGINES))
def test_run_explain_and_doctor_refuse_an_engine_alike(name: str, tmp_path: Path) -> None:
    info, reason = ENGINES[name]
    h = Harness(tmp_path)
    h.engine.engine_info = info
    h.engine.stdout = V1_OK
    kit = _kit(tmp_path)
    with pytest.raises(SbxError) as rule:
        check_engine(info)
    with pytest.raises(SbxError) as ran:
        prepare(h.ctx(), RunRequest(workload=str(kit)), "a" * 32, _no_progress)
    with pytest.raises(SbxError) as explained:
        dry_plan(h.ctx(), WorkloadRequest(workload=str(kit)))
    report = diagnose(h.ctx(), DoctorRequest(check_timeout_s=5.0, probe_timeout_s=5.0,
                                             workload=str(kit)),
                      host=HostFacts("posix", "Linux", 1000, 1000))
    checks = {c.id: c for c in report.checks}
    assert rule.value.reason is ran.value.reason is explained.value.reason is reason
    assert (checks["engine"].status, checks["engine"].reason) == (Status.FAIL, reason)
    assert (checks["workload"].status, checks["workload"].reason) == (Status.FAIL, reason)
    assert report.failed
