"""The egress proxy as a container on the engine, the data plane's shape (docs/data-plane.md):
the real proxy, from the runtime image, gets its state over stdin into its tmpfs, serves a
client container on an internal network whose bridge has no IPv4 address on the host, and
dials out on a second network. The client reaches the allowed origin through it, gets the
proxy's 403 for a host outside the policy, and cannot reach the origin directly or a listener
on the host at all."""

from __future__ import annotations

import json
import secrets
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from sbx.domain.egress import proxyauth
from sbx.domain.kits.compose import Network, NetworkPhase, Rule
from sbx.seams.driver import SdkEngine
from tests.support.proxycontainer import HOME, PORT, DataPlane, proxy_config

pytestmark = pytest.mark.docker

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
import socket, sys, urllib.error, urllib.request
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
except OSError:
    print("direct", "unreachable")
host, port = sys.argv[3], int(sys.argv[4])
try:
    socket.create_connection((host, port), timeout=3).close()
    print("host", "reached")
except OSError:
    print("host", "unreachable")
"""


@pytest.fixture
def plane(engine: SdkEngine) -> Iterator[DataPlane]:
    made = DataPlane()
    try:
        made.build_image()
        yield made
    finally:
        made.close()


def test_the_proxy_container_is_the_sandboxs_only_way_out(plane: DataPlane,
                                                           tmp_path: Path) -> None:
    origin = plane.run_detached(f"origin-{plane.tag}", plane.egress, "-c", ORIGIN)
    listener = socket.socket()
    listener.bind(("0.0.0.0", 0))  # noqa: S104 - the host side a sandbox must not reach
    listener.listen(4)
    listener.setblocking(False)
    try:
        token = secrets.token_hex(32)
        allow = Rule(origin, ("GET",), (), "allow", "./kit", 0, "runtime")
        network = Network(2, NetworkPhase(), NetworkPhase((allow,), ()), False, ())
        config = proxy_config(network, plane.network_value("Subnet"),
                              upstream=f"http://{origin}:8080")
        proxy = f"proxy-{plane.tag}"
        plane.start_proxy(proxy, config, token, tmp_path / "state")
        said = plane.run(plane.internal, "-c", CLIENT,
                         proxyauth.proxy_url(plane.address(proxy, plane.internal), PORT, token),
                         origin, plane.network_value("Gateway"),
                         str(listener.getsockname()[1]))
        lines = [line.split() for line in said.splitlines()]
        assert lines[0][1:] == ["200", f"http://{origin}:8080/"], said
        assert lines[1][1] == "403" and lines[1][2:], said  # the proxy's, with its rule
        assert lines[2] == ["direct", "unreachable"], said
        assert lines[3] == ["host", "unreachable"], said
        with pytest.raises(BlockingIOError):
            listener.accept()  # nothing from the sandbox's network ever arrived
        records = plane.read_file(proxy, f"{HOME}/state/requests.jsonl")
        hosts = [json.loads(line).get("host") for line in records.splitlines()]
        assert origin in hosts and "elsewhere.test" in hosts
    finally:
        listener.close()
