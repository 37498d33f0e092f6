"""`sbx run`'s cleanup when a step fails: each step of the execution fails in turn.

A run creates its objects in steps (volume, network, egress proxy, firewall guard, the create
step's container and per-run image, the sandbox container, its attach stream, its port
forwarder) and removes them in the ``finally`` of :func:`sbx.usecases.run.execute.execute`.
Each case here makes one step fail (an engine call of
:class:`tests.support.fakeengine.FakeEngine`, or a host seam: the proxy launch, the firewall
guard) and checks, through the CLI and its ``--json`` envelope, that

(a) the run ends with the failing step's reason code (never a crash, exit 70);
(b) everything created before the failing step is removed;
(c) in dependency order: nothing is removed while something created after it still uses it
    (the order :func:`sbx.usecases.run.cleanup.cleanup` documents; it is not the strict mirror of
    creation: the firewall rules, made before the container, go last on purpose);
(d) nothing after the failing step was attempted.

The engine and the host seams share one call log (``engine.calls``), so (c) and (d) read the
order across both.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from sbx.base.errors import EngineUnavailable, SbxError
from sbx.base.reasons import ExitStatus, Reason
from sbx.domain.egress import plan as egress_plan
from sbx.seams import ports
from sbx.seams import transports as transports_module
from sbx.seams.host import firewall
from sbx.seams.ports import Binding, PublishedPort
from tests.conftest import CliResult, run_cli
from tests.support.fakeengine import Call, FakeEngine, image_info, tar_of
from tests.support.kits import capabilities, network_policy, port, volume, write_kit

PASSWD = b"root:x:0:0::/root:/bin/sh\nagent:x:1000:1000::/home/agent:/bin/sh\n"
IMAGE_ID = "sha256:" + "ab" * 32
BRIDGE_NETWORK = "172.30.0.0/16"  # holds DEFAULT_GATEWAY
PROXY_PORT = 40123

# Calls that only undo: what the cleanup does (engine removals, host seams' stop/remove).
UNDO = {"remove_container", "remove_image", "remove_volume", "remove_network", "proxy.stop",
        "guard.remove", "forwarder.stop"}


class Host:
    """The host seams a run uses, faked: each records into the engine's call log, so one log
    holds the whole order. ``failures`` makes a seam raise (by its log name)."""

    def __init__(self, engine: FakeEngine) -> None:
        self.engine = engine
        self.failures: dict[str, BaseException] = {}

    def record(self, name: str, *args: Any) -> None:
        self.engine.calls.append((name, args))
        failure = self.failures.get(name)
        if failure is not None:
            raise failure


@dataclass
class FakeProxy:
    host: Host
    port: int = PROXY_PORT
    pid: int = 4_100_000

    def stop(self) -> None:
        self.host.record("proxy.stop")

    def switch_to_runtime(self) -> None:
        self.host.record("proxy.switch_to_runtime")

    def wait_ready(self) -> None:
        return  # started ready, as a host's proxy is


def install_host(monkeypatch: pytest.MonkeyPatch, engine: FakeEngine) -> Host:
    host = Host(engine)

    def start_proxy(config_json: str, run_dir: Path, run_id: str, *,
                    client_token: str | None = None,
                    secrets: Mapping[str, str] | None = None) -> FakeProxy:
        host.record("proxy.start", run_id)
        return FakeProxy(host)

    @dataclass
    class FakeGuard:
        bridge: str
        run_id: str
        allow_tcp_ports: Sequence[int] = ()
        proxy_address: str | None = None

        def install(self) -> str | None:
            host.record("guard.install", self.bridge, tuple(self.allow_tcp_ports))
            return None

        def remove(self) -> list[str]:
            host.record("guard.remove", self.bridge)
            return []

    @dataclass
    class FakeForwarder:
        target_ip: str
        published: list[PublishedPort] = field(default_factory=list)

        def start(self, wanted: Sequence[Binding]) -> list[PublishedPort]:
            host.record("forwarder.start", self.target_ip,
                        tuple(b.container_port for b in wanted))
            self.published = [PublishedPort(b.container_port, "tcp", b.host,
                                            b.host_port or 50_000 + b.container_port, b.source)
                              for b in wanted]
            return list(self.published)

        def stop(self) -> None:
            host.record("forwarder.stop", self.target_ip)

    monkeypatch.setattr(transports_module, "open_engine", lambda _env: engine)
    monkeypatch.setattr(egress_plan, "start_proxy", start_proxy)  # called through its module
    monkeypatch.setattr(firewall, "BridgeGuard", FakeGuard)
    monkeypatch.setattr(firewall, "bridge_network", lambda _bridge: BRIDGE_NETWORK)
    monkeypatch.setattr(ports, "PortForwarder", FakeForwarder)
    return host


def make_engine() -> FakeEngine:
    """Every kit image answers (nothing is built), with an /etc/passwd to resolve users from."""
    engine = FakeEngine()
    engine.fallback_image = image_info(IMAGE_ID, user="agent", workdir="/home/agent",
                                       cmd=("true",))
    engine.filesystems[IMAGE_ID] = tar_of({"etc/passwd": PASSWD})
    return engine


@dataclass
class Run:
    engine: FakeEngine
    host: Host
    result: CliResult
    state: Path

    @property
    def envelope(self) -> dict[str, Any]:
        lines = [line for line in self.result.stdout.splitlines() if line.startswith("{")]
        assert lines, f"no envelope: {self.result.stdout!r} / {self.result.stderr!r}"
        loaded: dict[str, Any] = json.loads(lines[-1])
        return loaded


@pytest.fixture
def kit(tmp_path: Path) -> Path:
    """A workload with a volume, a network policy (so a network, a proxy, a guard and a create
    step) and a published port (a forwarder)."""
    return write_kit(tmp_path / "kits", "wl", capabilities(
        volume("/data"), network_policy(runtime=["api.example.com"]), port(8080)),
        recipe="FROM base:1\n")


def sbx_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kit: Path,
            prepare: Callable[[FakeEngine, Host], None] | None = None) -> Run:
    """``sbx run --json KIT`` on a fresh fake engine and host (``prepare`` sets failures)."""
    engine = make_engine()
    host = install_host(monkeypatch, engine)
    if prepare is not None:
        prepare(engine, host)
    state = tmp_path / "state"
    env = {**os.environ, "SBX_HOME": str(state), "HOME": str(tmp_path / "home")}
    try:
        result = run_cli(["run", "--json", str(kit)], env=env, cwd=tmp_path)
    finally:
        engine.close()
    return Run(engine, host, result, state)


# -- the steps ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One call of the execution, by name and occurrence (1 = its first call once the run
    started creating), and the reason its failure carries (the one sbx.seams.driver gives that
    call's failures; the proxy launch's own)."""

    name: str
    occurrence: int
    reason: Reason

    @property
    def id(self) -> str:
        return f"{self.name}#{self.occurrence}"


STEPS = [
    Step("create_volume", 1, Reason.CREATE_FAILED),
    Step("create_network", 1, Reason.CREATE_FAILED),
    Step("network_gateway", 1, Reason.CREATE_FAILED),
    Step("proxy.start", 1, Reason.PROXY_FAILED),
    Step("probe_image", 1, Reason.CREATE_FAILED),  # /etc/passwd and the CA bundles
    Step("create", 1, Reason.CREATE_FAILED),  # the create step's container
    Step("put_archive", 1, Reason.CREATE_FAILED),
    Step("start", 1, Reason.START_FAILED),
    Step("exec_stream", 1, Reason.START_FAILED),  # the volume handed to the sandbox user
    Step("commit", 1, Reason.CREATE_FAILED),
    Step("create", 2, Reason.CREATE_FAILED),  # the sandbox container
    Step("attach", 1, Reason.START_FAILED),
    Step("start", 2, Reason.START_FAILED),
    Step("container_ip", 1, Reason.START_FAILED),
    Step("wait", 1, Reason.START_FAILED),
]
# Host seams whose failures are not SbxErrors (see test_host_seams_failing_*).
OTHER_HOST_STEPS = {"guard.install", "forwarder.start"}


def prepared(calls: Sequence[Call]) -> int:
    """How many calls the preparation made: the execution starts with the first creation."""
    return next(i for i, (name, _) in enumerate(calls) if name == "create_volume")


def position(calls: Sequence[Call], step: Step) -> int:
    """Where ``step`` is in ``calls``."""
    start = prepared(calls)
    seen = 0
    for index in range(start, len(calls)):
        if calls[index][0] == step.name:
            seen += 1
            if seen == step.occurrence:
                return index
    raise AssertionError(f"{step.id} never happened: {[n for n, _ in calls]}")


def failing(step: Step, reference: Run,
            error: BaseException | None = None) -> Callable[[FakeEngine, Host], None]:
    """Set up ``step`` to fail (with ``error``, else an SbxError with its reason)."""
    failure = error or SbxError(step.reason, f"injected failure at {step.id}")
    before = prepared(reference.engine.calls)
    earlier = sum(1 for name, _ in reference.engine.calls[:before] if name == step.name)

    def prepare(engine: FakeEngine, host: Host) -> None:
        if "." in step.name:  # a host seam
            host.failures[step.name] = failure
        else:
            assert isinstance(failure, SbxError)
            engine.fail(step.name, failure, nth=earlier + step.occurrence)

    return prepare


@pytest.fixture
def reference(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kit: Path) -> Run:
    """The same run without a failure: what a failure at each step is compared with. Its
    patches are undone at once, before the test patches the same names for its own run."""
    with monkeypatch.context() as patched:
        return sbx_run(tmp_path / "reference", patched, kit)


# What a later object uses, so it must go first: the sandbox's port forwarder forwards to its
# container; a container holds its image, volumes and network, and its bridge must stay closed
# by the guard while it exists; the proxy listens on the network's gateway.
USES: Mapping[str, frozenset[str]] = {
    "forwarder": frozenset({"container"}),
    "container": frozenset({"volume", "network", "image", "guard"}),
    "proxy": frozenset({"network"}),
}
REMOVAL = {"container": "remove_container", "image": "remove_image", "volume": "remove_volume",
           "network": "remove_network", "proxy": "proxy.stop", "guard": "guard.remove",
           "forwarder": "forwarder.stop"}
HOST_OBJECTS = {"proxy.start": "proxy", "guard.install": "guard", "forwarder.start": "forwarder"}


def created_objects(run: Run, failed_at: int | None = None) -> list[tuple[str, str, int]]:
    """(kind, id, index in the call log) of everything the run created, in creation order:
    the engine's objects and the host seams' (proxy, guard, forwarder). The call at
    ``failed_at`` created nothing."""
    engine_objects = iter(run.engine.created)
    creating = {"create_volume", "create_network", "create", "commit"}
    objects: list[tuple[str, str, int]] = []
    for index, (name, _args) in enumerate(run.engine.calls):
        if index == failed_at or (name not in creating and name not in HOST_OBJECTS):
            continue
        if name in HOST_OBJECTS:
            objects.append((HOST_OBJECTS[name], name, index))
        else:
            kind, ident = next(engine_objects)
            objects.append((kind, ident, index))
    return objects


def removal_index(run: Run, kind: str, ident: str) -> int:
    """Where the removal of (kind, ident) is in the call log (-1: never)."""
    name = REMOVAL[kind]
    for index, (call, args) in enumerate(run.engine.calls):
        if call == name and (kind in ("proxy", "guard", "forwarder") or args[0] == ident):
            return index
    return -1


def check_cleanup(run: Run, failed_at: int | None) -> None:
    """(b) everything created is removed, (c) in dependency order, (d) after the failing call
    only removals."""
    calls = run.engine.calls
    objects = created_objects(run, failed_at)
    removed = {(kind, ident): removal_index(run, kind, ident) for kind, ident, _ in objects}
    left = [key for key, index in removed.items() if index < 0]
    assert not left, f"left behind: {left}; calls: {[n for n, _ in calls]}"
    for kind, ident, created_at in objects:
        assert removed[kind, ident] > created_at
        for later_kind, later_ident, later_at in objects:
            # a later object uses an earlier one that was still there when it was made
            if (later_at > created_at and kind in USES.get(later_kind, ())
                    and removed[kind, ident] > later_at):
                assert removed[later_kind, later_ident] < removed[kind, ident], (
                    f"{kind} removed before the {later_kind} that uses it: "
                    f"{[n for n, _ in calls]}")
    if failed_at is not None:
        after = [name for name, _ in calls[failed_at + 1:]]
        assert set(after) <= UNDO, f"attempted after the failure: {after}"
    # The engine's state agrees: nothing of the run's is left, nor its run directory.
    assert (run.engine.containers, run.engine.networks, run.engine.volumes) == ([], [], [])
    assert not [tag for kind, tag in run.engine.created
                if kind == "image" and tag in run.engine.images]
    assert list((run.state / "runs").iterdir()) == []


def kinds_created(run: Run, failed_at: int | None = None) -> list[str]:
    return [kind for kind, _, _ in created_objects(run, failed_at)]


@pytest.mark.slow
def test_the_reference_run_creates_and_removes_everything(reference: Run) -> None:
    assert reference.result.exit_code == 0, reference.result.stdout + reference.result.stderr
    assert reference.envelope["status"] == "ok"
    assert kinds_created(reference) == ["volume", "network", "proxy", "guard", "container",
                                        "image", "container", "forwarder"]
    check_cleanup(reference, None)


@pytest.mark.slow
def test_every_step_of_the_execution_has_a_case(reference: Run) -> None:
    """A step the run gains must get a case here (STEPS), or its failure goes untested."""
    cases = {s.id for s in STEPS} | {f"{name}#1" for name in OTHER_HOST_STEPS}
    calls = reference.engine.calls
    seen: dict[str, int] = {}
    missing = []
    for name, _ in calls[prepared(calls):]:
        seen[name] = seen.get(name, 0) + 1
        if name not in UNDO and f"{name}#{seen[name]}" not in cases:
            missing.append(f"{name}#{seen[name]}")
    assert missing == []


@pytest.mark.slow
@pytest.mark.parametrize("step", STEPS, ids=[s.id for s in STEPS])
def test_a_failure_at_each_step_removes_what_was_created(
        step: Step, reference: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        kit: Path) -> None:
    run = sbx_run(tmp_path / "failing", monkeypatch, kit, failing(step, reference))
    # (a) the step's reason, as a failure sbx reports (never a crash)
    assert run.result.exit_code == step.reason.exit_status != ExitStatus.INTERNAL, (
        run.result.stdout + run.result.stderr)
    assert run.envelope["reason"] == step.reason.value
    assert f"injected failure at {step.id}" in run.envelope["message"]
    failed_at = position(run.engine.calls, step)
    # exactly what the reference run had created by then, and all of it removed
    at = position(reference.engine.calls, step)
    expected = [kind for kind, _, index in created_objects(reference) if index < at]
    assert kinds_created(run, failed_at) == expected
    check_cleanup(run, failed_at)


@pytest.mark.slow
@pytest.mark.parametrize(("step", "reason"), [
    (Step("create_volume", 1, Reason.DOCKER_UNREACHABLE), Reason.DOCKER_UNREACHABLE),
    (Step("commit", 1, Reason.DOCKER_UNREACHABLE), Reason.DOCKER_UNREACHABLE),
    (Step("attach", 1, Reason.DOCKER_UNREACHABLE), Reason.ENGINE_LOST),
    (Step("start", 2, Reason.DOCKER_UNREACHABLE), Reason.ENGINE_LOST),
], ids=["create_volume", "commit", "attach", "start#2"])
def test_losing_the_engine_once_the_sandbox_exists_is_engine_lost(
        step: Step, reason: Reason, reference: Run, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, kit: Path) -> None:
    """Before the sandbox container exists the engine was unreachable (a refusal); after, the
    run lost it."""
    gone = EngineUnavailable("cannot reach the Docker engine: gone")
    run = sbx_run(tmp_path / "failing", monkeypatch, kit, failing(step, reference, gone))
    assert run.envelope["reason"] == reason.value
    assert run.result.exit_code == reason.exit_status
    check_cleanup(run, position(run.engine.calls, step))


# What a host seam might raise that is not an SbxError (the real seams translate iptables and
# bind failures themselves: tests/unit/seams/host/test_firewall.py): the cleanup still runs in full.
HOST_FAILURES = [
    # iptables refusing a rule, as subprocess.run raises it
    (Step("guard.install", 1, Reason.CREATE_FAILED),
     subprocess.CalledProcessError(4, ["iptables", "-I", "INPUT", "1"])),
    # no free port on the loopback: PortForwarder.start's bind raises
    (Step("forwarder.start", 1, Reason.START_FAILED),
     OSError(98, "Address already in use")),
]


@pytest.mark.slow
@pytest.mark.parametrize(("step", "error"), HOST_FAILURES, ids=[s.id for s, _ in HOST_FAILURES])
def test_host_seams_failing_with_their_own_errors_still_clean_up(
        step: Step, error: BaseException, reference: Run, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, kit: Path) -> None:
    run = sbx_run(tmp_path / "failing", monkeypatch, kit, failing(step, reference, error))
    check_cleanup(run, position(run.engine.calls, step))


# -- an undo step that fails in any way: the rest still goes --------------------------------

UNDO_FAILURES = [
    ("forwarder.stop", OSError(9, "Bad file descriptor")),
    ("proxy.stop", OSError(32, "Broken pipe")),
    ("proxy.stop", subprocess.TimeoutExpired(["proxy"], 5)),
    ("guard.remove", subprocess.TimeoutExpired(["iptables"], 10)),
    ("guard.remove", FileNotFoundError(2, "No such file or directory", "iptables")),
]


@pytest.mark.slow
@pytest.mark.parametrize(("seam", "error"), UNDO_FAILURES,
                         ids=[f"{seam}-{type(e).__name__}" for seam, e in UNDO_FAILURES])
def test_an_undo_step_failing_with_any_error_does_not_stop_the_others(
        seam: str, error: BaseException, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        kit: Path) -> None:
    run = sbx_run(tmp_path / "undo", monkeypatch, kit,
                  lambda _engine, host: host.failures.__setitem__(seam, error))
    names = [name for name, _ in run.engine.calls]
    assert seam in names
    # Every engine object still went, and the run said what it could not undo.
    assert (run.engine.containers, run.engine.networks, run.engine.volumes) == ([], [], [])
    for removal in ("remove_container", "remove_image", "remove_volume", "remove_network",
                    "guard.remove"):
        assert removal in names, removal
    assert run.result.exit_code != int(ExitStatus.INTERNAL), run.result.stderr
    from sbx.seams import audit

    failed = [event["details"]["reason"] for event in audit.read_events(run.state)
              if event["event_type"] == audit.CLEANUP_FAILED]
    assert failed == [seam.replace(".", "_").replace("guard_remove", "firewall_rule_remove")
                      + "_failed"]
