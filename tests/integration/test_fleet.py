"""A fleet of engines: second engine hosts (tests/support/enginehost.py, each in its own
network namespace with dockerd and sshd) and this machine's engine, named in ``[engines]``.

A new sandbox goes to the emptier far engine; ``sbx ls`` lists both with their ENGINE; ``stop``
and ``rm`` reach each on its own engine without --engine; with one far host gone, ``ls`` names
it unreachable and ``gc`` still cleans the other. Every other command taking a NAME (cp, diff,
fetch, save, exec, ...) reaches the sandbox's engine too, and names it when it does not
answer; two entries reaching this machine's one daemon list its sandboxes once.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sbx.base import labels as label_keys
from sbx.base.paths import home_hash
from sbx.seams.driver import SdkEngine
from tests.support.sbxproc import run_sbx

from .conftest import BUSYBOX, FarHost, owned, ssh_wrapper, started_far_host

pytestmark = pytest.mark.docker

KIT = f'FROM {BUSYBOX}\nUSER agent\nWORKDIR /workspace\nCMD ["sleep", "600"]\n'
BOOKWORM = "sbx-base/bookworm:1"  # scripts/build-images.sh: has git, for a --clone sandbox


@pytest.fixture(scope="module")
def two_far_hosts() -> Iterator[tuple[FarHost, FarHost]]:
    with started_far_host() as first, started_far_host() as second:
        yield first, second


@pytest.fixture
def kit(kit_factory: Callable[..., Path]) -> Path:
    return kit_factory("fleet", KIT)


def _env(hosts: tuple[FarHost, ...], state_home: Path, config: Path,
         root: Path) -> dict[str, str]:
    """sbx's environment with no engine of its own: [engines] names them. One ssh config for
    both far hosts (each host's own file names only itself)."""
    ssh_config = root / "ssh_config"
    ssh_config.write_text("".join(h.host.ssh_config.read_text() for h in hosts))
    runtime = root / "run"
    runtime.mkdir(mode=0o700, exist_ok=True)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DOCKER_", "SBX_"))}
    ssh_bin = ssh_wrapper(root / "bin", ssh_config)
    return {**base, "SBX_HOME": str(state_home), "SBX_CONFIG": str(config),
            "SBX_SSH_CONFIG": str(ssh_config), "XDG_RUNTIME_DIR": str(runtime),
            "NO_COLOR": "1", "PATH": f"{ssh_bin}:{base.get('PATH', '/usr/bin:/bin')}"}


def _config(path: Path, engines: dict[str, str]) -> Path:
    path.write_text("[engines]\n" + "".join(f'{k} = "{v}"\n' for k, v in engines.items()))
    return path


def _states(far: FarHost, home: Path) -> dict[str, str]:
    """Sandbox name -> container state on ``far``, for the containers of state home ``home``."""
    listed = far.host.docker("ps", "-a", "--filter", f"label={label_keys.HOME}={home_hash(home)}",
                             "--format", '{{.Label "dev.sbx.name"}} {{.State}}')
    assert listed.returncode == 0, listed.stderr
    return dict(line.split(" ", 1) for line in listed.stdout.decode().splitlines() if line)


def test_a_fleet_places_lists_reaches_and_collects_across_engines(
        two_far_hosts: tuple[FarHost, FarHost], kit: Path, state_home: Path,
        engine: SdkEngine, tmp_path: Path) -> None:
    far1, far2 = two_far_hosts
    fars = {"far1": far1.host.ssh_host, "far2": far2.host.ssh_host}
    two = _config(tmp_path / "two.toml", fars)
    every = _config(tmp_path / "every.toml", {"local": "unix:///var/run/docker.sock", **fars})
    env = _env(two_far_hosts, state_home, two, tmp_path)
    big, small = f"big-{uuid.uuid4().hex[:6]}", f"small-{uuid.uuid4().hex[:6]}"
    try:
        # far1 holds 1 of its 2 CPUs: the next sandbox (1 CPU) leaves far2 the freer.
        made = run_sbx(["create", "--name", big, "--engine", "far1", str(kit)], env=env,
                       timeout=240)
        assert made.returncode == 0, made.stderr
        placed = run_sbx(["create", "--name", small, str(kit)], env=env, timeout=240)
        assert placed.returncode == 0, placed.stderr
        assert _states(far1, state_home) == {big: "running"}
        assert _states(far2, state_home) == {small: "running"}
        assert owned(engine, state_home) == []  # nothing on this machine's engine

        unknown = run_sbx(["create", "--name", "nope", "--engine", "far9", str(kit)], env=env)
        assert unknown.returncode == 125, unknown.stderr
        assert b"(engine_unknown)" in unknown.stderr and b"far1, far2" in unknown.stderr

        env["SBX_CONFIG"] = str(every)
        listed = run_sbx(["ls", "--json"], env=env, timeout=120)
        assert listed.returncode == 0, listed.stderr
        data = json.loads(listed.stdout)["data"]
        rows = {s["name"]: (s["engine"], s["status"]) for s in data["sandboxes"]}
        assert rows == {big: ("far1", "running"), small: ("far2", "running")}
        assert {e["name"]: e["reachable"] for e in data["engines"]} == \
            {"local": True, "far1": True, "far2": True}
        table = run_sbx(["ls"], env=env, timeout=120).stdout.decode()
        assert "ENGINE" in table.splitlines()[0]
        assert any(big in line and line.rstrip().endswith("far1") for line in table.splitlines())

        # stop and rm find each sandbox on its engine, with no --engine
        assert run_sbx(["stop", "-t", "0", small], env=env, timeout=120).returncode == 0
        assert _states(far2, state_home) == {small: "exited"}
        gone = run_sbx(["rm", "-f", big], env=env, timeout=120)
        assert gone.returncode == 0, gone.stderr
        assert _states(far1, state_home) == {}

        # something a crashed run left on far1, past its deadline
        planted = label_keys.object_labels(home_hash=home_hash(state_home),
                                           run_id=uuid.uuid4().hex, deadline=1, kits=["test"],
                                           role=label_keys.ROLE_SANDBOX)
        made_left = far1.host.docker("create", *(f"--label={k}={v}" for k, v in planted.items()),
                                     BUSYBOX, "true")
        assert made_left.returncode == 0, made_left.stderr
        left = made_left.stdout.decode().strip()

        far2.host.close()  # far2 goes away with the sandbox on it
        listed = run_sbx(["ls", "--json"], env=env, timeout=120)
        assert listed.returncode == 0, listed.stderr
        data = json.loads(listed.stdout)["data"]
        reach = {e["name"]: e for e in data["engines"]}
        assert reach["far2"]["reachable"] is False and reach["far2"]["reason"]
        assert reach["far1"]["reachable"] is True
        assert {s["name"]: s["status"] for s in data["sandboxes"]} == {small: "unreachable"}
        shown = run_sbx(["ls"], env=env, timeout=120)
        assert b"unreachable" in shown.stdout and b"far2" in shown.stderr

        collected = run_sbx(["gc", "--grace", "0", "--json"], env=env, timeout=180)
        result = json.loads(collected.stdout)
        assert collected.returncode == 126, collected.stderr  # far2 is a failure of its own
        failures = result["data"]["failed"]
        assert failures and all("engine far2" in f["message"] for f in failures), failures
        removed = {item["id"] for item in result["data"]["removed"]}
        assert left in removed
        assert far1.host.docker("inspect", left).returncode != 0  # gone from far1
    finally:
        for name in (big, small):
            with contextlib.suppress(Exception):
                run_sbx(["rm", "-f", name], env=env, timeout=120)
        for far in two_far_hosts:
            if far.host.netns:
                far.host.docker("rm", "-f", *(far.containers(state_home) or ["-"]))


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, check=True,
                          timeout=60)
    return done.stdout.decode()


def _repo(path: Path) -> Path:
    path.mkdir()
    _git(path, "init", "-q", "-b", "main")
    _git(path, "config", "user.email", "host@example.invalid")
    _git(path, "config", "user.name", "host")
    (path / "README").write_text("base\n", encoding="utf-8")
    _git(path, "add", "README")
    _git(path, "commit", "-q", "-m", "base")
    return path


def test_every_command_taking_a_name_reaches_its_engine_and_names_it_when_gone(
        kit_factory: Callable[..., Path], kit: Path, state_home: Path, engine: SdkEngine,
        tmp_path: Path) -> None:
    git_kit = kit_factory("fleetgit", f"FROM {BOOKWORM}\nUSER agent\nWORKDIR /workspace\n"
                                      'CMD ["sleep", "600"]\n')
    repo = _repo(tmp_path / "repo")
    with started_far_host() as far:
        far.host.load_image(BOOKWORM, timeout=300)
        # `local` and `here` are this machine's one daemon (/var/run is /run here)
        engines = {"local": "unix:///var/run/docker.sock", "here": "unix:///run/docker.sock",
                   "far": far.host.ssh_host}
        config = _config(tmp_path / "fleet.toml", engines)
        env = _env((far,), state_home, config, tmp_path)
        gone = _config(tmp_path / "gone.toml",  # far's entry now names no engine at all
                       {**engines, "far": f"unix://{tmp_path / 'nothing.sock'}"})
        clone, near = f"cl-{uuid.uuid4().hex[:6]}", f"near-{uuid.uuid4().hex[:6]}"
        try:
            made = run_sbx(["create", "--clone", "--name", clone, "--engine", "far",
                            str(git_kit), str(repo)], env=env, timeout=300)
            assert made.returncode == 0, made.stderr
            made = run_sbx(["create", "--name", near, "--engine", "local", str(kit)], env=env,
                           timeout=240)
            assert made.returncode == 0, made.stderr
            assert list(_states(far, state_home)) == [clone]
            assert [o.kind for o in owned(engine, state_home)].count("container") == 1

            # ls --all: near once (not again as a one-shot run of `here`), `here` an alias
            listed = run_sbx(["ls", "--all", "--json"], env=env, timeout=120)
            assert listed.returncode == 0, listed.stderr
            data = json.loads(listed.stdout)["data"]
            assert sorted((s["name"], s["engine"]) for s in data["sandboxes"]) == \
                sorted([(clone, "far"), (near, "local")])
            assert {e["name"]: e["aliases"] for e in data["engines"]} == \
                {"local": ["here"], "far": []}

            # each command finds the sandbox on far, with no --engine and no DOCKER_HOST
            worked = run_sbx(["exec", clone, "--", "sh", "-c",
                              "cd /workspace && echo far >> README && git -c user.name=a "
                              "-c user.email=a@example.invalid commit -qam far"],
                             env=env, timeout=120)
            assert worked.returncode == 0, worked.stderr
            (tmp_path / "in.txt").write_text("to far\n", encoding="utf-8")
            into = run_sbx(["cp", str(tmp_path / "in.txt"), f"{clone}:/workspace/in.txt"],
                           env=env, cwd=tmp_path, timeout=120)
            assert into.returncode == 0, into.stderr
            back = run_sbx(["cp", f"{clone}:/workspace/in.txt", str(tmp_path / "back.txt")],
                           env=env, cwd=tmp_path, timeout=120)
            assert back.returncode == 0, back.stderr
            assert (tmp_path / "back.txt").read_text() == "to far\n"
            shown = run_sbx(["diff", clone], env=env, timeout=120)
            assert shown.returncode == 0, shown.stderr
            assert b"+far" in shown.stdout and b"in.txt" in shown.stdout
            fetched = run_sbx(["fetch", clone], env=env, timeout=120)
            assert fetched.returncode == 0, fetched.stderr
            assert _git(repo, "log", "-1", "--format=%s", f"sbx/{clone}").strip() == "far"
            tag = f"sbx-test/fleet-tpl:{uuid.uuid4().hex[:6]}"
            saved = run_sbx(["save", clone, tag], env=env, timeout=300)
            assert saved.returncode == 0, saved.stderr
            assert far.host.docker("image", "inspect", tag).returncode == 0  # on far
            assert engine.image(tag) is None  # not on this machine's engine

            # far's entry unreachable: each command names engine far, never "no sandbox"
            env["SBX_CONFIG"] = str(gone)
            for argv in (["cp", f"{clone}:/workspace/in.txt", str(tmp_path / "x")],
                         ["cp", str(tmp_path / "in.txt"), f"{clone}:/workspace/"],
                         ["diff", clone], ["fetch", clone], ["save", clone, tag + "b"],
                         ["exec", clone, "--", "true"], ["logs", clone], ["start", clone],
                         ["sessions", clone], ["stop", clone]):
                refused = run_sbx(argv, env=env, cwd=tmp_path, timeout=120)
                assert refused.returncode != 0, argv
                assert b"(docker_unreachable)" in refused.stderr, (argv, refused.stderr)
                assert b"engine far" in refused.stderr, (argv, refused.stderr)
                assert b"no sandbox named" not in refused.stderr, argv
            env["SBX_CONFIG"] = str(config)
        finally:
            env["SBX_CONFIG"] = str(config)
            for name in (clone, near):
                run_sbx(["rm", "-f", name], env=env, timeout=120)
            far.host.docker("rm", "-f", *(far.containers(state_home) or ["-"]))
