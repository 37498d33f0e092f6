"""`sbx gc` decisions and execution against a fake engine (no daemon needed).

The fake answers the driver methods gc and doctor use and records every call, so the tests can
assert what was removed, what was confirmed, and that nothing at all happened when it must not.
"""

from __future__ import annotations

import dataclasses
import fcntl
import io
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from sbx.base import labels as label_keys
from sbx.base.errors import EngineUnavailable, SbxError
from sbx.base.paths import home_hash
from sbx.base.reasons import Reason
from sbx.base.render import Renderer
from sbx.domain.sandbox.imagecache import (
    CacheDecision,
    judge_cached,
    record_use,
    removal_order,
    use_tag,
)
from sbx.domain.sandbox.records import SandboxRecord
from sbx.seams import audit
from sbx.seams.engine import CachedImage, ImageInfo
from sbx.seams.host import firewall as fw
from sbx.seams.host.firewall import (
    FirewallError,
    FirewallUnavailable,
    RuleListingInvalid,
    SbxRule,
    parse_rules,
)
from sbx.usecases.context import AppContext
from sbx.usecases.gc import collect as gc_collect
from sbx.usecases.gc import judging as gc_judging
from sbx.usecases.gc import listing as gc_listing
from sbx.usecases.gc import result as gc_result
from sbx.usecases.gc import sweep as gc_sweep
from sbx.usecases.gc.collect import collect
from sbx.usecases.gc.judging import (
    Clock,
    judge_container,
    judge_image,
    judge_rule,
    judge_run_dir,
    judge_shared,
)
from sbx.usecases.gc.listing import ContainerEntry, ImageEntry, RunDir, RunDirState, SharedEntry
from sbx.usecases.gc.result import GcRequest
from sbx.usecases.gc.sweep import Firewall, Processes
from sbx.usecases.sandboxstore import SandboxStore
from sbx.views import gc as gc_view
from tests.support.fakeengine import FakeEngine

NOW = 1_900_000_000.0


def hex64() -> str:
    return uuid.uuid4().hex + uuid.uuid4().hex


def run_id() -> str:
    return uuid.uuid4().hex


class FakeFirewall:
    """The host firewall as gc sees it: a list of sbx rules and the bridges that exist."""

    def __init__(self) -> None:
        self.rules: list[SbxRule] = []
        self.bridges: set[str] = set()
        self.list_error: Exception | None = None
        self.relist_error: Exception | None = None  # from the second listing on
        self.remove_errors: dict[str, Exception] = {}  # by run id
        self.sticky: set[str] = set()  # run ids whose rules "go" but stay
        self.calls: list[tuple[str, Any]] = []

    def list_rules(self) -> list[SbxRule]:
        listings = sum(1 for name, _ in self.calls if name == "list")
        self.calls.append(("list", None))
        if self.list_error is not None:
            raise self.list_error
        if listings and self.relist_error is not None:
            raise self.relist_error
        return list(self.rules)

    def remove_rule(self, rule: SbxRule) -> None:
        self.calls.append(("remove", rule))
        if rule.run_id in self.remove_errors:
            raise self.remove_errors[rule.run_id]
        if rule.run_id not in self.sticky:
            self.rules.remove(rule)  # the first identical one, like `iptables -D`

    def bridge_exists(self, name: str) -> bool:
        return name in self.bridges

    def removed(self) -> list[SbxRule]:
        return [rule for name, rule in self.calls if name == "remove"]

    def ops(self) -> Firewall:
        return Firewall(self.list_rules, self.remove_rule, self.bridge_exists)


def rule(rid: str, *, bridge: str | None = None, target: str = "DROP") -> SbxRule:
    """A rule as BridgeGuard installs it, through the real parser."""
    bridge = bridge or f"sbx{rid[:12]}"
    (parsed,) = parse_rules(f"-P INPUT ACCEPT\n-A INPUT -i {bridge} -m comment --comment "
                            f"sbx-run-{rid} -j {target}\n")
    return parsed


def image(*, home: str, run: str | None, deadline: str | None,
          tags: list[str] | None = None) -> dict[str, Any]:
    labels = {label_keys.MANAGED: "true", label_keys.HOME: home,
              label_keys.ROLE: label_keys.ROLE_HELPER}
    if run is not None:
        labels[label_keys.RUN] = run
    if deadline is not None:
        labels[label_keys.DEADLINE] = deadline
    return {"Id": "sha256:" + hex64(), "Labels": labels, "Containers": -1,
            "RepoTags": [f"sbx-run/{run}:1"] if tags is None else tags}


def container(state: str = "exited", *, home: str, run: str | None = None,
              deadline: str | None = None, ident: str | None = None) -> dict[str, Any]:
    labels = {label_keys.MANAGED: "true", label_keys.HOME: home,
              label_keys.ROLE: label_keys.ROLE_SANDBOX}
    if run is not None:
        labels[label_keys.RUN] = run
    if deadline is not None:
        labels[label_keys.DEADLINE] = deadline
    return {"Id": ident or hex64(), "State": state, "Labels": labels}


def shared(kind: str, *, home: str, run: str | None, deadline: str | None) -> dict[str, Any]:
    labels = {label_keys.MANAGED: "true", label_keys.HOME: home}
    if run is not None:
        labels[label_keys.RUN] = run
    if deadline is not None:
        labels[label_keys.DEADLINE] = deadline
    if kind == "volume":
        return {"Name": f"sbx-{uuid.uuid4().hex}", "Labels": labels}
    return {"Id": hex64(), "Name": f"sbx-{uuid.uuid4().hex[:8]}", "Labels": labels}


class Harness:
    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.state = tmp_path / "state"
        # The default location (XDG_CONFIG_HOME), which may be absent: a file named by
        # SBX_CONFIG must exist, and most tests here want the built-in defaults.
        self.config = tmp_path / "xdg-config" / "sbx" / "config.toml"
        self.config.parent.mkdir(parents=True)
        self.engine = FakeEngine()
        # the image doctor's limits probe starts (a small one it knows)
        self.engine.add_image("sbx-test/busybox:1", size=2_000_000)
        self.env = {"SBX_HOME": str(self.state), "XDG_CONFIG_HOME": str(tmp_path / "xdg-config"),
                    "HOME": str(tmp_path), "NO_COLOR": "1"}
        self.out = io.StringIO()
        self.err = io.StringIO()
        self.alive: set[int] = set()
        self.firewall = FakeFirewall()

    @property
    def home(self) -> str:
        return home_hash(self.state)

    def marked(self, image: CachedImage) -> CachedImage:
        """``image`` with this home's mark (it built or used it)."""
        return dataclasses.replace(image, tags=(*image.tags, use_tag(self.home, image.id)))

    def ctx(self, *, as_json: bool = False, verbose: int = 0) -> AppContext:
        renderer = Renderer(self.out, self.err, as_json=as_json, env=self.env, width=88)
        engine = self.engine
        return AppContext(env=self.env, cwd=self.tmp, renderer=renderer, as_json=as_json,
                          verbose=verbose, driver_factory=lambda _env: engine)

    def processes(self, **overrides: Any) -> Processes:
        fields: dict[str, Any] = {"alive": lambda pid: pid in self.alive,
                                  "cmdline": lambda _pid: None,
                                  "signal": _no_signal, "sleep": lambda _s: None}
        fields.update(overrides)
        return Processes(**fields)

    def run_dir(self, name: str | None = None, *, pid: int | None = 4_000_000,
                age_s: float = 3600, deadline: int | None = None,
                proxy_pid: int | None = None, record: str | None = None) -> Path:
        path = self.state / "runs" / (name or run_id())
        path.mkdir(parents=True)
        text = record if record is not None else json.dumps(
            {"run_id": path.name, "pid": pid, "deadline": deadline, "proxy_pid": proxy_pid})
        (path / "run.json").write_text(text, encoding="utf-8")
        stamp = NOW - age_s
        os.utime(path / "run.json", (stamp, stamp))
        os.utime(path, (stamp, stamp))
        return path

    def collect(self, *, dry_run: bool = False, grace: int | None = 600,
                processes: Processes | None = None) -> gc_result.GcResult:
        return collect(self.ctx(), GcRequest(dry_run=dry_run, grace_s=grace),
                       clock=lambda: NOW, processes=processes or self.processes(),
                       firewall=self.firewall.ops())

    def audit_events(self) -> list[dict[str, Any]]:
        return list(audit.read_events(self.state))


def _no_signal(pid: int, sig: int) -> None:
    raise AssertionError(f"gc signalled pid {pid} with {sig}")


@pytest.fixture
def h(tmp_path: Path) -> Harness:
    return Harness(tmp_path)


def ran(h: Harness) -> None:
    (h.state / "runs").mkdir(parents=True, exist_ok=True)


# -- the pure decisions -------------------------------------------------------------------------

CLOCK = Clock(NOW, 600, lambda pid: pid == 1)


@pytest.mark.parametrize(("state", "deadline", "remove", "why"), [
    ("exited", None, True, "exited"),
    ("dead", "garbage", True, "dead"),
    ("running", str(int(NOW) + 60), False, "inside_deadline"),
    ("running", str(int(NOW) - 599), False, "inside_deadline"),  # inside the grace
    ("running", str(int(NOW) - 601), True, "deadline_passed"),
    ("paused", str(int(NOW) - 601), True, "deadline_passed"),
    ("created", str(int(NOW) - 601), True, "deadline_passed"),
    ("running", None, False, "deadline_missing"),
    ("running", "soon", False, "deadline_unreadable"),
    ("created", "-5", False, "deadline_unreadable"),
    ("created", "1e9", False, "deadline_unreadable"),
    ("running", "\u0661\u0662", False, "deadline_unreadable"),  # non-ASCII digits
    ("removing", str(int(NOW) - 10_000), False, "removing"),
])
def test_judge_container(state: str, deadline: str | None, remove: bool, why: str) -> None:
    entry = ContainerEntry(hex64(), state, run_id(), deadline)
    assert judge_container(entry, {}, CLOCK)[:2] == (remove, why)


def _run(name: str, pid: int | None, *, age: float = 3600, deadline: int | None = None,
         real: bool = True, proxy: int | None = None) -> RunDir:
    record = None if pid is None else RunDirState(pid, deadline, proxy)
    return RunDir(name, Path("/nonexistent") / name, real, age, record)


def test_created_container_is_abandoned_only_when_its_sbx_is_gone() -> None:
    rid = run_id()
    entry = ContainerEntry(hex64(), "created", rid, str(int(NOW) + 3600))
    assert judge_container(entry, {rid: _run(rid, 2)}, CLOCK)[:2] == (True, "abandoned")
    assert judge_container(entry, {rid: _run(rid, 1)}, CLOCK)[:2] == (False, "inside_deadline")
    assert judge_container(entry, {}, CLOCK)[:2] == (False, "inside_deadline")  # no evidence
    assert judge_container(entry, {rid: _run(rid, None)}, CLOCK)[:2] == (
        False, "inside_deadline")  # unreadable record: no evidence either
    running = ContainerEntry(hex64(), "running", rid, str(int(NOW) + 3600))
    # A running container is bounded by its deadline, never by the pid (SPEC §2.5).
    assert judge_container(running, {rid: _run(rid, 2)}, CLOCK)[:2] == (False, "inside_deadline")


def test_a_live_pid_past_the_deadline_plus_grace_is_not_a_live_run() -> None:
    rid = run_id()
    old = _run(rid, 1, deadline=int(NOW) - 601)
    entry = ContainerEntry(hex64(), "created", rid, str(int(NOW) + 3600))
    assert judge_container(entry, {rid: old}, CLOCK)[:2] == (True, "abandoned")


@pytest.mark.parametrize(("deadline", "run", "candidate", "why"), [
    (str(int(NOW) - 601), None, True, "deadline_passed"),
    (str(int(NOW) + 60), None, False, "inside_deadline"),
    (str(int(NOW) + 60), "dead", True, "run_over"),
    (str(int(NOW) + 60), "live", False, "inside_deadline"),
    (None, "dead", False, "deadline_missing"),
    ("x", "dead", False, "deadline_unreadable"),
])
def test_judge_shared(deadline: str | None, run: str | None, candidate: bool, why: str) -> None:
    rid = run_id()
    runs = {} if run is None else {rid: _run(rid, 2 if run == "dead" else 1)}
    entry = SharedEntry("network", hex64(), rid, deadline)
    assert judge_shared(entry, runs, CLOCK)[:2] == (candidate, why)


@pytest.mark.parametrize(("run", "in_use", "remove", "why"), [
    (_run("a" * 32, 2), False, True, "finished"),
    (_run("a" * 32, 2), True, False, "in_use"),
    (_run("a" * 32, 1), False, False, "live"),
    (_run("a" * 32, 2, age=599), False, False, "young"),
    (_run("a" * 32, None, age=3600), False, True, "unreadable_record"),
    (_run("a" * 32, 2, real=False), False, False, "not_a_directory"),
])
def test_judge_run_dir(run: RunDir, in_use: bool, remove: bool, why: str) -> None:
    assert judge_run_dir(run, {run.name} if in_use else set(), CLOCK)[:2] == (remove, why)


def test_unreadable_record_waits_for_the_floor_even_with_grace_zero() -> None:
    clock = Clock(NOW, 0, lambda _pid: False)
    young = _run("b" * 32, None, age=gc_judging.UNREADABLE_RECORD_FLOOR_S - 1)
    assert judge_run_dir(young, set(), clock)[:2] == (False, "young")
    old = _run("b" * 32, None, age=gc_judging.UNREADABLE_RECORD_FLOOR_S + 1)
    assert judge_run_dir(old, set(), clock)[:2] == (True, "unreadable_record")
    readable = _run("b" * 32, 2, age=1)
    assert judge_run_dir(readable, set(), clock)[:2] == (True, "finished")


# -- the collector ------------------------------------------------------------------------------


def test_a_home_that_never_ran_is_skipped_without_the_engine(h: Harness) -> None:
    h.engine.fail("list_labelled", EngineUnavailable("must not be called"))
    result = h.collect()
    assert result.outcome == "skipped" and result.exit_status == 0
    assert h.engine.calls == []
    assert not h.state.exists()  # no lock file, no audit log: nothing written


def test_stale_containers_go_live_ones_stay(h: Harness) -> None:
    ran(h)
    home = h.home
    exited = container("exited", home=home, run=run_id(), deadline=str(int(NOW) + 60))
    dead = container("dead", home=home, run=run_id())
    live = container("running", home=home, run=run_id(), deadline=str(int(NOW) + 60))
    late = container("running", home=home, run=run_id(), deadline=str(int(NOW) - 700))
    h.engine.containers = [exited, dead, live, late]
    result = h.collect()
    assert result.exit_status == 0 and not result.failed
    assert {i.id for i in result.removed} == {exited["Id"], dead["Id"], late["Id"]}
    assert h.engine.containers == [live]
    assert [i.why for i in result.kept] == ["inside_deadline"]
    # Scoped by this home's labels, and every removal confirmed with one listing.
    assert h.engine.called("list_labelled") == [({label_keys.MANAGED: "true",
                                                  label_keys.HOME: home},)]
    assert h.engine.called("present") == [("container", (exited["Id"], dead["Id"], late["Id"]))]


def test_grace_comes_from_the_config_and_the_flag_overrides_it(h: Harness) -> None:
    ran(h)
    h.config.write_text("[gc]\ngrace_seconds = 30\n", encoding="utf-8")
    late = container("running", home=h.home, run=run_id(), deadline=str(int(NOW) - 100))
    h.engine.containers = [late]
    assert [i.why for i in h.collect(dry_run=True, grace=None).removed] == ["deadline_passed"]
    assert [i.why for i in h.collect(dry_run=True, grace=200).kept] == ["inside_deadline"]
    assert h.collect(dry_run=True, grace=None).grace_s == 30


def test_invalid_config_refuses(h: Harness) -> None:
    ran(h)
    h.config.write_text("[gc]\ngrace_seconds = -1\n", encoding="utf-8")
    with pytest.raises(SbxError) as caught:
        h.collect(grace=None)
    assert caught.value.reason is Reason.INVALID_CONFIG
    assert h.engine.calls == []


def test_unreadable_and_missing_deadlines_are_kept_and_reported(h: Harness) -> None:
    ran(h)
    garbage = container("running", home=h.home, run=run_id(), deadline="garbage")
    missing = container("created", home=h.home, run=run_id())
    finished = container("exited", home=h.home, run=run_id(), deadline="garbage")
    h.engine.containers = [garbage, missing, finished]
    result = h.collect(grace=0)
    assert [i.id for i in result.removed] == [finished["Id"]]
    assert {(i.id, i.why) for i in result.reported} == {
        (garbage["Id"], "deadline_unreadable"), (missing["Id"], "deadline_missing")}
    assert result.exit_status == 0  # kept on purpose, not a failure


def test_abandoned_created_container_and_its_run_dir_go(h: Harness) -> None:
    ran(h)
    rid = run_id()
    h.run_dir(rid, pid=4_000_001)  # not in h.alive: that sbx is gone
    created = container("created", home=h.home, run=rid, deadline=str(int(NOW) + 3600))
    h.engine.containers = [created]
    result = h.collect(grace=0)
    assert [(i.kind, i.why) for i in result.removed] == [("container", "abandoned"),
                                                         ("run_dir", "finished")]
    assert not (h.state / "runs" / rid).exists()


def test_a_live_run_is_never_touched(h: Harness) -> None:
    ran(h)
    rid = run_id()
    h.alive.add(4242)
    path = h.run_dir(rid, pid=4242, age_s=7200, deadline=int(NOW) + 3600)
    created = container("created", home=h.home, run=rid, deadline=str(int(NOW) + 3600))
    running = container("running", home=h.home, run=rid, deadline=str(int(NOW) + 3600))
    net = shared("network", home=h.home, run=rid, deadline=str(int(NOW) + 3600))
    h.engine.containers = [created, running]
    h.engine.networks = [net]
    result = h.collect(grace=0)
    assert result.removed == [] and result.failed == []
    assert path.exists() and len(h.engine.containers) == 2 and h.engine.networks == [net]
    assert not any(name.startswith("remove_") for name, _ in h.engine.calls)


@pytest.mark.parametrize("error", [
    EngineUnavailable("cannot reach the Docker engine: boom"),
    SbxError(Reason.CLEANUP_FAILED, "listing sbx objects: the engine answered 500"),
])
def test_listing_failure_deletes_nothing_and_is_audited(h: Harness, error: SbxError) -> None:
    ran(h)
    old = h.run_dir(pid=4_000_002, age_s=86_400)
    h.engine.fail("list_labelled", error)
    result = h.collect(grace=0)
    assert result.exit_status == 126
    kind = "docker_unreachable" if error.reason is Reason.DOCKER_UNREACHABLE else "list_failed"
    assert [(f.kind, f.reason) for f in result.failed] == [(kind, error.reason)]
    assert old.exists()
    assert [i.why for i in result.kept] == ["listing_failed"]
    events = [e for e in h.audit_events() if e["event_type"] == audit.CLEANUP_FAILED]
    assert [e["details"] for e in events] == [{"reason": kind, "count": 1, "source": "gc"}]


@pytest.mark.parametrize("mangle", [
    lambda c: "not an object",
    lambda c: {**c, "Id": "short"},
    lambda c: {**c, "Id": c["Id"].upper()},
    lambda c: {**c, "State": "Exited"},
    lambda c: {**c, "State": None},
    lambda c: {**c, "Labels": None},
    lambda c: {**c, "Labels": {**c["Labels"], label_keys.HOME: "0" * 32}},
    lambda c: {**c, "Labels": {**c["Labels"], label_keys.DEADLINE: 5}},
    lambda c: {k: v for k, v in c.items() if k != "State"},
], ids=["not-object", "short-id", "upper-id", "state-case", "state-none", "labels-none",
        "other-home", "label-not-string", "no-state"])
def test_one_unparsable_entry_deletes_nothing(h: Harness,
                                              mangle: Callable[[dict[str, Any]], Any]) -> None:
    ran(h)
    old = h.run_dir(pid=4_000_003, age_s=86_400)
    good = container("exited", home=h.home, run=run_id())
    bad = mangle(container("exited", home=h.home, run=run_id()))
    h.engine.containers = [good, bad]
    result = h.collect(grace=0)
    assert [f.kind for f in result.failed] == ["list_invalid"]
    assert result.exit_status == 126 and result.removed == []
    assert old.exists() and good in h.engine.containers
    assert not any(name.startswith("remove_") for name, _ in h.engine.calls)
    assert any(e["details"].get("reason") == "list_invalid" for e in h.audit_events())


@pytest.mark.parametrize("kind", ["network", "volume"])
def test_an_unparsable_network_or_volume_also_stops_everything(h: Harness, kind: str) -> None:
    ran(h)
    good = container("exited", home=h.home, run=run_id())
    h.engine.containers = [good]
    bad = {"Labels": {label_keys.MANAGED: "true", label_keys.HOME: h.home}}
    setattr(h.engine, f"{kind}s", [bad])
    result = h.collect(grace=0)
    assert [f.kind for f in result.failed] == ["list_invalid"]
    assert good in h.engine.containers


def test_removal_in_confirmed_batches(h: Harness) -> None:
    ran(h)
    h.config.write_text("[gc]\nbatch_size = 3\n", encoding="utf-8")
    h.engine.containers = [container("exited", home=h.home, run=run_id()) for _ in range(10)]
    result = h.collect(grace=None)
    assert len(result.removed) == 10 and h.engine.containers == []
    assert [len(args[1]) for args in h.engine.called("present")] == [3, 3, 3, 1]


def test_beyond_the_batch_limit_is_deferred_with_its_run_dirs(
        h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    ran(h)
    monkeypatch.setattr(gc_sweep, "MAX_BATCHES", 2)
    h.config.write_text("[gc]\nbatch_size = 2\n", encoding="utf-8")
    runs = [run_id() for _ in range(7)]
    for rid in runs:
        h.run_dir(rid, pid=4_000_004)
    h.engine.containers = [container("exited", home=h.home, run=rid) for rid in runs]
    result = h.collect(grace=None)
    assert result.deferred == 3 and len(h.engine.containers) == 3
    assert sorted(p.name for p in (h.state / "runs").iterdir()) == sorted(runs[4:])
    assert {i.why for i in result.kept} == {"deferred", "in_use"}


def test_a_failed_removal_is_reported_audited_and_keeps_the_run_dir(h: Harness) -> None:
    ran(h)
    rid = run_id()
    path = h.run_dir(rid, pid=4_000_005)
    bad = container("exited", home=h.home, run=rid)
    sticky = container("dead", home=h.home, run=run_id())
    ok = container("exited", home=h.home, run=run_id())
    h.engine.containers = [bad, sticky, ok]
    h.engine.fail("remove_container",
                  SbxError(Reason.CLEANUP_FAILED, "engine said no"), key=bad["Id"])
    h.engine.sticky.add(sticky["Id"])
    result = h.collect(grace=0)
    assert result.exit_status == 126
    assert [i.id for i in result.removed] == [ok["Id"]]
    messages = [f.message for f in result.failed]
    assert messages == [f"could not remove container {bad['Id'][:12]}: engine said no",
                        f"container {sticky['Id'][:12]} is still present after its removal"]
    assert path.exists()
    details = [e["details"] for e in h.audit_events() if e["event_type"] == "cleanup_failed"]
    assert details == [{"reason": "container_remove_failed", "count": 2, "source": "gc"}]
    removed = [e["details"] for e in h.audit_events() if e["event_type"] == "gc_removed"]
    assert removed == [{"container": 1, "network": 0, "volume": 0, "image": 0,
                        "firewall_rule": 0, "run_dir": 0, "proxy": 0, "staging": 0,
                        "cached_image": 0, "grace_seconds": 0}]


def test_networks_and_volumes_no_container_uses(h: Harness) -> None:
    ran(h)
    dead_run, live_run = run_id(), run_id()
    h.run_dir(dead_run, pid=4_000_006)
    h.alive.add(77)
    h.run_dir(live_run, pid=77, deadline=int(NOW) + 3600)
    leaving = container("exited", home=h.home, run=dead_run)
    staying = container("running", home=h.home, run=live_run, deadline=str(int(NOW) + 3600))
    free = shared("network", home=h.home, run=dead_run, deadline=str(int(NOW) + 3600))
    used_by_leaving = shared("volume", home=h.home, run=dead_run, deadline=str(int(NOW) + 60))
    used_by_other = shared("network", home=h.home, run=None, deadline=str(int(NOW) - 9999))
    live = shared("network", home=h.home, run=live_run, deadline=str(int(NOW) + 3600))
    orphan = shared("volume", home=h.home, run=None, deadline=str(int(NOW) - 9999))
    unknown = shared("volume", home=h.home, run=None, deadline=None)
    h.engine.containers = [leaving, staying]
    h.engine.networks = [free, used_by_other, live]
    h.engine.volumes = [used_by_leaving, orphan, unknown]
    h.engine.users = {used_by_leaving["Name"]: [leaving["Id"]],
                      used_by_other["Id"]: ["f" * 64]}
    result = h.collect(grace=0)
    assert not result.failed
    gone = {(i.kind, i.why) for i in result.removed}
    assert gone == {("container", "exited"), ("network", "run_over"), ("volume", "run_over"),
                    ("volume", "deadline_passed"), ("run_dir", "finished")}
    assert h.engine.networks == [used_by_other, live]
    assert h.engine.volumes == [unknown]
    kept = {(i.id, i.why) for i in result.kept}
    assert (used_by_other["Id"], "in_use") in kept and (unknown["Name"], "deadline_missing") in kept
    # the live run's network was never even checked for users
    assert ("network", live["Id"]) not in h.engine.called("object_users")


def test_run_dirs_young_foreign_and_symlinked_entries(h: Harness) -> None:
    ran(h)
    young = h.run_dir(pid=4_000_007, age_s=10)
    unreadable = h.run_dir(record="{not json", age_s=86_400)
    half_written = h.run_dir(record="", age_s=5)
    runs = h.state / "runs"
    stranger = runs / "not-a-run-id"
    stranger.mkdir()
    target = h.tmp / "precious"
    target.mkdir()
    (target / "keep.txt").write_text("x", encoding="utf-8")
    link = runs / ("c" * 32)
    link.symlink_to(target)
    result = h.collect(grace=600)
    assert [i.why for i in result.removed] == ["unreadable_record"]
    assert not unreadable.exists()
    assert young.exists() and half_written.exists() and stranger.exists()
    assert link.is_symlink() and (target / "keep.txt").exists()
    assert ("c" * 32, "not_a_directory") in {(i.id, i.why) for i in result.kept}


def test_orphaned_proxy_is_stopped_only_when_it_names_the_run(h: Harness) -> None:
    ran(h)
    ours, theirs = run_id(), run_id()
    script = "import time; time.sleep(60)"
    proxy = subprocess.Popen([sys.executable, "-c", script, f"sbx-proxy-{ours}"])
    stranger = subprocess.Popen([sys.executable, "-c", script, "unrelated"])
    try:
        h.run_dir(ours, pid=4_000_008, proxy_pid=proxy.pid)
        h.run_dir(theirs, pid=4_000_009, proxy_pid=stranger.pid)
        real = Processes()  # real /proc and real signals for these two children

        def alive(pid: int) -> bool:
            if pid in (proxy.pid, stranger.pid):
                (proxy if pid == proxy.pid else stranger).poll()  # reap a zombie
                return real.alive(pid)
            return False

        result = h.collect(grace=0, processes=Processes(alive=alive, cmdline=real.cmdline,
                                                        signal=real.signal, sleep=real.sleep))
        assert proxy.wait(timeout=5) is not None
        assert stranger.poll() is None  # never signalled
        assert not result.failed
        assert {(i.kind, i.why) for i in result.removed} == {
            ("proxy", "orphaned"), ("run_dir", "finished")}
        assert ("proxy", "not_ours") in {(i.kind, i.why) for i in result.kept}
    finally:
        for child in (proxy, stranger):
            child.kill()
            child.wait(timeout=5)


def test_a_proxy_that_will_not_stop_keeps_its_run_dir(h: Harness) -> None:
    ran(h)
    rid = run_id()
    path = h.run_dir(rid, pid=4_000_010, proxy_pid=31337)
    signals: list[int] = []
    procs = h.processes(alive=lambda pid: pid == 31337, cmdline=lambda _pid: f"proxy {rid}",
                        signal=lambda _pid, sig: signals.append(sig))
    result = h.collect(grace=0, processes=procs)
    assert len(signals) == 2  # SIGTERM, then SIGKILL
    assert [f.kind for f in result.failed] == ["proxy_stop_failed"] and path.exists()


def test_lock_held_means_nothing_is_done(h: Harness) -> None:
    ran(h)
    h.engine.containers = [container("exited", home=h.home, run=run_id())]
    fd = os.open(h.state / gc_collect.LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        result = h.collect(grace=0)
    finally:
        os.close(fd)
    assert result.outcome == "locked" and result.exit_status == 0
    assert h.engine.calls == [] and len(h.engine.containers) == 1
    assert h.collect(grace=0).removed  # the lock is free again


def test_dry_run_changes_nothing(h: Harness) -> None:
    ran(h)
    rid = run_id()
    path = h.run_dir(rid, pid=4_000_011)
    h.engine.containers = [container("exited", home=h.home, run=rid)]
    result = h.collect(dry_run=True, grace=0)
    assert [(i.kind, i.why) for i in result.removed] == [("container", "exited"),
                                                         ("run_dir", "finished")]
    assert path.exists() and len(h.engine.containers) == 1
    assert not any(name.startswith("remove_") for name, _ in h.engine.calls)
    assert not (h.state / gc_collect.LOCK_FILE).exists() and h.audit_events() == []


# -- rendering ----------------------------------------------------------------------------------


def test_silent_when_everything_went(h: Harness) -> None:
    ran(h)
    h.engine.containers = [container("exited", home=h.home, run=run_id())]
    ctx = h.ctx()
    gc_view.gc_result(ctx.renderer, h.collect(grace=0))
    assert h.out.getvalue() == "" and h.err.getvalue() == ""


def test_one_line_per_failure_and_per_unreadable_deadline(h: Harness) -> None:
    ran(h)
    bad = container("exited", home=h.home, run=run_id())
    odd = container("running", home=h.home, run=run_id(), deadline="soon")
    h.engine.containers = [bad, odd]
    h.engine.fail("remove_container",
                  SbxError(Reason.CLEANUP_FAILED, "engine said no"), key=bad["Id"])
    gc_view.gc_result(h.ctx().renderer, h.collect(grace=0))
    assert h.out.getvalue() == ""
    assert h.err.getvalue().splitlines() == [
        f"sbx gc: kept container {odd['Id'][:12]} (run {odd['Labels'][label_keys.RUN][:12]}): "
        "its deadline label 'soon' is unreadable; sbx never guesses one",
        f"sbx gc: could not remove container {bad['Id'][:12]}: engine said no (cleanup_failed)",
    ]


def test_verbose_and_dry_run_list_what_goes(h: Harness) -> None:
    ran(h)
    gone = container("exited", home=h.home, run=run_id())
    h.engine.containers = [gone]
    gc_view.gc_result(h.ctx().renderer, h.collect(dry_run=True, grace=0))
    rid = gone["Labels"][label_keys.RUN]
    assert h.out.getvalue() == (f"would remove container {gone['Id'][:12]} (run {rid[:12]}): "
                                "the container is exited\n")


def test_json_envelope(h: Harness) -> None:
    ran(h)
    bad = container("exited", home=h.home, run=run_id())
    h.engine.containers = [bad]
    h.engine.fail("remove_container",
                  SbxError(Reason.CLEANUP_FAILED, "engine said no"), key=bad["Id"])
    gc_view.gc_result(h.ctx(as_json=True).renderer, h.collect(grace=0))
    envelope = json.loads(h.out.getvalue())
    assert envelope["command"] == "gc" and envelope["status"] == "failed"
    assert envelope["exit_code"] == 126 and envelope["reason"] == "cleanup_failed"
    data = envelope["data"]
    assert set(data) == {"outcome", "dry_run", "grace_seconds", "removed", "kept", "failed",
                         "deferred", "counts", "note", "workspace_warnings"}
    assert data["failed"] == [{"kind": "container_remove_failed", "reason": "cleanup_failed",
                               "message": f"could not remove container {bad['Id'][:12]}: "
                                          "engine said no", "target": bad["Id"]}]


# -- through the CLI ----------------------------------------------------------------------------


@pytest.fixture
def fake_cli(h: Harness, monkeypatch: pytest.MonkeyPatch, sbx_cli: Any) -> Callable[..., Any]:
    import sbx.seams.transports

    monkeypatch.setattr(sbx.seams.transports, "open_engine", lambda _env: h.engine)

    def call(args: list[str]) -> Any:
        return sbx_cli(args, env={**os.environ, **h.env})

    return call


@pytest.mark.slow
def test_cli_exit_statuses(h: Harness, fake_cli: Callable[..., Any]) -> None:
    assert fake_cli(["gc"]).exit_code == 0  # never ran: skipped
    ran(h)
    h.engine.containers = [container("exited", home=h.home, run=run_id())]
    done = fake_cli(["gc", "--grace", "0"])
    assert (done.exit_code, done.stdout, done.stderr) == (0, "", "")
    h.engine.fail("list_labelled",
                  EngineUnavailable("cannot reach the Docker engine: gone"))
    failed = fake_cli(["gc"])
    assert failed.exit_code == 126
    assert failed.stderr.strip().endswith("(docker_unreachable)")
    assert fake_cli(["gc", "--grace", "-1"]).exit_code == 2


def test_cli_dispatches_one_typed_request(monkeypatch: pytest.MonkeyPatch,
                                          fake_cli: Callable[..., Any]) -> None:
    seen: list[GcRequest] = []

    def fake_collect(_ctx: Any, request: GcRequest) -> gc_result.GcResult:
        seen.append(request)
        return gc_result.GcResult("done", request.dry_run, request.grace_s)

    monkeypatch.setattr(gc_collect, "collect", fake_collect)
    assert fake_cli(["gc", "--dry-run", "--grace", "5", "--json"]).exit_code == 0
    assert seen == [GcRequest(dry_run=True, grace_s=5)]


def test_real_pid_liveness() -> None:
    real = Processes()  # real /proc
    assert real.alive(os.getpid())
    assert not real.alive(0)
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and child.poll() is None:
        time.sleep(0.01)
    # Exited but not yet reaped would be a zombie; poll() reaped it, so the pid is gone.
    assert not real.alive(child.pid)
    assert "python" in (gc_listing.proc_cmdline(os.getpid()) or "")
    assert gc_listing.proc_cmdline(child.pid) is None


def test_an_unwritable_state_home_is_a_reported_failure(h: Harness) -> None:
    ran(h)
    (h.state / gc_collect.LOCK_FILE).mkdir()  # the lock path cannot be opened as a file
    with pytest.raises(SbxError) as caught:
        h.collect(grace=0)
    assert caught.value.reason is Reason.CLEANUP_FAILED and "gc lock" in caught.value.message


# -- host firewall rules: parsing `iptables -S INPUT` -------------------------------------------

RID = "0123456789abcdef0123456789abcdef"


def test_parse_rules_keeps_only_sbx_rules_with_their_exact_spec() -> None:
    text = (
        "-P INPUT ACCEPT\n"
        f"-A INPUT -i sbx0123456789ab -m comment --comment sbx-run-{RID} "
        "-m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n"
        f"-A INPUT -i sbx0123456789ab -p tcp -m comment --comment sbx-run-{RID} "
        "-m tcp --dport 3128 -j ACCEPT\n"
        f"-A INPUT -i sbx0123456789ab -m comment --comment sbx-run-{RID} -j DROP\n"
        "-A INPUT -i eth0 -p tcp -m tcp --dport 22 -j ACCEPT\n"
        "-A INPUT -m comment --comment \"admin: keep sbx-run-x\" -j ACCEPT\n"
        "-A INPUT -j DOCKER-USER\n"
    )
    rules = parse_rules(text)
    assert [(r.run_id, r.bridge, r.spec[-1]) for r in rules] == [
        (RID, "sbx0123456789ab", "ACCEPT"), (RID, "sbx0123456789ab", "ACCEPT"),
        (RID, "sbx0123456789ab", "DROP")]
    assert rules[2].spec == ("-i", "sbx0123456789ab", "-m", "comment", "--comment",
                             f"sbx-run-{RID}", "-j", "DROP")
    assert rules[2].text == f"-i sbx0123456789ab -m comment --comment sbx-run-{RID} -j DROP"


def test_parse_rules_matches_what_bridge_guard_installs() -> None:
    guard = fw.BridgeGuard("sbx0123456789ab", RID, allow_tcp_ports=(3128,))
    text = "-P INPUT DROP\n" + "".join(
        f"-A INPUT {' '.join(spec)}\n" for spec in guard.rules())
    assert [r.spec for r in parse_rules(text)] == [tuple(spec) for spec in guard.rules()]


@pytest.mark.parametrize(("lines", "expected"), [
    # quoting as iptables prints it: double quotes, backslash escapes
    ([f'-A INPUT -m comment --comment "sbx-run-{RID}" -j DROP'], [(RID, None)]),
    (['-A INPUT -m comment --comment "odd \\"x\\" y\\\\z" -j DROP'], []),
    ([f"-A INPUT ! -i sbx0123456789ab -m comment --comment sbx-run-{RID} -j DROP"],
     [(RID, None)]),  # a negated interface names no bridge
    ([f"-A INPUT -i sbx+ -m comment --comment sbx-run-{RID} -j DROP"], [(RID, None)]),
    ([f"-A INPUT -m comment --comment -i -m comment --comment sbx-run-{RID} -j DROP"],
     [(RID, None)]),  # "-i" as a comment's value is not an option
    (["# Warning: iptables-legacy tables present, use iptables-legacy to see them", "", "  "],
     []),
    ([f"-A INPUT -i sbxA -m comment --comment sbx-run-{RID} -j DROP\r"], [(RID, "sbxA")]),
])
def test_parse_rules_odd_but_readable_lines(lines: list[str],
                                            expected: list[tuple[str, str | None]]) -> None:
    rules = parse_rules("\n".join(["-P INPUT ACCEPT", *lines]) + "\n")
    assert [(r.run_id, r.bridge) for r in rules] == expected


@pytest.mark.parametrize("lines", [
    [],  # no policy line: truncated
    ["-P INPUT ACCEPT"],  # two policies
    ['-A INPUT -m comment --comment "unbalanced -j DROP'],
    [f"-A FORWARD -i x -m comment --comment sbx-run-{RID} -j DROP"],
    ["-N INPUT-EXTRA"],
    ["garbage"],
    ["-A INPUT -m comment --comment sbx-run-xyz -j DROP"],
    [f"-A INPUT -m comment --comment sbx-run-{RID.upper()} -j DROP"],
    [f"-A INPUT -m comment --comment sbx-run-{RID}0 -j DROP"],
    [f'-A INPUT -m comment --comment "sbx-run-{RID} extra" -j DROP'],
    [f"-A INPUT -m comment --comment sbx-run-{RID} -m comment --comment sbx-run-{RID} -j DROP"],
    [f"-A INPUT -j DROP -m comment --comment sbx-run-{RID} -i"],
    [f"-A INPUT -i a -i b -m comment --comment sbx-run-{RID} -j DROP"],
    [f"-A INPUT -i bad/name -m comment --comment sbx-run-{RID} -j DROP"],
    [f"-A INPUT -i {'x' * 16} -m comment --comment sbx-run-{RID} -j DROP"],
    ["-A INPUT -j DROP -m comment --comment"],
], ids=["no-policy", "two-policies", "unbalanced-quote", "other-chain", "new-chain", "garbage",
        "run-id-not-hex", "run-id-upper", "run-id-long", "comment-with-space", "two-comments",
        "dangling-i", "two-interfaces", "slash-in-interface", "interface-too-long",
        "dangling-comment"])
def test_parse_rules_refuses_a_listing_it_does_not_understand(lines: list[str]) -> None:
    head = [] if not lines else ["-P INPUT ACCEPT"]
    with pytest.raises(RuleListingInvalid):
        parse_rules("\n".join([*head, *lines]) + "\n")


def _fake_iptables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, listing: str,
                   status: int = 0, stderr: str = "") -> Path:
    """An `iptables` on PATH that prints ``listing`` for -S and logs every argv."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "iptables.log"
    (tmp_path / "listing.txt").write_text(listing, encoding="utf-8")
    script = bindir / "iptables"
    script.write_text(
        "#!/bin/sh\n"
        f"printf '%s\\n' \"$*\" >> {log}\n"
        f"if [ {status} -ne 0 ]; then printf '%s' '{stderr}' >&2; exit {status}; fi\n"
        f"case \"$*\" in *' -S '*) cat {tmp_path / 'listing.txt'} ;; esac\n", encoding="utf-8")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    return log


def test_list_and_remove_call_iptables_with_the_exact_spec(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    listing = ("-P INPUT ACCEPT\n"
               f"-A INPUT -i sbx0123456789ab -m comment --comment sbx-run-{RID} -j DROP\n")
    log = _fake_iptables(tmp_path, monkeypatch, listing=listing)
    (found,) = fw.list_sbx_rules()
    fw.remove_rule(found)
    assert log.read_text(encoding="utf-8").splitlines() == [
        "-w 5 -S INPUT",
        f"-w 5 -D INPUT -i sbx0123456789ab -m comment --comment sbx-run-{RID} -j DROP"]
    with pytest.raises(FirewallError, match="without its sbx comment"):
        fw.remove_rule(SbxRule(("-j", "DROP"), RID, None))


def test_iptables_failures_are_told_apart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_iptables(tmp_path, monkeypatch, listing="", status=4,
                   stderr="iptables v1.8.9 (nf_tables): Could not fetch rule set generation id: "
                          "Permission denied (you must be root)")
    with pytest.raises(FirewallUnavailable, match="Permission denied"):
        fw.list_sbx_rules()
    (tmp_path / "bin" / "iptables").write_text("#!/bin/sh\necho 'lock held' >&2\nexit 4\n",
                                               encoding="utf-8")
    with pytest.raises(FirewallError, match="lock held"):
        fw.list_sbx_rules()
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(FirewallUnavailable, match="not running as root"):
        fw.list_sbx_rules()
    monkeypatch.setattr(fw, "iptables_binary", lambda: None)
    with pytest.raises(FirewallUnavailable, match="iptables is missing"):
        fw.list_sbx_rules()


def test_bridge_exists_looks_at_the_host() -> None:
    assert fw.bridge_exists("lo")
    assert not fw.bridge_exists("sbxnosuchif0")
    assert fw.bridge_exists("../../etc")  # never "gone" for a name it cannot look up


# -- firewall rules and images: the pure decisions ----------------------------------------------


def _rule_case(run: str) -> tuple[dict[str, RunDir], dict[str, int | None]]:
    past, future = int(NOW) - 601, int(NOW) + 3600
    cases: dict[str, tuple[dict[str, RunDir], dict[str, int | None]]] = {
        "unknown": ({}, {}),
        "live": ({RID: _run(RID, 1, deadline=future)}, {}),
        "live_past_deadline": ({RID: _run(RID, 1, deadline=past)}, {}),
        "dead": ({RID: _run(RID, 2, deadline=future)}, {}),
        "unreadable": ({RID: _run(RID, None)}, {}),
        "objects_past": ({}, {RID: past}),
        "objects_future": ({}, {RID: future}),
        "objects_no_deadline": ({}, {RID: None}),
        "other_run_dir": ({"f" * 32: _run("f" * 32, 2)}, {"e" * 32: past}),
    }
    return cases[run]


@pytest.mark.parametrize(("run", "bridge_up", "remove", "why"), [
    ("unknown", False, False, "not_this_home"),  # another home's: never, even when stale
    ("other_run_dir", False, False, "not_this_home"),
    ("live", True, False, "live"),
    ("live", False, False, "live"),  # a live run tearing down: its own cleanup removes it
    ("live_past_deadline", True, True, "deadline_passed"),
    ("dead", True, True, "run_over"),
    ("unreadable", True, False, "no_evidence"),
    ("unreadable", False, True, "bridge_gone"),
    ("objects_past", True, True, "deadline_passed"),
    ("objects_future", True, False, "inside_deadline"),
    ("objects_future", False, True, "bridge_gone"),
    ("objects_no_deadline", True, False, "no_evidence"),
])
def test_judge_rule(run: str, bridge_up: bool, remove: bool, why: str) -> None:
    runs, known = _rule_case(run)
    assert judge_rule(rule(RID), runs, known, CLOCK, lambda _name: bridge_up)[:2] == (
        remove, why)


def test_judge_rule_without_a_bridge_goes_by_the_run_only() -> None:
    bridgeless = SbxRule(("-m", "comment", "--comment", f"sbx-run-{RID}", "-j", "DROP"), RID,
                         None)
    assert judge_rule(bridgeless, {}, {RID: int(NOW) + 60}, CLOCK,
                      lambda _name: False)[:2] == (False, "inside_deadline")


@pytest.mark.parametrize(("tags", "run", "deadline", "candidate", "why"), [
    (None, "dead", str(int(NOW) + 60), True, "run_over"),
    (None, None, str(int(NOW) - 601), True, "deadline_passed"),
    ([], None, str(int(NOW) - 601), True, "deadline_passed"),  # untagged
    (["<none>:<none>"], None, str(int(NOW) - 601), True, "deadline_passed"),
    (None, "live", str(int(NOW) + 60), False, "inside_deadline"),
    (None, "dead", None, False, "deadline_missing"),
    (["mine/kept:1"], None, str(int(NOW) - 601), False, "foreign_tag"),
    (["sbx-run/" + "f" * 32 + ":1"], None, str(int(NOW) - 601), False, "foreign_tag"),
])
def test_judge_image(tags: list[str] | None, run: str | None, deadline: str | None,
                     candidate: bool, why: str) -> None:
    runs = {} if run is None else {RID: _run(RID, 2 if run == "dead" else 1)}
    entry = ImageEntry("sha256:" + hex64(),
                       tuple([f"sbx-run/{RID}:1"] if tags is None else tags), RID, deadline)
    assert judge_image(entry, runs, CLOCK)[:2] == (candidate, why)


def test_an_image_naming_no_run_is_never_a_candidate() -> None:
    entry = ImageEntry("sha256:" + hex64(), (), None, str(int(NOW) - 9999))
    assert judge_image(entry, {}, CLOCK)[:2] == (False, "not_a_run_image")


# -- images and rules through the collector -----------------------------------------------------


def test_a_killed_runs_image_goes_after_its_container(h: Harness) -> None:
    ran(h)
    rid = run_id()
    h.run_dir(rid, pid=4_000_200)
    box = container("running", home=h.home, run=rid, deadline=str(int(NOW) - 5))
    img = image(home=h.home, run=rid, deadline=str(int(NOW) - 5))
    h.engine.containers = [box]
    h.engine.labelled_images = [img]
    h.engine.users = {img["Id"]: [box["Id"]]}  # its container, removed in the same pass
    result = h.collect(grace=0)
    assert not result.failed
    assert [(i.kind, i.why) for i in result.removed] == [
        ("container", "deadline_passed"), ("image", "deadline_passed"), ("run_dir", "finished")]
    assert h.engine.labelled_images == [] and h.engine.called("remove_image") == [(img["Id"],)]
    # scoped by this home's labels; confirmed with one more listing
    assert h.engine.called("list_labelled_images") == [
        ({label_keys.MANAGED: "true", label_keys.HOME: h.home},)] * 2
    assert result.counts()["image"] == 1


def test_images_kept_live_used_foreign_and_their_run_dirs_stay(h: Harness) -> None:
    ran(h)
    live_run, dead_run, used_run = run_id(), run_id(), run_id()
    h.alive.add(88)
    h.run_dir(live_run, pid=88, deadline=int(NOW) + 3600)
    h.run_dir(dead_run, pid=4_000_201)
    used_dir = h.run_dir(used_run, pid=4_000_202)
    live = image(home=h.home, run=live_run, deadline=str(int(NOW) + 3600))
    retagged = image(home=h.home, run=dead_run, deadline=str(int(NOW) - 5),
                     tags=[f"sbx-run/{dead_run}:1", "someone/kept:latest"])
    used = image(home=h.home, run=used_run, deadline=str(int(NOW) - 5))
    h.engine.labelled_images = [live, retagged, used]
    h.engine.users = {used["Id"]: ["f" * 64]}  # another container, not removed in this pass
    result = h.collect(grace=0)
    assert not result.failed and not any(i.kind == "image" for i in result.removed)
    assert h.engine.called("remove_image") == []
    kept = {i.id: i.why for i in result.kept if i.kind == "image"}
    assert kept == {live["Id"]: "inside_deadline", retagged["Id"]: "foreign_tag",
                    used["Id"]: "in_use"}
    assert used_dir.exists() and (h.state / "runs" / dead_run).exists()
    assert ("image", live["Id"]) not in h.engine.called("object_users")


@pytest.mark.parametrize("mangle", [
    lambda i: "not an object",
    lambda i: {**i, "Id": i["Id"].removeprefix("sha256:")},
    lambda i: {**i, "RepoTags": "sbx-run/x:1"},
    lambda i: {**i, "RepoTags": [None]},
    lambda i: {**i, "Labels": None},
    lambda i: {**i, "Labels": {**i["Labels"], label_keys.HOME: "0" * 32}},
], ids=["not-object", "bare-id", "tags-not-list", "tag-not-string", "labels-none", "other-home"])
def test_one_unparsable_image_deletes_nothing(h: Harness,
                                              mangle: Callable[[dict[str, Any]], Any]) -> None:
    ran(h)
    old = h.run_dir(pid=4_000_203, age_s=86_400)
    good = container("exited", home=h.home, run=run_id())
    h.engine.containers = [good]
    h.engine.labelled_images = [mangle(image(home=h.home, run=run_id(), deadline="1"))]
    h.firewall.rules = [rule(old.name)]
    result = h.collect(grace=0)
    assert [f.kind for f in result.failed] == ["list_invalid"] and result.removed == []
    assert old.exists() and good in h.engine.containers
    assert not any(name.startswith("remove_") for name, _ in h.engine.calls)
    assert h.firewall.calls == []


def test_a_failing_image_listing_deletes_nothing(h: Harness) -> None:
    ran(h)
    h.engine.containers = [container("exited", home=h.home, run=run_id())]
    h.engine.fail("list_labelled_images",
                  SbxError(Reason.CLEANUP_FAILED, "listing sbx images: 500"))
    result = h.collect(grace=0)
    assert [f.kind for f in result.failed] == ["list_failed"] and result.exit_status == 126
    assert not any(name.startswith("remove_") for name, _ in h.engine.calls)


def test_an_image_still_present_after_removal_is_a_failure(h: Harness) -> None:
    ran(h)
    rid = run_id()
    path = h.run_dir(rid, pid=4_000_204)
    img = image(home=h.home, run=rid, deadline="1")
    h.engine.labelled_images = [img]
    h.engine.sticky.add(img["Id"])
    result = h.collect(grace=0)
    assert [f.kind for f in result.failed] == ["image_remove_failed"]
    assert "still present" in result.failed[0].message and path.exists()
    assert result.failed[0].message.startswith(f"image {img['Id'][7:19]} ")


def test_stale_rules_of_this_home_go_other_homes_rules_are_never_touched(h: Harness) -> None:
    ran(h)
    dead_run, object_run, live_run, stranger = run_id(), run_id(), run_id(), run_id()
    h.run_dir(dead_run, pid=4_000_205)
    h.alive.add(99)
    live_dir = h.run_dir(live_run, pid=99, deadline=int(NOW) + 3600)
    h.engine.networks = [shared("network", home=h.home, run=object_run,
                                deadline=str(int(NOW) - 5))]
    h.firewall.rules = [rule(dead_run, target="ACCEPT"), rule(dead_run), rule(object_run),
                        rule(live_run), rule(stranger)]
    h.firewall.bridges = {f"sbx{live_run[:12]}"}
    result = h.collect(grace=0)
    assert not result.failed
    assert sorted(r.run_id for r in h.firewall.removed()) == sorted(
        [dead_run, dead_run, object_run])
    assert [r.run_id for r in h.firewall.rules] == [live_run, stranger]
    kept = {(i.run_id, i.why) for i in result.kept if i.kind == "firewall_rule"}
    assert kept == {(live_run, "live"), (stranger, "not_this_home")}
    assert result.counts()["firewall_rule"] == 3
    assert not (h.state / "runs" / dead_run).exists() and live_dir.exists()
    removed = [e["details"] for e in h.audit_events() if e["event_type"] == "gc_removed"]
    assert removed[-1]["firewall_rule"] == 3 and removed[-1]["run_dir"] == 1


def test_identical_rules_go_one_by_one_and_are_confirmed_by_count(h: Harness) -> None:
    ran(h)
    h.config.write_text("[gc]\nbatch_size = 2\n", encoding="utf-8")
    rid = run_id()
    h.run_dir(rid, pid=4_000_206)
    h.firewall.rules = [rule(rid)] * 3
    result = h.collect(grace=None)
    assert not result.failed and h.firewall.rules == []
    assert len(h.firewall.removed()) == 3
    assert [name for name, _ in h.firewall.calls] == [
        "list", "remove", "remove", "list", "remove", "list"]


@pytest.mark.parametrize(("error", "kind"), [
    (FirewallError("listing the INPUT rules: lock held"), "firewall_list_failed"),
    (RuleListingInvalid("line 3: unbalanced quote"), "firewall_list_invalid"),
])
def test_a_rule_listing_that_fails_removes_no_rule_and_keeps_run_dirs(
        h: Harness, error: Exception, kind: str) -> None:
    ran(h)
    rid = run_id()
    path = h.run_dir(rid, pid=4_000_207)
    gone = container("exited", home=h.home, run=run_id())
    h.engine.containers = [gone]
    h.firewall.list_error = error
    result = h.collect(grace=0)
    assert [f.kind for f in result.failed] == [kind] and result.exit_status == 126
    assert h.firewall.removed() == [] and path.exists()
    assert [i.id for i in result.removed] == [gone["Id"]]  # engine objects are not held back
    assert (rid, "firewall_listing_failed") in {(i.id, i.why) for i in result.kept}
    details = [e["details"] for e in h.audit_events() if e["event_type"] == "cleanup_failed"]
    assert details == [{"reason": kind, "count": 1, "source": "gc"}]


def test_without_iptables_or_root_it_is_a_note_never_a_failure(h: Harness) -> None:
    ran(h)
    rid = run_id()
    path = h.run_dir(rid, pid=4_000_208)
    h.firewall.list_error = FirewallUnavailable("not running as root")
    result = h.collect(grace=0)
    assert result.exit_status == 0 and not result.failed
    assert result.note == "host firewall rules were not checked (not running as root)"
    assert not path.exists()  # run dirs go as before
    gc_view.gc_result(h.ctx().renderer, result)
    assert h.out.getvalue() == "" and h.err.getvalue() == ""  # cron stays silent
    gc_view.gc_result(h.ctx().renderer, result, verbose=1)
    assert "host firewall rules were not checked (not running as root)" in h.err.getvalue()
    h.out.truncate(0)
    h.out.seek(0)
    gc_view.gc_result(h.ctx(as_json=True).renderer, result)
    assert "not running as root" in json.loads(h.out.getvalue().strip())["data"]["note"]


def test_a_home_that_knows_no_run_does_not_list_the_firewall(h: Harness) -> None:
    ran(h)
    h.firewall.list_error = AssertionError("must not be listed")
    assert h.collect(grace=0).exit_status == 0 and h.firewall.calls == []


def test_a_rule_that_will_not_go_is_a_failure_and_keeps_its_run_dir(h: Harness) -> None:
    ran(h)
    refused, sticky, fine = run_id(), run_id(), run_id()
    paths = {rid: h.run_dir(rid, pid=4_000_209) for rid in (refused, sticky, fine)}
    h.firewall.rules = [rule(refused), rule(sticky), rule(fine)]
    h.firewall.remove_errors[refused] = FirewallError("iptables: Bad rule")
    h.firewall.sticky.add(sticky)
    result = h.collect(grace=0)
    assert [f.kind for f in result.failed] == ["firewall_rule_remove_failed"] * 2
    assert "Bad rule" in result.failed[0].message
    assert "still present" in result.failed[1].message
    assert paths[refused].exists() and paths[sticky].exists() and not paths[fine].exists()
    details = [e["details"] for e in h.audit_events() if e["event_type"] == "cleanup_failed"]
    assert details == [{"reason": "firewall_rule_remove_failed", "count": 2, "source": "gc"}]


def test_an_unconfirmable_rule_removal_is_a_failure(h: Harness) -> None:
    ran(h)
    rid = run_id()
    path = h.run_dir(rid, pid=4_000_210)
    h.firewall.rules = [rule(rid)]
    h.firewall.relist_error = FirewallError("lock held")
    result = h.collect(grace=0)
    assert [f.kind for f in result.failed] == ["firewall_rule_remove_failed"]
    assert "could not confirm" in result.failed[0].message and path.exists()


def test_dry_run_and_json_include_images_and_rules(h: Harness) -> None:
    ran(h)
    rid = run_id()
    path = h.run_dir(rid, pid=4_000_211)
    img = image(home=h.home, run=rid, deadline="1")
    h.engine.labelled_images = [img]
    h.firewall.rules = [rule(rid)]
    result = h.collect(dry_run=True, grace=0)
    assert [(i.kind, i.why) for i in result.removed] == [
        ("image", "deadline_passed"), ("firewall_rule", "deadline_passed"),
        ("run_dir", "finished")]
    assert h.firewall.removed() == [] and h.engine.labelled_images == [img] and path.exists()
    gc_view.gc_result(h.ctx().renderer, result)
    lines = h.out.getvalue().splitlines()
    assert lines[0].startswith(f"would remove image {img['Id'][7:19]} (run {rid[:12]})")
    assert lines[1].startswith(f"would remove firewall rule -i sbx{rid[:12]} -m comment")
    h.out.truncate(0)
    h.out.seek(0)
    gc_view.gc_result(h.ctx(as_json=True).renderer, result)
    data = json.loads(h.out.getvalue())["data"]
    assert data["counts"]["image"] == 1 and data["counts"]["firewall_rule"] == 1
    assert {"kind": "firewall_rule", "id": rule(rid).text, "run_id": rid,
            "why": "deadline_passed",
            "detail": data["removed"][1]["detail"]} in data["removed"]


# --- the image cache (sbx.domain.sandbox.imagecache): kit builds, assemblies, prepared images
# ---------


def cached(tags: Sequence[str], *, idle: float | None = 7200,
           ident: str | None = None) -> CachedImage:
    return CachedImage(ident or "sha256:" + hex64(), tuple(tags),
                       None if idle is None else NOW - idle)


def judge(image: CachedImage, home: str = "a" * 64, users: int = 0) -> tuple[str, tuple[str, ...]]:
    decision = judge_cached(image, home_hash=home, now=NOW, grace_s=600, users=users)
    return decision.why, decision.untag


def test_a_cached_image_this_home_marks_goes_with_its_cache_tags_only_when_idle() -> None:
    plain = cached(["sbx-kit/k:1", "sbx-prep/p:1"])
    mine = use_tag("a" * 64, plain.id)
    image = dataclasses.replace(plain, tags=(*plain.tags, mine))
    # The cache tags first, the mark last (kept if the engine keeps the image).
    assert judge(image) == ("unused", ("sbx-kit/k:1", "sbx-prep/p:1", mine))
    assert judge(dataclasses.replace(image, last_tagged=NOW - 60))[0] == "recently_used"
    assert judge(dataclasses.replace(image, last_tagged=None)) == ("last_use_unknown", ())
    assert judge(image, users=1) == ("in_use", ())


def test_an_image_this_home_neither_built_nor_marks_is_never_removed() -> None:
    """Another home built it and no home marks it (any more): not this home's to take."""
    assert judge(cached(["sbx-kit/k:1", "sbx-prep/p:1"])) == ("not_this_home", ())
    image = cached(["sbx-kit/k:1"])
    theirs = use_tag("b" * 64, image.id)
    assert judge(dataclasses.replace(image, tags=(*image.tags, theirs))) == (
        "not_this_home", ())


def test_only_this_homes_mark_goes_while_another_home_marks_the_image() -> None:
    image = cached(["sbx-kit/k:1"])
    mine, theirs = use_tag("a" * 64, image.id), use_tag("b" * 64, image.id)
    shared_image = dataclasses.replace(image, tags=(*image.tags, mine, theirs))
    assert judge(shared_image) == ("used_by_another_home", (mine,))
    # Marked by this home alone: the cache tags and then the mark go.
    assert judge(dataclasses.replace(image, tags=(*image.tags, mine))) == (
        "unused", ("sbx-kit/k:1", mine))


def test_a_tag_sbx_did_not_make_keeps_the_image() -> None:
    image = cached(["sbx-kit/k:1", "myteam/agent:latest"])
    mine = use_tag("a" * 64, image.id)
    assert judge(image) == ("not_this_home", ())
    assert judge(dataclasses.replace(image, tags=(*image.tags, mine))) == ("foreign_tag", (mine,))


def test_children_are_removed_before_their_parents() -> None:
    kit = CacheDecision("k", ("sbx-kit/k:1",), "unused", "")
    prep = CacheDecision("p", ("sbx-use/x:1", "sbx-prep/p:1"), "unused", "")
    assembled = CacheDecision("a", ("sbx-assembled/a:1",), "unused", "")
    assert [d.image_id for d in removal_order([kit, assembled, prep])] == ["p", "a", "k"]


def test_record_use_marks_cached_images_and_leaves_the_users_own_alone() -> None:
    tagged: list[tuple[str, str]] = []

    class Tagger:
        def tag_image(self, image: str, ref: str) -> None:
            tagged.append((image, ref))

    kit = ImageInfo("sha256:" + "1" * 64, ("sbx-kit/k:1",), "", "", None, None, (), {})
    plain = ImageInfo("sha256:" + "2" * 64, ("busybox:1",), "", "", None, None, (), {})
    record_use(Tagger(), "c" * 64, [kit, plain, kit])  # type: ignore[arg-type]
    assert tagged == [(kit.id, f"sbx-use/{'c' * 16}:{'1' * 24}")]


def test_gc_removes_idle_cached_images_and_keeps_what_is_used(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.config.write_text("[gc]\nimage_idle_seconds = 600\n", encoding="utf-8")
    h.run_dir()  # the home ran a sandbox once
    idle, recent, used, refused = (
        h.marked(cached(tags, idle=after))
        for tags, after in ((["sbx-kit/old:1"], 7200), (["sbx-kit/new:1"], 30),
                            (["sbx-prep/p:1"], 7200), (["sbx-kit/held:1"], 7200)))
    foreign = cached(["sbx-kit/other:1"])  # built by another home, marked by none
    h.engine.cached = [idle, recent, used, refused, foreign]
    h.engine.users = {used.id: ["c" * 64]}
    h.engine.untag_refused = {"sbx-kit/held:1"}
    dry = h.collect(dry_run=True)
    assert {i.id for i in dry.removed if i.kind == "cached_image"} == {idle.id, refused.id}
    assert h.engine.called("untag_image") == []  # a dry run changes nothing
    result = h.collect()
    assert {i.id for i in result.removed if i.kind == "cached_image"} == {idle.id}
    kept = {i.id: i.why for i in result.kept if i.kind == "cached_image"}
    assert kept == {recent.id: "recently_used", used.id: "in_use", refused.id: "in_use",
                    foreign.id: "not_this_home"}
    assert [image.id for image in h.engine.cached] == [recent.id, used.id, refused.id,
                                                       foreign.id]
    # The image the engine kept is still this home's: its mark stayed, a later gc retries.
    held = next(image for image in h.engine.cached if image.id == refused.id)
    assert use_tag(h.home, refused.id) in held.tags




# -- labels are sbx's alone ------------------------------------------------------------------


def _labelled(h: Harness, rid: str, name: str, state: str = "exited") -> dict[str, Any]:
    entry = container(state, home=h.home, run=rid, deadline=str(int(NOW) + 3600))
    entry["Labels"][label_keys.NAME] = name
    return entry


def test_a_name_label_no_record_vouches_for_is_collected(h: Harness) -> None:
    """A kit image's `LABEL dev.sbx.name=X` (or any name label sbx did not record for that
    run) does not keep a crashed run's container forever."""
    ran(h)
    rid = run_id()
    h.run_dir(rid, pid=None)
    planted = _labelled(h, rid, "dev")
    h.engine.containers.append(planted)
    result = h.collect()
    assert [(i.kind, i.id, i.why) for i in result.removed] == [
        ("container", planted["Id"], "exited"), ("run_dir", rid, "unreadable_record")]


def test_a_named_sandbox_sbx_recorded_is_kept(h: Harness) -> None:
    ran(h)
    by_run = run_id()
    h.run_dir(by_run, record=json.dumps({"run_id": by_run, "pid": 4_000_000, "name": "dev"}))
    by_store = run_id()
    store = SandboxStore(h.state)
    store.save(SandboxRecord(name="box", run_id=by_store, created=NOW, workload="./k",
                             kits=[], workspace=None, access="none", request={}))
    kept = [_labelled(h, by_run, "dev"), _labelled(h, by_store, "box")]
    other = _labelled(h, by_run, "not-dev")  # its run made "dev", not this name
    h.engine.containers.extend([*kept, other])
    result = h.collect()
    assert [i.id for i in result.removed if i.kind == "container"] == [other["Id"]]
    assert {i.id: i.why for i in result.kept if i.kind == "container"} == {
        kept[0]["Id"]: "named", kept[1]["Id"]: "named"}


def test_an_empty_name_label_is_no_name() -> None:
    assert label_keys.value({label_keys.NAME: ""}, label_keys.NAME) is None
    entry = gc_listing._parse_container(
        {"Id": hex64(), "State": "exited",
         "Labels": {label_keys.MANAGED: "true", label_keys.HOME: "h", label_keys.NAME: ""}},
        "h")
    assert entry.name is None and not entry.named


def test_own_labels_shadow_every_sbx_label_of_the_image() -> None:
    image = {label_keys.NAME: "dev", label_keys.DEADLINE: "1", "dev.sbx.anything": "x",
             label_keys.HOME: "theirs", "org.opencontainers.image.title": "kept"}
    own = label_keys.object_labels(home_hash="mine", run_id="r", deadline=9, kits=["k"],
                                   role=label_keys.ROLE_SANDBOX)
    merged = {**image, **label_keys.own_labels(image, own)}  # what the engine makes of it
    assert merged[label_keys.NAME] == "" and merged["dev.sbx.anything"] == ""
    assert merged[label_keys.HOME] == "mine" and merged[label_keys.DEADLINE] == "9"
    assert merged["org.opencontainers.image.title"] == "kept"
    assert label_keys.own_labels(image, {**own, label_keys.NAME: "box"})[label_keys.NAME] == "box"


# -- a live owner: whatever the state of what its run holds, gc never touches it --------------


def _hold_owner(path: Path) -> int:
    """Take ``path``'s owner lock as a live run does; the caller closes the descriptor."""
    path.mkdir(parents=True, exist_ok=True)
    fd = os.open(path / "owner.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


def test_an_exited_container_of_a_live_run_is_never_removed(h: Harness) -> None:
    ran(h)
    rid = run_id()
    path = h.run_dir(rid, pid=4_000_020, deadline=int(NOW) - 100_000)  # its pid looks gone
    gone = container("exited", home=h.home, run=rid, deadline=str(int(NOW) - 100_000))
    net = shared("network", home=h.home, run=rid, deadline=str(int(NOW) - 100_000))
    vol = shared("volume", home=h.home, run=rid, deadline=str(int(NOW) - 100_000))
    h.engine.containers, h.engine.networks, h.engine.volumes = [gone], [net], [vol]
    h.firewall.rules = [rule(rid)]
    fd = _hold_owner(path)
    try:
        result = h.collect(grace=0)
    finally:
        os.close(fd)
    assert result.removed == [] and result.failed == []
    assert {(i.kind, i.why) for i in result.kept if i.run_id == rid} == {
        ("container", "live"), ("network", "live"), ("volume", "live"),
        ("firewall_rule", "live"), ("run_dir", "in_use")}
    assert h.engine.containers == [gone] and path.exists() and h.firewall.removed() == []
    # Once its owner is gone, the same pass removes it all.
    result = h.collect(grace=0)
    assert {i.kind for i in result.removed} >= {"container", "network", "volume",
                                                "firewall_rule", "run_dir"}


def test_a_claimed_run_without_its_record_yet_is_live(h: Harness) -> None:
    ran(h)
    rid = run_id()
    path = h.state / "runs" / rid
    fd = _hold_owner(path)  # what `sbx run` holds while it plans (no run.json yet)
    stamp = NOW - 10_000
    os.utime(path, (stamp, stamp))
    probe = container("created", home=h.home, run=rid, deadline=str(int(NOW) - 10))
    h.engine.containers = [probe]
    try:
        result = h.collect(grace=0)
    finally:
        os.close(fd)
    assert result.removed == [] and path.exists() and h.engine.containers == [probe]
    assert {(i.kind, i.why) for i in result.kept} == {("container", "live"),
                                                      ("run_dir", "in_use")}
    h.engine.containers = []
    fd = _hold_owner(path)
    try:  # nothing of it is left, and still its directory is its owner's
        result = h.collect(grace=0)
    finally:
        os.close(fd)
    assert path.exists() and {(i.kind, i.why) for i in result.kept} == {("run_dir", "live")}


def test_a_run_that_starts_after_gc_read_the_runs_is_seen_at_removal(h: Harness) -> None:
    """The race: gc reads the run directories, then a run starts (its lock first, then its
    container, which exits at once), then gc lists and removes. The lock is looked at again
    right before the removal."""
    ran(h)
    rid = run_id()
    late = container("exited", home=h.home, run=rid, deadline=str(int(NOW) + 3600))
    held: list[int] = []
    listing = h.engine.list_labelled

    def list_after_the_run_started(labels: Any) -> Any:
        if not held:
            held.append(_hold_owner(h.state / "runs" / rid))
            h.engine.containers.append(late)
        return listing(labels)

    h.engine.list_labelled = list_after_the_run_started  # type: ignore[method-assign]
    try:
        result = h.collect(grace=0)
    finally:
        for fd in held:
            os.close(fd)
    assert late in h.engine.containers
    assert ("container", late["Id"], "live") in {(i.kind, i.id, i.why) for i in result.kept}
    assert "remove_container" not in h.engine.names()


def test_gc_asks_the_engine_only_about_the_images_this_home_marks(tmp_path: Path) -> None:
    """Other homes' marks (thousands, on a shared engine) cost no inspect and no users call:
    an image this home does not mark is never this home's, whatever its use or age."""
    h = Harness(tmp_path)
    h.config.write_text("[gc]\nimage_idle_seconds = 600\n", encoding="utf-8")
    h.run_dir()
    mine = h.marked(cached(["sbx-kit/mine:1"]))
    others = [cached([f"sbx-use/{'b' * 16}:{n:024x}"], idle=None) for n in range(50)]
    h.engine.cached = [mine, *others]
    h.engine.users = {other.id: ["c" * 64] for other in others}
    result = h.collect()
    assert {i.id for i in result.removed if i.kind == "cached_image"} == {mine.id}
    kept = {i.id: i.why for i in result.kept if i.kind == "cached_image"}
    assert kept == {other.id: "not_this_home" for other in others}
    assert [args[1] for args in h.engine.called("object_users")
            if args[0] == "image"] == [mine.id]


def test_a_cached_install_goes_with_the_run_tag_a_dead_reusing_run_left_and_first() -> None:
    """A run that reused a cached install and died leaves its sbx-run/ tag: once no container
    uses the image and the grace passed, that tag goes with the cache tags (else it would keep
    the image forever); installs are children of everything else, so they go first."""
    image = cached(["sbx-installed/k:1", "sbx-run/r1:1"])
    mine = use_tag("a" * 64, image.id)
    image = dataclasses.replace(image, tags=(*image.tags, mine))
    assert judge(image) == ("unused", ("sbx-installed/k:1", "sbx-run/r1:1", mine))
    assert judge(image, users=1) == ("in_use", ())
    installed = CacheDecision("i", ("sbx-installed/k:1",), "unused", "")
    prep = CacheDecision("p", ("sbx-prep/p:1",), "unused", "")
    assert [d.image_id for d in removal_order([prep, installed])] == ["i", "p"]


def test_a_template_is_never_a_candidate_whatever_its_run_labels_say() -> None:
    # untagged, its run over and its deadline long past: still user data
    entry = ImageEntry("sha256:" + hex64(), (), RID, str(int(NOW) - 9999), template=True)
    assert judge_image(entry, {RID: _run(RID, 2)}, CLOCK)[:2] == (False, "template")


def test_the_state_homes_egress_network_is_kept_without_a_warning() -> None:
    """A proxy's egress network beside the engine names no run: kept as shared, not reported
    as a missing deadline; a run's own network of the proxy role is judged as any other."""
    from sbx.base import labels as label_keys
    from sbx.seams.engine import RawListing
    from sbx.usecases.gc.listing import parse_listing
    from sbx.usecases.gc.result import REPORTED_KEPT

    home = "a" * 32
    base = {label_keys.MANAGED: "true", label_keys.HOME: home,
            label_keys.ROLE: label_keys.ROLE_PROXY}
    rid = run_id()
    listing = parse_listing(RawListing((), (
        {"Id": hex64(), "Labels": base},
        {"Id": hex64(), "Labels": {**base, label_keys.RUN: rid}},
    ), ()), home)
    shared, owned = listing.shared
    assert shared.shared and not owned.shared
    keep, why, _detail = judge_shared(shared, {}, CLOCK)
    assert (keep, why) == (False, "shared") and why not in REPORTED_KEPT
    assert judge_shared(owned, {rid: _run(rid, 2)}, CLOCK)[:2] == (False, "deadline_missing")
