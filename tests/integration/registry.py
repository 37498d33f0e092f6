"""A real registry for the pull tests: Debian's `docker-registry serve CONFIG` on
127.0.0.1:<free port> with a temporary storage directory, stopped at teardown.

Without `docker-registry` the tests skip, unless SBX_REQUIRE_ENGINE=1 (CI), where a missing
registry is a failure.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REGISTRY_BINARY = "docker-registry"
START_TIMEOUT_S = 20.0


@dataclass
class Registry:
    host: str  # 127.0.0.1:PORT
    process: subprocess.Popen[bytes]
    log: Path

    def ref(self, repository: str, tag: str) -> str:
        return f"{self.host}/{repository}:{tag}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _answers(host: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://{host}/v2/", timeout=2) as response:
            return int(response.status) == 200
    except (urllib.error.URLError, OSError):
        return False


def start_registry(root: Path) -> Registry:
    binary = shutil.which(REGISTRY_BINARY) or (
        f"/usr/bin/{REGISTRY_BINARY}" if os.path.exists(f"/usr/bin/{REGISTRY_BINARY}") else None)
    if binary is None:
        message = f"{REGISTRY_BINARY} is not installed (apt-get install docker-registry)"
        if os.environ.get("SBX_REQUIRE_ENGINE") == "1":
            pytest.fail(message)
        pytest.skip(message)
    root.mkdir(parents=True, exist_ok=True)
    host = f"127.0.0.1:{free_port()}"
    storage = root / "storage"
    storage.mkdir(exist_ok=True)
    config = root / "config.yml"
    config.write_text(
        "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n"
        f"    rootdirectory: {storage}\n  delete:\n    enabled: true\n"
        f"http:\n  addr: {host}\n", encoding="utf-8")
    log = root / "registry.log"
    with log.open("wb") as sink:
        process = subprocess.Popen([binary, "serve", str(config)], stdout=sink,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    registry = Registry(host, process, log)
    deadline = time.monotonic() + START_TIMEOUT_S
    for _ in range(int(START_TIMEOUT_S / 0.1) + 1):
        if _answers(host):
            return registry
        if process.poll() is not None or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    registry.stop()
    pytest.fail(f"docker-registry did not answer on {host}: "
                f"{log.read_text(encoding='utf-8', errors='replace')[-2000:]}")


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[Registry]:
    started = start_registry(tmp_path / "registry")
    try:
        yield started
    finally:
        started.stop()


__all__ = ["Registry", "free_port", "registry", "start_registry"]
