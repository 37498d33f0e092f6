"""Which engine a command speaks to with [engines]: the environment's when it names one,
--engine's entry (an unknown one refused with the names), the least-loaded answering entry for
a new sandbox, and a named sandbox's own recorded engine for everything after."""

from __future__ import annotations

import dataclasses
import io
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from sbx.base import labels
from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.base.render import Renderer
from sbx.domain.sandbox import runrecord
from sbx.domain.sandbox.records import SandboxRecord
from sbx.seams.engine import EngineInfo
from sbx.seams.enginehost import ENGINE_NAME_ENV
from sbx.usecases import explainplan, fleet, mcptools, templates
from sbx.usecases.context import AppContext
from sbx.usecases.idlestop import mark_stopped
from sbx.usecases.named import clone, copy
from sbx.usecases.named.everywhere import list_everywhere
from sbx.usecases.run.request import RunRequest
from sbx.usecases.sandboxstore import SandboxStore
from tests.support.fakeengine import DEFAULT_INFO, FakeEngine

GiB = 1024 ** 3
HOSTS = {"one": "ssh://root@one", "two": "ssh://root@two"}


def _info(cpus: int) -> EngineInfo:
    return dataclasses.replace(DEFAULT_INFO, cpus=cpus, memory_bytes=16 * GiB)


def _ctx(tmp_path: Path, engines: Mapping[str, FakeEngine], **env: str) -> AppContext:
    config = tmp_path / "config.toml"
    config.write_text("[engines]\n" + "".join(f'{n} = "{h}"\n' for n, h in HOSTS.items()))
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DOCKER_", "SBX_"))}
    full = {**base, "SBX_HOME": str(tmp_path / "state"), "SBX_CONFIG": str(config), **env}

    def factory(seen: Mapping[str, str]) -> FakeEngine:
        name = seen.get(ENGINE_NAME_ENV)
        if name is None:
            return engines["env"]
        assert seen["DOCKER_HOST"] == HOSTS[name]
        return engines[name]

    return AppContext(env=full, cwd=tmp_path, driver_factory=factory,
                      renderer=Renderer(io.StringIO(), io.StringIO(), as_json=False))


def _running(engine: FakeEngine, ident: str, home: str) -> None:
    engine.containers.append({"Id": ident, "State": "running", "Labels": {
        **labels.home_selector(home), labels.ROLE: labels.ROLE_SANDBOX}})


def test_a_new_sandbox_goes_to_the_least_loaded_answering_engine(tmp_path: Path) -> None:
    one, two = FakeEngine(info=_info(4)), FakeEngine(info=_info(4))
    ctx = _ctx(tmp_path, {"one": one, "two": two, "env": FakeEngine()})
    _running(one, "a" * 64, "elsewhere")  # any home's sandbox holds its engine's room
    held: Any = type("Spec", (), {"nano_cpus": 3 * 10**9, "memory_bytes": GiB})()
    one.specs["a" * 64] = held
    placed = fleet.for_new(ctx, RunRequest(workload="k"))
    assert placed.env[ENGINE_NAME_ENV] == "two" and placed.env["DOCKER_HOST"] == HOSTS["two"]
    assert fleet.current(placed) == ("two", HOSTS["two"])


def test_docker_host_in_the_environment_means_that_engine(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, {"env": FakeEngine()}, DOCKER_HOST="unix:///x.sock")
    assert fleet.for_new(ctx, RunRequest(workload="k")) is ctx
    assert fleet.current(ctx) == (None, None)


def test_engine_flag_picks_an_entry_and_an_unknown_one_is_refused(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, {"env": FakeEngine()}, DOCKER_HOST="unix:///x.sock")
    chosen = fleet.for_new(ctx, RunRequest(workload="k", engine="one"))
    assert chosen.env["DOCKER_HOST"] == HOSTS["one"] and "DOCKER_CONTEXT" not in chosen.env
    with pytest.raises(SbxError) as caught:
        fleet.for_new(ctx, RunRequest(workload="k", engine="three"))
    assert caught.value.reason is Reason.ENGINE_UNKNOWN
    assert "one, two" in caught.value.message


def test_a_recorded_sandbox_is_reached_on_its_engine(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, {"env": FakeEngine()})
    SandboxStore(ctx.state_home).save(SandboxRecord(
        name="dev", run_id="ab" * 16, created=1.0, workload="./k", kits=[], workspace=None,
        access="none", request={}, container_id="c" * 64, engine="two",
        engine_host=HOSTS["two"]))
    assert fleet.for_sandbox(ctx, "dev").env["DOCKER_HOST"] == HOSTS["two"]
    assert fleet.for_sandbox(ctx, "ab" * 6).env["DOCKER_HOST"] == HOSTS["two"]
    assert fleet.for_sandbox(ctx, "other") is ctx
    with pytest.raises(SbxError) as caught:  # it stays where it was created
        fleet.for_new(ctx, RunRequest(workload="k", name="dev", engine="one"))
    assert caught.value.reason is Reason.ENGINE_UNKNOWN


def test_no_engine_answering_refuses_the_placement(tmp_path: Path) -> None:
    class Down(FakeEngine):
        def info(self) -> EngineInfo:
            raise SbxError(Reason.DOCKER_UNREACHABLE, "connecting: no route")

    ctx = _ctx(tmp_path, {"one": Down(), "two": Down(), "env": FakeEngine()})
    with pytest.raises(SbxError) as caught:
        fleet.for_new(ctx, RunRequest(workload="k"))
    assert caught.value.reason is Reason.DOCKER_UNREACHABLE
    assert "one: connecting: no route" in caught.value.message


def test_ls_names_an_unreachable_engine_and_lists_the_others(tmp_path: Path) -> None:
    class Down(FakeEngine):
        def list_owned(self, labels: Mapping[str, str]) -> list:  # type: ignore[type-arg]
            raise SbxError(Reason.DOCKER_UNREACHABLE, "connecting: no route")

    one = FakeEngine()
    ctx = _ctx(tmp_path, {"one": one, "two": Down(), "env": FakeEngine()})
    store = SandboxStore(ctx.state_home)
    for name, engine in (("a1", "one"), ("b2", "two")):
        store.save(SandboxRecord(name=name, run_id=name * 16, created=1.0, workload="./k",
                                 kits=[], workspace=None, access="none", request={},
                                 container_id=name * 32, engine=engine,
                                 engine_host=HOSTS[engine]))
    _running(one, "a1" * 32, ctx.home_hash)
    found = list_everywhere(ctx, include_runs=False)
    assert found.fleet
    assert [(s.name, s.status, s.engine) for s in found.sandboxes] == [
        ("a1", "running", "one"), ("b2", "unreachable", "two")]
    reach = {e.name: e for e in found.engines}
    assert reach["one"].reason is None
    assert reach["two"].reason == "docker_unreachable" and "no route" in (reach["two"].message
                                                                          or "")


class _Unreachable(FakeEngine):
    """An engine every call of which fails as a far host that went away does."""

    def _call(self, name: str, *args: Any) -> None:
        super()._call(name, *args)
        raise SbxError(Reason.DOCKER_UNREACHABLE, "engine two (ssh://root@two): connecting: "
                                                  "no route")


def _on_two(ctx: AppContext) -> None:
    """``dev``: a --clone sandbox on engine two, stopped by its keeper."""
    store = SandboxStore(ctx.state_home)
    store.save(SandboxRecord(
        name="dev", run_id="cd" * 16, created=1.0, workload="./k", kits=[], workspace=None,
        access="none", container_id="d" * 64, engine="two", engine_host=HOSTS["two"],
        request={"workspace_volume": "vol", "clone": {
            "repository": str(ctx.cwd), "base": "0" * 40, "branch": "sbx/dev",
            "path": "/workspace"}}))
    run_dir = runrecord.run_dir(ctx.state_home, "cd" * 16)
    run_dir.mkdir(parents=True)
    mark_stopped(run_dir, 60.0, 1.0)


def _tool(ctx: AppContext, tool_name: str, **arguments: Any) -> Any:
    tool = next(t for t in mcptools.tools(ctx) if t.name == tool_name)
    result = tool.call(arguments)
    assert result["isError"], result
    raise SbxError(Reason(result["structuredContent"]["reason"]),
                   result["structuredContent"]["message"])


NAMED_COMMANDS: dict[str, Any] = {
    "cp out": lambda c: copy.copy(c, "dev:/workspace/f", str(c.cwd / "f"), max_bytes=1 << 20),
    "cp in": lambda c: copy.copy(c, str(c.cwd / "config.toml"), "dev:/workspace/in",
                                 max_bytes=1 << 20),
    "diff": lambda c: clone.diff(c, "dev"),
    "fetch": lambda c: clone.fetch(c, "dev"),
    "save": lambda c: templates.save(c, "dev", "mine:1"),
    "diff by run id": lambda c: clone.diff(c, "cd" * 6),
    "mcp exec": lambda c: _tool(c, "exec", name="dev", command=["true"]),
    "mcp stop": lambda c: _tool(c, "stop", name="dev"),
    "mcp rm": lambda c: _tool(c, "rm", name="dev"),
    "mcp diff": lambda c: _tool(c, "diff", name="dev"),
    "mcp fetch": lambda c: _tool(c, "fetch", name="dev"),
    "mcp cp": lambda c: _tool(c, "cp", source="dev:/workspace/f", destination=str(c.cwd / "f")),
}


@pytest.mark.parametrize("command", sorted(NAMED_COMMANDS))
def test_a_command_on_a_named_sandbox_speaks_to_its_engine_alone(tmp_path: Path,
                                                                 command: str) -> None:
    """Its engine gone, the command says so by the engine's name (docker_unreachable); the
    environment's engine, which does not hold it, is never asked."""
    here, two = FakeEngine(), _Unreachable()
    ctx = _ctx(tmp_path, {"one": FakeEngine(), "two": two, "env": here})
    _on_two(ctx)
    with pytest.raises(SbxError) as caught:
        NAMED_COMMANDS[command](ctx)
    assert caught.value.reason is Reason.DOCKER_UNREACHABLE, caught.value.message
    assert "engine two" in caught.value.message
    assert here.calls == []
    assert two.calls


def test_explain_asks_a_stopped_sandboxs_own_engine_whether_it_runs(tmp_path: Path) -> None:
    here, two = FakeEngine(), FakeEngine()
    ctx = _ctx(tmp_path, {"one": FakeEngine(), "two": two, "env": here})
    _on_two(ctx)
    two.containers.append({"Id": "d" * 64, "State": "running", "Labels": {}})
    answer = explainplan.explain_named(ctx, "dev", None, "runtime", resolve=False)
    assert answer.stopped is None  # running again on two: its stop mark is stale
    assert two.called("container_state") == [("d" * 64,)]
    assert here.calls == []


def test_ls_lists_the_sandboxes_of_a_daemon_two_entries_reach_once(tmp_path: Path) -> None:
    """one and two (and the environment's engine) are one daemon, as a `local` entry naming
    the default socket is: each of its containers is one row, under the first name."""
    same = FakeEngine(info=dataclasses.replace(DEFAULT_INFO, engine_id="DAEMON:A"))
    ctx = _ctx(tmp_path, {"one": same, "two": same, "env": same})
    store = SandboxStore(ctx.state_home)
    for name, engine in (("a1", "one"), ("b2", "two"), ("c3", None)):
        store.save(SandboxRecord(name=name, run_id=name * 16, created=1.0, workload="./k",
                                 kits=[], workspace=None, access="none", request={},
                                 container_id=name * 32, engine=engine,
                                 engine_host=HOSTS[engine] if engine else None))
        _running(same, name * 32, ctx.home_hash)
        same.containers[-1]["Labels"][labels.NAME] = name
    _running(same, "e" * 64, ctx.home_hash)  # a one-shot run
    same.containers[-1]["Labels"][labels.RUN] = "ef" * 16
    found = list_everywhere(ctx, include_runs=True)
    assert sorted((s.name, s.engine) for s in found.sandboxes) == [
        ("(run efefefefefef)", "one"), ("a1", "one"), ("b2", "one"), ("c3", "one")]
    assert [(e.name, e.aliases) for e in found.engines] == [("one", ("two", None))]
    assert found.engines[0].as_dict()["aliases"] == ["two", None]


def test_engines_whose_info_gives_no_id_are_not_taken_for_one(tmp_path: Path) -> None:
    one, two = FakeEngine(), FakeEngine()  # /info without an ID
    ctx = _ctx(tmp_path, {"one": one, "two": two, "env": FakeEngine()})
    _running(one, "a" * 64, ctx.home_hash)
    _running(two, "b" * 64, ctx.home_hash)
    found = list_everywhere(ctx, include_runs=True)
    assert [(e.name, e.aliases) for e in found.engines] == [("one", ()), ("two", ())]
    assert sorted(s.engine or "" for s in found.sandboxes) == ["one", "two"]


def test_two_daemons_of_one_key_file_are_told_apart_by_their_data_root(tmp_path: Path) -> None:
    """A second dockerd on one host (or a cloned machine) has the first one's /info ID."""
    shared = dataclasses.replace(DEFAULT_INFO, engine_id="DAEMON:A", host_name="vm")
    one = FakeEngine(info=dataclasses.replace(shared, data_root="/var/lib/docker"))
    two = FakeEngine(info=dataclasses.replace(shared, data_root="/srv/far/data"))
    ctx = _ctx(tmp_path, {"one": one, "two": two, "env": FakeEngine()})
    _running(one, "a" * 64, ctx.home_hash)
    _running(two, "b" * 64, ctx.home_hash)
    found = list_everywhere(ctx, include_runs=True)
    assert [(e.name, e.aliases) for e in found.engines] == [("one", ()), ("two", ())]
    assert sorted(s.engine or "" for s in found.sandboxes) == ["one", "two"]
