"""`sbx doctor` against a fake engine: each check, the timeouts, the probe's cleanup, the limit
comparison for cgroup v1 and v2, golden human output and the JSON contract.

Golden files live in tests/golden/doctor_*.txt; regenerate them with
``SBX_UPDATE_GOLDEN=1 pytest tests/unit/usecases/test_doctor.py`` and review the diff.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from sbx.base.config import GiB, MiB
from sbx.base.errors import EngineUnavailable, SbxError
from sbx.base.reasons import Reason
from sbx.base.render import Renderer
from sbx.domain.sandbox.hardening import Limits
from sbx.seams.engine import EngineInfo
from sbx.usecases.doctor import diagnose as doctor_diagnose
from sbx.usecases.doctor import limits as doctor_limits
from sbx.usecases.doctor import model as doctor_model
from sbx.usecases.doctor import probes as doctor_probes
from sbx.usecases.doctor.diagnose import diagnose
from sbx.usecases.doctor.egress import listening_ports
from sbx.usecases.doctor.limits import compare_limits, parse_probe_output, probe_candidates
from sbx.usecases.doctor.model import Check, DoctorRequest, HostFacts, Status, Verdict
from sbx.usecases.doctor.probes import EgressProbes
from sbx.views import doctor as doctor_view
from tests.unit.usecases.test_gc import Harness, container, run_id

GOLDEN = Path(__file__).resolve().parents[2] / "golden"
USER = HostFacts("posix", "Linux", 1000, 1000)
ROOT = HostFacts("posix", "Linux", 0, 0)
DEFAULTS = Limits(memory_bytes=4 * GiB, pids=128, cpu_millis=1000, tmp_bytes=256 * MiB,
                  workspace_bytes=512 * MiB, home_bytes=512 * MiB)
V2_OK = b"cgroup=2\nmemory=4294967296\nswap=0\npids=128\ncpu=100000 100000\n"
V1_OK = (b"cgroup=1\nmemory=4294967296\nmemsw=4294967296\npids=128\n"
         b"cpu_quota=100000\ncpu_period=100000\n")
FAST = DoctorRequest(check_timeout_s=5.0, probe_timeout_s=5.0)
NOW = datetime(2030, 1, 15, 12, 0, tzinfo=UTC)
TCP_HEADER = ("  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  "
              "timeout inode\n")
# 0.0.0.0:22 and 0.0.0.0:5432 listening, 127.0.0.1:631 listening, one established connection
PROC_TCP = TCP_HEADER + (
    "   0: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000  0 0 1 1\n"
    "   1: 00000000:1538 00000000:0000 0A 00000000:00000000 00:00000000 00000000  0 0 2 1\n"
    "   2: 0100007F:0277 00000000:0000 0A 00000000:00000000 00:00000000 00000000  0 0 3 1\n"
    "   3: 0100007F:BEE4 0100007F:842F 01 00000000:00000000 00:00000000 00000000  0 0 4 1\n")
# :::22 (again) and :::8080 listening, ::1:9000 listening
PROC_TCP6 = TCP_HEADER + (
    "   0: 00000000000000000000000000000000:0016 00000000000000000000000000000000:0000 0A "
    "00000000:00000000 00:00000000 00000000 0 0 5 1\n"
    "   1: 00000000000000000000000000000000:1F90 00000000000000000000000000000000:0000 0A "
    "00000000:00000000 00:00000000 00000000 0 0 6 1\n"
    "   2: 00000000000000000000000001000000:2328 00000000000000000000000000000000:0000 0A "
    "00000000:00000000 00:00000000 00000000 0 0 7 1\n")


class FakeProxy:
    def __init__(self, run_dir: Path, *, port: int = 40123, stubborn: bool = False) -> None:
        self.run_dir = run_dir
        self.port = port
        self.pid = 4_100_000
        self.stubborn = stubborn
        self.running = True
        self.stops = 0

    def alive(self) -> bool:
        return self.running

    def stop(self) -> None:
        self.stops += 1
        self.running = self.stubborn


class ProxyStarts:
    """Records each start: the config it was given and whether its run directory existed."""

    def __init__(self, error: SbxError | None = None, stubborn: bool = False) -> None:
        self.error = error
        self.stubborn = stubborn
        self.calls: list[dict[str, Any]] = []
        self.proxies: list[FakeProxy] = []

    def __call__(self, config_json: str, run_dir: Path, run_id: str) -> FakeProxy:
        record = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
        self.calls.append({"config": json.loads(config_json), "run_dir": run_dir,
                           "run_id": run_id, "record": record})
        if self.error is not None:
            raise self.error
        proxy = FakeProxy(run_dir, stubborn=self.stubborn)
        self.proxies.append(proxy)
        return proxy


def probes(*, tcp: tuple[str, ...] = (TCP_HEADER,), iptables: str | None = "/usr/sbin/iptables",
           iptables_problem: str | None = None, starts: ProxyStarts | None = None,
           now: datetime = NOW) -> EgressProbes:
    return EgressProbes(iptables=lambda: iptables, iptables_problem=lambda: iptables_problem,
                        proc_net_tcp=lambda: tcp, start_proxy=starts or ProxyStarts(),
                        now=lambda: now)


@pytest.fixture(autouse=True)
def fake_egress(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No unit test starts a real proxy or reads this host's sockets and firewall."""
    monkeypatch.setattr(doctor_probes, "DEFAULT_EGRESS_PROBES", probes())
    yield


@pytest.fixture
def h(tmp_path: Path) -> Harness:
    harness = Harness(tmp_path)
    harness.engine.stdout = V2_OK
    return harness


def report(h: Harness, host: HostFacts = USER, request: DoctorRequest = FAST,
           **kwargs: Any) -> doctor_model.DoctorReport:
    return diagnose(h.ctx(), request, host=host, **kwargs)


def by_id(rep: doctor_model.DoctorReport) -> dict[str, doctor_model.CheckResult]:
    return {check.id: check for check in rep.checks}


# -- golden human output ------------------------------------------------------------------------


def scrub(text: str, tmp: Path) -> str:
    text = text.replace(str(tmp), "<TMP>")
    text = re.sub(r"Docker \S+ \(API [0-9.]+\)", "Docker <VERSION> (API <API>)", text)
    text = re.sub(r"\b[0-9a-f]{12,64}\b", "<ID>", text)
    text = re.sub(r"sbx sandbox CA [0-9a-f]{8}\b", "sbx sandbox CA <HOME>", text)
    return re.sub(r"\b\d+(\.\d+)?(ms|s)\b", "<DURATION>", text)


def human(h: Harness, rep: doctor_model.DoctorReport) -> str:
    out = io.StringIO()
    renderer = Renderer(out, io.StringIO(), as_json=False, env={"NO_COLOR": "1"}, width=88)
    doctor_view.doctor_report(renderer, rep)
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
    h.engine.fail("info", EngineUnavailable(
        "cannot reach the Docker engine: connection refused",
        hint="Start the engine and check that `docker version` answers."))
    rep = report(h, host=ROOT)
    assert rep.exit_status == 1
    assert_golden("problems", human(h, rep))
    # Checks that need the engine do not even try once the engine check failed.
    assert [name for name, _ in h.engine.calls] == ["info"]


def test_golden_limits_unenforced_and_stale_objects(h: Harness,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor_probes, "DEFAULT_EGRESS_PROBES",
                        probes(tcp=(PROC_TCP, PROC_TCP6), iptables=None))
    h.engine.engine_info = EngineInfo("24.0.99", "1.43", "linux", "2", "systemd", True,
                                      ("name=rootless",))
    h.engine.stdout = b"cgroup=2\nmemory=max\nswap=max\npids=max\ncpu=max 100000\n"
    (h.state / "runs").mkdir(parents=True)
    h.engine.containers = [container("exited", home=h.home, run=run_id()),
                           container("running", home=h.home, run=run_id(), deadline="?")]
    rep = report(h)
    assert rep.exit_status == 1
    assert_golden("unenforced", human(h, rep))
    limits = by_id(rep)["limits"]
    assert limits.data["unenforced"] == ["memory", "swap", "pids", "cpu"]


@pytest.mark.slow
def test_golden_hung_engine(h: Harness) -> None:
    release = threading.Event()
    h.engine.on_call("info", lambda: release.wait(30))
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
    h.engine.fail("info", EngineUnavailable("cannot reach the Docker engine: gone"))
    out = io.StringIO()
    renderer = Renderer(out, io.StringIO(), as_json=True, env={})
    doctor_view.doctor_report(renderer, report(h, host=ROOT))
    envelope = json.loads(out.getvalue())
    assert set(envelope) == {"sbx_result_version", "command", "status", "exit_code", "reason",
                             "message", "hint", "data", "diagnostics"}
    assert (envelope["command"], envelope["status"], envelope["exit_code"]) == (
        "doctor", "failed", 1)
    checks = envelope["data"]["checks"]
    assert [c["id"] for c in checks] == ["platform", "config", "identity", "engine", "runtimes",
                                         "limits", "gc", "egress-ca", "egress-proxy",
                                         "egress-host-services"]
    for check in checks:
        assert {"id", "title", "status", "detail", "reason", "fix"} <= set(check)
        assert check["status"] in {"ok", "warn", "fail"}
        assert isinstance(check["title"], str) and isinstance(check["detail"], str)
        assert_check_contract(check)
    assert envelope["data"]["summary"] == {"ok": 5, "warn": 3, "fail": 2}
    egress = {c["id"]: c for c in checks if c["id"].startswith("egress-")}
    assert egress["egress-ca"]["data"]["not_after"] == "2031-01-15T12:00:00+00:00"
    assert egress["egress-ca"]["data"]["days_left"] == 365
    assert egress["egress-proxy"]["data"]["port"] == 40123
    assert egress["egress-host-services"]["data"] == {"closed": True}


def assert_check_contract(check: dict[str, Any]) -> None:
    """ok: no reason, no fix. warn and fail: a reason code and a fix."""
    if check["status"] == "ok":
        assert check["reason"] is None and check["fix"] is None
        return
    assert check["fix"]
    assert check["reason"] in {r.value for r in Reason}


def test_json_contract_host_services_warning(h: Harness) -> None:
    out = io.StringIO()
    rep = report(h, egress=probes(tcp=(PROC_TCP,)))
    doctor_view.doctor_report(Renderer(out, io.StringIO(), as_json=True, env={}), rep)
    envelope = json.loads(out.getvalue())
    checks = {c["id"]: c for c in envelope["data"]["checks"]}
    for check in checks.values():
        assert_check_contract(check)
    host = checks["egress-host-services"]
    assert host["status"] == "warn" and host["reason"] == "host_services_exposed"
    assert host["data"] == {"closed": False, "why": "sbx is not root", "ports": [22, 5432]}
    assert envelope["exit_code"] == 0


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
    h.engine.stdout = V2_OK.replace(b"pids=128", b"pids=64")
    rep = report(h)
    assert by_id(rep)["config"].detail == f"{h.config} is valid (1 setting from the file)"
    assert by_id(rep)["limits"].status is Status.OK


def test_engine_on_windows_containers_fails(h: Harness) -> None:
    h.engine.engine_info = EngineInfo("20.10", "1.41", "windows", "", "", False, ())
    check = by_id(report(h))["engine"]
    assert (check.status, check.reason) == (Status.FAIL, Reason.UNSUPPORTED_PLATFORM)


def test_rootless_on_cgroup_v1_fails_the_engine_check_as_run_refuses(h: Harness) -> None:
    h.engine.engine_info = EngineInfo("20.10", "1.41", "linux", "1", "cgroupfs", True, ())
    h.engine.stdout = V1_OK
    rep = report(h)
    assert by_id(rep)["engine"].status is Status.FAIL
    assert by_id(rep)["engine"].reason is Reason.RESOURCE_LIMITS_UNENFORCED
    assert by_id(rep)["limits"].status is Status.OK  # still probed: it shows which limits


def test_probe_is_hardened_labelled_and_always_removed(h: Harness) -> None:
    rep = report(h)
    assert by_id(rep)["limits"].status is Status.OK
    (spec,) = [args[0] for args in h.engine.called("create")]
    assert spec.read_only and spec.cap_drop == ("ALL",) and spec.network_mode == "none"
    assert spec.user == "1000:1000" and spec.memory_bytes == 4 * GiB and spec.pids_limit == 128
    assert spec.labels["dev.sbx.role"] == "helper" and spec.labels["dev.sbx.home"] == h.home
    assert spec.entrypoint[:2] == ("/bin/sh", "-c")
    created = list(h.engine.specs)
    assert [args[0] for args in h.engine.called("remove_container")] == created
    assert list((h.state / "runs").iterdir()) == []


@pytest.mark.parametrize("failure", ["start", "timeout"])
def test_probe_is_removed_when_it_fails(h: Harness, failure: str) -> None:
    if failure == "start":
        h.engine.fail("start", SbxError(Reason.START_FAILED, "no /bin/sh"))
    else:
        h.engine.exit_status = None
    rep = report(h)
    created = list(h.engine.specs)
    assert created and [a[0] for a in h.engine.called("remove_container")] == created
    assert list((h.state / "runs").iterdir()) == []
    check = by_id(rep)["limits"]
    if failure == "start":
        assert (check.status, check.reason) == (Status.WARN, Reason.IMAGE_MISSING)
    else:
        assert (check.status, check.reason) == (Status.FAIL, Reason.DOCKER_UNREACHABLE)
        assert h.engine.called("kill")


def test_probe_falls_back_to_the_next_image(h: Harness) -> None:
    h.engine.add_image("big/image:1", size=900_000_000)
    h.engine.add_image("tiny/noshell:1", size=10)
    h.engine.fail("start", SbxError(Reason.START_FAILED, "no /bin/sh"))
    rep = report(h)
    # every image fails to start: three attempts, then a warning
    assert [a[0] for a in h.engine.called("image")] == [
        "sbx-test/busybox:1", "tiny/noshell:1", "big/image:1"]
    assert by_id(rep)["limits"].status is Status.WARN


def test_no_local_image_warns(h: Harness) -> None:
    h.engine.images.clear()
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
    h.engine.fail("list_labelled", SbxError(Reason.CLEANUP_FAILED, "listing sbx objects: 500"))
    check = by_id(report(h))["gc"]
    assert check.status is Status.WARN and "listing sbx objects: 500" in check.detail


# -- the runner ---------------------------------------------------------------------------------


def test_each_check_times_out_on_its_own(h: Harness) -> None:
    release = threading.Event()

    def hangs(_state: doctor_model.DoctorState) -> Verdict:
        release.wait(30)
        return Verdict(Status.OK, "late")

    checks = (Check("slow", "slow", hangs, timeout_reason=Reason.INVALID_CONFIG),
              Check("fast", "fast", lambda _s: Verdict(Status.OK, "fine")))
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
    def broken(_state: doctor_model.DoctorState) -> Verdict:
        raise ZeroDivisionError("bug")

    with pytest.raises(ZeroDivisionError):
        report(h, checks=(Check("broken", "broken", broken),))


def test_cli_exit_status_and_dispatch(h: Harness, monkeypatch: pytest.MonkeyPatch,
                                      sbx_cli: Any) -> None:
    import sbx.seams.transports

    monkeypatch.setattr(sbx.seams.transports, "open_engine", lambda _env: h.engine)
    env = {**os.environ, **h.env}
    ok = sbx_cli(["doctor"], env=env)
    assert ok.exit_code == 0, ok.stdout + ok.stderr
    assert ok.stdout.splitlines()[-1].startswith("doctor: ")
    h.engine.fail("info", EngineUnavailable("cannot reach the Docker engine: gone"))
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
                    workspace_bytes=1, home_bytes=1)
    output = f"cgroup=2\nmemory={100 * MiB}\nswap=0\npids=32\ncpu=33300 100000\n".encode()
    assert all(_enforced(output, limits).values())
    judged = doctor_limits.judge_limits(limits, parse_probe_output(output.decode()), "img")
    assert judged.status is Status.OK
    assert judged.detail == ("memory 104857723 bytes, pids 32, cpu 0.333 CPUs enforced "
                             "(cgroup v2, probe img)")


def test_no_swap_accounting_is_noted_not_failed() -> None:
    output = b"cgroup=1\nmemory=4294967296\npids=128\ncpu_quota=100000\ncpu_period=100000\n"
    judged = doctor_limits.judge_limits(DEFAULTS, parse_probe_output(output.decode()), "img")
    assert judged.status is Status.OK and judged.detail.endswith("(no swap accounting)")


def test_the_probe_script_reads_both_cgroup_layouts() -> None:
    script = doctor_limits.PROBE_SCRIPT
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


# -- egress checks ------------------------------------------------------------------------------


def egress_report(h: Harness, host: HostFacts = USER, **kwargs: Any) -> dict[
        str, doctor_model.CheckResult]:
    return by_id(report(h, host=host, egress=probes(**kwargs)))


def test_listening_ports_are_read_from_proc_net_tcp_and_tcp6() -> None:
    assert listening_ports([PROC_TCP, PROC_TCP6]) == [22, 5432, 8080]
    assert listening_ports([TCP_HEADER, "", "garbage\n   0: zz:zz 0 0A\n"]) == []
    assert listening_ports([]) == []


def test_host_services_closed_when_root_with_working_iptables(h: Harness) -> None:
    check = egress_report(h, ROOT, tcp=(PROC_TCP,))["egress-host-services"]
    assert check.status is Status.OK and check.fix is None
    assert check.detail == "closed per run by bridge firewall rules (root, /usr/sbin/iptables)"


def test_host_services_not_root_warns_naming_the_ports(h: Harness) -> None:
    check = egress_report(h, USER, tcp=(PROC_TCP, PROC_TCP6))["egress-host-services"]
    assert check.status is Status.WARN
    assert check.detail == ("ports 22, 5432, 8080 listen on all interfaces and a sandbox network "
                            "could reach them (sbx is not root: cannot install bridge rules)")
    assert check.fix == "Run sbx as root, or bind those services to 127.0.0.1."
    assert check.data["ports"] == [22, 5432, 8080]


@pytest.mark.parametrize(("iptables", "problem", "why", "fix"), [
    (None, None, "iptables is missing", "Install iptables"),
    ("/sbin/iptables", "iptables refused: Permission denied (you must be root)",
     "iptables does not work here: iptables refused: Permission denied (you must be root)",
     "Give sbx CAP_NET_ADMIN"),
])
def test_host_services_root_without_usable_iptables_warns(
        h: Harness, iptables: str | None, problem: str | None, why: str, fix: str) -> None:
    check = egress_report(h, ROOT, tcp=(PROC_TCP,), iptables=iptables,
                          iptables_problem=problem)["egress-host-services"]
    assert check.status is Status.WARN
    assert check.detail == (f"ports 22, 5432 listen on all interfaces and a sandbox network "
                            f"could reach them ({why}: cannot install bridge rules)")
    assert (check.fix or "").startswith(fix)


def test_host_services_one_port_and_no_port(h: Harness) -> None:
    one = TCP_HEADER + "   0: 00000000:0016 00000000:0000 0A 0:0 0:0 0 0 0 1 1\n"
    check = egress_report(h, tcp=(one,))["egress-host-services"]
    assert check.detail.startswith("port 22 listens on all interfaces and a sandbox network "
                                   "could reach it (")
    none = egress_report(h, tcp=(TCP_HEADER,))["egress-host-services"]
    assert none.status is Status.OK
    assert none.detail == ("no host TCP service listens on all interfaces (bridges stay open: "
                           "sbx is not root)")


def test_ca_missing_is_created_and_then_loaded(h: Harness) -> None:
    first = egress_report(h)["egress-ca"]
    assert first.status is Status.OK and first.data["created"] is True
    assert first.detail.startswith("created now (runs with a network policy use it): O=sbx,CN=sbx "
                                   "sandbox CA ")
    assert first.detail.endswith(", valid until 2031-01-15 (365 days left)")
    pem = (h.state / "ca" / "ca.pem").read_bytes()
    later = egress_report(h, now=NOW + timedelta(days=100))["egress-ca"]
    assert later.status is Status.OK and later.data["created"] is False
    assert later.detail.endswith(", valid until 2031-01-15 (265 days left)")
    assert not later.detail.startswith("created")
    assert (h.state / "ca" / "ca.pem").read_bytes() == pem


@pytest.mark.parametrize(("days", "what"), [(362, "expires within 7 days"),
                                            (400, "has expired"),
                                            (-30, "is not valid yet (check the clock)")])
def test_ca_expiring_or_expired_warns_and_is_not_replaced(h: Harness, days: int,
                                                          what: str) -> None:
    egress_report(h)  # creates it at NOW
    files = {p.name: p.read_bytes() for p in (h.state / "ca").iterdir() if p.is_file()}
    check = egress_report(h, now=NOW + timedelta(days=days))["egress-ca"]
    assert (check.status, check.reason) == (Status.WARN, Reason.PROXY_FAILED)
    assert check.detail.endswith(what), check.detail
    assert "next run with a network policy replaces it" in (check.fix or "")
    if days == 362:
        assert "(3 days left)" in check.detail and check.data["days_left"] == 3
    assert {p.name: p.read_bytes() for p in (h.state / "ca").iterdir() if p.is_file()} == files


def test_ca_unreadable_warns_with_the_fix(h: Harness) -> None:
    egress_report(h)
    (h.state / "ca" / "ca.pem").write_text("not a certificate", encoding="utf-8")
    check = egress_report(h)["egress-ca"]
    assert (check.status, check.reason) == (Status.WARN, Reason.PROXY_FAILED)
    assert check.detail == (f"{h.state / 'ca'} is unreadable (not a valid CA key and "
                            "certificate)")
    assert (check.fix or "").startswith(f"Remove {h.state / 'ca'}")
    assert (h.state / "ca" / "ca.pem").read_text(encoding="utf-8") == "not a certificate"


def test_proxy_starts_deny_all_on_loopback_and_is_stopped(h: Harness) -> None:
    starts = ProxyStarts()
    check = egress_report(h, starts=starts)["egress-proxy"]
    assert check.status is Status.OK
    assert check.detail == "a deny-all proxy started, bound 127.0.0.1:40123 and stopped"
    (call,) = starts.calls
    config = call["config"]
    assert config["network"] is None and config["credentials"] == []
    assert (config["listen_host"], config["listen_port"]) == ("127.0.0.1", 0)
    assert config["run_id"] == call["run_id"] == check.data["run_id"]
    # a throwaway state home inside the run directory: the real CA is never touched by the proxy
    assert config["state_home"] == str(call["run_dir"] / "home")
    assert call["run_dir"].parent == h.state / "runs"
    assert call["record"]["pid"] == os.getpid() and call["record"]["workload"] == "doctor-proxy"
    (proxy,) = starts.proxies
    assert proxy.stops >= 1 and not proxy.alive()
    assert list((h.state / "runs").iterdir()) == []


def test_proxy_that_does_not_start_fails_with_its_stderr(h: Harness) -> None:
    error = SbxError(Reason.PROXY_FAILED, "the egress proxy did not start",
                     details={"stderr": "Traceback ...\nOSError: [Errno 98] address in use\n"})
    check = egress_report(h, starts=ProxyStarts(error))["egress-proxy"]
    assert (check.status, check.reason) == (Status.FAIL, Reason.PROXY_FAILED)
    assert check.detail == "the proxy did not start: OSError: [Errno 98] address in use"
    assert "Traceback" in check.data["stderr"] and check.fix
    assert list((h.state / "runs").iterdir()) == []


def test_proxy_that_cannot_be_executed_fails(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    def denied(*_args: Any, **_kwargs: Any) -> Any:
        raise PermissionError(13, "Permission denied", "/venv/bin/python3")

    monkeypatch.setattr(subprocess, "Popen", denied)  # as sbx.domain.egress.plan calls it
    egress = replace(probes(), start_proxy=doctor_probes.EgressProbes().start_proxy)
    check = by_id(report(h, egress=egress))["egress-proxy"]
    assert (check.status, check.reason) == (Status.FAIL, Reason.PROXY_FAILED)
    assert check.detail == ("the proxy did not start: PermissionError: [Errno 13] Permission "
                            "denied: '/venv/bin/python3'")
    assert list((h.state / "runs").iterdir()) == []


def test_unwritable_state_home_fails_the_proxy_check(h: Harness) -> None:
    h.state.mkdir(parents=True)
    (h.state / "runs").write_text("not a directory", encoding="utf-8")
    only = tuple(c for c in doctor_diagnose.CHECKS if c.id == "egress-proxy")
    (check,) = report(h, checks=only).checks
    assert (check.status, check.reason) == (Status.FAIL, Reason.PROXY_FAILED)
    assert check.detail.startswith(f"cannot write the run directory {h.state / 'runs'}/")


def test_proxy_that_will_not_stop_fails_and_its_run_dir_stays_for_gc(h: Harness) -> None:
    starts = ProxyStarts(stubborn=True)
    check = egress_report(h, starts=starts)["egress-proxy"]
    assert (check.status, check.reason) == (Status.FAIL, Reason.PROXY_FAILED)
    assert "sbx gc" in (check.fix or "")
    (run_dir,) = (h.state / "runs").iterdir()
    assert json.loads((run_dir / "run.json").read_text())["proxy_pid"] == 4_100_000


def test_egress_checks_run_without_the_engine(h: Harness) -> None:
    h.engine.fail("info", EngineUnavailable("cannot reach the Docker engine: gone"))
    rep = egress_report(h, ROOT)
    assert rep["engine"].status is Status.FAIL
    assert all(rep[i].status is Status.OK
               for i in ("egress-ca", "egress-proxy", "egress-host-services"))


def test_a_hung_egress_probe_times_out_as_proxy_failed(h: Harness) -> None:
    release = threading.Event()

    def hangs() -> tuple[str, ...]:
        release.wait(30)
        return ()

    egress = replace(probes(), proc_net_tcp=hangs)
    checks = tuple(c for c in doctor_diagnose.CHECKS if c.id == "egress-host-services")
    checks = (replace(checks[0], timeout_s=None),)
    try:
        rep = report(h, request=DoctorRequest(check_timeout_s=0.2), checks=checks, egress=egress)
    finally:
        release.set()
    (check,) = rep.checks
    assert (check.status, check.reason, check.detail) == (
        Status.FAIL, Reason.PROXY_FAILED, "timed out after 0.2s")
