"""Named sandboxes on a real engine: every command and state transition (create, run again,
attach, detach, exec, logs, stop, start, rm), what persists across stop/start, the hardened
shape on every start, egress and credentials after a restart, a proxy that refuses others,
the CLI's death (named: keeps running, proxy alive; one-shot: gone), gc with named sandboxes
and dead owners, and the `ls --json` shape.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sbx.base import labels
from sbx.base.paths import home_hash
from sbx.domain.credentials.secrets import SecretStore
from sbx.seams.driver import SdkEngine
from tests.support.kits import api_key_credential, capabilities, network_policy, rule
from tests.support.origin import Internet
from tests.support.sbxproc import SBX, Finished, run_sbx

from .conftest import BUSYBOX, make_kit, owned, user_owned

pytestmark = pytest.mark.docker

WAIT_S = 60.0
SECRET = "ghp_named_sandbox_real_token_" + "x" * 12
EGRESS_KIT = capabilities(
    network_policy(version=2, runtime=[rule(["api.github.com"], methods=["GET"])]),
    api_key_credential("github", "GH_TOKEN", "api.github.com", value_format="token %s"))


@pytest.fixture
def env(state_home: Path, tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "SBX_HOME": str(state_home), "SBX_CONFIG": os.devnull}


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_kit(tmp_path_factory.mktemp("kits"), "agent",
                    f"FROM {BUSYBOX}\nUSER agent\nWORKDIR /workspace\nCMD [\"sh\"]\n", """
        capabilities:
          - type: com.docker.sandbox/volume@1
            config:
              path: /data
        """)


@pytest.fixture
def name() -> str:
    return f"n-{uuid.uuid4().hex[:10]}"


def sbx(env: dict[str, str], *args: str, data: bytes | None = None,
        timeout: float = 120) -> Finished:
    return run_sbx(list(args), env=env, data=data, timeout=timeout)


def ls(env: dict[str, str]) -> dict[str, dict[str, Any]]:
    done = sbx(env, "ls", "--json")
    assert done.returncode == 0, done.stderr
    envelope = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return {s["name"]: s for s in envelope["data"]["sandboxes"]}


def test_lifecycle_create_exec_stop_start_persist_rm(kit: Path, env: dict[str, str],
                                                     name: str, cleanup: list[str],
                                                     engine: SdkEngine,
                                                     state_home: Path) -> None:
    cleanup.append(name)
    created = sbx(env, "run", "--name", name, "-d", str(kit), "--", "sh", "-c",
                  "echo started; sleep 600")
    assert created.returncode == 0, created.stderr
    listed = ls(env)[name]
    assert listed["status"] == "running" and listed["workload"] == str(kit)
    assert set(listed) >= {"name", "workload", "kits", "status", "workspace", "created"}
    # exec: the sandbox's user and hardening; writes to HOME and a volume@1 volume.
    done = sbx(env, "exec", name, "--", "sh", "-c",
               'id -u; echo home > "$HOME/h"; echo vol > /data/v; touch /x 2>&1 | head -1;'
               ' grep CapEff /proc/self/status')
    assert done.returncode == 0, done.stderr
    out = done.stdout.decode()
    assert out.splitlines()[0] == "1000"
    assert "Read-only file system" in out and "0000000000000000" in out
    assert sbx(env, "exec", name, "--", "sh", "-c", "exit 7").returncode == 7
    assert sbx(env, "exec", "-i", name, "--", "cat", data=b"piped\x00bytes").stdout \
        == b"piped\x00bytes"
    assert b"started" in sbx(env, "logs", name).stdout
    # stop → exited, still listed; gc leaves it alone.
    assert sbx(env, "stop", name).returncode == 0
    assert ls(env)[name]["status"] == "exited"
    gc = sbx(env, "gc", "--grace", "0")
    assert gc.returncode == 0, gc.stderr
    assert any(o.kind == "container" for o in owned(engine, state_home))
    # start again (same config), HOME and the volume persisted; the shape is the same.
    again = sbx(env, "run", "--name", name, "-d", str(kit))
    assert again.returncode == 0, again.stderr
    done = sbx(env, "exec", name, "--", "sh", "-c",
               'cat "$HOME/h" /data/v; touch /y 2>/dev/null || echo ro; id -u;'
               ' grep -E "CapEff|NoNewPrivs" /proc/self/status')
    assert done.stdout.decode().split() == ["home", "vol", "ro", "1000", "CapEff:",
                                            "0000000000000000", "NoNewPrivs:", "1"]
    # rm while running: everything goes (container, volumes, network, record, run dir).
    assert sbx(env, "rm", "-f", name).returncode == 0
    cleanup.remove(name)
    assert name not in ls(env)
    assert [o for o in owned(engine, state_home)
            if o.labels.get(labels.NAME) == name] == []
    assert not (state_home / "sandboxes" / name).exists()
    assert f"named-{name}" not in Path("/proc/self/mountinfo").read_text(encoding="utf-8")


def test_creation_options_are_refused_on_an_existing_sandbox(kit: Path, env: dict[str, str],
                                                             name: str, cleanup: list[str],
                                                             tmp_path: Path) -> None:
    cleanup.append(name)
    assert sbx(env, "run", "--name", name, "-d", str(kit), "--", "sleep", "600").returncode \
        == 0
    # Not tmp_path itself: it holds the state home, which must not sit in another user's dir.
    workspace = tmp_path / "ws"
    workspace.mkdir()
    user_owned(workspace)
    for extra, flag in [(["--kit", str(kit)], "--kit"), (["--arg", "A=1"], "--arg"),
                        (["--mount", f"{workspace}:/m"], "--mount"), (["-e", "A=1"], "--env"),
                        (["--user", "2000"], "--user"), (["--timeout", "5"], "--timeout")]:
        done = sbx(env, "run", "--name", name, *extra, str(kit))
        assert done.returncode == 2, (flag, done.stderr)
        assert flag.encode() in done.stderr and b"(invalid_argument)" in done.stderr


@pytest.mark.parametrize("bad", ["a", "-x", "x-", "has space", "x" * 64, "ünï"])
def test_bad_names_are_refused(bad: str, kit: Path, env: dict[str, str]) -> None:
    done = sbx(env, "run", "--name", bad, "-d", str(kit))
    assert done.returncode == 2 and b"(invalid_argument)" in done.stderr


def test_missing_names_and_rm_without_a_terminal(env: dict[str, str], kit: Path, name: str,
                                                 cleanup: list[str]) -> None:
    for command in (["attach", name], ["exec", name, "--", "true"], ["logs", name],
                    ["stop", name], ["rm", "-f", name]):
        done = sbx(env, *command)
        assert done.returncode == 2 and b"no sandbox named" in done.stderr, command
    cleanup.append(name)
    assert sbx(env, "run", "--name", name, "-d", str(kit), "--", "sleep", "600").returncode \
        == 0
    refused = sbx(env, "rm", name)  # no terminal: -f is needed
    assert refused.returncode == 2 and b"-f" in refused.stderr
    assert name in ls(env)


def test_two_concurrent_creations_make_one_sandbox(kit: Path, env: dict[str, str], name: str,
                                                   cleanup: list[str], engine: SdkEngine,
                                                   state_home: Path) -> None:
    cleanup.append(name)
    results: list[Finished] = []
    threads = [threading.Thread(target=lambda: results.append(
        sbx(env, "run", "--name", name, "-d", str(kit), "--", "sleep", "600")))
        for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT_S * 2)
    assert [r.returncode for r in results] == [0, 0], [r.stderr for r in results]
    containers = [o for o in owned(engine, state_home)
                  if o.kind == "container" and o.labels.get(labels.NAME) == name]
    assert len(containers) == 1


def _pane(session: str, command: str, width: int = 100) -> None:
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", str(width), "-y", "30",
                    command], check=True, timeout=30)


def _screen(session: str) -> str:
    return subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True,
                          text=True, timeout=30, check=False).stdout


def _wait_screen(session: str, text: str) -> str:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        screen = _screen(session)
        if text in screen:
            return screen
        time.sleep(0.1)
    raise AssertionError(f"{text!r} never appeared:\n{_screen(session)}")


def test_attach_detach_and_reattach_in_a_terminal(kit: Path, env: dict[str, str],
                                                  name: str, cleanup: list[str],
                                                  tmp_path: Path) -> None:
    cleanup.append(name)
    session = f"named-{uuid.uuid4().hex[:8]}"
    script = tmp_path / "go.sh"
    script.write_text(
        f"export SBX_HOME={env['SBX_HOME']} SBX_CONFIG={os.devnull}\n"
        f"{SBX} run --name {name} {kit}; echo FIRST_RC=$?\n"
        f"{SBX} attach {name}; echo SECOND_RC=$?\nsleep 600\n", encoding="utf-8")
    _pane(session, f"bash --norc --noprofile {script}")
    try:
        _wait_screen(session, "/workspace $")
        subprocess.run(["tmux", "send-keys", "-t", session, "echo marker-$((2*21))", "Enter"],
                       check=True, timeout=30)
        _wait_screen(session, "marker-42")
        subprocess.run(["tmux", "send-keys", "-t", session, "C-p", "C-q"], check=True,
                       timeout=30)
        _wait_screen(session, "FIRST_RC=0")  # detached: 0, the sandbox keeps running
        assert ls(env)[name]["status"] == "running"
        subprocess.run(["tmux", "send-keys", "-t", session, "", "Enter"], check=True,
                       timeout=30)
        subprocess.run(["tmux", "send-keys", "-t", session, "exit 5", "Enter"], check=True,
                       timeout=30)
        _wait_screen(session, "SECOND_RC=5")  # the workload's own status
        assert ls(env)[name]["status"] == "exited"
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], timeout=30, check=False)


@pytest.fixture
def egress(tmp_path: Path, state_home: Path, internet: Internet) -> dict[str, str]:
    internet.origin.clear()
    SecretStore(state_home).set("github", SECRET)
    config = internet.sbx_config(tmp_path / "config.toml")
    return {**os.environ, "SBX_HOME": str(state_home), "SBX_CONFIG": str(config)}


CURL = ('curl -sS -m 10 -o /dev/null -w "%{http_code}" https://api.github.com/user; echo; '
        'curl -sS -m 10 -o /dev/null -w "%{http_code}" http://evil.example/x; echo')


@pytest.fixture(scope="module")
def egress_kit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_kit(tmp_path_factory.mktemp("kits"), "netagent",
                    "FROM sbx-base/bookworm:1\nUSER agent\nWORKDIR /workspace\n"
                    "CMD [\"bash\"]\n", EGRESS_KIT)


def test_egress_and_credentials_survive_stop_start_and_the_cli(
        egress_kit: Path, egress: dict[str, str], name: str, cleanup: list[str],
        internet: Internet, engine: SdkEngine, state_home: Path) -> None:
    cleanup.append(name)
    # Created attached by a CLI that is then SIGKILLed: the sandbox and its proxy live on.
    process = subprocess.Popen([str(SBX), "run", "--name", name, str(egress_kit), "--",
                                "sleep", "600"], env=egress, stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _until(lambda: ls(egress).get(name, {}).get("status") == "running")
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(30)
    for round_ in ("after the CLI died", "after stop/start"):
        done = sbx(egress, "exec", name, "--", "bash", "-c", CURL)
        assert done.stdout.decode().split() == ["200", "403"], (round_, done.stderr)
        seen = [r for r in internet.origin.requests() if r.path == "/user"]
        assert seen and seen[-1].header("Authorization") == f"token {SECRET}", round_
        assert all("sbx-proxy-managed" not in (r.header("Authorization") or "")
                   for r in seen)
        internet.origin.clear()
        if round_ == "after the CLI died":
            assert sbx(egress, "stop", name).returncode == 0
            # The keeper stopped the proxy with the sandbox.
            _until(lambda: not _proxies(state_home))
            again = sbx(egress, "run", "--name", name, "-d", str(egress_kit))
            assert again.returncode == 0, again.stderr
    # Only the sandbox may use its proxy: the host (the gateway) gets refused.
    proxy_port = _proxy_port(state_home)
    gateway = _gateway(engine, state_home, name)
    refused = subprocess.run(["curl", "-sS", "-m", "5", "-o", "/dev/null", "-w", "%{http_code}",
                              "-x", f"http://{gateway}:{proxy_port}", "http://api.github.com/"],
                             capture_output=True, text=True, timeout=30, check=False)
    assert refused.stdout in ("403", "407"), refused


def _until(probe: Callable[[], bool], timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if probe():
            return
        time.sleep(0.2)
    raise AssertionError("condition never held")


def _proxies(state_home: Path) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if b"sbx.proxy" in cmdline and str(state_home).encode() in cmdline:
                found.append(int(entry.name))
    return found


def _proxy_port(state_home: Path) -> int:
    [config] = list((state_home / "runs").glob("*/proxy.json"))
    return int(json.loads(config.read_text(encoding="utf-8"))["listen_port"])


def _gateway(engine: SdkEngine, state_home: Path, name: str) -> str:
    [network] = [o for o in owned(engine, state_home)
                 if o.kind == "network" and o.labels.get(labels.NAME) == name]
    return engine.network_gateway(network.id)


def test_gc_leaves_named_sandboxes_and_collects_runs_whose_owner_died(
        kit: Path, busybox_kit: Path, env: dict[str, str], name: str, cleanup: list[str],
        engine: SdkEngine, state_home: Path) -> None:
    cleanup.append(name)
    assert sbx(env, "run", "--name", name, "-d", str(kit), "--", "sleep", "600").returncode \
        == 0
    assert sbx(env, "stop", name).returncode == 0
    # A one-shot run whose sbx is SIGKILLed: its owner lock is free, so gc takes it (grace 0)
    # although its deadline is an hour away.
    process = subprocess.Popen([str(SBX), "run", str(busybox_kit), "--", "sleep", "600"],
                               env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    _until(lambda: any(o.kind == "container" and labels.NAME not in o.labels
                       and o.state == "running" for o in owned(engine, state_home)))
    process.send_signal(signal.SIGKILL)
    process.wait(30)
    done = sbx(env, "gc", "--grace", "0")
    assert done.returncode == 0, done.stderr
    left = owned(engine, state_home)
    assert [o for o in left if o.kind == "container" and labels.NAME not in o.labels] == []
    assert any(o.labels.get(labels.NAME) == name for o in left)  # named: kept
    # --named takes stopped named sandboxes.
    assert sbx(env, "gc", "--grace", "0", "--named").returncode == 0
    assert name not in ls(env)
    cleanup.remove(name)
    assert home_hash(state_home)  # the home is untouched otherwise
