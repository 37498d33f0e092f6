"""The boundary, round 3, on a real engine: what a sandbox (or another local user) can leave
behind for sbx's next run.

- State sbx trusts must be sbx's own: another host user (``sbx-tester``, uid 4321) plants a
  plan-cache entry in a state home others may write, or owns the home: the victim's identical
  command is refused (``state_unsafe``) and nothing runs; a cached plan never runs privileged
  whatever its file says; a symlinked descriptor is followed by the cache key.
- Every start is checked like the first: a host socket created while a named sandbox was
  stopped is refused at its restart; ``sbx exec -e`` refuses what ``sbx run -e`` refuses.
- Labels are sbx's alone: a kit image's ``LABEL dev.sbx.name=X`` (and other ``dev.sbx.*``
  labels) does not make its crashed runs look named: gc collects them, ``ls --all`` lists
  them, and ``run --name X`` works.
Each with the legitimate use still working.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sbx.base import labels
from sbx.base.paths import home_hash
from sbx.domain.credentials.secrets import SecretStore
from sbx.seams.driver import SdkEngine
from tests.support.kits import api_key_credential, capabilities, network_policy, rule
from tests.support.sbxproc import SBX, Finished, run_sbx

from .conftest import BUSYBOX, TESTER_UID, owned, reachable_by_others, user_owned

pytestmark = pytest.mark.docker

WAIT_S = 60.0
DOCKERFILE = f"FROM {BUSYBOX}\nUSER agent\nWORKDIR /workspace\nCMD [\"true\"]\n"
CAPS = "grep CapBnd /proc/self/status"


@pytest.fixture
def env(state_home: Path) -> dict[str, str]:
    return {**os.environ, "SBX_HOME": str(state_home), "SBX_CONFIG": os.devnull}


def _as_tester(script: str) -> subprocess.CompletedProcess[str]:
    """``sh -c SCRIPT`` as the other host user."""
    if os.geteuid() != 0:
        pytest.skip("switching to the test user needs root")
    return subprocess.run(["setpriv", f"--reuid={TESTER_UID}", f"--regid={TESTER_UID}",
                           "--init-groups", "sh", "-c", script], capture_output=True,
                          text=True, timeout=60, check=False, stdin=subprocess.DEVNULL)


def _cap_bounding(stdout: str) -> int:
    (line,) = [line for line in stdout.splitlines() if line.startswith("CapBnd:")]
    return int(line.split()[1], 16)


def _entry(home: Path) -> Path:
    (found,) = (home / "cache" / "plans").glob("*.json")
    return found


# -- state sbx trusts must be its own --------------------------------------------------------


def test_a_plan_another_user_planted_in_a_home_others_may_write_is_refused(
        kit_factory: Callable[..., Path], sbx_cli: Any, env: dict[str, str], state_home: Path,
        tmp_path: Path) -> None:
    kit = kit_factory("victim", DOCKERFILE)
    argv = ["run", str(kit), "--", "echo", "legit"]
    first = sbx_cli(argv, env=env)
    assert (first.exit_code, first.stdout) == (0, "legit\n"), first.stderr
    # The attacker's entry: the victim's own, made to run their command privileged.
    entry = json.loads(_entry(state_home).read_text(encoding="utf-8"))
    key = _entry(state_home).name
    entry["recipe"]["command"] = ["PWNED"]
    entry["recipe"]["privileged"] = entry["recipe"]["facts"]["privileged"] = True
    entry["request"]["allow_privileged"] = True
    planted = tmp_path / "planted.json"
    planted.write_text(json.dumps(entry), encoding="utf-8")
    planted.chmod(0o644)
    # The victim's mistake: a home others may write. The attacker swaps its cache for theirs.
    state_home.chmod(0o777)  # the mistake under test
    reachable_by_others(state_home)
    done = _as_tester(f"mv {state_home}/cache {state_home}/cache.old && "
                      f"mkdir -p {state_home}/cache/plans && "
                      f"cp {planted} {state_home}/cache/plans/{key}")
    assert done.returncode == 0, done.stderr
    assert os.stat(state_home / "cache").st_uid == TESTER_UID

    refused = sbx_cli(argv, env=env)
    assert refused.exit_code == 125, refused
    assert "(state_unsafe)" in refused.stderr and str(state_home) in refused.stderr
    assert f"chmod go-w {state_home}" in refused.stderr
    assert "PWNED" not in refused.stdout + refused.stderr
    # The fix the message names is not enough while their directory is still there.
    state_home.chmod(0o700)
    still = sbx_cli(argv, env=env)
    assert still.exit_code == 125 and "(state_unsafe)" in still.stderr
    assert f"{state_home}/cache" in still.stderr and f"uid {TESTER_UID}" in still.stderr
    assert "PWNED" not in still.stdout
    assert sbx_cli(["explain", "state_unsafe"], env=env).exit_code == 0
    # Their directory removed: the victim's command runs the victim's plan again.
    shutil.rmtree(state_home / "cache")
    again = sbx_cli(argv, env=env)
    assert (again.exit_code, again.stdout) == (0, "legit\n"), again.stderr


def test_a_home_another_user_owns_is_refused(kit_factory: Callable[..., Path], sbx_cli: Any,
                                             env: dict[str, str], state_home: Path,
                                             tester_sbx: list[str], tmp_path: Path) -> None:
    kit = kit_factory("theirs", DOCKERFILE)
    argv = ["run", str(kit), "--", "echo", "legit"]
    assert sbx_cli(argv, env=env).exit_code == 0
    if os.geteuid() != 0:
        pytest.skip("giving the home to another user needs root")
    for directory, _dirs, files in os.walk(state_home):
        for path in [directory, *(os.path.join(directory, f) for f in files)]:
            os.lchown(path, TESTER_UID, TESTER_UID)
    entry = _entry(state_home)
    data = json.loads(entry.read_text(encoding="utf-8"))
    data["recipe"]["command"] = ["PWNED"]
    entry.write_text(json.dumps(data), encoding="utf-8")
    refused = sbx_cli(argv, env=env)
    assert refused.exit_code == 125, refused
    assert f"the state home (SBX_HOME) is owned by uid {TESTER_UID}" in refused.stderr
    assert "PWNED" not in refused.stdout
    # Its owner uses it as before.
    reachable_by_others(tmp_path)
    theirs = run_sbx(["run", str(kit), "--", "echo", "theirs"], prefix=tester_sbx, env={
        "PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "SBX_HOME": str(state_home),
        "SBX_CONFIG": os.devnull})
    assert (theirs.returncode, theirs.stdout) == (0, b"theirs\n"), theirs.stderr


def test_a_cached_plan_never_runs_privileged(kit_factory: Callable[..., Path], sbx_cli: Any,
                                             env: dict[str, str], state_home: Path) -> None:
    """Privilege and consent are decided on every run: whatever an entry says, the cached
    path makes an unprivileged container."""
    kit = kit_factory("plain", DOCKERFILE)
    argv = ["run", "--allow-privileged", str(kit), "--", "sh", "-c", CAPS]
    first = sbx_cli(argv, env=env)
    assert first.exit_code == 0 and _cap_bounding(first.stdout) == 0, first.stderr
    path = _entry(state_home)
    entry = json.loads(path.read_text(encoding="utf-8"))
    entry["recipe"]["privileged"] = entry["recipe"]["facts"]["privileged"] = True
    path.write_text(json.dumps(entry), encoding="utf-8")
    second = sbx_cli(argv, env=env)
    assert second.exit_code == 0 and _cap_bounding(second.stdout) == 0, second.stderr


def test_a_symlinked_descriptor_keys_the_cache_by_what_it_leads_to(
        tmp_path: Path, sbx_cli: Any, env: dict[str, str]) -> None:
    """The link text stays the same while privileged@1 is removed from its target: the next
    identical run must not stay privileged."""
    kit = tmp_path / "kits" / "linked"
    kit.mkdir(parents=True)
    (kit / "linked.dockerfile").write_text(DOCKERFILE, encoding="utf-8")
    target = tmp_path / "descriptors" / "linked.yaml"
    target.parent.mkdir()
    header = '# syntax=docker/sandbox-kit:3\nschemaVersion: "3"\nkind: workload\n'
    target.write_text(header + capabilities("- type: com.docker.sandbox/privileged@1\n"),
                      encoding="utf-8")
    (kit / "linked.yaml").symlink_to(target)
    argv = ["run", "--allow-privileged", str(kit), "--", "sh", "-c", CAPS]
    privileged = sbx_cli(argv, env=env)
    assert privileged.exit_code == 0 and _cap_bounding(privileged.stdout) != 0, privileged
    target.write_text(header, encoding="utf-8")
    for _ in range(2):  # the full plan, then (cached or not) the same
        plain = sbx_cli(argv, env=env)
        assert plain.exit_code == 0 and _cap_bounding(plain.stdout) == 0, plain.stderr


# -- every start is checked like the first ---------------------------------------------------


@pytest.fixture
def name(env: dict[str, str]) -> Iterator[str]:
    chosen = f"b-{uuid.uuid4().hex[:10]}"
    yield chosen
    run_sbx(["rm", "-f", chosen], env=env, timeout=120)


def _sbx(env: dict[str, str], *args: str, timeout: float = 120) -> Finished:
    return run_sbx(list(args), env=env, timeout=timeout)


def test_a_socket_created_while_a_named_sandbox_was_stopped_is_refused_at_its_restart(
        kit_factory: Callable[..., Path], env: dict[str, str], name: str, tmp_path: Path,
        engine: SdkEngine, state_home: Path) -> None:
    kit = kit_factory("restart", f"FROM {BUSYBOX}\nUSER agent\nWORKDIR /workspace\n")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    user_owned(workspace)
    create = ["run", "--name", name, "-d", str(kit), str(workspace), "--", "sleep", "600"]
    assert _sbx(env, *create).returncode == 0
    assert _sbx(env, "stop", name).returncode == 0
    # While it is stopped, the host gets a socket there (an ssh ControlMaster, say).
    control = workspace / ".cm-host-22"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(control))
    listener.listen(1)
    try:
        refused = _sbx(env, *create)
        listener.settimeout(0.5)
        with pytest.raises(TimeoutError):
            listener.accept()  # nothing reached it
    finally:
        listener.close()
    assert refused.returncode == 125, refused
    assert b"(mount_blocked)" in refused.stderr and str(control).encode() in refused.stderr
    (container,) = [o for o in owned(engine, state_home) if o.kind == "container"]
    assert engine.container_state(container.id) == "exited"  # never started
    # The socket gone, the same command starts it, and it works.
    control.unlink()
    assert _sbx(env, *create).returncode == 0
    done = _sbx(env, "exec", name, "--", "sh", "-c", "echo in > in.txt; id -u")
    assert done.returncode == 0 and done.stdout == b"1000\n", done.stderr
    assert (workspace / "in.txt").read_text(encoding="utf-8") == "in\n"
    # A socket made while it runs is refused by the next exec and attach, as by a start.
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(control))
    listener.listen(1)
    try:
        reenter = [word for word in create if word != "-d"]  # attaches to the running one
        for session in (["exec", name, "--", "true"], ["attach", name], reenter):
            again = _sbx(env, *session)
            assert again.returncode == 125, (session, again)
            assert b"(mount_blocked)" in again.stderr, (session, again.stderr)
    finally:
        listener.close()
    control.unlink()
    assert _sbx(env, "exec", name, "--", "true").returncode == 0


SECRET = "ghp_exec_env_real_token_" + "x" * 16


def test_exec_refuses_the_variables_run_refuses(kit_factory: Callable[..., Path],
                                                env: dict[str, str], name: str,
                                                state_home: Path) -> None:
    kit = kit_factory("execenv", f"FROM {BUSYBOX}\nUSER agent\nWORKDIR /workspace\n", capabilities(
        network_policy(version=2, runtime=[rule(["api.github.com"], methods=["GET"])]),
        api_key_credential("github", "GH_TOKEN", "api.github.com", value_format="token %s")))
    SecretStore(state_home, keyring=None).set("github", SECRET)
    for variable in ("GH_TOKEN=ghp_typed_by_the_user", "HTTPS_PROXY=http://elsewhere:1",
                     "SBX_RUN_ID=forged"):
        one_shot = _sbx(env, "run", "-e", variable, str(kit), "--", "true")
        assert one_shot.returncode == 2 and b"(invalid_argument)" in one_shot.stderr
    assert _sbx(env, "run", "--name", name, "-d", str(kit), "--", "sleep", "600").returncode \
        == 0
    for variable in ("GH_TOKEN=ghp_typed_by_the_user", "GH_TOKEN",
                     "HTTPS_PROXY=http://elsewhere:1", "https_proxy=x", "SBX_RUN_ID=forged",
                     "HOME=/tmp"):
        refused = run_sbx(["exec", "-e", variable, name, "--", "env"], env={
            **env, "GH_TOKEN": "from-the-host"}, timeout=120)
        assert refused.returncode == 2, (variable, refused)
        assert b"(invalid_argument)" in refused.stderr
        assert b"ghp_typed_by_the_user" not in refused.stderr + refused.stdout
        assert b"from-the-host" not in refused.stderr + refused.stdout
    # What the sandbox holds is still the sentinel; a plain variable passes.
    done = _sbx(env, "exec", "-e", "GREETING=hi", name, "--", "sh", "-c",
                'echo "$GREETING $GH_TOKEN"')
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"hi sbx-proxy-managed-github\n"


# -- labels are sbx's alone -----------------------------------------------------------------


def _until(probe: Callable[[], bool], timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if probe():
            return
        time.sleep(0.2)
    raise AssertionError("condition never held")


def test_a_kit_images_sbx_labels_do_not_survive_on_its_runs(
        kit_factory: Callable[..., Path], env: dict[str, str], state_home: Path, name: str,
        engine: SdkEngine) -> None:
    forged = {labels.NAME: name, labels.HOME: home_hash(state_home),
              labels.DEADLINE: "99999999999", labels.ROLE: "helper",
              labels.RUN: "0" * 32, "dev.sbx.extra": "x"}
    kit = kit_factory("labelled", DOCKERFILE.replace(
        "CMD", "".join(f"LABEL {k}={json.dumps(v)}\n" for k, v in forged.items()) + "CMD"))
    # A one-shot run whose sbx crashes (SIGKILL) while its sandbox runs.
    process = subprocess.Popen([str(SBX), "run", str(kit), "--", "sleep", "600"], env=env,
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        _until(lambda: any(o.kind == "container" and o.state == "running"
                           for o in owned(engine, state_home)))
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(30)
    (crashed,) = [o for o in owned(engine, state_home) if o.kind == "container"]
    assert crashed.labels[labels.NAME] == "" and crashed.labels["dev.sbx.extra"] == ""
    assert crashed.labels[labels.ROLE] == labels.ROLE_SANDBOX
    assert crashed.labels[labels.RUN] != "0" * 32
    assert int(crashed.labels[labels.DEADLINE]) < time.time() + 7200
    # The kit image sbx built carries none of them either (labelled again after its build).
    image = json.loads(subprocess.run(
        ["docker", "inspect", "--format", "{{json .Config.Labels}}",
         json.loads(subprocess.run(["docker", "inspect", "--format", "{{json .Image}}",
                                    crashed.id], capture_output=True, text=True, check=True,
                                   timeout=30).stdout)],
        capture_output=True, text=True, check=True, timeout=30).stdout)
    assert {k: v for k, v in image.items() if k in forged} == dict.fromkeys(forged, "")
    # `ls --all` lists it as a run; `run --name` of the name the image carries works.
    done = _sbx(env, "ls", "--all", "--json")
    listed = json.loads(done.stdout.decode().strip().splitlines()[-1])["data"]["sandboxes"]
    assert [s["name"] for s in listed] == [f"(run {crashed.labels[labels.RUN][:12]})"]
    made = _sbx(env, "run", "--name", name, "-d", str(kit), "--", "sleep", "600")
    assert made.returncode == 0, made.stderr
    # gc collects the crashed run (its owner is gone) and keeps the real named sandbox.
    collected = _sbx(env, "gc", "--grace", "0")
    assert collected.returncode == 0, collected.stderr
    left = [o for o in owned(engine, state_home) if o.kind == "container"]
    assert [o.labels.get(labels.NAME) for o in left] == [name]
    assert crashed.id not in {o.id for o in left}
