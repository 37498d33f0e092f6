"""The egress proxy as a container on the engine, the data plane's shape (docs/data-plane.md):
the real proxy, from the runtime image, gets its state over stdin into its tmpfs, serves a
client container on an internal network whose bridge has no IPv4 address on the host, and
dials an origin container on a second network. The client reaches the allowed origin through
it, gets the proxy's 403 for a host outside the policy, and cannot reach the origin directly or
a listener on the host at all."""

from __future__ import annotations

import io
import json
import os
import secrets
import select
import socket
import subprocess
import tarfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from sbx.domain.egress import proxyauth
from sbx.domain.egress.ca import CertificateAuthority
from sbx.domain.egress.proxyconfig import ProxyConfig
from sbx.domain.kits.compose import Network, NetworkPhase, Rule
from sbx.seams.driver import SdkEngine
from sbx.seams.host.runtimepack import build_context, runtime_pack

pytestmark = pytest.mark.docker

HOME = "/run/sbx"
PORT = 3128
READY_S = 60.0

# The far side, in one container on the egress network: the upstream proxy the config names
# (as a corporate one would be), which answers every request itself as the origin.
ORIGIN = """\
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class Answer(BaseHTTPRequestHandler):
    def do_GET(self):
        body = ("origin saw " + self.path).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
ThreadingHTTPServer(("0.0.0.0", 8080), Answer).serve_forever()
"""

CLIENT = """\
import sys, urllib.error, urllib.request
proxy, origin = sys.argv[1], sys.argv[2]
opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy}))
for url in (f"http://{origin}:8080/", "http://elsewhere.test/"):
    try:
        with opener.open(url, timeout=10) as answer:
            print(url, answer.status, answer.read(200).decode("utf-8", "replace").split()[-1])
    except urllib.error.HTTPError as refused:
        print(url, refused.code, refused.headers.get("X-Sbx-Rule", ""))
direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
try:
    direct.open(f"http://{origin}:8080/", timeout=5)
    print("direct", "reached")
except OSError as error:
    print("direct", "unreachable")
import socket
host, port = sys.argv[3], int(sys.argv[4])
try:
    socket.create_connection((host, port), timeout=3).close()
    print("host", "reached")
except OSError:
    print("host", "unreachable")
"""


def docker(*args: str, timeout: float = 120) -> str:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout,
                          check=False)
    assert done.returncode == 0, (args, done.stderr)
    return done.stdout.strip()


@pytest.fixture(scope="module")
def runtime_image(engine: SdkEngine) -> Iterator[str]:
    pack = runtime_pack()
    image = engine.build(build_context(pack), "Dockerfile", pack.tag, {}, on_line=lambda _: None)
    yield image.id
    engine.remove_image(image.id)


@pytest.fixture
def networks() -> Iterator[tuple[str, str, str]]:
    """(internal, egress, the internal network's nominal gateway), both made here."""
    tag = uuid.uuid4().hex[:10]
    internal, egress = f"sbx-dp-in-{tag}", f"sbx-dp-eg-{tag}"
    docker("network", "create", "--internal", "-o",
           "com.docker.network.bridge.inhibit_ipv4=true", internal)
    docker("network", "create", egress)
    try:
        gateway = docker("network", "inspect", internal, "--format",
                         "{{(index .IPAM.Config 0).Gateway}}")
        yield internal, egress, gateway
    finally:
        for name in (internal, egress):
            subprocess.run(["docker", "network", "rm", name], capture_output=True, timeout=60,
                           check=False)


def _state(tmp_path: Path, origin: str, subnet: str, token: str) -> bytes:
    """What the proxy would read from a state home: its config and the CA, as a tar."""
    local = tmp_path / "state"
    CertificateAuthority.load_or_create(local)
    allow = Rule(origin, ("GET",), (), "allow", "./kit", 0, "runtime")
    config = ProxyConfig(
        run_id=f"run-{uuid.uuid4().hex[:8]}", state_home=Path(HOME, "state"),
        audit_log=Path(HOME, "state", "audit.jsonl"),
        network=Network(2, NetworkPhase(), NetworkPhase((allow,), ()), False, ()),
        listen_host="0.0.0.0", listen_port=PORT, peer_network=subnet,  # noqa: S104
        upstream_proxy=f"http://{origin}:8080",
        request_log=Path(HOME, "state", "requests.jsonl"))
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(local, arcname="state")
        body = config.to_json().encode()
        info = tarfile.TarInfo("proxy.json")
        info.size = len(body)
        tar.addfile(info, io.BytesIO(body))
    state = buffer.getvalue()
    return f"{len(state)}\n".encode() + state + f"{token}\n".encode()


def _ready(proxy: subprocess.Popen[bytes]) -> str:
    assert proxy.stdout is not None
    deadline = time.monotonic() + READY_S
    line = b""
    while time.monotonic() < deadline and not line.endswith(b"\n"):
        ready, _, _ = select.select([proxy.stdout], [], [], 1.0)
        if ready:
            byte = os.read(proxy.stdout.fileno(), 1)  # unbuffered: select sees the rest
            if not byte:
                break
            line += byte
    return line.decode(errors="replace")


def test_the_proxy_container_is_the_sandboxs_only_way_out(
        runtime_image: str, networks: tuple[str, str, str], tmp_path: Path) -> None:
    internal, egress, gateway = networks
    tag = uuid.uuid4().hex[:8]
    origin, proxy_name = f"origin-{tag}", f"proxy-{tag}"
    locked = ["--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges"]
    listener = socket.socket()
    listener.bind(("0.0.0.0", 0))  # noqa: S104 - the host side a sandbox must not reach
    listener.listen(4)
    listener.setblocking(False)
    proxy: subprocess.Popen[bytes] | None = None
    try:
        docker("run", "-d", "--name", origin, "--network", egress, *locked, runtime_image,
               "-c", ORIGIN)
        subnet = docker("network", "inspect", internal, "--format",
                        "{{(index .IPAM.Config 0).Subnet}}")
        token = secrets.token_hex(32)
        docker("create", "-i", "--name", proxy_name, "--network", internal, *locked,
               "--tmpfs", f"{HOME}:rw,mode=0700,uid=65534,gid=65534", runtime_image,
               "-m", "sbx.proxy.boot", HOME)
        docker("network", "connect", egress, proxy_name)
        proxy = subprocess.Popen(["docker", "start", "-ai", proxy_name],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE)
        assert proxy.stdin is not None
        proxy.stdin.write(_state(tmp_path, origin, subnet, token))
        proxy.stdin.flush()
        ready = _ready(proxy)
        assert ready.startswith("SBX-PROXY-READY"), ready
        address = docker("inspect", proxy_name, "--format",
                         f'{{{{(index .NetworkSettings.Networks "{internal}").IPAddress}}}}')
        said = docker("run", "--rm", "--network", internal, *locked, runtime_image, "-c",
                      CLIENT, proxyauth.proxy_url(address, PORT, token), origin, gateway,
                      str(listener.getsockname()[1]))
        lines = [line.split() for line in said.splitlines()]
        assert lines[0][1:] == ["200", f"http://{origin}:8080/"], said
        assert lines[1][1] == "403" and lines[1][2:], said  # the proxy's, with its rule
        assert lines[2] == ["direct", "unreachable"], said
        assert lines[3] == ["host", "unreachable"], said
        with pytest.raises(BlockingIOError):
            listener.accept()  # nothing from the sandbox's network ever arrived
        records = docker("exec", proxy_name, runtime_pack().python, "-c",
                         f"print(open('{HOME}/state/requests.jsonl').read(), end='')")
        hosts = [json.loads(line).get("host") for line in records.splitlines()]
        assert origin in hosts and "elsewhere.test" in hosts
    finally:
        listener.close()
        if proxy is not None:
            # The owner's pipe ends: the proxy stops.
            proxy.communicate(timeout=30)
        for name in (proxy_name, origin):
            subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=60,
                           check=False)
