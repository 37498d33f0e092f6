"""The host-side boundary, attacked from outside on a real engine (issue 10, classes 1-3, 7, 8,
12): what is mounted is what was checked, the workspace cannot attack its owner through git,
blocked paths and sockets stay out, builds have no network, the sandbox keeps its own deadline,
signals at start-up leave nothing, concurrent first runs build once, and a lost engine is a
failure after the start that says what it left.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sbx.seams.driver import SdkEngine
from tests.support.sbxproc import SBX, run_sbx

from .conftest import BUSYBOX, TESTER_UID, make_kit, owned, reachable_by_others, user_owned

pytestmark = pytest.mark.docker

BOOKWORM = "sbx-base/bookworm:1"
WAIT_S = 60.0


@pytest.fixture
def env(state_home: Path, tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "SBX_HOME": str(state_home), "SBX_CONFIG": os.devnull}


@pytest.fixture(scope="module")
def deb_kit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_kit(tmp_path_factory.mktemp("kits"), "gitkit",
                    f"FROM {BOOKWORM}\nUSER agent\nWORKDIR /workspace\nCMD [\"bash\"]\n")


SLOW_DESCRIPTOR = """
    capabilities:
      - type: com.docker.sandbox/lifecycle@1
        config:
          install:
            - command: sleep 3
    """
SLOW_RECIPE = f"FROM {BUSYBOX}\nUSER agent\nWORKDIR /workspace\nCMD [\"sh\"]\n"


@pytest.fixture(scope="module")
def slow_kit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A kit whose install hook holds the create step for 3 s: a wide window between sbx's
    check of a mount source and the engine's mount, for the swap attacks below."""
    return make_kit(tmp_path_factory.mktemp("kits"), "slowkit", SLOW_RECIPE, SLOW_DESCRIPTOR)


def chown_tree(path: Path, uid: int) -> None:
    for directory, dirs, files in os.walk(path):
        os.chown(directory, uid, uid)
        for name in (*dirs, *files):
            os.chown(os.path.join(directory, name), uid, uid, follow_symlinks=False)


def git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The host's real git, as the owner would run it (root trusting the repo explicitly)."""
    return subprocess.run(["git", "-c", f"safe.directory={repo}", "-C", str(repo), *args],
                          capture_output=True, text=True, timeout=30, check=False)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True, timeout=30)
    (project / "README").write_text("hello\n", encoding="utf-8")
    git(project, "add", "README")
    committed = git(project, "-c", "user.email=o@example.invalid", "-c", "user.name=owner",
                    "commit", "-qm", "first")
    assert committed.returncode == 0, committed.stderr
    shutil.rmtree(project / ".git" / "hooks")  # a missing hooks dir must not be creatable
    chown_tree(project, 1000)
    return project


ATTACK = r"""
cd "$SBX_WORKSPACE"
git config core.fsmonitor "touch $MARKER" 2>/dev/null; echo "config=$?"
mkdir -p .git/hooks 2>/dev/null
printf '#!/bin/sh\ntouch %s\n' "$MARKER" > .git/hooks/pre-commit 2>/dev/null; echo "hook=$?"
mv .git .git-away 2>/dev/null; echo "mv=$?"
printf '[core]\n\tfsmonitor = touch %s\n' "$MARKER" > .git/config 2>/dev/null; echo "write=$?"
echo change >> README
git -c user.email=a@example.invalid -c user.name=agent commit -qam "by the agent"; echo "commit=$?"
echo 'touch /tmp/x' > .envrc
mkdir -p vendor/lib/.git
printf '[core]\n\tfsmonitor = touch %s\n' "$MARKER" > vendor/lib/.git/config
"""


def test_git_config_is_read_only_so_host_git_runs_nothing(repo: Path, deb_kit: Path,
                                                          env: dict[str, str],
                                                          tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    config_before = (repo / ".git" / "config").read_bytes()
    result = run_sbx(["run", "-e", f"MARKER={marker}", str(deb_kit), str(repo), "--",
                      "bash", "-c", ATTACK], env=env)
    assert result.returncode == 0, result.stderr
    values = dict(line.split("=", 1) for line in result.stdout.decode().splitlines())
    # Every write to git's executed configuration failed; the agent could still commit.
    assert values["config"] != "0" and values["hook"] != "0"
    assert values["mv"] != "0" and values["write"] != "0"
    assert values["commit"] == "0"
    assert (repo / ".git" / "config").read_bytes() == config_before
    assert not (repo / ".git" / "hooks" / "pre-commit").exists()
    assert git(repo, "log", "-1", "--format=%s").stdout.strip() == "by the agent"
    # The owner's next git commands run nothing the sandbox wrote.
    for command in (("status",), ("commit", "--allow-empty", "-qm", "owner")):
        done = git(repo, "-c", "user.email=o@example.invalid", "-c", "user.name=owner",
                   *command)
        assert done.returncode == 0, done.stderr
    assert not marker.exists()
    # What git cannot be protected from is reported: the new .envrc and the nested repository.
    stderr = result.stderr.decode()
    assert ".envrc" in stderr and "vendor/lib/.git/config" in stderr
    events = (Path(env["SBX_HOME"]) / "audit.jsonl").read_text(encoding="utf-8")
    assert "workspace_host_config_changed" in events


def test_trusted_workspace_lets_the_sandbox_write_git_config(repo: Path, deb_kit: Path,
                                                             env: dict[str, str],
                                                             tmp_path: Path) -> None:
    # The control: with --trust-workspace the same write lands, and the host's git runs it,
    # so the test above would see a marker if the protection failed.
    marker = tmp_path / "ran"
    result = run_sbx(["run", "--trust-workspace", "-e", f"MARKER={marker}", str(deb_kit),
                      str(repo), "--", "bash", "-c",
                      'cd "$SBX_WORKSPACE"; git config core.fsmonitor "touch $MARKER"'], env=env)
    assert result.returncode == 0, result.stderr
    git(repo, "status")
    assert marker.exists()


# -- check-to-use: what is mounted is what was checked --------------------------------------------


def _swap_when_started(home: Path, path: Path, target: Path) -> threading.Thread:
    """Once the run records itself (after every check), replace ``path`` by a symbolic link to
    ``target`` — what an attacker racing sbx would do."""
    def swap() -> None:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            if list((home / "runs").glob("*/run.json")):
                path.rename(path.with_name(path.name + ".checked"))
                path.symlink_to(target)
                return
            time.sleep(0.01)

    thread = threading.Thread(target=swap, daemon=True)
    thread.start()
    return thread


def _secret_and_workspace(root: Path, uid: int) -> tuple[Path, Path]:
    root.mkdir(parents=True, exist_ok=True)
    secret = root / "secret"
    secret.mkdir()
    (secret / "id_rsa").write_text("PRIVATE-KEY-MATERIAL\n", encoding="utf-8")
    workspace = root / "ws"
    workspace.mkdir()
    (workspace / "inside.txt").write_text("the checked workspace\n", encoding="utf-8")
    chown_tree(root, uid)
    return secret, workspace


@pytest.mark.skipif(os.geteuid() != 0, reason="staging mounts need root")
def test_swapped_workspace_is_not_what_gets_mounted(slow_kit: Path, env: dict[str, str],
                                                    tmp_path: Path, state_home: Path) -> None:
    secret, workspace = _secret_and_workspace(tmp_path / "host", 1000)
    swapper = _swap_when_started(state_home, workspace, secret)
    result = run_sbx(["run", str(slow_kit), str(workspace), "--", "sh", "-c",
                      'ls "$SBX_WORKSPACE"; cat "$SBX_WORKSPACE"/* 2>/dev/null'], env=env)
    swapper.join(WAIT_S)
    assert workspace.is_symlink(), "the swap never happened; the test proves nothing"
    assert result.returncode == 0, result.stderr
    assert b"the checked workspace" in result.stdout
    assert b"PRIVATE-KEY-MATERIAL" not in result.stdout and b"id_rsa" not in result.stdout
    assert _staging_mounts_of(state_home) == []


def test_swap_is_caught_without_root(tester_sbx: list[str], tmp_path: Path,
                                     engine: SdkEngine) -> None:
    reachable_by_others(tmp_path)  # the test user must reach its directory below
    root = tmp_path / "tester"
    root.mkdir()
    slow_kit = make_kit(root / "kits", "slowkit", SLOW_RECIPE, SLOW_DESCRIPTOR)
    secret, workspace = _secret_and_workspace(root, TESTER_UID)
    home = root / "state"
    home.mkdir()
    os.chown(home, TESTER_UID, TESTER_UID)
    tester_env = {"PATH": "/usr/bin:/bin", "HOME": str(root), "SBX_HOME": str(home),
                  "SBX_CONFIG": os.devnull}
    swapper = _swap_when_started(home, workspace, secret)
    try:
        # The workload waits before it reads, so the stop on a mismatch comes first.
        result = run_sbx(["run", str(slow_kit), str(workspace), "--", "sh", "-c",
                          'sleep 3; cat "$SBX_WORKSPACE"/* 2>/dev/null'],
                         env=tester_env, prefix=tester_sbx)
    finally:
        swapper.join(WAIT_S)
        left = owned(engine, home)
        for obj in left:
            if obj.kind == "container":
                engine.remove_container(obj.id)
    assert workspace.is_symlink(), ("the swap never happened; the test proves nothing",
                                    result.stderr)
    assert result.returncode == 125, (result.stdout, result.stderr)
    assert b"(rule source_changed)" in result.stderr
    assert b"PRIVATE-KEY-MATERIAL" not in result.stdout
    assert [o for o in left if o.kind == "container"] == []


@pytest.mark.skipif(os.geteuid() != 0, reason="staging mounts need root")
def test_a_vanished_source_is_never_created_by_the_engine(slow_kit: Path,
                                                          env: dict[str, str],
                                                          tmp_path: Path,
                                                          state_home: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    user_owned(workspace)

    def remove() -> None:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            if list((state_home / "runs").glob("*/run.json")):
                workspace.rmdir()
                return
            time.sleep(0.01)

    remover = threading.Thread(target=remove, daemon=True)
    remover.start()
    result = run_sbx(["run", str(slow_kit), str(workspace), "--", "sh", "-c",
                      'touch "$SBX_WORKSPACE/x" 2>&1; ls -a "$SBX_WORKSPACE"'], env=env)
    remover.join(WAIT_S)
    # Refused (the staging of a directory that is gone fails) or run on the deleted directory:
    # either way the engine never recreates it on the host.
    assert result.returncode in (0, 125, 126), result.stderr
    assert not workspace.exists(), "the engine created the vanished workspace on the host"


@pytest.fixture
def listening_socket(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "project" / "agent.sock"
    path.parent.mkdir()
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    try:
        yield path
    finally:
        server.close()


@pytest.mark.parametrize("make", ["socket", "socket_inside", "proc", "kube",
                                  "other_state_home", "gitconfig"])
def test_blocked_sources_are_refused_not_crashed_on(make: str, busybox_kit: Path,
                                                    env: dict[str, str], tmp_path: Path,
                                                    listening_socket: Path) -> None:
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    (home / ".gitconfig").write_text("[user]\n", encoding="utf-8")
    xdg_state = tmp_path / "xdg-state-elsewhere"
    (xdg_state / "sbx").mkdir(parents=True)
    source = {"socket": str(listening_socket), "socket_inside": str(listening_socket.parent),
              "proc": "/proc/1/root/etc",
              "kube": str(home / ".kube"), "other_state_home": str(xdg_state / "sbx"),
              "gitconfig": str(home / ".gitconfig")}[make]
    result = run_sbx(["run", "--mount", f"{source}:/mnt/x:ro", str(busybox_kit), "--", "true"],
                     env={**env, "HOME": str(home), "XDG_STATE_HOME": str(xdg_state)})
    assert result.returncode == 125, result.stderr
    assert b"(mount_blocked)" in result.stderr and b"Traceback" not in result.stderr


def test_a_kit_build_gets_no_network(kit_factory: Callable[..., Path],
                                     env: dict[str, str]) -> None:
    kit = kit_factory("nonet", f"FROM {BUSYBOX}\nLABEL test.nonce=\"{uuid.uuid4().hex}\"\n"
                      "RUN ls /sys/class/net > /build-interfaces\nUSER agent\n")
    result = run_sbx(["run", str(kit), "--", "cat", "/build-interfaces"], env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [b"lo"]


def test_the_sandbox_keeps_its_deadline_when_sbx_is_killed(busybox_kit: Path,
                                                           env: dict[str, str],
                                                           engine: SdkEngine,
                                                           state_home: Path) -> None:
    process = subprocess.Popen([str(SBX), "run", "--timeout", "3s", str(busybox_kit), "--",
                                "sleep", "600"], env=env, stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        container = _wait_for(lambda: next((o for o in owned(engine, state_home)
                                            if o.kind == "container"
                                            and o.state == "running"), None))
        process.send_signal(signal.SIGKILL)  # no cleanup, no client-side deadline any more
        process.wait(30)
        state = _wait_for(lambda: next((o.state for o in owned(engine, state_home)
                                        if o.id == container.id and o.state != "running"),
                                       None))
        assert state == "exited"
    finally:
        for obj in owned(engine, state_home):
            if obj.kind == "container":
                engine.remove_container(obj.id)
        subprocess.run([str(SBX), "gc", "--grace", "0"], env=env, timeout=120, check=False,
                       capture_output=True)


def _wait_for(probe: Callable[[], Any], timeout: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = probe()
        if found is not None:
            return found
        time.sleep(0.1)
    raise AssertionError(f"nothing after {timeout} s")


# -- faults: signals at start-up, concurrent first runs, a lost engine ---------------------------

BUSY_DESCRIPTOR = """
    capabilities:
      - type: com.docker.sandbox/lifecycle@1
        config:
          install:
            - command: "true"
          startup:
            - command: "true"
      - type: com.docker.sandbox/volume@1
        config:
          path: /data
    """


@pytest.mark.parametrize("delay", [0.15, 0.3, 0.45, 0.6, 0.75, 0.9, 1.05, 1.2, 1.4, 1.6, 1.8,
                                   2.1])
def test_sigterm_at_any_start_up_point_leaves_nothing(delay: float, tmp_path: Path,
                                                      env: dict[str, str], engine: SdkEngine,
                                                      state_home: Path) -> None:
    kit = make_kit(tmp_path / "kits", "busy", SLOW_RECIPE, BUSY_DESCRIPTOR)
    warm = run_sbx(["run", str(kit), "--", "true"], env=env)  # build once, outside the timing
    assert warm.returncode == 0, warm.stderr
    process = subprocess.Popen([str(SBX), "run", str(kit), "--", "sleep", "30"], env=env,
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE)
    time.sleep(delay)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=WAIT_S)
    # A signal that lands before the interpreter reached sbx's handlers (a loaded machine at the
    # earliest delays) ends it by the default action, before anything exists to leave behind.
    assert process.returncode == 130 or (process.returncode == -signal.SIGTERM
                                         and not stderr), stderr
    assert b"Traceback" not in stderr
    assert owned(engine, state_home) == []
    assert not list((state_home / "runs").iterdir())
    from sbx.base.paths import home_hash

    images = subprocess.run(["docker", "images", "-a", "-q", "--filter",
                             f"label=dev.sbx.home={home_hash(state_home)}"],
                            capture_output=True, text=True, timeout=30, check=True).stdout.split()
    assert images == []  # the per-run image of the create step is gone too


def test_concurrent_first_runs_of_one_kit_build_it_once(kit_factory: Callable[..., Path],
                                                        env: dict[str, str]) -> None:
    nonce = uuid.uuid4().hex
    kit = kit_factory("firsts", f"FROM {BUSYBOX}\nLABEL test.nonce=\"{nonce}\"\n"
                      "RUN sleep 1\nUSER agent\n")
    runs = [subprocess.Popen([str(SBX), "run", str(kit), "--", "true"], env=env,
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE) for _ in range(8)]
    statuses = [(p.wait(timeout=WAIT_S * 2), p.stderr.read() if p.stderr else b"")
                for p in runs]
    for process in runs:
        if process.stderr:
            process.stderr.close()
    assert [s for s, _ in statuses] == [0] * 8, statuses
    # Built once: no duplicate build re-tagged the name and left its image dangling.
    dangling = subprocess.run(["docker", "images", "-q", "--filter",
                               f"label=test.nonce={nonce}", "--filter", "dangling=true"],
                              capture_output=True, text=True, timeout=30, check=True)
    assert dangling.stdout.split() == []
    built = [err for _, err in statuses if b"building" in err]
    assert len(built) == 1, built


class _SocketRelay:
    """A unix socket that relays to the engine's, until cut: the engine 'disappears' for the
    client without anything happening to the engine itself."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.server = socket.socket(socket.AF_UNIX)
        self.server.bind(str(path))
        self.server.listen(64)
        self.connections: list[socket.socket] = []
        self.cut = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.cut.is_set():
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX)
            upstream.connect("/var/run/docker.sock")
            self.connections += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib_suppress():
                sink.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self.cut.set()
        with contextlib_suppress():
            self.server.shutdown(socket.SHUT_RDWR)  # unblocks accept(); close alone does not
        self.server.close()
        with contextlib_suppress():
            self.path.unlink()
        for connection in self.connections:
            with contextlib_suppress():
                connection.shutdown(socket.SHUT_RDWR)
            connection.close()


def contextlib_suppress() -> Any:
    import contextlib

    return contextlib.suppress(OSError)


def test_losing_the_engine_after_the_start_is_a_failure_that_says_what_is_left(
        busybox_kit: Path, env: dict[str, str], engine: SdkEngine, state_home: Path,
        tmp_path: Path) -> None:
    relay = _SocketRelay(tmp_path / "engine.sock")
    relayed = {**env, "DOCKER_HOST": f"unix://{relay.path}"}
    process = subprocess.Popen([str(SBX), "run", str(busybox_kit), "--", "sleep", "60"],
                               env=relayed, stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _wait_for(lambda: next((o for o in owned(engine, state_home)
                                if o.kind == "container" and o.state == "running"), None))
        relay.close()
        _, stderr = process.communicate(timeout=WAIT_S)
        text = stderr.decode()
        assert process.returncode == 126, text  # a failure after the start, not a refusal
        assert "(engine_lost)" in text and "sbx gc" in text and "Traceback" not in text
    finally:
        relay.close()
        if process.poll() is None:
            process.kill()
        for obj in owned(engine, state_home):
            if obj.kind == "container":
                engine.remove_container(obj.id)
        subprocess.run([str(SBX), "gc", "--grace", "0"], env=env, timeout=120, check=False,
                       capture_output=True)


SIZED_DESCRIPTOR = """
    capabilities:
      - type: com.docker.sandbox/volume@1
        config:
          path: /data
          size: 1m
      - type: com.docker.sandbox/lifecycle@1
        config:
          install:
            - command: "echo seeded > /data/seed"
    """


@pytest.mark.skipif(os.geteuid() != 0, reason="sized volumes need root (mount)")
def test_a_sized_volume_cannot_hold_more_than_its_size(tmp_path: Path, env: dict[str, str],
                                                       state_home: Path) -> None:
    kit = make_kit(tmp_path / "kits", "sized", SLOW_RECIPE, SIZED_DESCRIPTOR)
    script = ("cat /data/seed; "
              "dd if=/dev/zero of=/data/small bs=1k count=512 2>/dev/null && echo small=ok; "
              "dd if=/dev/zero of=/data/big bs=1M count=32 2>/dev/null || echo big=refused; "
              "df -k /data | tail -1")
    result = run_sbx(["run", str(kit), "--", "sh", "-c", script], env=env)
    assert result.returncode == 0, result.stderr
    out = result.stdout.decode()
    assert "seeded" in out  # what the install hook wrote is there at run time
    assert "small=ok" in out and "big=refused" in out
    assert _staging_mounts_of(state_home) == []
    assert not list((state_home / "runs").iterdir())


def test_a_sized_volume_is_refused_where_its_size_cannot_be_enforced(
        tester_sbx: list[str], tmp_path: Path) -> None:
    reachable_by_others(tmp_path)
    root = tmp_path / "tester"
    root.mkdir()
    kit = make_kit(root / "kits", "sized", SLOW_RECIPE, SIZED_DESCRIPTOR)
    home = root / "state"
    home.mkdir()
    chown_tree(root, TESTER_UID)
    result = run_sbx(["run", str(kit), "--", "true"],
                     env={"PATH": "/usr/bin:/bin", "HOME": str(root), "SBX_HOME": str(home),
                          "SBX_CONFIG": os.devnull}, prefix=tester_sbx)
    assert result.returncode == 125, result.stderr
    assert b"(unsupported_capability)" in result.stderr and b"cannot be enforced" in result.stderr


def _staging_mounts_of(state_home: Path) -> list[str]:
    """This test's own staging mounts (other homes on the machine are not this test's)."""
    from sbx.base.paths import home_hash

    mine = f"/run/sbx/{home_hash(state_home)}/"
    return [line for line in Path("/proc/self/mountinfo").read_text(encoding="utf-8").splitlines()
            if mine in line]
