"""`-p/--publish` for real: a server in the sandbox reached from the host through the same
forwarder as port@1, on loopback; a named sandbox's ports with no sbx attached and across
stop/start; and the refusals, with nothing of the run left.

Traffic goes only to loopback.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.kits import capabilities, network_policy

from .conftest import BUSYBOX

pytestmark = pytest.mark.docker

SBX = str(Path(sys.executable).parent / "sbx")
SERVER = (f"FROM {BUSYBOX}\nUSER agent\n"
          'CMD ["sh", "-c", "mkdir -p /tmp/www && echo served-from-sandbox > '
          '/tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www"]\n')
KIT_PORT = """
capabilities:
  - type: com.docker.sandbox/port@1
    config: {container: 8080}
"""


def _env(state_home: Path) -> dict[str, str]:
    return {**os.environ, "SBX_HOME": str(state_home), "SBX_CONFIG": os.devnull,
            "NO_COLOR": "1"}


def _sbx(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SBX, *args], env=env, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=timeout, check=False)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _fetch(port: int, host: str = "127.0.0.1", wait_s: float = 20) -> str:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:  # bounded: the server may still be starting
        try:
            with socket.socket(family, socket.SOCK_STREAM) as conn:
                conn.settimeout(2)
                conn.connect((host, port))
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


def _refused(port: int) -> bool:
    """Nothing listens on the loopback port any more (it can be bound; past connections in
    TIME_WAIT do not count, as for the forwarder)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _ports(env: dict[str, str], name: str) -> list[dict[str, Any]]:
    done = _sbx(env, "ports", name, "--json")
    assert done.returncode == 0, done.stderr
    envelope = json.loads(done.stdout.strip().splitlines()[-1])
    assert envelope["data"]["name"] == name
    ports: list[dict[str, Any]] = envelope["data"]["ports"]
    return ports


@pytest.fixture
def holder() -> Iterator[socket.socket]:
    """A host service holding a loopback port."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    yield sock
    sock.close()


def test_one_shot_run_publishes_on_loopback_on_asked_and_free_ports(
        kit_factory: Callable[..., Path], state_home: Path) -> None:
    kit = kit_factory("pubserve", SERVER)
    fixed = _free_port()
    process = subprocess.Popen(
        [SBX, "run", "-p", f"{fixed}:8080", "-p", "127.0.0.1::8080", "--timeout", "60",
         str(kit)], env=_env(state_home), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, stdin=subprocess.DEVNULL)
    notices: list[str] = []
    try:
        assert process.stderr is not None
        deadline = time.monotonic() + 120
        while len(notices) < 2 and time.monotonic() < deadline:  # bounded
            line = process.stderr.readline()
            if not line and process.poll() is not None:
                break
            if "is published on" in line:
                notices.append(line.strip())
        assert len(notices) == 2, notices
        free = next(int(n.rsplit(":", 1)[1]) for n in notices
                    if not n.endswith(f":{fixed}"))
        assert all("8080/tcp (-p) is published on 127.0.0.1:" in n for n in notices)
        assert _fetch(fixed) == "served-from-sandbox"
        assert _fetch(free) == "served-from-sandbox"
    finally:
        process.terminate()
        process.communicate(timeout=60)
    assert _refused(fixed) and _refused(free), "the forwarder outlived the run"


def test_named_sandbox_ports_are_reachable_with_no_cli_and_across_stop_start(
        kit_factory: Callable[..., Path], state_home: Path) -> None:
    env = _env(state_home)
    kit = kit_factory("pubnamed", SERVER, KIT_PORT)
    fixed = _free_port()
    name = "pubnamed"
    made = _sbx(env, "create", "--name", name, "-p", f"127.0.0.1:{fixed}:8080",
                "-p", "8080", str(kit))
    try:
        assert made.returncode == 0, made.stderr
        assert f"8080/tcp (-p) is published on 127.0.0.1:{fixed}" in made.stderr
        # The creating sbx has exited: the keeper forwards.
        ports = _ports(env, name)
        assert sorted((p["source"], p["asked_host_port"]) for p in ports) == [
            ("kit", 0), ("publish", 0), ("publish", fixed)]
        assert all(p["host"] == "127.0.0.1" and p["container"] == 8080 for p in ports)
        live = [p["host_port"] for p in ports]
        assert fixed in live and all(isinstance(p, int) and p > 0 for p in live)
        for port in live:
            assert _fetch(port) == "served-from-sandbox", port
        table = _sbx(env, "ports", name)
        assert table.returncode == 0 and f"127.0.0.1:{fixed}" in table.stdout
        assert "kit" in table.stdout and "publish" in table.stdout
        # `sbx explain NAME` shows the same ports, from the same record
        told = _sbx(env, "explain", name)
        assert told.returncode == 0, told.stderr
        for port in live:
            assert f"8080/tcp  127.0.0.1:{port}  (" in told.stdout, told.stdout
        told_json = _sbx(env, "explain", "--json", name)
        assert told_json.returncode == 0, told_json.stderr
        assert json.loads(told_json.stdout.strip().splitlines()[-1])["data"]["ports"] == \
            _ports(env, name)

        stopped = _sbx(env, "stop", name)
        assert stopped.returncode == 0, stopped.stderr
        assert [p["host_port"] for p in _ports(env, name)] == [None, None, None]
        assert all(_refused(port) for port in live), "ports outlived the stopped sandbox"
        told = _sbx(env, "explain", name)
        assert told.returncode == 0 and told.stdout.count("8080/tcp  - (stopped)") == 3, \
            told.stdout

        started = _sbx(env, "start", name)
        assert started.returncode == 0, started.stderr
        again = _ports(env, name)
        assert fixed in [p["host_port"] for p in again]
        for port in [p["host_port"] for p in again]:
            assert _fetch(port) == "served-from-sandbox", port
        # The same -p again for an existing sandbox is a creation option: refused by name.
        other = _sbx(env, "run", "--name", name, "-p", "9999:8080", str(kit), "-d")
        assert other.returncode == 2 and "--publish" in other.stderr, other.stderr
    finally:
        removed = _sbx(env, "rm", "-f", name)
    assert removed.returncode == 0, removed.stderr
    assert _refused(fixed)


@pytest.mark.parametrize(("publish", "code", "exit_code"), [
    ("0", "invalid_argument", 2),
    ("65536:8080", "invalid_argument", 2),
    ("300.1.1.1:9000:8080", "invalid_argument", 2),
    ("0.0.0.0:9000:8080", "publish_refused", 125),
    ("8080/udp", "publish_refused", 125),
])
def test_bad_publish_is_refused_with_its_reason(
        busybox_kit: Path, state_home: Path, publish: str, code: str, exit_code: int) -> None:
    done = _sbx(_env(state_home), "run", "--json", "-p", publish, str(busybox_kit))
    envelope = json.loads(done.stdout.strip().splitlines()[-1])
    assert (done.returncode, envelope["reason"]) == (exit_code, code), done.stderr
    assert "Traceback" not in done.stderr
    assert not (state_home / "runs").exists() or not any((state_home / "runs").iterdir())


def test_duplicate_host_port_is_refused(busybox_kit: Path, state_home: Path) -> None:
    port = _free_port()
    done = _sbx(_env(state_home), "run", "-p", f"{port}:8080", "-p", f"{port}:8081",
                str(busybox_kit))
    assert done.returncode == 2 and "invalid_argument" in done.stderr, done.stderr
    assert f"already published by -p {port}:8080" in done.stderr


def test_a_taken_host_port_is_refused_and_nothing_is_left(
        kit_factory: Callable[..., Path], state_home: Path, holder: socket.socket) -> None:
    kit = kit_factory("pubtaken", SERVER)
    taken = int(holder.getsockname()[1])
    done = _sbx(_env(state_home), "run", "--json", "-p", f"{taken}:8080", str(kit))
    envelope = json.loads(done.stdout.strip().splitlines()[-1])
    assert (done.returncode, envelope["reason"]) == (125, "port_taken"), done.stderr
    assert f"ss -ltnp 'sport = :{taken}'" in envelope["hint"]
    assert "Traceback" not in done.stderr
    # state_home's fixture fails the test if a container, network or volume is left.


def test_a_taken_host_port_refuses_a_named_start(
        kit_factory: Callable[..., Path], state_home: Path) -> None:
    env = _env(state_home)
    kit = kit_factory("pubrestart", SERVER)
    fixed = _free_port()
    name = "pubrestart"
    made = _sbx(env, "create", "--name", name, "-p", f"{fixed}:8080", str(kit))
    try:
        assert made.returncode == 0, made.stderr
        assert _sbx(env, "stop", name).returncode == 0
        with socket.socket() as squatter:
            squatter.bind(("127.0.0.1", fixed))
            squatter.listen(1)
            refused = _sbx(env, "start", name)
            assert refused.returncode == 125, refused.stderr
            assert "port_taken" in refused.stderr and "Traceback" not in refused.stderr
        started = _sbx(env, "start", name)  # freed: it starts, on its port
        assert started.returncode == 0, started.stderr
        assert _fetch(fixed) == "served-from-sandbox"
    finally:
        _sbx(env, "rm", "-f", name)


def test_a_named_sandbox_with_egress_forwards_its_ports_from_the_proxy_keeper(
        kit_factory: Callable[..., Path], state_home: Path) -> None:
    # With a network policy the keeper owns the egress proxy too: one keeper for both.
    env = _env(state_home)
    kit = kit_factory("pubegress", SERVER,
                      capabilities(network_policy(version=2, runtime=["example.invalid"])))
    fixed = _free_port()
    name = "pubegress"
    made = _sbx(env, "create", "--name", name, "-p", f"{fixed}:8080", str(kit))
    try:
        assert made.returncode == 0, made.stderr
        run_dir = next((state_home / "runs").iterdir())
        assert json.loads((run_dir / "proxy.json").read_text())  # it has a proxy
        assert _fetch(fixed) == "served-from-sandbox"
        assert _sbx(env, "stop", name).returncode == 0
        assert _refused(fixed)
        assert _sbx(env, "start", name).returncode == 0
        assert _fetch(fixed) == "served-from-sandbox"
        assert [p["host_port"] for p in _ports(env, name)] == [fixed]
    finally:
        _sbx(env, "rm", "-f", name)
