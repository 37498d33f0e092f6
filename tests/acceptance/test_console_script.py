"""The installed `sbx` console script, run as a user would: exit codes, stdout/stderr, signals,
and nothing left behind after any refusal."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sbx.base import labels
from sbx.base.errors import SbxError
from sbx.base.paths import home_hash
from sbx.seams.transports import open_engine

SBX = shutil.which("sbx", path=str(Path(sys.executable).parent)) or "sbx"
BUSYBOX = "sbx-test/busybox:1"
REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.acceptance


@pytest.fixture(autouse=True)
def _nothing_left_behind(tmp_path: Path) -> Iterator[None]:
    """After every refusal or run, no object labelled for this test's state home remains."""
    yield
    driver = open_engine(dict(os.environ))
    try:
        leftovers = driver.list_owned(labels.home_selector(home_hash(tmp_path / "state")))
    except SbxError:
        return  # no engine here: nothing could have been created
    assert leftovers == []


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    (tmp_path / "config.toml").touch()  # SBX_CONFIG must name a file; empty means defaults
    env = {**os.environ, "SBX_HOME": str(tmp_path / "state"),
           "SBX_CONFIG": str(tmp_path / "config.toml"), "NO_COLOR": "1"}
    env.update(extra)
    return env


def _sbx(args: list[str], env: dict[str, str], timeout: float = 120,
         ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SBX, *args], env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL, check=False)


def _kit(tmp_path: Path, dockerfile: str = f"FROM {BUSYBOX}\nUSER agent\nCMD [\"true\"]\n",
         descriptor: str = "") -> Path:
    kit = tmp_path / "kit"
    kit.mkdir(exist_ok=True)
    (kit / "kit.yaml").write_text(
        f'# syntax=docker/sandbox-kit:3\nschemaVersion: "3"\nkind: workload\n{descriptor}',
        encoding="utf-8")
    (kit / "kit.dockerfile").write_text(dockerfile, encoding="utf-8")
    return kit


def test_version_and_help() -> None:
    version = subprocess.run([SBX, "--version"], capture_output=True, text=True, check=False)
    assert version.returncode == 0 and version.stdout.startswith("sbx ")
    helped = subprocess.run([SBX, "--help"], capture_output=True, text=True, check=False)
    assert helped.returncode == 0 and "run" in helped.stdout and "explain" in helped.stdout


def test_help_does_not_import_the_docker_sdk() -> None:
    code = ("import sys; from sbx.__main__ import cli; cli(['--help']); "
            "print('docker' in sys.modules, 'sbx.seams.driver' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=False)
    assert out.stdout.strip().splitlines()[-1] == "False False"


def test_python_dash_m_sbx_works() -> None:
    out = subprocess.run([sys.executable, "-m", "sbx", "--version"], capture_output=True,
                         text=True, check=False)
    assert out.returncode == 0 and out.stdout.startswith("sbx ")


def test_unknown_flag_is_a_usage_error(tmp_path: Path) -> None:
    result = _sbx(["run", "--no-such-flag", "x"], _env(tmp_path))
    assert result.returncode == 2
    assert "No such option" in result.stderr


def test_explain_reason_and_list(tmp_path: Path) -> None:
    one = _sbx(["explain", "mount_blocked"], _env(tmp_path))
    assert one.returncode == 0 and "cause:" in one.stdout and "fix:" in one.stdout
    listed = _sbx(["explain", "--list", "--json"], _env(tmp_path))
    codes = [r["code"] for r in json.loads(listed.stdout)["data"]["reasons"]]
    assert "docker_unreachable" in codes and "egress_denied" in codes
    wrong = _sbx(["explain", "mount_blokced"], _env(tmp_path))
    assert wrong.returncode == 2 and "mount_blocked" in wrong.stderr


def test_invalid_config_refuses_with_file_key_and_line(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text("[sandbox]\npids = 128\nmemroy_bytes = 1\n",
                                          encoding="utf-8")
    result = _sbx(["run", str(_kit(tmp_path))], _env(tmp_path))
    assert result.returncode == 125
    assert "config.toml:3" in result.stderr and "memory_bytes" in result.stderr
    assert "(invalid_config)" in result.stderr


def test_invalid_descriptor_names_path_and_position(tmp_path: Path) -> None:
    kit = _kit(tmp_path, descriptor="capabilities:\n  - type: not a type\n    optionl: true\n")
    result = _sbx(["run", "--json", str(kit)], _env(tmp_path))
    assert result.returncode == 125
    envelope = json.loads(result.stdout)
    assert envelope["reason"] == "invalid_kit" and envelope["status"] == "refused"
    paths = {d["path"]: (d["line"], d["col"]) for d in envelope["diagnostics"]}
    assert paths["capabilities[0].type"] == (5, 11)
    assert paths["capabilities[0].optionl"] == (6, 5)


def test_engine_down_is_docker_unreachable(tmp_path: Path) -> None:
    env = _env(tmp_path, DOCKER_HOST=f"unix://{tmp_path}/no-engine.sock")
    result = _sbx(["run", str(_kit(tmp_path))], env)
    assert result.returncode == 125
    assert "(docker_unreachable)" in result.stderr and "DOCKER_HOST" in result.stderr


def _crashing(args: list[str]) -> str:
    # A bug stand-in: the renderer raises a plain RuntimeError, which is not an SbxError.
    return ("import sys\nimport sbx.base.render as r\n"
            "def boom(self, reason):\n    raise RuntimeError('boom-for-test')\n"
            "r.Renderer.reason = boom\n"
            f"from sbx.__main__ import cli\nsys.exit(cli({args!r}))\n")


def test_unexpected_crash_writes_a_report(tmp_path: Path) -> None:
    env = _env(tmp_path)
    out = subprocess.run([sys.executable, "-c", _crashing(["explain", "timeout"])], env=env,
                         capture_output=True, text=True, check=False)
    assert out.returncode == 70
    assert "unexpected error" in out.stderr and "(internal_error)" in out.stderr
    assert "Traceback" not in out.stderr
    reports = list((tmp_path / "state" / "crash-reports").glob("crash-*.md"))
    assert len(reports) == 1
    text = reports[0].read_text(encoding="utf-8")
    assert "- sbx:" in text and "- python:" in text and "boom-for-test" in text
    loud = subprocess.run([sys.executable, "-c", _crashing(["--traceback", "explain", "timeout"])],
                          env=env, capture_output=True, text=True, check=False)
    assert "Traceback" in loud.stderr and "boom-for-test" in loud.stderr


@pytest.mark.docker
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_mid_run_removes_everything(tmp_path: Path, sig: signal.Signals) -> None:
    driver = open_engine(dict(os.environ))
    try:
        driver.info()
    except Exception as error:
        if os.environ.get("SBX_REQUIRE_ENGINE") == "1":
            pytest.fail(f"no engine: {error}")
        pytest.skip(f"no engine: {error}")
    env = _env(tmp_path)
    selector = labels.home_selector(home_hash(tmp_path / "state"))
    process = subprocess.Popen([SBX, "run", str(_kit(tmp_path)), "--", "sleep", "60"], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # bounded: until the sandbox runs
            if any(o.kind == "container" and o.state == "running"
                   for o in driver.list_owned(selector)):
                break
            time.sleep(0.1)
        else:
            pytest.fail("the sandbox never started")
        process.send_signal(sig)
        _out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130
    assert "(interrupted)" in err
    assert driver.list_owned(selector) == []
    assert not any((tmp_path / "state" / "runs").iterdir())


@pytest.mark.docker
def test_bundled_example_runs(tmp_path: Path) -> None:
    result = _sbx(["run", str(REPO / "examples" / "hello"), str(REPO / "examples" / "hello"),
                   "--access", "ro"], _env(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "hello from sbx: uid=1000" in result.stdout
    assert "root filesystem: read-only" in result.stdout
    assert "network: none" in result.stdout


@pytest.mark.docker
def test_verbose_traces_engine_calls_without_leaking_the_environment(tmp_path: Path) -> None:
    result = _sbx(["-vv", "run", str(_kit(tmp_path)), "--", "true"], _env(tmp_path))
    assert result.returncode == 0, result.stderr
    traced = [line for line in result.stderr.splitlines() if "engine: " in line]
    names = [line.split("engine: ", 1)[1].split("(", 1)[0] for line in traced]
    assert names[:1] == ["info"] and "create" in names and names[-1] == "remove_container"
    assert all(line.rstrip().endswith("ms]") for line in traced)
    assert "SBX_RUN_ID" not in result.stderr  # specs are summarised, never dumped
