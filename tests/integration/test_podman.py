"""Podman's Docker-compatible service (Debian's `podman system service`): sbx refuses to start a
sandbox there by name (``engine_unsupported``), before anything is built or created, and doctor
says the same. The service runs on a socket and storage of the test's own; the machine's Docker
engine is not touched."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.sbxproc import run_sbx

from .conftest import BUSYBOX

pytestmark = pytest.mark.docker

START_TIMEOUT_S = 60.0


def _podman(root: Path, *args: str) -> list[str]:
    return ["podman", "--root", str(root / "storage"), "--runroot", str(root / "run"), *args]


@pytest.fixture
def podman_socket(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    if shutil.which("podman") is None:
        if os.environ.get("SBX_REQUIRE_ENGINE") == "1":
            pytest.fail("podman is not installed (scripts/setup.sh installs it)")
        pytest.skip("podman is not installed")
    # A short path of its own: a unix socket's path is limited to 107 bytes.
    root = Path(tempfile.mkdtemp(prefix="sbx-podman-", dir="/tmp"))
    sock = root / "podman.sock"
    log = tmp_path / "podman-service.log"
    with log.open("wb") as sink:
        service = subprocess.Popen(
            _podman(root, "system", "service", "-t", "0", f"unix://{sock}"),
            stdout=sink, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not sock.exists():
            assert service.poll() is None, log.read_text(errors="replace")
            assert time.monotonic() < deadline, "podman's socket did not appear"
            time.sleep(0.1)
        yield root, sock
    finally:
        service.terminate()
        try:
            service.wait(timeout=20)
        except subprocess.TimeoutExpired:
            service.kill()
            service.wait(timeout=20)
        subprocess.run(_podman(root, "system", "reset", "--force"), capture_output=True,
                       timeout=120, check=False)
        shutil.rmtree(root, ignore_errors=True)


def _listed(root: Path, *what: str) -> list[str]:
    done = subprocess.run(_podman(root, *what), capture_output=True, text=True, timeout=60,
                          check=True)
    return done.stdout.split()


def test_a_run_on_podman_is_refused_by_name_and_makes_nothing_there(
        podman_socket: tuple[Path, Path], kit_factory: Callable[..., Path],
        tmp_path: Path) -> None:
    root, sock = podman_socket
    kit = kit_factory("onpodman", f"FROM {BUSYBOX}\nUSER agent\nCMD [\"true\"]\n")
    env = {**os.environ, "DOCKER_HOST": f"unix://{sock}", "SBX_HOME": str(tmp_path / "home"),
           "SBX_CONFIG": os.devnull}
    env.pop("DOCKER_CONTEXT", None)
    refused = run_sbx(["run", str(kit), "--", "true"], env=env, timeout=120)
    assert refused.returncode == 125, refused
    assert b"(engine_unsupported)" in refused.stderr and b"Podman" in refused.stderr
    assert b"DOCKER_HOST=unix:///var/run/docker.sock" in refused.stderr
    assert _listed(root, "ps", "-aq") == []  # nothing created
    assert _listed(root, "images", "-q") == []  # nothing built
    doctor = run_sbx(["doctor", "--json"], env=env, timeout=120)
    assert doctor.returncode != 0
    checks = {c["id"]: c for c in json.loads(doctor.stdout)["data"]["checks"]}
    assert checks["engine"]["status"] == "fail", checks["engine"]
    assert checks["engine"]["reason"] == "engine_unsupported"
    explained = run_sbx(["explain", "engine_unsupported"], env=env, timeout=60)
    assert explained.returncode == 0 and b"Podman" in explained.stdout
