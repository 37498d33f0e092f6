"""`sbx doctor` against a fake engine: each check, the timeouts, the probe's cleanup, the limit
comparison for cgroup v1 and v2, golden human output and the JSON contract.

Golden files live in tests/golden/doctor_*.txt; regenerate them with
``SBX_UPDATE_GOLDEN=1 pytest tests/unit/test_doctor.py`` and review the diff.
"""

from __future__ import annotations

import io
import json
import os
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from sbx.config import GiB, MiB
from sbx.core import doctor as doctor_core
from sbx.core.doctor import (
    Check,
    DoctorRequest,
    Finding,
    HostFacts,
    Status,
    compare_limits,
    diagnose,
    parse_probe_output,
    probe_candidates,
)
from sbx.driver import EngineInfo
from sbx.errors import EngineUnavailable, SbxError
from sbx.hardening import Limits
from sbx.reasons import Reason
from sbx.render import Renderer

from .test_gc import Harness, container, run_id

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
USER = HostFacts("posix", "Linux", 1000, 1000)
ROOT = HostFacts("posix", "Linux", 0, 0)
DEFAULTS = Limits(memory_bytes=4 * GiB, pids=128, cpu_millis=1000, tmp_bytes=256 * MiB,
                  workspace_bytes=512 * MiB)
V2_OK = b"cgroup=2\nmemory=4294967296\nswap=0\npids=128\ncpu=100000 100000\n"
V1_OK = (b"cgroup=1\nmemory=4294967296\nmemsw=4294967296\npids=128\n"
         b"cpu_quota=100000\ncpu_period=100000\n")
FAST = DoctorRequest(check_timeout_s=5.0, probe_timeout_s=5.0)


@pytest.fixture
def h(tmp_path: Path) -> Harness:
    harness = Harness(tmp_path)
    harness.engine.probe_output = V2_OK
    return harness


def report(h: Harness, host: HostFacts = USER, request: DoctorRequest = FAST,
           **kwargs: Any) -> doctor_core.DoctorReport:
    return diagnose(h.ctx(), request, host=host, **kwargs)


def by_id(rep: doctor_core.DoctorReport) -> dict[str, doctor_core.CheckResult]:
    return {check.id: check for check in rep.checks}


# -- golden human output ------------------------------------------------------------------------


def scrub(text: str, tmp: Path) -> str:
    text = text.replace(str(tmp), "<TMP>")
    text = re.sub(r"Docker \S+ \(API [0-9.]+\)", "Docker <VERSION> (API <API>)", text)
    text = re.sub(r"\b[0-9a-f]{12,64}\b", "<ID>", text)
    return re.sub(r"\b\d+(\.\d+)?(ms|s)\b", "<DURATION>", text)


def human(h: Harness, rep: doctor_core.DoctorReport) -> str:
    out = io.StringIO()
    renderer = Renderer(out, io.StringIO(), as_json=False, env={"NO_COLOR": "1"}, width=88)
    renderer.doctor_report(rep)
    return scrub(out.getvalue(), h.tmp)


def assert_golden(name: str, text: str) -> None:
    path = GOLDEN / f"doctor_{name}.txt"
    if os.environ.get("SBX_UPDATE_GOLDEN") == "1":
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"{path} missing: run with SBX_UPDATE_GOLDEN=1"
    assert text == path.read_text(encoding="utf-8")


def test_golden_all_good(h: Harness) -> None:
    rep = report(h)
    assert rep.exit_status == 0
    assert_golden("ok", human(h, rep))


def test_golden_root_invalid_config_engine_down(h: Harness) -> None:
    h.config.write_text("[sandbox]\npids = 0\nmemmory_bytes = 5\n", encoding="utf-8")
    h.engine.info_error = EngineUnavailable(
        "cannot reach the Docker engine: connection refused",
        hint="Start the engine and check that `docker version` answers.")
    rep = report(h, host=ROOT)
    assert rep.exit_status == 1
    assert_golden("problems", human(h, rep))
    # Checks that need the engine do not even try once the engine check failed.
    assert [name for name, _ in h.engine.calls] == ["info"]


def test_golden_limits_unenforced_and_stale_objects(h: Harness) -> None:
    h.engine.engine_info = EngineInfo("24.0.99", "1.43", "linux", "2", "systemd", True,
                                      ("name=rootless",))
    h.engine.probe_output = b"cgroup=2\nmemory=max\nswap=max\npids=max\ncpu=max 100000\n"
    (h.state / "runs").mkdir(parents=True)
    h.engine.containers = [container("exited", home=h.home, run=run_id()),
                           container("running", home=h.home, run=run_id(), deadline="?")]
    rep = report(h)
    assert rep.exit_status == 1
    assert_golden("unenforced", human(h, rep))
    limits = by_id(rep)["limits"]
    assert limits.data["unenforced"] == ["memory", "swap", "pids", "cpu"]


def test_golden_hung_engine(h: Harness) -> None:
    release = threading.Event()
    h.engine.block = lambda: release.wait(30)
    try:
        started = time.monotonic()
        rep = report(h, request=DoctorRequest(check_timeout_s=0.3, probe_timeout_s=0.3))
        elapsed = time.monotonic() - started
    finally:
        release.set()
    assert elapsed < 3.0, f"doctor took {elapsed:.1f}s with a 0.3s per-check timeout"
    engine = by_id(rep)["engine"]
    assert (engine.status, engine.reason) == (Status.FAIL, Reason.DOCKER_UNREACHABLE)
    assert engine.detail == "timed out after 0.3s"
    assert_golden("hung_engine", human(h, rep))


# -- JSON contract ------------------------------------------------------------------------------


def test_json_contract(h: Harness) -> None:
    h.engine.info_error = EngineUnavailable("cannot reach the Docker engine: gone")
    out = io.StringIO()
    Renderer(out, io.StringIO(), as_json=True, env={}).doctor_report(report(h, host=ROOT))
    envelope = json.loads(out.getvalue())
    assert set(envelope) == {"sbx_result_version", "command", "status", "exit_code", "reason",
                             "message", "hint", "data", "diagnostics"}
    assert (envelope["command"], envelope["status"], envelope["exit_code"]) == (
        "doctor", "failed", 1)
    checks = envelope["data"]["checks"]
    assert [c["id"] for c in checks] == ["platform", "config", "identity", "engine", "limits",
                                         "gc"]
    for check in checks:
        assert {"id", "title", "status", "detail", "reason", "fix"} <= set(check)
        assert check["status"] in {"ok", "warn", "fail"}
        assert isinstance(check["title"], str) and isinstance(check["detail"], str)
        if check["status"] == "ok":
            assert check["reason"] is None and check["fix"] is None
        else:
            assert check["reason"] in {r.value for r in Reason} and check["fix"]
    assert envelope["data"]["summary"] == {"ok": 2, "warn": 2, "fail": 2}


def test_exit_status_passes_with_warnings_only(h: Harness) -> None:
    rep = report(h, host=ROOT)
    assert by_id(rep)["identity"].status is Status.WARN
    assert rep.exit_status == 0 and not rep.failed


# -- individual checks --------------------------------------------------------------------------


def test_platform_non_unix_fails(h: Harness) -> None:
    rep = report(h, host=HostFacts("nt", "Windows", None, None))
    check = by_id(rep)["platform"]
    assert (check.status, check.reason) == (Status.FAIL, Reason.UNSUPPORTED_PLATFORM)
    assert by_id(rep)["identity"].detail.startswith("process identity unknown")


def test_config_failure_names_file_key_and_line(h: Harness) -> None:
    h.config.write_text("[gc]\n\nbatch_size = 0\n", encoding="utf-8")
    rep = report(h)
    check = by_id(rep)["config"]
    assert check.status is Status.FAIL and check.reason is Reason.INVALID_CONFIG
    assert f"{h.config}:3: gc.batch_size: must be at least 1" in check.detail
    assert by_id(rep)["limits"].reason is Reason.INVALID_CONFIG


def test_config_from_file_is_counted(h: Harness) -> None:
    h.config.write_text("[sandbox]\npids = 64\n", encoding="utf-8")
    h.engine.probe_output = V2_OK.replace(b"pids=128", b"pids=64")
    rep = report(h)
    assert by_id(rep)["config"].detail == f"{h.config} is valid (1 setting from the file)"
    assert by_id(rep)["limits"].status is Status.OK


def test_engine_on_windows_containers_fails(h: Harness) -> None:
    h.engine.engine_info = EngineInfo("20.10", "1.41", "windows", "", "", False, ())
    check = by_id(report(h))["engine"]
    assert (check.status, check.reason) == (Status.FAIL, Reason.UNSUPPORTED_PLATFORM)


def test_rootless_on_cgroup_v1_warns_in_the_engine_check(h: Harness) -> None:
    h.engine.engine_info = EngineInfo("20.10", "1.41", "linux", "1", "cgroupfs", True, ())
    h.engine.probe_output = V1_OK
    rep = report(h)
    assert by_id(rep)["engine"].reason is Reason.RESOURCE_LIMITS_UNENFORCED
    assert by_id(rep)["limits"].status is Status.OK


def test_probe_is_hardened_labelled_and_always_removed(h: Harness) -> None:
    rep = report(h)
    assert by_id(rep)["limits"].status is Status.OK
    (spec,) = [args[0] for args in h.engine.called("create")]
    assert spec.read_only and spec.cap_drop == ("ALL",) and spec.network_mode == "none"
    assert spec.user == "1000:1000" and spec.memory_bytes == 4 * GiB and spec.pids_limit == 128
    assert spec.labels["dev.sbx.role"] == "helper" and spec.labels["dev.sbx.home"] == h.home
    assert spec.entrypoint[:2] == ("/bin/sh", "-c")
    created = list(h.engine.created)
    assert [args[0] for args in h.engine.called("remove_container")] == created
    assert list((h.state / "runs").iterdir()) == []


@pytest.mark.parametrize("failure", ["start", "timeout"])
def test_probe_is_removed_when_it_fails(h: Harness, failure: str) -> None:
    if failure == "start":
        h.engine.start_errors["*"] = SbxError(Reason.START_FAILED, "no /bin/sh")
    else:
        h.engine.wait_result = None
    rep = report(h)
    created = list(h.engine.created)
    assert created and [a[0] for a in h.engine.called("remove_container")] == created
    assert list((h.state / "runs").iterdir()) == []
    check = by_id(rep)["limits"]
    if failure == "start":
        assert (check.status, check.reason) == (Status.WARN, Reason.IMAGE_MISSING)
    else:
        assert (check.status, check.reason) == (Status.FAIL, Reason.DOCKER_UNREACHABLE)
        assert h.engine.called("kill")


def test_probe_falls_back_to_the_next_image(h: Harness) -> None:
    h.engine.images = [("big/image:1", 900_000_000), ("tiny/noshell:1", 10),
                       ("sbx-test/busybox:1", 2_000_000)]
    h.engine.start_errors["sha256:" + "a" * 64] = SbxError(Reason.START_FAILED, "no /bin/sh")
    rep = report(h)
    # every image has the same fake id, so all three fail: three attempts, then a warning
    assert [a[0] for a in h.engine.called("image")] == [
        "sbx-test/busybox:1", "tiny/noshell:1", "big/image:1"]
    assert by_id(rep)["limits"].status is Status.WARN


def test_no_local_image_warns(h: Harness) -> None:
    h.engine.images = []
    check = by_id(report(h))["limits"]
    assert (check.status, check.reason) == (Status.WARN, Reason.IMAGE_MISSING)
    assert "never pulls" in (check.fix or "")


def test_probe_candidates_prefer_the_known_tiny_images() -> None:
    local = [("zz/huge:1", 10**9), ("alpine:latest", 7_000_000), ("aa/small:1", 100),
             ("sbx-test/busybox:1", 2_000_000)]
    assert probe_candidates(local) == ["sbx-test/busybox:1", "alpine:latest", "aa/small:1",
                                       "zz/huge:1"]


def test_gc_check_counts_stale_objects(h: Harness) -> None:
    (h.state / "runs").mkdir(parents=True)
    old = h.run_dir(pid=4_000_100)
    stamp = time.time() - 86_400  # doctor's survey runs on the real clock
    os.utime(old / "run.json", (stamp, stamp))
    os.utime(old, (stamp, stamp))
    h.engine.containers = [container("exited", home=h.home, run=run_id()),
                           container("dead", home=h.home, run=run_id())]
    check = by_id(report(h))["gc"]
    assert (check.status, check.reason) == (Status.WARN, Reason.CLEANUP_FAILED)
    assert check.detail == "stale: 2 containers, 1 run dir"
    assert "sbx gc" in (check.fix or "")
    assert len(h.engine.containers) == 2  # counted, never removed


def test_gc_check_reports_a_failed_listing(h: Harness) -> None:
    (h.state / "runs").mkdir(parents=True)
    h.engine.list_error = SbxError(Reason.CLEANUP_FAILED, "listing sbx objects: 500")
    check = by_id(report(h))["gc"]
    assert check.status is Status.WARN and "listing sbx objects: 500" in check.detail


# -- the runner ---------------------------------------------------------------------------------


def test_each_check_times_out_on_its_own(h: Harness) -> None:
    release = threading.Event()

    def hangs(_state: doctor_core.DoctorState) -> Finding:
        release.wait(30)
        return Finding(Status.OK, "late")

    checks = (Check("slow", "slow", hangs, timeout_reason=Reason.INVALID_CONFIG),
              Check("fast", "fast", lambda _s: Finding(Status.OK, "fine")))
    try:
        started = time.monotonic()
        rep = report(h, request=DoctorRequest(check_timeout_s=0.2), checks=checks)
        assert time.monotonic() - started < 2.0
    finally:
        release.set()
    slow, fast = rep.checks
    assert (slow.status, slow.reason, slow.detail) == (
        Status.FAIL, Reason.INVALID_CONFIG, "timed out after 0.2s")
    assert fast.status is Status.OK


def test_a_bug_in_a_check_is_not_swallowed(h: Harness) -> None:
    def broken(_state: doctor_core.DoctorState) -> Finding:
        raise ZeroDivisionError("bug")

    with pytest.raises(ZeroDivisionError):
        report(h, checks=(Check("broken", "broken", broken),))


def test_cli_exit_status_and_dispatch(h: Harness, monkeypatch: pytest.MonkeyPatch,
                                      sbx_cli: Any) -> None:
    import sbx.driver

    monkeypatch.setattr(sbx.driver, "DockerDriver", lambda _env: h.engine)
    env = {**os.environ, **h.env}
    ok = sbx_cli(["doctor"], env=env)
    assert ok.exit_code == 0, ok.stdout + ok.stderr
    assert ok.stdout.splitlines()[-1].startswith("doctor: ")
    h.engine.info_error = EngineUnavailable("cannot reach the Docker engine: gone")
    failed = sbx_cli(["doctor", "--json"], env=env)
    assert failed.exit_code == 1 and failed.envelope()["exit_code"] == 1


# -- limit comparison ---------------------------------------------------------------------------


def _enforced(output: bytes, limits: Limits = DEFAULTS) -> dict[str, bool]:
    readings = parse_probe_output(output.decode())
    return {r.name: r.enforced for r in compare_limits(limits, readings)}


def test_cgroup_v2_and_v1_readings_that_match() -> None:
    assert _enforced(V2_OK) == {"memory": True, "swap": True, "pids": True, "cpu": True}
    assert _enforced(V1_OK) == {"memory": True, "swap": True, "pids": True, "cpu": True}


@pytest.mark.parametrize(("output", "unenforced"), [
    (b"cgroup=2\nmemory=max\nswap=0\npids=128\ncpu=100000 100000\n", ["memory"]),
    (b"cgroup=2\nmemory=4294967296\nswap=max\npids=128\ncpu=100000 100000\n", ["swap"]),
    (b"cgroup=2\nmemory=4294967296\npids=max\ncpu=max 100000\n", ["pids", "cpu"]),
    (b"cgroup=1\nmemory=9223372036854771712\npids=128\ncpu_quota=100000\ncpu_period=100000\n",
     ["memory"]),
    (b"cgroup=1\nmemory=4294967296\nmemsw=9223372036854771712\npids=128\ncpu_quota=-1\n"
     b"cpu_period=100000\n", ["swap", "cpu"]),
    (b"cgroup=1\n", ["memory", "pids", "cpu"]),
    (b"", ["memory", "pids", "cpu"]),
])
def test_unenforced_limits_are_named(output: bytes, unenforced: list[str]) -> None:
    assert [name for name, ok in _enforced(output).items() if not ok] == unenforced


def test_memory_is_compared_within_a_page_and_cpu_within_a_milli() -> None:
    limits = Limits(memory_bytes=100 * MiB + 123, pids=32, cpu_millis=333, tmp_bytes=1,
                    workspace_bytes=1)
    output = f"cgroup=2\nmemory={100 * MiB}\nswap=0\npids=32\ncpu=33300 100000\n".encode()
    assert all(_enforced(output, limits).values())
    judged = doctor_core.judge_limits(limits, parse_probe_output(output.decode()), "img")
    assert judged.status is Status.OK
    assert judged.detail == ("memory 104857723 bytes, pids 32, cpu 0.333 CPUs enforced "
                             "(cgroup v2, probe img)")


def test_no_swap_accounting_is_noted_not_failed() -> None:
    output = b"cgroup=1\nmemory=4294967296\npids=128\ncpu_quota=100000\ncpu_period=100000\n"
    judged = doctor_core.judge_limits(DEFAULTS, parse_probe_output(output.decode()), "img")
    assert judged.status is Status.OK and judged.detail.endswith("(no swap accounting)")


def test_the_probe_script_reads_both_cgroup_layouts() -> None:
    script = doctor_core.PROBE_SCRIPT
    for path in ("memory.max", "memory.swap.max", "pids.max", "cpu.max",
                 "memory/memory.limit_in_bytes", "memory/memory.memsw.limit_in_bytes",
                 "pids/pids.max", "cpu.cfs_quota_us", "cpu.cfs_period_us"):
        assert path in script


def test_an_invalid_config_is_reported_once_not_by_every_check(h: Harness) -> None:
    (h.state / "runs").mkdir(parents=True)
    h.config.write_text("[gc]\nbatch_size = 0\n", encoding="utf-8")
    rep = by_id(report(h))
    assert rep["config"].status is Status.FAIL
    assert (rep["gc"].status, rep["gc"].reason) == (Status.WARN, Reason.INVALID_CONFIG)
    assert h.engine.called("list_labelled") == [] and h.engine.called("create") == []
