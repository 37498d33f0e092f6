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
import shlex
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sbx.domain.credentials.secrets import SecretStore
from tests.support.origin import Internet, Reply, Seen
from tests.support.sbxproc import run_sbx

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]
BROWSER = REPO / "examples" / "browser"
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
    import subprocess

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
        loopback = address in ("0100007F", "00000000000000000000000001000000") or \
            address.endswith("0100007F") and address.startswith("0000000000000000FFFF0000")
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
    assert sorted(s.path for s in pages) == ["/allowed/page", "/page"]
    assert all("HeadlessChrome" in (s.header("user-agent") or "") for s in pages)
    assert all(s.header("proxy-authorization") is None for s in pages)
    values = dict(line.split("=", 1) for line in out.splitlines() if "=" in line
                  and not line.startswith("{"))
    assert "0100007F:2406" in values["listening"]  # CDP: 127.0.0.1:9222
    assert _listening(values["listening"]) == [], values["listening"]
    assert values["cdp_env"] == "http://127.0.0.1:9222"


def test_a_bundled_agent_kit_composed_with_the_browser_finds_it(
        internet: Internet, state_home: Path, tmp_path: Path) -> None:
    _require_overlay()
    SecretStore(state_home).set("openai", "real-openai-key-must-stay-on-the-host")
    env = {**os.environ, "SBX_HOME": str(state_home), "NO_COLOR": "1",
           "SBX_CONFIG": str(_config(internet, tmp_path / "config.toml"))}
    script = ("sbx-browser wait && curl -fsS --noproxy '*' \"$CHROME_CDP_URL/json/version\" "
              "&& echo && cat \"$HOME/.codex/AGENTS.md\"")
    done = run_sbx(["run", str(REPO / "examples" / "agents" / "codex"), "--arg",
                    "source=staged", "--kit", str(BROWSER), "--timeout", "300", "--", "bash",
                    "-c", script], env=env, timeout=RUN_TIMEOUT_S)
    out, err = done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")
    assert done.returncode == 0, err[-3000:]
    version = json.loads(out.splitlines()[0])
    assert version["Browser"].startswith("HeadlessChrome/")
    assert version["webSocketDebuggerUrl"].startswith("ws://127.0.0.1:9222/devtools/browser/")
    # The kit's notes reached the agent's own profile, with the CDP address.
    assert "Browser in sbx" in out and "http://127.0.0.1:9222" in out, shlex.quote(out[-2000:])
