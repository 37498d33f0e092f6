"""`port@1` for real: published on 127.0.0.1 through sbx, with host services closed.

Traffic goes only to loopback and to the Docker network the run itself created (its gateway
address is the host's side of that network).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from .conftest import BUSYBOX

pytestmark = pytest.mark.docker

SBX = str(Path(sys.executable).parent / "sbx")
PORT_KIT = """
capabilities:
  - type: com.docker.sandbox/port@1
    config: {container: 8080}
"""


class Listener:
    """A host service listening on all interfaces that records every connection it accepts."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("0.0.0.0", 0))  # noqa: S104 - the point: a service on all interfaces
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = int(self.sock.getsockname()[1])
        self.accepted: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, peer = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.accepted.append(peer[0])
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.sock.close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    service = Listener()
    yield service
    service.close()


def _run_in_background(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([SBX, *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)


def test_port_is_published_on_loopback_and_host_services_are_closed(
        kit_factory: Callable[..., Path], state_home: Path, tmp_path: Path,
        listener: Listener) -> None:
    # The workload serves on 8080 and, meanwhile, tries the host service at its gateway.
    script = (
        "mkdir -p /tmp/www && echo served-from-sandbox > /tmp/www/index.html && "
        "httpd -p 8080 -h /tmp/www && "
        "gw=$(ip route | awk '/default/ {print $3}'); "
        "[ -n \"$gw\" ] || gw=$(ip -4 addr show eth0 | awk '/inet / {split($2,a,\"/\"); "
        "split(a[1],o,\".\"); print o[1]\".\"o[2]\".\"o[3]\".1\"}'); "
        f"if nc -w 2 \"$gw\" {listener.port} </dev/null; then echo host=reached; "
        "else echo host=closed; fi; sleep 6"
    )
    kit = kit_factory("portkit", f"FROM {BUSYBOX}\nUSER agent\n", PORT_KIT)
    env = {**os.environ, "SBX_HOME": str(state_home),
           "SBX_CONFIG": os.devnull, "NO_COLOR": "1"}
    process = _run_in_background(["run", str(kit), "--timeout", "30", "--", "sh", "-c", script],
                                 env)
    try:
        published = _published_port(process)
        run_ids = [path.name for path in (state_home / "runs").iterdir()]
        body = _fetch(published)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert body == "served-from-sandbox"
    assert process.returncode == 0, err
    assert "host=closed" in out
    assert listener.accepted == [], "the sandbox reached a host service"
    assert len(run_ids) == 1, run_ids
    assert _input_rules_of(run_ids[0]) == [], "firewall rules outlived the run"


def _input_rules_of(run_id: str) -> list[str]:
    """The host's INPUT rules of one run (other runs on the machine have their own)."""
    rules = subprocess.run(["iptables", "-S", "INPUT"], capture_output=True, text=True,
                           check=False).stdout
    return [line for line in rules.splitlines() if f"sbx-run-{run_id}" in line]


def test_json_reports_published_ports(kit_factory: Callable[..., Path], state_home: Path,
                                      tmp_path: Path, sbx_cli: Callable[..., object]) -> None:
    kit = kit_factory("portjson", f"FROM {BUSYBOX}\nUSER agent\n", PORT_KIT)
    env = {**os.environ, "SBX_HOME": str(state_home),
           "SBX_CONFIG": os.devnull}
    result = sbx_cli(["run", "--json", str(kit), "--", "sh", "-c",
                      "ls /sys/class/net; sleep 1"], env=env)
    envelope = result.envelope()  # type: ignore[attr-defined]
    ports = envelope["data"]["ports"]
    assert [(p["container"], p["transport"], p["host"]) for p in ports] == \
        [(8080, "tcp", "127.0.0.1")]
    assert sorted(envelope["data"]["stdout"].split()) == ["eth0", "lo"]


def _published_port(process: subprocess.Popen[str]) -> int:
    assert process.stderr is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # bounded: until sbx prints the published address
        line = process.stderr.readline()
        if "published on 127.0.0.1:" in line:
            return int(line.rsplit(":", 1)[1].strip())
        if not line and process.poll() is not None:
            break
    pytest.fail("sbx never published the port")


def _fetch(port: int) -> str:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:  # bounded: the server may still be starting
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as conn:
                conn.sendall(b"GET /index.html HTTP/1.0\r\nHost: x\r\n\r\n")
                data = b""
                while chunk := conn.recv(4096):
                    data += chunk
            if b"200" in data.split(b"\r\n", 1)[0]:
                return data.split(b"\r\n\r\n", 1)[1].decode().strip()
        except OSError:
            pass
        time.sleep(0.2)
    return ""


def test_without_ports_there_is_no_network(busybox_kit: Path, state_home: Path,
                                           tmp_path: Path,
                                           sbx_cli: Callable[..., object]) -> None:
    env = {**os.environ, "SBX_HOME": str(state_home),
           "SBX_CONFIG": os.devnull}
    result = sbx_cli(["run", "--json", str(busybox_kit), "--", "ls", "/sys/class/net"],
                     env=env)
    data = result.envelope()["data"]  # type: ignore[attr-defined]
    assert data["stdout"].split() == ["lo"] and data["ports"] == []
    assert json.dumps(data)  # the envelope is plain JSON
