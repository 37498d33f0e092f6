"""`sbx gc` against the real engine: what a killed run leaves is removed, live runs and other
homes are never touched, unreadable deadlines are kept, a failing listing deletes nothing, and
two gc runs never collide.

Every wait is bounded in count and time; every object a test creates is removed in a `finally`
(the `state_home` fixture then checks nothing labelled for the home is left).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from sbx.base import labels as label_keys
from sbx.base.paths import home_hash
from sbx.seams import audit
from sbx.seams.driver import SdkEngine
from sbx.seams.engine import OwnedObject
from sbx.seams.host import firewall

from .conftest import BUSYBOX, owned

pytestmark = pytest.mark.docker

SBX = str(Path(sys.executable).with_name("sbx"))


@pytest.fixture
def env(state_home: Path, tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "SBX_HOME": str(state_home), "SBX_CONFIG": os.devnull}


def wait_for(what: str, probe: Callable[[], Any], *, timeout_s: float = 60.0,
             every_s: float = 0.1) -> Any:
    """Poll ``probe`` until it returns something truthy; bounded in time and count."""
    deadline = time.monotonic() + timeout_s
    for _ in range(int(timeout_s / every_s) + 1):
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            break
        time.sleep(every_s)
    pytest.fail(f"timed out after {timeout_s}s waiting for {what}")


def containers(engine: SdkEngine, home: Path) -> list[OwnedObject]:
    return [o for o in owned(engine, home) if o.kind == "container"]


def sandbox_in_state(engine: SdkEngine, home: Path, state: str) -> OwnedObject | None:
    for obj in containers(engine, home):
        if obj.labels.get(label_keys.ROLE) == label_keys.ROLE_SANDBOX and obj.state == state:
            return obj
    return None


def labelled(home: Path, *, run: str | None = None, deadline: str | None = None,
             test: str = "") -> dict[str, str]:
    labels = label_keys.object_labels(home_hash=home_hash(home), run_id=run or uuid.uuid4().hex,
                                      deadline=0, kits=["test"], role=label_keys.ROLE_SANDBOX)
    if deadline is None:
        del labels[label_keys.DEADLINE]
    else:
        labels[label_keys.DEADLINE] = deadline
    labels["dev.sbx.test"] = test or "gc"
    return labels


def create_container(engine: SdkEngine, labels: dict[str, str], *,
                     command: tuple[str, ...] = ("sleep", "30"), start: bool = False) -> str:
    api: Any = engine._api
    created = api.create_container(BUSYBOX, command=list(command), labels=labels,
                                   network_disabled=True)
    ident = str(created["Id"])
    if start:
        api.start(ident)
    return ident


def remove_everything(engine: SdkEngine, home: Path) -> None:
    """Best-effort cleanup of everything labelled for ``home`` (containers first)."""
    objects = owned(engine, home)
    for obj in sorted(objects, key=lambda o: o.kind != "container"):
        remover = {"container": engine.remove_container, "network": engine.remove_network,
                   "volume": engine.remove_volume}[obj.kind]
        remover(obj.id)


def spawn_run(busybox_kit: Path, env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
    """``sbx run [OPTIONS] KIT -- sh -c SCRIPT`` as a real process (args[-1] is SCRIPT)."""
    log = Path(env["SBX_HOME"]).parent / f"run-{uuid.uuid4().hex[:8]}.log"
    with log.open("wb") as sink:
        return subprocess.Popen([SBX, "run", *args[:-1], str(busybox_kit), "--", "sh", "-c",
                                 args[-1]], env=env, stdout=sink, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)


def running_sandbox(process: subprocess.Popen[bytes], engine: SdkEngine,
                    home: Path) -> OwnedObject:
    """Wait until the run's sandbox container runs; fail early if sbx itself exited."""

    def probe() -> OwnedObject | None:
        if process.poll() is not None:
            logs = sorted(home.parent.glob("run-*.log"))
            text = logs[-1].read_text(errors="replace") if logs else ""
            pytest.fail(f"sbx run exited with {process.returncode} before its sandbox ran: "
                        f"{text[-2000:]}")
        return sandbox_in_state(engine, home, "running")

    found: OwnedObject = wait_for("the sandbox to run", probe)
    return found


def sigkill(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=10)


# -- what a killed run leaves --------------------------------------------------------------------


def test_sigkilled_run_left_a_finished_container_gc_removes_everything(
        busybox_kit: Path, env: dict[str, str], engine: SdkEngine, state_home: Path,
        sbx_cli: Any) -> None:
    process = spawn_run(busybox_kit, env, "sleep 2")
    try:
        running_sandbox(process, engine, state_home)
        sigkill(process)
        wait_for("the orphaned workload to exit",
                 lambda: sandbox_in_state(engine, state_home, "exited"), timeout_s=30)
        assert len(list((state_home / "runs").iterdir())) == 1
        result = sbx_cli(["gc", "--grace", "0"], env=env)
        assert (result.exit_code, result.stdout, result.stderr) == (0, "", "")
        assert owned(engine, state_home) == []
        assert list((state_home / "runs").iterdir()) == []
    finally:
        if process.poll() is None:
            sigkill(process)
        remove_everything(engine, state_home)


def test_sigkilled_run_still_running_goes_once_its_owner_is_gone_past_the_grace(
        busybox_kit: Path, env: dict[str, str], engine: SdkEngine, state_home: Path,
        sbx_cli: Any) -> None:
    process = spawn_run(busybox_kit, env, "--timeout", "30", "sleep 60")
    try:
        sandbox = running_sandbox(process, engine, state_home)
        sigkill(process)
        # Inside the grace the orphan is kept: its run is younger than the grace...
        early = sbx_cli(["gc", "--grace", "600", "--json"], env=env).envelope()
        kept = {item["id"]: item["why"] for item in early["data"]["kept"]}
        assert kept.get(sandbox.id) == "inside_deadline"
        assert sandbox_in_state(engine, state_home, "running") is not None
        # ...and past it, the still-running container of a dead owner (its owner lock is
        # free) and its run dir go, silently, long before the deadline.
        assert time.time() < int(sandbox.labels[label_keys.DEADLINE])
        result = sbx_cli(["gc", "--grace", "0", "--json"], env=env)
        removed = {item["id"]: item["why"]
                   for item in result.envelope()["data"]["removed"]}
        assert removed.get(sandbox.id) == "owner_gone"
        assert sbx_cli(["gc", "--grace", "0"], env=env).stdout == ""  # nothing left to say
        assert owned(engine, state_home) == []
        assert list((state_home / "runs").iterdir()) == []
        events = [e for e in audit.read_events(state_home) if e["event_type"] == "gc_removed"]
        assert events and events[0]["details"]["container"] == 1
        assert events[0]["details"]["run_dir"] == 1
    finally:
        if process.poll() is None:
            sigkill(process)
        remove_everything(engine, state_home)


def test_a_live_run_inside_its_deadline_is_never_touched(
        busybox_kit: Path, env: dict[str, str], engine: SdkEngine, state_home: Path,
        sbx_cli: Any) -> None:
    process = spawn_run(busybox_kit, env, "sleep 12")  # outlives gc on a busy machine
    try:
        sandbox = running_sandbox(process, engine, state_home)
        result = sbx_cli(["gc", "--grace", "0", "--json"], env=env)
        assert result.exit_code == 0
        data: Any = result.envelope()["data"]
        assert data["removed"] == [] and data["failed"] == []
        kept = {i["id"]: i["why"] for i in data["kept"]}
        assert kept[sandbox.id] == "live"  # its owner holds the run's lock
        assert kept[sandbox.labels[label_keys.RUN]] in {"in_use", "live"}  # its run dir
        assert (state_home / "runs" / sandbox.labels[label_keys.RUN]).is_dir()
        assert sandbox_in_state(engine, state_home, "running") is not None
        assert process.wait(timeout=60) == 0  # the run finishes normally and cleans up
        assert owned(engine, state_home) == []
    finally:
        if process.poll() is None:
            sigkill(process)
        remove_everything(engine, state_home)


# -- scope and anomalies -------------------------------------------------------------------------


def test_another_homes_containers_are_never_touched(
        engine: SdkEngine, env: dict[str, str], state_home: Path, tmp_path: Path,
        sbx_cli: Any) -> None:
    other = tmp_path / "other-home"
    (state_home / "runs").mkdir(parents=True)
    theirs = create_container(engine, labelled(other, deadline="1"))
    ours = create_container(engine, labelled(state_home, deadline="1"))
    try:
        result = sbx_cli(["gc", "--grace", "0", "--json"], env=env)
        assert result.exit_code == 0
        removed = [item["id"] for item in result.envelope()["data"]["removed"]]
        assert removed == [ours]
        assert [o.id for o in owned(engine, other)] == [theirs]
        # The other home's own gc removes it (it "ran": it has a runs/ directory).
        (other / "runs").mkdir(parents=True)
        again = sbx_cli(["gc", "--grace", "0"], env={**env, "SBX_HOME": str(other)})
        assert again.exit_code == 0 and owned(engine, other) == []
    finally:
        remove_everything(engine, other)
        remove_everything(engine, state_home)


def test_a_garbage_deadline_is_kept_and_reported(engine: SdkEngine, env: dict[str, str],
                                                 state_home: Path, sbx_cli: Any) -> None:
    (state_home / "runs").mkdir(parents=True)
    odd = create_container(engine, labelled(state_home, deadline="tomorrow"))
    missing = create_container(engine, labelled(state_home, deadline=None))
    try:
        human = sbx_cli(["gc", "--grace", "0"], env=env)
        assert human.exit_code == 0 and human.stdout == ""
        lines = human.stderr.splitlines()
        assert len(lines) == 2
        assert any(odd[:12] in line and "'tomorrow' is unreadable" in line for line in lines)
        assert any(missing[:12] in line and "no deadline label" in line for line in lines)
        data: Any = sbx_cli(["gc", "--grace", "0", "--json"], env=env).envelope()["data"]
        kept = {item["id"]: item["why"] for item in data["kept"]}
        assert kept[odd] == "deadline_unreadable" and kept[missing] == "deadline_missing"
        assert {o.id for o in owned(engine, state_home)} == {odd, missing}
    finally:
        remove_everything(engine, state_home)


def test_unused_per_run_networks_and_volumes_go_used_ones_stay(
        engine: SdkEngine, env: dict[str, str], state_home: Path, sbx_cli: Any) -> None:
    api: Any = engine._api
    (state_home / "runs").mkdir(parents=True)
    past = str(int(time.time()) - 10)
    future = str(int(time.time()) + 3600)
    free_net = api.create_network(f"sbx-test-{uuid.uuid4().hex[:12]}", internal=True,
                                  labels=labelled(state_home, deadline=past))["Id"]
    used_net = api.create_network(f"sbx-test-{uuid.uuid4().hex[:12]}", internal=True,
                                  labels=labelled(state_home, deadline=past))["Id"]
    free_vol = api.create_volume(labels=labelled(state_home, deadline=past))["Name"]
    # A live container (inside its deadline) that uses the second network keeps it.
    user = api.create_container(BUSYBOX, command=["sleep", "30"],
                                labels=labelled(state_home, deadline=future),
                                host_config=api.create_host_config(network_mode=used_net))["Id"]
    try:
        result = sbx_cli(["gc", "--grace", "0", "--json"], env=env)
        assert result.exit_code == 0, result.stdout
        data: Any = result.envelope()["data"]
        assert {(i["kind"], i["id"]) for i in data["removed"]} == {
            ("network", free_net), ("volume", free_vol)}
        assert (used_net, "in_use") in {(i["id"], i["why"]) for i in data["kept"]}
        left = {(o.kind, o.id) for o in owned(engine, state_home)}
        assert left == {("network", used_net), ("container", user)}
    finally:
        remove_everything(engine, state_home)


# -- a failing engine, and a concurrent gc -------------------------------------------------------


class _FakeEngineHandler(BaseHTTPRequestHandler):
    """Answers /_ping and /version like an engine, and 500s everything else."""

    protocol_version = "HTTP/1.1"
    server: _FakeEngineServer

    def _answer(self, status: int, body: dict[str, Any] | str) -> None:
        raw = (body if isinstance(body, str) else json.dumps(body)).encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain" if isinstance(body, str)
                         else "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def _handle(self) -> None:
        path = urlsplit(self.path).path
        self.server.requests.append((self.command, path))
        if path.endswith("/_ping"):
            self._answer(200, "OK")
        elif path.endswith("/version"):
            self._answer(200, {"ApiVersion": "1.41", "MinAPIVersion": "1.12",
                               "Version": "20.10.99-fake", "Os": "linux"})
        else:
            self._answer(500, {"message": "injected failure"})

    do_GET = do_POST = do_DELETE = _handle

    def log_message(self, format: str, *args: Any) -> None:
        return


class _FakeEngineServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def __init__(self, path: str) -> None:
        self.requests: list[tuple[str, str]] = []
        super().__init__(path, _FakeEngineHandler)


@pytest.fixture
def failing_engine() -> Iterator[tuple[str, _FakeEngineServer]]:
    directory = tempfile.mkdtemp(prefix="sbx-fake-", dir="/tmp")  # short: AF_UNIX path limit
    path = os.path.join(directory, "docker.sock")
    server = _FakeEngineServer(path)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield f"unix://{path}", server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
        os.unlink(path)
        os.rmdir(directory)


def test_a_failing_listing_removes_nothing_exits_126_and_is_audited(
        failing_engine: tuple[str, _FakeEngineServer], env: dict[str, str], state_home: Path,
        sbx_cli: Any) -> None:
    url, server = failing_engine
    run_dir = state_home / "runs" / uuid.uuid4().hex
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text('{"pid": 999999999}', encoding="utf-8")
    os.utime(run_dir, (time.time() - 86_400,) * 2)
    os.utime(run_dir / "run.json", (time.time() - 86_400,) * 2)
    fake_env = {**env, "DOCKER_HOST": url}
    human = sbx_cli(["gc", "--grace", "0"], env=fake_env)
    assert human.exit_code == 126 and human.stdout == ""
    (line,) = human.stderr.splitlines()
    assert "nothing was removed" in line and "500" in line and line.endswith("(cleanup_failed)")
    data: Any = sbx_cli(["gc", "--grace", "0", "--json"], env=fake_env).envelope()["data"]
    assert [f["kind"] for f in data["failed"]] == ["list_failed"] and data["removed"] == []
    assert run_dir.exists()
    assert all(method == "GET" for method, _path in server.requests)  # nothing was deleted
    failures = [e["details"] for e in audit.read_events(state_home)
                if e["event_type"] == "cleanup_failed"]
    assert failures == [{"reason": "list_failed", "count": 1, "source": "gc"}] * 2


def test_concurrent_gc_backs_off_without_acting(engine: SdkEngine, env: dict[str, str],
                                                state_home: Path, sbx_cli: Any) -> None:
    (state_home / "runs").mkdir(parents=True)
    stale = create_container(engine, labelled(state_home, deadline="1"))
    try:
        fd = os.open(state_home / "gc.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # "another gc" holds the lock
            quiet = sbx_cli(["gc", "--grace", "0"], env=env)
            assert (quiet.exit_code, quiet.stdout, quiet.stderr) == (0, "", "")
            envelope = sbx_cli(["gc", "--grace", "0", "--json"], env=env).envelope()
            assert envelope["data"]["outcome"] == "locked"
            verbose = sbx_cli(["-v", "gc", "--grace", "0"], env=env)
            assert verbose.exit_code == 0 and "another sbx gc holds" in verbose.stderr
            assert [o.id for o in owned(engine, state_home)] == [stale]
        finally:
            os.close(fd)
        done = sbx_cli(["gc", "--grace", "0"], env=env)
        assert done.exit_code == 0 and owned(engine, state_home) == []
    finally:
        remove_everything(engine, state_home)


def test_two_gc_processes_at_once_never_fail(engine: SdkEngine, env: dict[str, str],
                                             state_home: Path) -> None:
    (state_home / "runs").mkdir(parents=True)
    for _ in range(6):
        create_container(engine, labelled(state_home, deadline="1"))
    try:
        procs = [subprocess.Popen([SBX, "gc", "--grace", "0"], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE) for _ in range(2)]
        outputs = [p.communicate(timeout=120) for p in procs]
        assert [p.returncode for p in procs] == [0, 0], outputs
        assert all(out == (b"", b"") for out in outputs)
        assert owned(engine, state_home) == []
    finally:
        remove_everything(engine, state_home)


# -- per-run images and host firewall rules ------------------------------------------------------

IPTABLES = firewall.iptables_binary()
needs_iptables = pytest.mark.skipif(IPTABLES is None or os.geteuid() != 0,
                                    reason="host firewall rules need iptables and root")
PORT_LIFECYCLE_KIT = """
capabilities:
  - type: com.docker.sandbox/port@1
    config: {container: 8080}
  - type: com.docker.sandbox/lifecycle@1
    config:
      files: [{path: /etc/x, content: "x"}]
"""


def images_of(engine: SdkEngine, home: Path) -> list[str]:
    """Ids of every image labelled for ``home`` (untagged ones included)."""
    return [str(i["Id"]) for i in engine.list_labelled_images(
        label_keys.home_selector(home_hash(home)))]


def remove_images(engine: SdkEngine, home: Path) -> None:
    for ident in images_of(engine, home):
        engine.remove_image(ident)


def commit_run_image(engine: SdkEngine, labels: dict[str, str]) -> str:
    """What the create step leaves: ``sbx-run/<run id>:1`` committed with the run's labels."""
    api: Any = engine._api
    helper = str(api.create_container(BUSYBOX, command=["true"], network_disabled=True,
                                      labels={"dev.sbx.test": "gc-image-helper"})["Id"])
    try:
        like = engine.image(BUSYBOX)
        assert like is not None
        return engine.commit(helper, f"sbx-run/{labels[label_keys.RUN]}:1", labels, like).id
    finally:
        engine.remove_container(helper)


def write_run_dir(home: Path, rid: str, *, pid: int, deadline: int) -> Path:
    path = home / "runs" / rid
    path.mkdir(parents=True)
    (path / "run.json").write_text(json.dumps({"run_id": rid, "pid": pid, "deadline": deadline}),
                                   encoding="utf-8")
    return path


def dead_pid() -> int:
    """A pid that certainly names no process now (a reaped child's)."""
    child = subprocess.Popen(["true"])
    child.wait(timeout=10)
    return child.pid


def input_rules() -> str:
    assert IPTABLES is not None
    return subprocess.run([IPTABLES, "-w", "5", "-S", "INPUT"], capture_output=True, text=True,
                          check=True, timeout=15).stdout


def rule_spec(interface: str, rid: str) -> list[str]:
    return ["-i", interface, "-m", "comment", "--comment", f"sbx-run-{rid}", "-j", "DROP"]


def delete_rules(rid: str) -> None:
    """Remove every INPUT rule commented for ``rid`` (bounded: a few passes at most)."""
    assert IPTABLES is not None
    for _ in range(10):
        ours = [r for r in firewall.parse_rules(input_rules()) if r.run_id == rid]
        if not ours:
            return
        subprocess.run([IPTABLES, "-w", "5", "-D", "INPUT", *ours[0].spec], check=False,
                       capture_output=True, timeout=15)
    pytest.fail(f"could not remove the test's firewall rules of run {rid}")


def test_a_stale_runs_image_goes_a_live_runs_image_stays(
        engine: SdkEngine, env: dict[str, str], state_home: Path, sbx_cli: Any) -> None:
    stale, live = uuid.uuid4().hex, uuid.uuid4().hex
    past, future = int(time.time()) - 10, int(time.time()) + 3600
    stale_dir = write_run_dir(state_home, stale, pid=dead_pid(), deadline=past)
    live_dir = write_run_dir(state_home, live, pid=os.getpid(), deadline=future)
    try:
        stale_image = commit_run_image(engine, labelled(state_home, run=stale,
                                                        deadline=str(past), test="gc-image"))
        live_image = commit_run_image(engine, labelled(state_home, run=live,
                                                       deadline=str(future), test="gc-image"))
        assert sorted(images_of(engine, state_home)) == sorted([stale_image, live_image])
        dry: Any = sbx_cli(["gc", "--grace", "0", "--dry-run", "--json"], env=env).envelope()
        assert ("image", stale_image) in {(i["kind"], i["id"]) for i in dry["data"]["removed"]}
        assert len(images_of(engine, state_home)) == 2  # a dry run changes nothing
        result = sbx_cli(["gc", "--grace", "0", "--json"], env=env)
        assert result.exit_code == 0, result.stdout
        data: Any = result.envelope()["data"]
        assert [(i["kind"], i["id"], i["why"]) for i in data["removed"]] == [
            ("image", stale_image, "deadline_passed"), ("run_dir", stale, "finished")]
        kept = {(i["kind"], i["id"]): i["why"] for i in data["kept"]}
        assert kept[("image", live_image)] == "inside_deadline"
        assert kept[("run_dir", live)] in {"in_use", "live"}
        assert images_of(engine, state_home) == [live_image]
        assert engine.image(f"sbx-run/{stale}:1") is None
        assert engine.image(f"sbx-run/{live}:1") is not None
        assert not stale_dir.exists() and live_dir.exists()
        events = [e for e in audit.read_events(state_home) if e["event_type"] == "gc_removed"]
        assert events[-1]["details"]["image"] == 1
    finally:
        remove_images(engine, state_home)
    assert images_of(engine, state_home) == []


@needs_iptables
def test_a_stale_runs_firewall_rule_goes_an_unknown_runs_rule_stays(
        env: dict[str, str], state_home: Path, sbx_cli: Any) -> None:
    assert IPTABLES is not None
    stale, unknown = uuid.uuid4().hex, uuid.uuid4().hex
    stale_dir = write_run_dir(state_home, stale, pid=dead_pid(), deadline=int(time.time()) - 10)
    # Interfaces that do not exist: the rules match no traffic while the test runs.
    stale_rule = rule_spec(f"sbxtest{stale[:8]}", stale)
    unknown_rule = rule_spec(f"sbxtest{unknown[:8]}", unknown)
    try:
        for spec in (stale_rule, unknown_rule):
            subprocess.run([IPTABLES, "-w", "5", "-I", "INPUT", *spec], check=True,
                           capture_output=True, timeout=15)
        result = sbx_cli(["gc", "--grace", "0", "--json"], env=env)
        assert result.exit_code == 0, result.stdout
        data: Any = result.envelope()["data"]
        removed = [(i["kind"], i["run_id"], i["why"]) for i in data["removed"]]
        assert removed == [("firewall_rule", stale, "deadline_passed"),
                           ("run_dir", stale, "finished")]
        assert data["removed"][0]["id"] == " ".join(stale_rule)
        kept = {(i["kind"], i["run_id"]): i["why"] for i in data["kept"]}
        assert kept[("firewall_rule", unknown)] == "not_this_home"
        rules = input_rules()
        assert f"sbx-run-{stale}" not in rules and f"sbx-run-{unknown}" in rules
        assert not stale_dir.exists()
        # The unknown run's rule is never touched, however often gc runs.
        again = sbx_cli(["gc", "--grace", "0"], env=env)
        assert (again.exit_code, again.stdout, again.stderr) == (0, "", "")
        assert f"sbx-run-{unknown}" in input_rules()
    finally:
        delete_rules(stale)
        delete_rules(unknown)
    assert f"sbx-run-{unknown}" not in input_rules()


def test_a_sigkilled_run_with_a_port_and_a_create_step_leaves_nothing_after_gc(
        kit_factory: Callable[..., Path], env: dict[str, str], engine: SdkEngine,
        state_home: Path, sbx_cli: Any) -> None:
    kit = kit_factory("gcport", f"FROM {BUSYBOX}\nUSER agent\n", PORT_LIFECYCLE_KIT)
    log = state_home.parent / "run-gcport.log"
    with log.open("wb") as sink:
        process = subprocess.Popen([SBX, "run", str(kit), "--timeout", "3", "--", "sleep", "30"],
                                   env=env, stdout=sink, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL)
    rid = ""
    try:
        sandbox = running_sandbox(process, engine, state_home)
        sigkill(process)
        rid = sandbox.labels[label_keys.RUN]
        # What the killed run left: its container, network, per-run image, rules, run dir.
        kinds = {o.kind for o in owned(engine, state_home)}
        assert kinds == {"container", "network"}, kinds
        run_image = engine.image(f"sbx-run/{rid}:1")
        assert run_image is not None
        # The create step's result is the install cache's entry too, labelled for no home.
        assert any(tag.startswith("sbx-installed/") for tag in run_image.tags), run_image.tags
        assert images_of(engine, state_home) == []
        if IPTABLES is not None and os.geteuid() == 0:
            assert f"sbx-run-{rid}" in input_rules()
        assert (state_home / "runs" / rid).is_dir()
        deadline = int(sandbox.labels[label_keys.DEADLINE])
        wait_for("the run's deadline to pass", lambda: time.time() > deadline + 0.5,
                 timeout_s=15)
        # The install cache keeps its entry for [gc] image_idle_seconds; at 0 it goes now.
        idle_now = state_home.parent / "gc-idle-now.toml"
        idle_now.write_text("[gc]\nimage_idle_seconds = 0\n", encoding="utf-8")
        result = sbx_cli(["gc", "--grace", "0"], env={**env, "SBX_CONFIG": str(idle_now)})
        assert (result.exit_code, result.stdout, result.stderr) == (0, "", ""), log.read_text()
        assert owned(engine, state_home) == []
        assert engine.image(f"sbx-run/{rid}:1") is None  # the dead run's tag is gone
        assert engine.image(run_image.id) is None  # and the unused cache entry with it
        if IPTABLES is not None and os.geteuid() == 0:
            assert f"sbx-run-{rid}" not in input_rules()
        assert list((state_home / "runs").iterdir()) == []
        events = [e for e in audit.read_events(state_home) if e["event_type"] == "gc_removed"]
        counts = events[-1]["details"]
        assert (counts["container"], counts["network"], counts["run_dir"]) == (1, 1, 1)
        if IPTABLES is not None and os.geteuid() == 0:
            assert counts["firewall_rule"] == 2  # established-accept and drop
    finally:
        if process.poll() is None:
            sigkill(process)
        remove_everything(engine, state_home)
        remove_images(engine, state_home)
        if rid and IPTABLES is not None and os.geteuid() == 0:
            delete_rules(rid)
        shutil.rmtree(state_home / "runs", ignore_errors=True)


# -- a live owner: whatever the state, gc never touches what it holds ---------------------------


def _own(home: Path, run_id: str) -> int:
    """Hold a run's owner lock (and write its record) as a live `sbx run` does."""
    path = home / "runs" / run_id
    path.mkdir(parents=True)
    (path / "run.json").write_text(json.dumps({"run_id": run_id, "pid": os.getpid(),
                                               "deadline": 1}), encoding="utf-8")
    fd = os.open(path / "owner.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


def test_an_exited_container_of_a_live_owner_stays_until_its_owner_is_gone(
        engine: SdkEngine, env: dict[str, str], state_home: Path, sbx_cli: Any) -> None:
    run_id = uuid.uuid4().hex
    fd = _own(state_home, run_id)
    ident = create_container(engine, labelled(state_home, run=run_id, deadline="1"),
                             command=("true",), start=True)
    try:
        wait_for("the container to exit", lambda: engine.container_state(ident) == "exited")
        for _ in range(3):  # as gc --grace 0 run in a loop beside the run
            result = sbx_cli(["gc", "--grace", "0", "--json"], env=env)
            assert result.exit_code == 0, result.stderr
            data: Any = result.envelope()["data"]
            assert {i["id"]: i["why"] for i in data["kept"]}[ident] == "live"
            assert data["removed"] == []
        assert engine.container_state(ident) == "exited"
        os.close(fd)
        fd = -1
        result = sbx_cli(["gc", "--grace", "0", "--json"], env=env)
        assert ident in {i["id"] for i in result.envelope()["data"]["removed"]}
        assert owned(engine, state_home) == []
    finally:
        if fd >= 0:
            os.close(fd)
        remove_everything(engine, state_home)


def test_gc_looping_beside_live_runs_never_breaks_one(
        busybox_kit: Path, env: dict[str, str], engine: SdkEngine,
        state_home: Path) -> None:
    """Runs whose workload exits at once, beside `sbx gc --grace 0` in a loop: every run ends
    with its own status and output, and nothing is left."""
    stop = threading.Event()
    gc_failures: list[str] = []

    def loop() -> None:
        for _ in range(400):  # bounded in count, and by the runs' end
            if stop.is_set():
                return
            done = subprocess.run([SBX, "gc", "--grace", "0"], env=env, capture_output=True,
                                  timeout=120, check=False)
            if done.returncode != 0:
                gc_failures.append(done.stderr.decode(errors="replace"))

    looper = threading.Thread(target=loop, daemon=True)
    looper.start()
    try:
        for index in range(8):
            done = subprocess.run([SBX, "run", str(busybox_kit), "--", "sh", "-c",
                                   f"echo run-{index}; exit {index % 3}"], env=env,
                                  capture_output=True, timeout=120, check=False)
            assert (done.returncode, done.stdout) == (index % 3, f"run-{index}\n".encode()), \
                done.stderr
    finally:
        stop.set()
        looper.join(timeout=180)
    assert gc_failures == []
    assert owned(engine, state_home) == []


# -- a reader that closes sbx's output early -------------------------------------------------


@pytest.mark.parametrize("networked", [False, True], ids=["plain", "networked"])
def test_a_closed_reader_never_leaves_the_sandbox_behind(
        kit_factory: Callable[..., Path], env: dict[str, str], engine: SdkEngine,
        state_home: Path, networked: bool) -> None:
    """`sbx run ... | head -c1`, a bounded number of times: each time sbx exits 141 after its
    cleanup, and no container, network or run directory of the home is left."""
    from tests.support.kits import capabilities, network_policy

    extra = capabilities(network_policy(runtime=["example.invalid"])) if networked else ""
    kit = kit_factory("chatty", f"FROM {BUSYBOX}\nUSER agent\nCMD [\"true\"]\n", extra)
    for attempt in range(4):
        done = subprocess.run(
            ["bash", "-c", f'{SBX} run {kit} -- sh -c "yes" | head -c1 >/dev/null; '
                           'exit "${PIPESTATUS[0]}"'],
            env=env, capture_output=True, timeout=120, check=False)
        assert done.returncode == 141, (attempt, done.stderr)
        assert owned(engine, state_home) == [], attempt
        assert list((state_home / "runs").iterdir()) == [], attempt
