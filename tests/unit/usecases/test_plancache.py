"""The plan cache's key and entries (sbx.usecases.plancache): any input change is a miss, and a
corrupt or stale entry is a miss (the full plan is made again), never a traceback."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import pytest

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.kits.sessions import SessionAsk
from sbx.seams.engine import ImageInfo
from sbx.seams.session.mode import HostStreams
from sbx.usecases import codeprint, plancache
from sbx.usecases.run.recipe import PlanFacts, Recipe
from sbx.usecases.run.request import RunRequest

STREAMS = HostStreams(stdin_fd=0, stdin_is_terminal=False, stdout_is_terminal=False)

def _open_up(path: Path, mode: int) -> None:
    """Give a path the loose mode an attack (or a careless user) would leave it with."""
    os.chmod(path, mode)  # the point of these tests



def _recipe() -> Recipe:
    return Recipe(
        image=ImageInfo(id="sha256:" + "a" * 64, tags=("sbx-kit/k:1",), user="agent",
                        workdir="/workspace", entrypoint=None, cmd=("true",),
                        env=("PATH=/bin",), labels={"dev.sbx.kit": "k"}),
        image_tag="sbx-kit/k:1", images_used=("sha256:" + "a" * 64,), uid=1000, gid=1000,
        user_source="image USER agent", user_warnings=(), owner=(1000, 1000, 0o755),
        timeout_s=3600.0,
        limits={"memory_bytes": 1 << 30, "pids": 128, "cpu_millis": 1000,
                "tmp_bytes": 1 << 28, "workspace_bytes": 1 << 29, "home_bytes": 1 << 28},
        workspace_target="/workspace", command=("true",), entrypoint=None,
        env={"A": "1"}, home="/home/sbx", tmpfs={"/cache": (1 << 20, None)},
        detach_keys="ctrl-p,ctrl-q", explain_command="sbx explain /k",
        notes=(), blocked=("/secret",), allowed_roots=(),
        facts=PlanFacts(workload="./k", kits=("./k",),
                        selection={"selected": [{"kit": "k", "path": "x"}], "skipped": []},
                        limits={"memory_bytes": 1 << 30, "cpu_millis": 1000, "pids": 128}),
        bounds={"memory_bytes": 1 << 32, "cpu_millis": 2000, "pids": 256})


@pytest.fixture
def setup(tmp_path: Path) -> dict[str, Any]:
    kit = tmp_path / "k"
    kit.mkdir()
    (kit / "k.yaml").write_text("kind: workload\n", encoding="utf-8")
    (kit / "k.dockerfile").write_text("FROM x\n", encoding="utf-8")
    (kit / "sub").mkdir()
    (kit / "sub" / "f.txt").write_text("data", encoding="utf-8")
    config = tmp_path / "config.toml"
    config.write_text("", encoding="utf-8")
    env = {"SBX_HOME": str(tmp_path / "state"), "SBX_CONFIG": str(config), "HOME": "/root",
           "PATH": "/bin"}
    return {"kit": kit, "config": config, "env": env, "cwd": tmp_path,
            "argv": ("run", "./k"), "passthrough": ("true",),
            "home": tmp_path / "state"}


def _store(s: dict[str, Any], **changes: Any) -> bool:
    return plancache.store(
        state_home=s["home"], env=s["env"], cwd=s["cwd"], argv=s["argv"],
        passthrough=s["passthrough"], streams=STREAMS,
        request=RunRequest(workload="./k", command=("true",)), recipe=_recipe(),
        kit_dirs=[s["kit"]], **changes)


def _lookup(s: dict[str, Any], **changes: Any) -> plancache.Hit | None:
    args = {"env": s["env"], "cwd": s["cwd"], "argv": s["argv"],
            "passthrough": s["passthrough"], "streams": STREAMS, **changes}
    return plancache.lookup(**args)


def _entry(s: dict[str, Any]) -> Path:
    home: Path = s["home"]
    (path,) = (home / "cache" / "plans").glob("*.json")
    return path


def test_stored_recipe_comes_back_equal(setup: dict[str, Any]) -> None:
    assert _store(setup)
    hit = _lookup(setup)
    assert hit is not None
    assert hit.recipe == _recipe()
    assert hit.request == RunRequest(workload="./k", command=("true",), host=STREAMS)
    assert os.stat(_entry(setup)).st_mode & 0o777 == 0o600


@pytest.mark.parametrize("change", [
    {"argv": ("run", "./k", "--timeout", "5")},
    {"argv": ("run", "--json", "./k")},
    {"passthrough": ("false",)},
    {"passthrough": None},
    {"cwd": Path("/")},
    {"streams": HostStreams(stdin_fd=None, stdin_is_terminal=False,
                            stdout_is_terminal=False)},
    {"streams": HostStreams(stdin_fd=0, stdin_is_terminal=True, stdout_is_terminal=True)},
])
def test_any_change_of_the_request_is_a_miss(setup: dict[str, Any],
                                             change: dict[str, Any]) -> None:
    assert _store(setup)
    assert _lookup(setup) is not None
    assert _lookup(setup, **change) is None


@pytest.mark.parametrize("variable", ["DOCKER_HOST", "SBX_PLAN_X", "ANTHROPIC_API_KEY", "PATH"])
def test_any_environment_change_is_a_miss(setup: dict[str, Any], variable: str) -> None:
    assert _store(setup)
    assert _lookup(setup, env={**setup["env"], variable: "changed"}) is None


def test_shell_bookkeeping_variables_are_not_part_of_the_key(setup: dict[str, Any]) -> None:
    assert _store(setup)
    assert _lookup(setup, env={**setup["env"], "_": "/usr/bin/time", "SHLVL": "3",
                               "OLDPWD": "/x"}) is not None


def test_sbx_code_change_is_a_miss(setup: dict[str, Any],
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    assert _store(setup)
    monkeypatch.setattr(codeprint, "_CODE", ["another planner"])
    assert _lookup(setup) is None


def test_euid_is_part_of_the_key(setup: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    key = plancache.request_key(setup["env"], setup["cwd"], setup["argv"],
                                setup["passthrough"], STREAMS)
    monkeypatch.setattr(os, "geteuid", lambda: 12345)
    assert plancache.request_key(setup["env"], setup["cwd"], setup["argv"],
                                 setup["passthrough"], STREAMS) != key


def test_another_users_home_is_refused_not_read(setup: dict[str, Any],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    assert _store(setup)
    monkeypatch.setattr(os, "geteuid", lambda: 12345)
    with pytest.raises(SbxError) as error:
        _lookup(setup)
    assert error.value.reason is Reason.STATE_UNSAFE
    assert str(setup["home"]) in error.value.message


@pytest.mark.parametrize("edit", [
    lambda s: s["config"].write_text("[sandbox]\npids = 64\n", encoding="utf-8"),
    lambda s: s["config"].unlink(),
    lambda s: (s["kit"] / "k.yaml").write_text("kind: workload\n# edited\n", encoding="utf-8"),
    lambda s: (s["kit"] / "sub" / "f.txt").write_text("datA", encoding="utf-8"),
    lambda s: (s["kit"] / "new.txt").write_text("", encoding="utf-8"),
    lambda s: (s["kit"] / "sub" / "f.txt").unlink(),
    lambda s: (s["kit"] / "sub" / "f.txt").rename(s["kit"] / "sub" / "g.txt"),
    lambda s: os.chmod(s["kit"] / "k.dockerfile", 0o700),
    lambda s: os.symlink("k.yaml", s["kit"] / "link"),
])
def test_any_change_of_what_the_plan_was_derived_from_is_a_miss(setup: dict[str, Any],
                                                                edit: Any) -> None:
    assert _store(setup)
    edit(setup)
    assert _lookup(setup) is None


def test_a_config_file_that_appears_is_a_miss(setup: dict[str, Any], tmp_path: Path) -> None:
    config = tmp_path / "xdg" / "sbx" / "config.toml"
    env = {k: v for k, v in setup["env"].items() if k != "SBX_CONFIG"}
    setup["env"] = {**env, "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    assert _store(setup)
    assert _lookup(setup) is not None
    config.parent.mkdir(parents=True)
    config.write_text("", encoding="utf-8")
    assert _lookup(setup) is None


def test_switched_off_by_the_environment(setup: dict[str, Any]) -> None:
    assert _store(setup)
    assert _lookup(setup, env={**setup["env"], plancache.SWITCH_ENV: "0"}) is None


def _corrupt_variants() -> list[Any]:
    def set_in(path: list[str], value: Any) -> Any:
        def apply(data: dict[str, Any]) -> dict[str, Any]:
            node = data
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = value
            return data
        return apply

    def drop(path: list[str]) -> Any:
        def apply(data: dict[str, Any]) -> dict[str, Any]:
            node = data
            for key in path[:-1]:
                node = node[key]
            del node[path[-1]]
            return data
        return apply

    return [
        set_in(["format"], 999), set_in(["key"], "0" * 64), drop(["recipe"]),
        set_in(["recipe", "uid"], "1000"), set_in(["recipe", "image"], None),
        set_in(["recipe", "tmpfs"], {"/x": [1]}), set_in(["recipe", "command"], "true"),
        set_in(["recipe", "owner"], [1, 2]), set_in(["request", "workload"], 7),
        set_in(["request", "surprise"], True), set_in(["deps", "kits"], [["/nonexistent"]]),
        set_in(["deps", "config"], None), set_in(["verbose"], True),
        set_in(["recipe", "facts", "kits"], [1]), lambda data: [data],
        set_in(["recipe", "limits", "surprise"], 1), drop(["recipe", "limits", "pids"]),
        set_in(["recipe", "timeout_s"], -1), set_in(["recipe", "timeout_s"], "60"),
        set_in(["recipe", "detach_keys"], "ctrl-"),
    ]


@pytest.mark.parametrize("corrupt", _corrupt_variants())
def test_a_corrupt_entry_is_a_miss(setup: dict[str, Any], corrupt: Any) -> None:
    assert _store(setup)
    path = _entry(setup)
    path.write_text(json.dumps(corrupt(json.loads(path.read_text(encoding="utf-8")))),
                    encoding="utf-8")
    assert _lookup(setup) is None


@pytest.mark.parametrize("content", [b"", b"{", b"\x00\xff garbage", b"[]", b"null", b"1e999"])
def test_undecodable_entries_are_misses(setup: dict[str, Any], content: bytes) -> None:
    assert _store(setup)
    _entry(setup).write_bytes(content)
    assert _lookup(setup) is None


def test_an_entry_that_is_not_a_regular_file_is_refused(setup: dict[str, Any]) -> None:
    assert _store(setup)
    path = _entry(setup)
    path.unlink()
    path.mkdir()
    with pytest.raises(SbxError) as error:
        _lookup(setup)
    assert error.value.reason is Reason.STATE_UNSAFE
    assert "not a regular file" in error.value.message


def test_a_kit_tree_too_large_to_hash_is_not_stored(setup: dict[str, Any],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plancache, "MAX_KIT_FILES", 2)
    assert not _store(setup)
    assert _lookup(setup) is None


def test_the_number_of_entries_is_bounded(setup: dict[str, Any],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plancache, "MAX_ENTRIES", 3)
    for index in range(6):
        assert _store({**setup, "passthrough": (str(index),)})
    assert len(list((setup["home"] / "cache" / "plans").glob("*.json"))) == 3
    assert _lookup(setup, passthrough=("5",)) is not None


@pytest.mark.slow
def test_the_cached_path_is_light_to_import() -> None:
    """What `sbx run` imports from the plan cache up to the engine: no decoder, validator,
    YAML parser, kit composition, CLI parser or docker SDK (checked in a fresh interpreter;
    the engine test checks a whole cached run)."""
    import subprocess
    import sys

    code = ("import sys, sbx.__main__, sbx.commands.run_cached, sbx.usecases.plancache, "
            "sbx.usecases.run.start, sbx.domain.sandbox.runargs, sbx.seams.driver, "
            "sbx.base.render\n"
            "print(' '.join(sorted(sys.modules)))")
    loaded = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                check=True, timeout=60).stdout.split())
    assert not {m for m in loaded if m.split(".")[0] in FORBIDDEN_ROOTS
                or m in FORBIDDEN_MODULES}, loaded


FORBIDDEN_ROOTS = frozenset({"jsonschema", "ruamel", "yaml", "docker", "requests", "typer",
                             "tomlkit", "rich"})
FORBIDDEN_MODULES = frozenset({"sbx.domain.kits.compose", "sbx.domain.kits.resolve",
                               "sbx.domain.kits.rules", "sbx.base.config", "sbx.app"})


def test_a_nan_timeout_is_a_miss(setup: dict[str, Any]) -> None:
    assert _store(setup)
    path = _entry(setup)
    path.write_text(path.read_text(encoding="utf-8").replace('"timeout_s": 3600.0',
                                                             '"timeout_s": NaN'),
                    encoding="utf-8")
    assert "NaN" in path.read_text(encoding="utf-8")
    assert _lookup(setup) is None


# --- what an entry is trusted with, and whose it must be ------------------------------------


def test_a_symlinked_descriptor_is_hashed_by_what_it_leads_to(setup: dict[str, Any],
                                                              tmp_path: Path) -> None:
    """The loader follows the link: a changed target (privileged@1 removed, say) must be a
    miss even though the link's own text is unchanged."""
    real = tmp_path / "elsewhere.yaml"
    real.write_text("kind: workload\n# privileged@1\n", encoding="utf-8")
    (setup["kit"] / "k.yaml").unlink()
    (setup["kit"] / "k.yaml").symlink_to(real)
    assert _store(setup)
    assert _lookup(setup) is not None
    real.write_text("kind: workload\n# nothing privileged\n", encoding="utf-8")
    assert _lookup(setup) is None


def test_a_symlinked_kit_directory_is_hashed_by_its_target(setup: dict[str, Any],
                                                           tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "f").write_text("one", encoding="utf-8")
    (setup["kit"] / "lib").symlink_to(other)
    assert _store(setup)
    (other / "f").write_text("two", encoding="utf-8")
    assert _lookup(setup) is None


def test_a_link_loop_in_a_kit_is_hashed_once(setup: dict[str, Any]) -> None:
    (setup["kit"] / "sub" / "up").symlink_to(setup["kit"])
    assert _store(setup)
    assert _lookup(setup) is not None


def test_no_entry_carries_privilege(setup: dict[str, Any]) -> None:
    """The recipe has no privilege field and the stored facts none either: a cached plan is
    never privileged whatever the file says."""
    assert "privileged" not in {f.name for f in dataclasses.fields(Recipe)}
    assert _store(setup)
    path = _entry(setup)
    entry = json.loads(path.read_text(encoding="utf-8"))
    assert "privileged" not in json.dumps(entry["recipe"])
    entry["recipe"]["privileged"] = True
    entry["recipe"]["facts"]["privileged"] = True
    entry["request"]["allow_privileged"] = True
    path.write_text(json.dumps(entry), encoding="utf-8")
    hit = _lookup(setup)
    assert hit is None or hit.recipe is None or not hit.recipe.facts.privileged


@pytest.mark.parametrize("uid", [0, -1])
def test_an_entry_running_as_root_is_a_miss(setup: dict[str, Any], uid: int) -> None:
    assert _store(setup)
    path = _entry(setup)
    entry = json.loads(path.read_text(encoding="utf-8"))
    entry["recipe"]["uid"] = uid
    path.write_text(json.dumps(entry), encoding="utf-8")
    assert _lookup(setup) is None


def _refused(setup: dict[str, Any], text: str) -> SbxError:
    with pytest.raises(SbxError) as error:
        _lookup(setup)
    assert error.value.reason is Reason.STATE_UNSAFE, error.value
    assert text in error.value.message, error.value.message
    return error.value


def test_a_symlinked_entry_is_refused(setup: dict[str, Any], tmp_path: Path) -> None:
    assert _store(setup)
    path = _entry(setup)
    planted = tmp_path / "planted.json"
    planted.write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(planted)
    error = _refused(setup, "symlink")
    assert error.hint is not None and f"rm {path}" in error.hint


def test_a_hard_linked_entry_is_refused(setup: dict[str, Any], tmp_path: Path) -> None:
    assert _store(setup)
    os.link(_entry(setup), tmp_path / "second-name")
    _refused(setup, "hard links")


def test_a_fifo_entry_is_refused_without_waiting(setup: dict[str, Any]) -> None:
    assert _store(setup)
    path = _entry(setup)
    path.unlink()
    os.mkfifo(path, 0o600)
    _refused(setup, "not a regular file")  # returns: nothing opens the FIFO's other end


@pytest.mark.parametrize("mode", [0o620, 0o602, 0o666])
def test_an_entry_others_may_write_is_refused(setup: dict[str, Any], mode: int) -> None:
    assert _store(setup)
    os.chmod(_entry(setup), mode)
    error = _refused(setup, f"{mode:04o}")
    assert error.hint is not None and "chmod go-w" in error.hint


@pytest.mark.parametrize("where", ["home", "cache", "plans"])
def test_a_directory_others_may_write_is_refused(setup: dict[str, Any], where: str) -> None:
    assert _store(setup)
    home: Path = setup["home"]
    directory = {"home": home, "cache": home / "cache", "plans": home / "cache" / "plans"}[where]
    _open_up(directory, 0o777)
    error = _refused(setup, "0777")
    assert error.hint is not None and f"chmod go-w {directory}" in error.hint


def test_a_parent_of_the_home_others_may_write_is_refused(setup: dict[str, Any],
                                                          tmp_path: Path) -> None:
    """Another user could rename the home away and put their own in its place."""
    shared = tmp_path / "shared"
    shared.mkdir()
    home = shared / "state"
    setup = {**setup, "home": home, "env": {**setup["env"], "SBX_HOME": str(home)}}
    assert _store(setup)
    _open_up(shared, 0o775)
    _refused(setup, "lets its group")
    _open_up(shared, 0o1777)  # sticky, as /tmp: nobody else may rename what is ours
    assert _lookup(setup) is not None


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another uid needs root")
def test_an_entry_another_user_owns_is_refused(setup: dict[str, Any]) -> None:
    assert _store(setup)
    os.chown(_entry(setup), 4321, 4321)
    _refused(setup, "owned by uid 4321")


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another uid needs root")
def test_a_home_reached_through_a_link_another_user_controls_is_refused(
        setup: dict[str, Any], tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, 4321, 4321)
    (theirs / "link").symlink_to(setup["home"])
    setup = {**setup, "env": {**setup["env"], "SBX_HOME": str(theirs / "link")}}
    assert _store(setup)
    _refused(setup, "owned by uid 4321")


def test_limit_flags_come_back_with_the_request_and_bounds_with_the_recipe(
        setup: dict[str, Any]) -> None:
    request = RunRequest(workload="./k", command=("true",), memory_bytes=256 << 20,
                         cpu_millis=500, pids=64)
    assert plancache.store(
        state_home=setup["home"], env=setup["env"], cwd=setup["cwd"], argv=setup["argv"],
        passthrough=setup["passthrough"], streams=STREAMS, request=request, recipe=_recipe(),
        kit_dirs=[setup["kit"]])
    hit = _lookup(setup)
    assert hit is not None
    assert (hit.request.memory_bytes, hit.request.cpu_millis, hit.request.pids) == \
        (256 << 20, 500, 64)
    assert hit.recipe is not None
    assert hit.recipe.bounds == {"memory_bytes": 1 << 32, "cpu_millis": 2000, "pids": 256}


def test_a_recipe_without_bounds_is_a_miss(setup: dict[str, Any]) -> None:
    assert _store(setup)
    path = _entry(setup)
    entry = json.loads(path.read_text(encoding="utf-8"))
    del entry["recipe"]["bounds"]
    path.write_text(json.dumps(entry), encoding="utf-8")
    assert _lookup(setup) is None


@pytest.mark.parametrize("session", [SessionAsk("prompt", "a; $(id)\nb"), SessionAsk("continue"),
                                     None])
def test_a_session_verb_comes_back_with_the_request(setup: dict[str, Any],
                                                    session: SessionAsk | None) -> None:
    request = RunRequest(workload="./k", tty=False, session=session)
    assert plancache.store(
        state_home=setup["home"], env=setup["env"], cwd=setup["cwd"], argv=setup["argv"],
        passthrough=setup["passthrough"], streams=STREAMS, request=request, recipe=_recipe(),
        kit_dirs=[setup["kit"]])
    hit = _lookup(setup)
    assert hit is not None and hit.request.session == session


# --- a named sandbox's start: the parsed request only -----------------------------------------


def test_a_named_start_keeps_the_whole_request_and_no_plan(setup: dict[str, Any]) -> None:
    """Every field the parser set comes back (the engine, ports, idle stop... a start passes
    them on to its checks), and no recipe: the start's own entry decides everything else."""
    request = RunRequest(workload=str(setup["kit"]), workspace=".", name="dev",
                         keep=True, engine="far", publish=("8080:80",), idle_stop_s=90.0,
                         workspace_mode="copy", accept=True, env=("A=1",),
                         session=SessionAsk("resume", "id1"))
    assert plancache.store(state_home=setup["home"], env=setup["env"], cwd=setup["cwd"],
                           argv=setup["argv"], passthrough=setup["passthrough"],
                           streams=STREAMS, request=request, recipe=None, kit_dirs=[])
    hit = _lookup(setup)
    assert hit is not None and hit.recipe is None
    assert hit.request == dataclasses.replace(request, host=STREAMS)
    assert _lookup(setup, argv=("run", "--keep", "./k")) is None  # other words: a miss


def test_a_named_start_s_request_does_not_depend_on_the_config(setup: dict[str, Any]) -> None:
    """The parse reads no config: an edited config still finds the request (the start reads
    the config itself, afresh)."""
    assert plancache.store(state_home=setup["home"], env=setup["env"], cwd=setup["cwd"],
                           argv=setup["argv"], passthrough=setup["passthrough"],
                           streams=STREAMS, request=RunRequest(workload="./k", name="dev"),
                           recipe=None, kit_dirs=[])
    setup["config"].write_text("[sandbox]\nkeep = \"never\"\n", encoding="utf-8")
    hit = _lookup(setup)
    assert hit is not None and hit.request.name == "dev"
