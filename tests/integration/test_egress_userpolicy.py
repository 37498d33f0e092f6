"""The user policy applied live by the real proxy process: a rule changed with `sbx policy`
while a loop of requests runs is followed by the next request — allow, deny (winning over a
kit's allow), rm — without a restart, against the local "internet" (loopback only)."""

from __future__ import annotations

import json
import os
import shlex
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sbx.domain.egress.policystore import rules_path
from sbx.domain.egress.proxyconfig import ProxyConfig
from sbx.domain.kits.compose import Network, NetworkPhase, Rule
from tests.support.origin import Internet, ProxyProcess
from tests.support.sbxproc import run_sbx

from .test_session_tty import SBX, Pane, pane  # noqa: F401 - the tmux pane fixture

NETWORK = Network(2, NetworkPhase(), NetworkPhase(
    allow=(Rule("api.github.com", ("GET", "POST"), (), "allow", "./gh", 0, "runtime",
                "capabilities[0]"),
           Rule("github.com", (), (), "allow", "./gh", 0, "runtime", "capabilities[0]")),
    deny=(Rule("api.github.com", ("DELETE",), (), "deny", "./gh", 1, "runtime",
               "capabilities[1]"),)), False, ())


@pytest.fixture
def proxy(tmp_path: Path, internet: Internet) -> Iterator[ProxyProcess]:
    home = tmp_path / "state"
    config = ProxyConfig(
        run_id="run-live", state_home=home, audit_log=home / "audit.jsonl", network=NETWORK,
        upstream_proxy=internet.upstream.url, upstream_ca_file=internet.pki.ca_file,
        explain_command="sbx explain ./k", user_policy=rules_path(home))
    process = ProxyProcess(config, tmp_path / "proxy.json")
    yield process
    process.stop()


class Loop:
    """GETs in a loop on fresh connections, each answer's status kept with its time."""

    def __init__(self, proxy: ProxyProcess, host: str, path: str, method: str = "GET") -> None:
        self.client = proxy.client()
        self.host, self.path, self.method = host, path, method
        self.seen: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        deadline = time.monotonic() + 60
        while not self._stop.is_set() and time.monotonic() < deadline and len(self.seen) < 2000:
            [answer] = self.client.https(self.host, [(self.method, self.path)])
            self.seen.append((time.monotonic(), answer.status))
            time.sleep(0.02)

    def __enter__(self) -> Loop:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def after(self, moment: float) -> list[int]:
        return [status for when, status in self.seen if when > moment]

    def wait(self, count: int) -> None:
        deadline = time.monotonic() + 20
        while len(self.seen) < count and time.monotonic() < deadline:
            time.sleep(0.01)


def sbx_policy(proxy: ProxyProcess, *args: str) -> str:
    env = {**os.environ, "SBX_HOME": str(proxy.config.state_home), "NO_COLOR": "1"}
    done = run_sbx(["policy", *args], env=env, timeout=60)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


def test_allow_deny_and_rm_reach_the_running_proxy_by_its_next_request(
        proxy: ProxyProcess) -> None:
    with Loop(proxy, "example.net", "/live") as loop:
        loop.wait(3)
        assert {s for _, s in loop.seen} == {403}
        out = sbx_policy(proxy, "allow", "example.net", "/live", "--yes")
        changed = time.monotonic()
        rule_id = out.split("added rule ", 1)[1].split(":", 1)[0]
        loop.wait(len(loop.seen) + 5)
        assert set(loop.after(changed)) == {200}, loop.seen[-8:]
        sbx_policy(proxy, "rm", rule_id)
        removed = time.monotonic()
        loop.wait(len(loop.seen) + 5)
        assert set(loop.after(removed)) == {403}


def test_a_user_deny_wins_over_a_kits_allow_and_a_user_allow_never_beats_a_kits_deny(
        proxy: ProxyProcess) -> None:
    client = proxy.client()
    assert [a.status for a in client.https("api.github.com", [("GET", "/x")])] == [200]
    with Loop(proxy, "api.github.com", "/x") as loop:
        loop.wait(3)
        sbx_policy(proxy, "deny", "api.github.com/x")
        changed = time.monotonic()
        loop.wait(len(loop.seen) + 5)
        assert set(loop.after(changed)) == {403}
    sbx_policy(proxy, "allow", "api.github.com", "--method", "DELETE", "--yes")
    [refused] = client.https("api.github.com", [("DELETE", "/y")])
    assert refused.status == 403 and "./gh capabilities[1] runtime.deny" in refused.text
    [other] = client.https("github.com", [("GET", "/x")])
    assert other.status == 200  # the deny names api.github.com/x only


def test_a_widening_allow_is_shown_and_asked_on_a_terminal(
        pane: Pane, state_home: Path) -> None:  # noqa: F811
    rules = rules_path(state_home)
    command = f"SBX_HOME={shlex.quote(str(state_home))} NO_COLOR=1 {shlex.quote(SBX)} policy"
    pane.type(f"{command} allow open.example /v1/** --method POST; echo yes:RC=$?")
    pane.wait(r"it applies to every sandbox, whatever its kits declare")
    pane.wait(r"Accept these permissions\? \[y/N\] *$")
    pane.type("y")
    assert pane.status("yes") == 0
    [rule] = json.loads(rules.read_text())["rules"]
    assert (rule["host"], rule["path"], rule["methods"]) == ("open.example", "/v1/**", ["POST"])
    pane.type(f"{command} allow other.example; echo no:RC=$?")
    pane.wait(r"Accept these permissions\? \[y/N\] *$")
    pane.type("n")
    assert pane.status("no") == 125
    pane.wait(r"\(permission_widened\)")
    assert len(json.loads(rules.read_text())["rules"]) == 1  # declined: nothing added
