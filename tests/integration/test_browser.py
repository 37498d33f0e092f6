"""The browser mixin (examples/browser) for real: Debian's Chromium in a sandbox, driven over CDP.

A raw CDP client (tests/support/cdp.py, standard library only) runs inside the sandbox, where
the DevTools listen (the sandbox's own 127.0.0.1:9222), and loads pages of the test "internet"
(tests/support/origin.py, through sbx's upstream proxy setting): a tunnelled host (the
origin's certificate, from the upstream CA sbx's trust bundle carries) and an intercepted one
(sbx's CA), both verified by Chromium against the profile's NSS database; a path the policy
refuses on the intercepted host, and a plain-HTTP host outside the policy, show sbx's 403 page
in the browser; an HTTPS host outside the policy is a refused tunnel (the origin never sees
it). Nothing in the sandbox listens beyond its loopback.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sbx.domain.credentials.secrets import SecretStore
from tests.support.origin import Internet, Reply, Seen
from tests.support.sbxproc import run_sbx

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]
BROWSER = REPO / "examples" / "browser"
OBSERVER = REPO / "examples" / "browser-observer"
SBX = str(Path(sys.executable).parent / "sbx")
SUPPORT = REPO / "tests" / "support"
OVERLAY = "sbx-base/browser-overlay:1"
RUN_TIMEOUT_S = 600.0
PAGE = b"<html><head><title>sbx browser page</title></head><body>Hello from %s</body></html>"
POLICY = """
capabilities:
  - type: com.docker.sandbox/network-policy@2
    config:
      runtime:
        allow:
          - example.com
          - hosts: [api.github.com]
            methods: [GET]
            paths: [/allowed/**]
"""
# Inside the sandbox: wait for the browser, load the pages, then list every listening socket.
PROBE = """
set -u
sbx-browser wait
python3 /opt/sbx-test/cdp.py https://example.com/page https://api.github.com/allowed/page \
  https://api.github.com/forbidden http://example.org/outside https://example.org/outside
echo "listening=$(cat /proc/net/tcp /proc/net/tcp6 | awk '$4 == "0A" {print $2}' | \
  tr '\\n' ' ')"
echo "cdp_env=$CHROME_CDP_URL"
"""


def _require_overlay() -> None:
    found = subprocess.run(["docker", "image", "inspect", OVERLAY], capture_output=True,
                           timeout=60, check=False)
    if found.returncode != 0:
        message = f"{OVERLAY} is missing (bash scripts/build-images.sh)"
        if os.environ.get("SBX_REQUIRE_ENGINE") == "1":
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture
def pages(internet: Internet) -> Iterator[list[Seen]]:
    seen: list[Seen] = []

    def page(seen_request: Seen) -> Reply:
        seen.append(seen_request)
        host = (seen_request.header("host") or "").encode()
        return Reply(200, [("Content-Type", "text/html")], PAGE % host)

    for host in ("example.com", "api.github.com", "example.org"):
        internet.origin.route(host, page)
    internet.origin.clear()
    try:
        yield seen
    finally:
        for host in ("example.com", "api.github.com", "example.org"):
            internet.origin.unroute(host)


def _config(internet: Internet, path: Path) -> Path:
    internet.sbx_config(path)
    with path.open("a", encoding="utf-8") as handle:
        handle.write("[sandbox]\npids = 1024\n")  # Chromium's threads count as pids
    return path


def _listening(value: str) -> list[str]:
    """The local addresses of listening sockets (/proc/net/tcp hex), non-loopback ones."""
    outside = []
    for entry in value.split():
        address, _, _port = entry.partition(":")
        v4_loopback = len(address) == 8 and address.endswith("7F")  # 127/8, little-endian
        mapped = address.startswith("0000000000000000FFFF0000") and address.endswith("7F")
        loopback = v4_loopback or mapped or address == "00000000000000000000000001000000"
        if not loopback:
            outside.append(entry)
    return outside


def test_cdp_loads_pages_through_the_proxy_and_shows_sbx_refusals(
        kit_factory: Callable[..., Path], internet: Internet, pages: list[Seen],
        state_home: Path, tmp_path: Path) -> None:
    _require_overlay()
    workload = kit_factory("web", "FROM sbx-base/agent:1\nUSER agent\n"
                           "WORKDIR /home/agent/work\n", POLICY)
    env = {**os.environ, "SBX_HOME": str(state_home), "NO_COLOR": "1",
           "SBX_CONFIG": str(_config(internet, tmp_path / "config.toml"))}
    done = run_sbx(["run", str(workload), "--kit", str(BROWSER), "--timeout", "300",
                    "--mount", f"{SUPPORT}:/opt/sbx-test:ro", "--", "bash", "-c", PROBE],
                   env=env, timeout=RUN_TIMEOUT_S)
    out, err = done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")
    assert done.returncode == 0, (out[-3000:], err[-3000:])
    results = {r["url"]: r for r in (json.loads(line) for line in out.splitlines()
                                     if line.startswith("{"))}
    # A tunnelled host (verified with the upstream CA) and an intercepted one (sbx's CA).
    for url, host in (("https://example.com/page", "example.com"),
                      ("https://api.github.com/allowed/page", "api.github.com")):
        assert (results[url]["status"], results[url]["title"]) == (200, "sbx browser page"), \
            results[url]
        assert f"Hello from {host}" in results[url]["text"]
    # sbx's 403, shown in the browser: a path the policy refuses, a plain-HTTP host outside it.
    for url in ("https://api.github.com/forbidden", "http://example.org/outside"):
        assert results[url]["status"] == 403, results[url]
        assert "egress_denied" in results[url]["text"] and "sbx explain" in results[url]["text"]
    # HTTPS outside the policy: the tunnel is refused (Chromium shows no proxy's page there).
    assert results["https://example.org/outside"]["error"] == "net::ERR_TUNNEL_CONNECTION_FAILED"
    # The origin saw the two allowed pages (and the browser's own favicon requests), and
    # nothing for the host outside the policy.
    hosts = {((s.header("host") or "").split(":")[0], s.path) for s in pages
             if s.path != "/favicon.ico"}
    assert hosts == {("example.com", "/page"), ("api.github.com", "/allowed/page")}
    assert not [s for s in pages if "example.org" in (s.header("host") or "")]
    assert all("HeadlessChrome" in (s.header("user-agent") or "") for s in pages)
    assert all(s.header("proxy-authorization") is None for s in pages)
    values = dict(line.split("=", 1) for line in out.splitlines() if "=" in line
                  and not line.startswith("{"))
    assert "0100007F:2406" in values["listening"]  # CDP: 127.0.0.1:9222
    assert _listening(values["listening"]) == [], values["listening"]
    assert values["cdp_env"] == "http://127.0.0.1:9222"


def test_a_bundled_agent_kit_composed_with_the_browser_by_short_names_finds_it(
        internet: Internet, state_home: Path, tmp_path: Path) -> None:
    _require_overlay()
    SecretStore(state_home).set("openai", "real-openai-key-must-stay-on-the-host")
    env = {**os.environ, "SBX_HOME": str(state_home), "NO_COLOR": "1",
           "SBX_CONFIG": str(_config(internet, tmp_path / "config.toml"))}
    script = ("sbx-browser wait && curl -fsS --noproxy '*' \"$CHROME_CDP_URL/json/version\" "
              "| jq -c . && cat \"$HOME/.codex/AGENTS.md\"")
    # Both by their short names: the bundled agent and the bundled browser mixin.
    done = run_sbx(["run", "codex", "--arg", "source=staged", "--kit", "browser", "--timeout",
                    "300", "--", "bash", "-c", script], env=env, timeout=RUN_TIMEOUT_S,
                   cwd=tmp_path)
    out, err = done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")
    assert done.returncode == 0, err[-3000:]
    version = json.loads(out.splitlines()[0])
    assert version["Browser"].startswith("Chrome/") and "HeadlessChrome" in version["User-Agent"]
    assert version["webSocketDebuggerUrl"].startswith("ws://127.0.0.1:9222/devtools/browser/")
    # The kit's notes reached the agent's own profile, with the CDP address.
    assert "Browser in sbx" in out and "http://127.0.0.1:9222" in out, shlex.quote(out[-2000:])


def _http(port: int, target: str, cookie: str | None = None,
          extra: str = "") -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 request to the host's loopback (the published observer port)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        head = f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n"
        if cookie:
            head += f"Cookie: {cookie}\r\n"
        sock.sendall((head + extra + "\r\n").encode())
        data = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
            if extra and b"\r\n\r\n" in data and len(data) > data.index(b"\r\n\r\n") + 6:
                break  # a WebSocket: the head and the server's first frame are enough
    top, _, body = data.partition(b"\r\n\r\n")
    lines = top.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in
               (line.partition(":") for line in lines[1:])}
    return int(lines[0].split()[1]), headers, body


def _host_listeners(port: int) -> list[str]:
    """The local addresses (/proc/net hex) of the host's listening TCP sockets on ``port``."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text(encoding="ascii").splitlines()[1:]:
            fields = line.split()
            address, _, hex_port = fields[1].partition(":")
            if fields[3] == "0A" and int(hex_port, 16) == port:
                found.append(address)
    return found


def test_observer_url_opens_once_and_only_with_its_token(
        kit_factory: Callable[..., Path], internet: Internet, pages: list[Seen],
        state_home: Path, tmp_path: Path) -> None:
    _require_overlay()
    workload = kit_factory("web", "FROM sbx-base/agent:1\nUSER agent\n"
                           "WORKDIR /home/agent/work\n", POLICY)
    env = {**os.environ, "SBX_HOME": str(state_home), "NO_COLOR": "1",
           "SBX_CONFIG": str(_config(internet, tmp_path / "config.toml"))}
    argv = [SBX, "run", str(workload), "--kit", str(BROWSER), "--kit", str(OBSERVER),
            "--timeout", "300", "--", "bash", "-c", "sbx-browser wait && echo up && sleep 240"]
    with subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as proc:
        assert proc.stderr is not None and proc.stdout is not None
        stderr = proc.stderr
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(iter(stderr.readline, "")),
                                  daemon=True)
        reader.start()
        try:
            deadline = time.monotonic() + 240
            url = None
            while url is None and time.monotonic() < deadline and proc.poll() is None:
                found = re.search(r"browser observer[^:]*: (http://127\.0\.0\.1:(\d+)/\?token="
                                  r"([0-9a-f]{32}))", "".join(lines))
                url = found
                time.sleep(0.2)
            assert url is not None, "".join(lines)[-3000:]
            port, token = int(url.group(2)), url.group(3)
            # On the host, the published port listens on loopback only.
            assert _host_listeners(port) == ["0100007F"], _host_listeners(port)
            assert proc.stdout.readline().strip() == "up"  # the browser drew its window
            assert _http(port, "/")[0] == 403
            assert _http(port, "/?token=" + "0" * 32)[0] == 403
            status, headers, _ = _http(port, f"/?token={token}")
            assert status == 302 and headers["location"].startswith("/vnc.html")
            cookie = headers["set-cookie"].split(";", 1)[0]
            assert "HttpOnly" in headers["set-cookie"]
            assert _http(port, f"/?token={token}")[0] == 403  # once only
            assert _http(port, "/vnc.html")[0] == 403  # not without the session
            status, _, body = _http(port, "/vnc.html", cookie)
            assert status == 200 and b"noVNC" in body
            status, headers, frame = _http(port, "/websockify", cookie, extra=(
                "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                "Sec-WebSocket-Key: c2J4LW9ic2VydmVyLXRlc3Q=\r\n"
                "Sec-WebSocket-Protocol: binary\r\n"))
            assert status == 101, (status, headers)
            assert frame[2:6] == b"RFB ", frame[:16]  # the VNC server's greeting, in a frame
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=120)
            finally:
                reader.join(timeout=10)
    # Only the sbx forwarder listened, on the host's loopback: the URL named 127.0.0.1.
    assert url.group(1).startswith("http://127.0.0.1:")
