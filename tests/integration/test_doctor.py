"""`sbx doctor` against the real engine: the limit probe reads back what was asked, leaves
nothing behind, the JSON contract holds, and a hung engine cannot hang doctor."""

from __future__ import annotations

import io
import os
import re
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sbx.base.reasons import Reason
from sbx.base.render import Renderer
from sbx.seams.driver import SdkEngine
from sbx.usecases.context import AppContext
from sbx.usecases.doctor.diagnose import CHECKS, diagnose
from sbx.usecases.doctor.model import DoctorRequest, Status

from .conftest import owned

pytestmark = pytest.mark.docker

# A fix line ends with its reason code; the host-services warning has none (no refusal fits).
LINE = re.compile(r"^(?:[✓!✗]  \S.* — \S.*|    fix: .+ \([a-z_]+\)"
                  r"|    fix: .+, or bind those services to 127\.0\.0\.1\."
                  r"|doctor: \d+ ok, \d+ warnings?, \d+ failed)$")


@pytest.fixture
def env(state_home: Path, tmp_path: Path) -> dict[str, str]:
    (tmp_path / "cfg.toml").touch()  # SBX_CONFIG must name a file; empty means defaults
    return {**os.environ, "SBX_HOME": str(state_home), "SBX_CONFIG": str(tmp_path / "cfg.toml")}


def test_real_probe_passes_and_leaves_nothing(engine: SdkEngine, env: dict[str, str],
                                              state_home: Path, sbx_cli: Any) -> None:
    result = sbx_cli(["doctor"], env=env)
    assert result.exit_code == 0, result.stdout
    lines = result.stdout.splitlines()
    assert all(LINE.match(line) for line in lines), lines
    assert any(line.startswith("✓  resource limits — memory 4 GiB, pids 128, cpu 1.000 CPUs "
                               "enforced") for line in lines), lines
    assert owned(engine, state_home) == []
    assert list((state_home / "runs").iterdir()) == []


def test_configured_limits_are_read_back(engine: SdkEngine, env: dict[str, str],
                                         state_home: Path, sbx_cli: Any) -> None:
    Path(env["SBX_CONFIG"]).write_text(
        "[sandbox]\nmemory_bytes = 67108864\npids = 32\ncpu_millis = 500\n"
        "tmp_bytes = 8388608\nworkspace_bytes = 8388608\nhome_bytes = 8388608\n",
        encoding="utf-8")
    envelope = sbx_cli(["doctor", "--json"], env=env).envelope()
    assert envelope["exit_code"] == 0
    checks = {c["id"]: c for c in envelope["data"]["checks"]}
    limits = checks["limits"]
    assert limits["status"] == "ok", limits
    readings = {r["name"]: r for r in limits["data"]["limits"]}
    assert readings["memory"]["read"] == "64 MiB" and readings["pids"]["read"] == "32"
    assert readings["cpu"]["read"] == "0.500 CPUs"
    assert all(r["enforced"] for r in readings.values())
    assert checks["config"]["detail"].endswith("is valid (6 settings from the file)")
    assert owned(engine, state_home) == []


def test_json_contract(engine: SdkEngine, env: dict[str, str], sbx_cli: Any) -> None:
    result = sbx_cli(["doctor", "--json"], env=env)
    envelope = result.envelope()
    assert result.stderr == ""
    assert envelope["sbx_result_version"] == 1 and envelope["command"] == "doctor"
    assert envelope["status"] == "ok" and envelope["exit_code"] == result.exit_code == 0
    data: Any = envelope["data"]
    assert [c["id"] for c in data["checks"]] == ["platform", "config", "identity", "engine",
                                                 "runtimes", "limits", "gc", "egress-ca",
                                                 "egress-proxy", "egress-host-services"]
    runtimes = next(c for c in data["checks"] if c["id"] == "runtimes")
    assert "runc" in runtimes["data"]["runtimes"] and runtimes["status"] == "ok"
    for check in data["checks"]:
        assert {"id", "title", "status", "detail", "reason", "fix"} <= set(check)
        assert check["status"] in {"ok", "warn", "fail"}
    engine_check = next(c for c in data["checks"] if c["id"] == "engine")
    assert engine_check["data"]["version"] and engine_check["data"]["api_version"]
    assert engine_check["data"]["cgroup_version"] in {"1", "2"}


def test_gc_check_counts_what_a_crash_left(engine: SdkEngine, env: dict[str, str],
                                           state_home: Path, sbx_cli: Any) -> None:
    from .test_gc import create_container, labelled, remove_everything

    (state_home / "runs").mkdir(parents=True)
    create_container(engine, labelled(state_home, deadline="1"))
    try:
        envelope = sbx_cli(["doctor", "--json"], env=env).envelope()
        gc = next(c for c in envelope["data"]["checks"]
                  if c["id"] == "gc")
        assert gc["status"] == "warn" and gc["detail"] == "stale: 1 container"
        assert "sbx gc" in gc["fix"] and envelope["exit_code"] == 0
    finally:
        remove_everything(engine, state_home)


@pytest.fixture
def hung_engine() -> Iterator[str]:
    """A unix socket that accepts connections and never answers."""
    directory = tempfile.mkdtemp(prefix="sbx-hung-", dir="/tmp")
    path = os.path.join(directory, "docker.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(8)
    server.settimeout(0.1)
    stop = threading.Event()
    held: list[socket.socket] = []

    def accept() -> None:
        for _ in range(600):  # bounded: at most 60 s of accepting
            if stop.is_set():
                return
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            held.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"unix://{path}"
    finally:
        stop.set()
        thread.join(timeout=5)
        for conn in held:
            conn.close()
        server.close()
        os.unlink(path)
        os.rmdir(directory)


def test_a_hung_engine_cannot_hang_doctor(hung_engine: str, env: dict[str, str],
                                          tmp_path: Path) -> None:
    hung_env = {**env, "DOCKER_HOST": hung_engine}
    ctx = AppContext(env=hung_env, cwd=tmp_path,
                     renderer=Renderer(io.StringIO(), io.StringIO(), as_json=True, env=hung_env))
    bound = 1.0
    started = time.monotonic()
    report = diagnose(ctx, DoctorRequest(check_timeout_s=bound, probe_timeout_s=bound))
    elapsed = time.monotonic() - started
    # One check waits out its timeout; the engine-dependent ones report at once.
    assert elapsed < bound * 3, f"doctor took {elapsed:.1f}s"
    checks = {c.id: c for c in report.checks}
    assert (checks["engine"].status, checks["engine"].reason) == (
        Status.FAIL, Reason.DOCKER_UNREACHABLE)
    assert checks["engine"].detail == f"timed out after {bound:g}s"
    assert checks["limits"].status is Status.FAIL and checks["gc"].status is Status.WARN
    assert report.exit_status == 1


def _cmdlines_with(needle: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if needle.encode() in raw:
            found.append(int(entry.name))
    return found


def test_real_proxy_starts_binds_and_stops(env: dict[str, str], state_home: Path,
                                           tmp_path: Path) -> None:
    """The egress checks against this host: a real proxy process starts, prints its ready line,
    is stopped, and leaves no process and no run directory; the real CA is created once and
    then loaded, and the proxy never touches it."""
    ctx = AppContext(env=env, cwd=tmp_path,
                     renderer=Renderer(io.StringIO(), io.StringIO(), as_json=True, env=env))
    egress_checks = tuple(c for c in CHECKS if c.id.startswith("egress-"))
    report = diagnose(ctx, checks=egress_checks)
    checks = {c.id: c for c in report.checks}
    proxy = checks["egress-proxy"]
    assert proxy.status is Status.OK, proxy
    run_id = proxy.data["run_id"]
    assert re.fullmatch(r"[0-9a-f]{32}", run_id)
    assert 0 < proxy.data["port"] < 65536
    assert proxy.detail == f"a deny-all proxy started, bound 127.0.0.1:{proxy.data['port']} " \
                           "and stopped"
    assert _cmdlines_with(run_id) == []
    assert list((state_home / "runs").iterdir()) == []
    ca = checks["egress-ca"]
    assert ca.status is Status.OK and ca.data["created"] is True
    assert ca.data["days_left"] >= 360
    pem = (state_home / "ca" / "ca.pem").read_bytes()
    again = {c.id: c for c in diagnose(ctx, checks=egress_checks).checks}
    assert again["egress-ca"].data["created"] is False
    assert again["egress-ca"].data["fingerprint_sha256"] == ca.data["fingerprint_sha256"]
    assert (state_home / "ca" / "ca.pem").read_bytes() == pem
    assert _cmdlines_with(again["egress-proxy"].data["run_id"]) == []
    host = checks["egress-host-services"]
    if os.geteuid() == 0 and shutil.which("iptables"):
        assert host.status is Status.OK and host.data["closed"] is True, host
    else:
        assert host.data["closed"] is False
