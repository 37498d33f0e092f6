"""Each capability type sbx implements, proven from inside a real sandbox through `sbx run`.

KIT-SPEC-V3 §2 and §2.1: lifecycle@1, volume@1, resources@1, agent-context@1, privileged@1,
capability groups (§1.7) and the resolver's composition errors (§4.1, §9). Every test runs the
CLI against the real engine and probes the sandbox with `-- sh -c '...'`; workloads are busybox
(the bundled examples test is the one bookworm run). Kit images (``sbx-kit/*``) are cached by
content; per-run images and volumes are sbx's to remove, and these tests check that it does.
"""

from __future__ import annotations

import gc
import os
import posixpath
import re
import textwrap
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sbx.base import labels as label_keys
from sbx.base.paths import home_hash
from sbx.domain.sandbox.capabilities import SUPPORTED
from sbx.seams.driver import SdkEngine

from .conftest import BUSYBOX, owned, user_owned

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]
HOST_SENTINEL = "host-sentinel-must-not-leak"
# The baseline a hook may see besides its declared names (lifecycle@1).
BASELINE = frozenset({"PATH", "HOME", "HOSTNAME", "TERM", "PWD", "OLDPWD", "SHLVL", "_"})
WORKLOAD_DOCKERFILE = f"FROM {BUSYBOX}\nUSER agent\nWORKDIR /workspace\n"
UNSUPPORTED = "com.example/x@1"
GIB = 1024**3
MIB = 1024**2

# Reads the limits the container's own cgroups apply, on cgroup v1 or v2.
CGROUP_PROBE = r"""
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
  echo "memory=$(cat /sys/fs/cgroup/memory.max)"
  set -- $(cat /sys/fs/cgroup/cpu.max); echo "quota=$1"; echo "period=$2"
else
  echo "memory=$(cat /sys/fs/cgroup/memory/memory.limit_in_bytes)"
  echo "quota=$(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us)"
  echo "period=$(cat /sys/fs/cgroup/cpu/cpu.cfs_period_us)"
fi
"""

Runner = Callable[..., Any]
KitMaker = Callable[..., Path]

@pytest.fixture(autouse=True)
def _collect_garbage() -> Iterator[None]:
    yield
    gc.collect()


@pytest.fixture
def env(state_home: Path, tmp_path: Path) -> dict[str, str]:
    # The sentinel rides along in every run's host environment: nothing may carry it inside.
    return {**os.environ, "SBX_HOME": str(state_home), "SBX_CONFIG": os.devnull,
            "KIT_HOST_SENTINEL": HOST_SENTINEL}


@pytest.fixture
def mixin_factory(tmp_path: Path) -> KitMaker:
    """`<name>/<name>.yaml` with ``kind: mixin``; a dockerfile only when given."""

    def factory(name: str, descriptor_extra: str = "", dockerfile: str | None = None) -> Path:
        kit = tmp_path / "kits" / name
        kit.mkdir(parents=True)
        (kit / f"{name}.yaml").write_text(
            "# syntax=docker/sandbox-kit:3\nschemaVersion: \"3\"\nkind: mixin\n"
            + textwrap.dedent(descriptor_extra), encoding="utf-8")
        if dockerfile is not None:
            (kit / f"{name}.dockerfile").write_text(textwrap.dedent(dockerfile),
                                                    encoding="utf-8")
        return kit

    return factory


def _run_json(sbx_cli: Runner, env: dict[str, str], args: list[str], script: str,
              cwd: Path | None = None) -> dict[str, Any]:
    """`sbx run --json ARGS -- sh -c SCRIPT`, which must succeed; the envelope's data."""
    result = sbx_cli(["run", "--json", *args, "--", "sh", "-c", script], env=env, cwd=cwd)
    envelope = result.envelope()
    data: dict[str, Any] = envelope["data"]
    assert envelope["status"] == "ok", (envelope, result.stderr)
    return data


def _sections(stdout: str) -> list[str]:
    return stdout.split("---\n")


def _values(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def _labelled_images(engine: SdkEngine, state_home: Path) -> list[Any]:
    api: Any = engine._api
    selector = label_keys.home_selector(home_hash(state_home))
    return list(api.images(all=True,
                           filters={"label": [f"{k}={v}" for k, v in selector.items()]}))


# -- lifecycle@1 ---------------------------------------------------------------------------------


def _ordered_lifecycle_kits(kit_factory: KitMaker, mixin_factory: KitMaker,
                            ) -> tuple[Path, Path, Path]:
    """lcw (workload) <- lcfirst (requires lcw) <- lcsecond (requires lcfirst >= 1.0)."""
    startup = {name: f'echo "{name} uid=$(id -u) run=$SBX_RUN_ID" >> /tmp/startup-order'
               for name in ("lcw", "lcfirst", "lcsecond")}
    workload = kit_factory("lcw", WORKLOAD_DOCKERFILE, f"""
        provides: ["lcw@1.0.0"]
        capabilities:
          - type: com.docker.sandbox/lifecycle@1
            config:
              install:
                - command: >-
                    mkdir -p /var/log /opt/agent-owned && chown agent:agent /opt/agent-owned &&
                    echo "lcw uid=$(id -u)" >> /var/log/order
                - command: >-
                    echo "lcw-as-agent uid=$(id -u) home=$HOME" >> /opt/agent-owned/who &&
                    echo "lcw-as-agent" >> /var/log/order || true
                  user: agent
              startup:
                - command: '{startup["lcw"]}'
                  env: [SBX_RUN_ID]
        """)
    first = mixin_factory("lcfirst", f"""
        provides: ["lcfirst@1.0.0"]
        requires: ["lcw"]
        capabilities:
          - type: com.docker.sandbox/lifecycle@1
            config:
              install:
                - command: echo "lcfirst uid=$(id -u)" >> /var/log/order
                - command: echo "lcfirst#2" >> /var/log/order
              startup:
                - command: '{startup["lcfirst"]}'
                  env: [SBX_RUN_ID]
        """)
    second = mixin_factory("lcsecond", f"""
        provides: ["lcsecond@1.0.0"]
        requires: ["lcfirst >= 1.0"]
        capabilities:
          - type: com.docker.sandbox/lifecycle@1
            config:
              install:
                - command: echo "lcsecond uid=$(id -u)" >> /var/log/order
              startup:
                - command: '{startup["lcsecond"]}'
                  env: [SBX_RUN_ID]
        """)
    return workload, first, second


LIFECYCLE_PROBE = """
cat /var/log/order; echo ---
cat /opt/agent-owned/who; echo ---
cat /tmp/startup-order; echo "workload run=$SBX_RUN_ID"; echo ---
touch /var/log/probe 2>&1; echo "touch=$?"
echo again >> /var/log/order 2>&1; echo "append=$?"
"""


def test_install_and_startup_hooks_run_in_dependency_order_whatever_the_flag_order(
        kit_factory: KitMaker, mixin_factory: KitMaker, sbx_cli: Runner, env: dict[str, str],
        engine: SdkEngine, state_home: Path) -> None:
    workload, first, second = _ordered_lifecycle_kits(kit_factory, mixin_factory)
    # The flags name the dependent mixin first: order comes from requires, never from flags.
    args = [str(workload), "--kit", str(second), "--kit", str(first)]
    data = _run_json(sbx_cli, env, args, LIFECYCLE_PROBE)
    order, who, startup, readonly = _sections(data["stdout"])

    assert [Path(k).name for k in data["kits"]] == ["lcw", "lcfirst", "lcsecond"]
    # Install hooks: each exactly once, as root by default, in dependency order; within a kit
    # in declaration order. The `user: agent` hook ran as uid 1000 with the agent's home, and
    # could not append to the root-owned log (which is why its line is missing there).
    assert order.splitlines() == ["lcw uid=0", "lcfirst uid=0", "lcfirst#2", "lcsecond uid=0"]
    assert who.splitlines() == ["lcw-as-agent uid=1000 home=/home/agent"]
    # Startup hooks: before the workload, as the sandbox user, in dependency order, writing
    # /tmp, in this very start (the run id is this run's, not one baked into the image).
    run_id = data["run_id"]
    assert startup.splitlines() == [f"lcw uid=1000 run={run_id}",
                                    f"lcfirst uid=1000 run={run_id}",
                                    f"lcsecond uid=1000 run={run_id}",
                                    f"workload run={run_id}"]
    # The root filesystem the install hooks wrote to is read-only at runtime.
    values = _values(readonly)
    assert values["touch"] != "0" and values["append"] != "0"
    assert "Read-only file system" in readonly

    # The per-run image the create step committed went with the run.
    assert engine.image(f"sbx-run/{run_id}:1") is None
    assert _labelled_images(engine, state_home) == []

    # Startup hooks run on every start; install hooks never run again at start.
    again = _run_json(sbx_cli, env, args, LIFECYCLE_PROBE)
    order_again, _who, startup_again, _ro = _sections(again["stdout"])
    assert again["run_id"] != run_id
    assert order_again == order
    assert [line.rsplit("run=", 1)[1] for line in startup_again.splitlines()] == \
        [again["run_id"]] * 4


def test_files_modes_owner_overwrite_and_arg_expansion(kit_factory: KitMaker, sbx_cli: Runner,
                                                       env: dict[str, str]) -> None:
    dockerfile = f"""\
        FROM {BUSYBOX}
        RUN mkdir -p /etc/fw && echo original > /etc/fw/keep && echo original > /etc/fw/replace
        USER agent
        WORKDIR /workspace
        """
    kit = kit_factory("fw", dockerfile, """
        args:
          greet: {default: "hello", pattern: '^[a-z]+$'}
        capabilities:
          - type: com.docker.sandbox/lifecycle@1
            config:
              files:
                - {path: /etc/fw/conf, content: "greet=${{ kit.args.greet }}\\n", mode: "0640"}
                - {path: /etc/fw/keep, content: "replaced\\n", overwrite: false}
                - {path: /etc/fw/replace, content: "replaced\\n"}
                - {path: /etc/fw/new, content: "new\\n", overwrite: false}
                - path: /opt/fw/bin/greet
                  content: "#!/bin/sh\\necho script-${{ kit.args.greet }}\\n"
                  mode: "0750"
              install:
                - command: echo "install-${{ kit.args.greet }}" > /etc/fw/from-install
              startup:
                - command: echo "startup-${{kit.args.greet}}" > /tmp/from-startup
        """)
    script = """
    for f in conf keep replace new; do
      echo "$f=$(stat -c '%a %u:%g' /etc/fw/$f) $(cat /etc/fw/$f)"
    done
    echo "script=$(stat -c '%a %u:%g' /opt/fw/bin/greet) $(/opt/fw/bin/greet)"
    echo "install=$(cat /etc/fw/from-install)"
    echo "startup=$(cat /tmp/from-startup)"
    echo "reread=$(cat /etc/fw/conf 2>&1)"
    """
    values = _values(_run_json(sbx_cli, env, [str(kit), "--arg", "greet=yo"], script)["stdout"])
    # Mode honoured, owned by the sandbox user, content expanded with the --arg value.
    assert values["conf"] == "640 1000:1000 greet=yo"
    # overwrite: false leaves the image's file untouched (content and owner)...
    assert values["keep"] == "644 0:0 original"
    # ...the default overwrites it, and a missing file is written either way.
    assert values["replace"] == "644 1000:1000 replaced"
    assert values["new"] == "644 1000:1000 new"
    assert values["script"] == "750 1000:1000 script-yo"
    # Arg references are expanded in install and startup commands too.
    assert values["install"] == "install-yo"
    assert values["startup"] == "startup-yo"
    assert values["reread"] == "greet=yo"


def test_hook_environment_is_declared_names_plus_baseline(kit_factory: KitMaker,
                                                          sbx_cli: Runner,
                                                          env: dict[str, str]) -> None:
    dockerfile = f"""\
        FROM {BUSYBOX}
        ENV IMAGE_ONLY=image-env-not-declared IMAGE_DECLARED=image-declared-value
        USER agent
        WORKDIR /workspace
        """
    kit = kit_factory("envw", dockerfile, """
        args:
          level: {default: "default-level", env: KIT_LEVEL}
        capabilities:
          - type: com.docker.sandbox/lifecycle@1
            config:
              install:
                - {command: "env > /etc/install-env", env: [KIT_LEVEL, IMAGE_DECLARED]}
              startup:
                - {command: "env > /tmp/startup-env", env: [KIT_LEVEL, IMAGE_DECLARED]}
        """)
    # Host variables by the declared names must not be where the values come from either.
    host = {**env, "KIT_LEVEL": "host-level-must-not-leak",
            "IMAGE_DECLARED": "host-declared-must-not-leak", "IMAGE_ONLY": "host-image-only"}
    data = _run_json(sbx_cli, host, [str(kit), "--arg", "level=from-arg"],
                     "cat /etc/install-env; echo ---; cat /tmp/startup-env; echo ---; env")
    install_text, startup_text, workload_text = _sections(data["stdout"])
    declared = {"KIT_LEVEL", "IMAGE_DECLARED"}
    for name, text in (("install", install_text), ("startup", startup_text)):
        hook_env = _values(text)
        assert set(hook_env) - BASELINE == declared, (name, sorted(hook_env))
        assert hook_env["KIT_LEVEL"] == "from-arg", name  # the arg's env: export
        assert hook_env["IMAGE_DECLARED"] == "image-declared-value", name  # the image's ENV
        assert "IMAGE_ONLY" not in hook_env and "KIT_HOST_SENTINEL" not in hook_env, name
        assert "PATH" in hook_env, name
    assert _values(install_text)["HOME"] == "/root"
    # Startup hooks run in the sandbox: they see its writable HOME, as the workload does.
    assert _values(startup_text)["HOME"] == _values(workload_text)["HOME"] == "/home/sbx"
    # The undeclared image variable is real: the workload itself sees it.
    workload_env = _values(workload_text)
    assert workload_env["IMAGE_ONLY"] == "image-env-not-declared"
    assert workload_env["KIT_LEVEL"] == "from-arg"
    # Nothing of the host's environment reached the sandbox at all.
    assert "KIT_HOST_SENTINEL" not in workload_env
    assert "must-not-leak" not in data["stdout"] and "host-image-only" not in data["stdout"]


def test_failing_install_hook_fails_the_run_naming_kit_and_hook_and_leaves_nothing(
        kit_factory: KitMaker, mixin_factory: KitMaker, sbx_cli: Runner, env: dict[str, str],
        engine: SdkEngine, state_home: Path) -> None:
    workload = kit_factory("failw", WORKLOAD_DOCKERFILE, """
        provides: ["failw@1.0.0"]
        capabilities:
          - type: com.docker.sandbox/lifecycle@1
            config:
              install:
                - command: echo workload-install-ran
        """)
    # The failing hook is the second of the mixin's second entry; the first entry is skipped,
    # so the entry's declaration index (1) differs from its index among selected entries (0).
    mixin = mixin_factory("failm", f"""
        requires: ["failw"]
        capabilities:
          - type: {UNSUPPORTED}
            optional: true
          - type: com.docker.sandbox/lifecycle@1
            config:
              install:
                - command: echo first-hook-ran
                - command: echo about-to-fail >&2; exit 3
                - command: echo never-runs
        """)
    result = sbx_cli(["run", str(workload), "--kit", str(mixin), "--", "echo",
                      "workload-must-not-run"], env=env)
    assert result.exit_code == 126, result.stderr
    assert "(hook_failed)" in result.stderr
    assert f"{mixin} capabilities[1].config.install[1] failed with status 3" in result.stderr
    # The hooks before it ran (their output is shown), the ones after it and the workload not.
    assert "workload-install-ran" in result.stderr and "first-hook-ran" in result.stderr
    assert "about-to-fail" in result.stderr
    assert "never-runs" not in result.stderr + result.stdout
    assert "workload-must-not-run" not in result.stdout
    # Nothing left: no container, volume or network (state_home checks too), no per-run image.
    assert owned(engine, state_home) == []
    assert _labelled_images(engine, state_home) == []


def test_failing_hook_inside_a_group_is_named_by_its_member_path(
        kit_factory: KitMaker, sbx_cli: Runner, env: dict[str, str]) -> None:
    kit = kit_factory("failg", WORKLOAD_DOCKERFILE, """
        capabilities:
          - group:
              capabilities:
                - type: com.docker.sandbox/lifecycle@1
                  config:
                    startup:
                      - command: "true"
                      - command: exit 4
        """)
    result = sbx_cli(["run", str(kit), "--", "echo", "workload-must-not-run"], env=env)
    assert result.exit_code == 126, result.stderr
    assert (f"startup hook {kit} capabilities[0].group.capabilities[0].config.startup[1] "
            "failed with status 4 (hook_failed)") in result.stderr
    assert "workload-must-not-run" not in result.stdout


def test_install_hooks_leave_no_engine_connection_open(kit_factory: KitMaker, sbx_cli: Runner,
                                                      env: dict[str, str]) -> None:
    kit = kit_factory("sockw", WORKLOAD_DOCKERFILE, """
        capabilities:
          - type: com.docker.sandbox/lifecycle@1
            config:
              install:
                - command: "true"
        """)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        result = sbx_cli(["run", str(kit), "--", "true"], env=env)
        gc.collect()
    assert result.exit_code == 0, result.stderr
    leaks = [str(w.message) for w in caught
             if issubclass(w.category, ResourceWarning) and "docker.sock" in str(w.message)]
    assert leaks == []


# -- volume@1 ------------------------------------------------------------------------------------


def test_kit_files_on_start_up_mounts_are_there_when_the_workload_starts(
        kit_factory: KitMaker, sbx_cli: Runner, env: dict[str, str]) -> None:
    # /tmp, a tmpfs volume and the private workspace are mounted at start: files baked into
    # the image there would be hidden. They are copied in before the kits' startup hooks.
    kit = kit_factory("mfiles", WORKLOAD_DOCKERFILE, """
        capabilities:
          - type: com.docker.sandbox/volume@1
            config: {path: /scratch, tmpfs: true, size: 8m}
          - type: com.docker.sandbox/lifecycle@1
            config:
              files:
                - {path: /tmp/greeting, content: "hello from /tmp\\n", mode: "0640"}
                - {path: /scratch/deep/er/note, content: "on a tmpfs volume\\n"}
                - {path: /workspace/README, content: "in the private workspace\\n"}
                - {path: /etc/mf/plain, content: "in the image\\n"}
              startup:
                - command: cat /tmp/greeting > /scratch/seen-by-hook
        """)
    data = _run_json(sbx_cli, env, [str(kit)],
                     "cat /tmp/greeting /scratch/deep/er/note /workspace/README /etc/mf/plain "
                     "/scratch/seen-by-hook; stat -c '%a %u' /tmp/greeting")
    lines = data["stdout"].splitlines()
    assert lines[:5] == ["hello from /tmp", "on a tmpfs volume", "in the private workspace",
                         "in the image", "hello from /tmp"], data["stdout"]
    assert lines[5] == "640 1000"  # the declared mode, owned by the sandbox user


def test_tmpfs_volume_is_mounted_size_capped_and_writable_by_the_sandbox_user(
        kit_factory: KitMaker, sbx_cli: Runner, env: dict[str, str]) -> None:
    kit = kit_factory("tmpv", WORKLOAD_DOCKERFILE, """
        capabilities:
          - type: com.docker.sandbox/volume@1
            config: {path: /scratch, tmpfs: true, size: 8m, mode: "0750"}
        """)
    script = """
    echo "mount=$(grep ' /scratch ' /proc/mounts | cut -d' ' -f1,3)"
    echo "stat=$(stat -c '%a %u:%g' /scratch)"
    echo "entries=$(ls -A /scratch | wc -l)"
    echo small > /scratch/small && echo "write=ok"
    dd if=/dev/zero of=/scratch/big bs=1M count=16 2>/dev/null; echo "dd=$?"
    echo "bytes=$(wc -c < /scratch/big)"
    """
    values = _values(_run_json(sbx_cli, env, [str(kit)], script)["stdout"])
    assert values["mount"] == "tmpfs tmpfs"
    assert values["stat"] == "750 1000:1000"
    assert values["entries"] == "0"
    assert values["write"] == "ok"
    # Writing past the size fails, and no more than the size was stored.
    assert values["dd"] != "0"
    assert int(values["bytes"]) <= 8 * MIB


def test_volume_is_fresh_writable_by_the_sandbox_user_and_removed_after_the_run(
        kit_factory: KitMaker, sbx_cli: Runner, env: dict[str, str], engine: SdkEngine,
        state_home: Path, tmp_path: Path) -> None:
    # The image already has files at the path: the volume must still start empty.
    dockerfile = (f"FROM {BUSYBOX}\nRUN mkdir -p /data && echo seed > /data/seed\n"
                  "USER agent\nWORKDIR /workspace\n")
    kit = kit_factory("blockv", dockerfile, """
        capabilities:
          - type: com.docker.sandbox/volume@1
            config: {path: /data, mode: "0700"}
        """)
    workspace = tmp_path / "handshake"
    workspace.mkdir()
    # The workload waits (bounded) for the test to have seen the volume on the engine.
    script = """
    echo "fs=$(grep ' /data ' /proc/mounts | cut -d' ' -f3)"
    echo "stat=$(stat -c '%a %u:%g' /data)"
    echo "entries=$(ls -A /data | wc -l)"
    echo data > /data/written && echo "write=ok"
    i=0; while [ ! -e "$SBX_WORKSPACE/go" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
    echo "waited=$i"
    """
    outcome: dict[str, Any] = {}

    def run() -> None:
        outcome["result"] = sbx_cli(["run", "--json", str(kit), str(workspace), "--access", "ro",
                                     "--", "sh", "-c", script], env=env)

    thread = threading.Thread(target=run, name="sbx-run-volume-test")
    thread.start()
    seen: list[str] = []
    deadline = time.monotonic() + 60
    while thread.is_alive() and not seen and time.monotonic() < deadline:
        seen = [o.name for o in owned(engine, state_home) if o.kind == "volume"]
        time.sleep(0.1)
    (workspace / "go").write_text("", encoding="utf-8")
    thread.join(90)
    assert not thread.is_alive()
    result = outcome["result"]
    assert result.exit_code == 0, result.stdout + result.stderr
    values = _values(result.envelope()["data"]["stdout"])
    assert seen, "no volume labelled with this state home existed during the run"
    assert values["fs"] not in ("", "tmpfs", "overlay")
    assert values["stat"] == "700 1000:1000"
    assert values["entries"] == "0"
    assert values["write"] == "ok"
    assert int(values["waited"]) < 300  # the handshake happened, the workload did not time out
    assert [o for o in owned(engine, state_home) if o.kind == "volume"] == []
    assert _labelled_images(engine, state_home) == []


# -- resources@1 ---------------------------------------------------------------------------------


@pytest.fixture
def bounded_env(env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """[sandbox] memory_bytes = 1 GiB, so a kit request can be under or over the bound."""
    config = tmp_path / "bounded.toml"
    config.write_text(f"[sandbox]\nmemory_bytes = {GIB}\ntmp_bytes = {64 * MIB}\n"
                      f"workspace_bytes = {64 * MIB}\nhome_bytes = {64 * MIB}\n"
                      "cpu_millis = 1000\n", encoding="utf-8")
    return {**env, "SBX_CONFIG": str(config)}


def _resources_kit(kit_factory: KitMaker, name: str, config: str, optional: bool = False) -> Path:
    return kit_factory(name, WORKLOAD_DOCKERFILE, f"""
        capabilities:
          - type: com.docker.sandbox/resources@1
            optional: {"true" if optional else "false"}
            config: {config}
        """)


def test_resources_within_bounds_are_applied(kit_factory: KitMaker, sbx_cli: Runner,
                                             bounded_env: dict[str, str]) -> None:
    kit = _resources_kit(kit_factory, "resok", "{memory: 512m, cpu: 0.5}")
    data = _run_json(sbx_cli, bounded_env, [str(kit)], CGROUP_PROBE)
    values = _values(data["stdout"])
    # The kit's request, not the configured bound (1 GiB), is what the cgroup enforces.
    assert int(values["memory"]) == 512 * MIB
    assert int(values["quota"]) * 1000 // int(values["period"]) == 500
    assert data["limits"]["memory_bytes"] == 512 * MIB
    assert data["limits"]["cpu_millis"] == 500


def test_resources_over_the_bound_refuse_when_required(kit_factory: KitMaker, sbx_cli: Runner,
                                                       bounded_env: dict[str, str]) -> None:
    kit = _resources_kit(kit_factory, "resover", "{memory: 2g}")
    result = sbx_cli(["run", str(kit), "--", "echo", "workload-ran"], env=bounded_env)
    assert result.exit_code == 125
    assert "(unsupported_capability)" in result.stderr
    assert f"refused: {kit} capabilities[0] (com.docker.sandbox/resources@1)" in result.stderr
    assert "exceeds the configured bound" in result.stderr
    assert "workload-ran" not in result.stdout


def test_resources_over_the_bound_are_skipped_and_recorded_when_optional(
        kit_factory: KitMaker, sbx_cli: Runner, bounded_env: dict[str, str]) -> None:
    kit = _resources_kit(kit_factory, "resopt", "{memory: 2g, cpu: 0.5}", optional=True)
    data = _run_json(sbx_cli, bounded_env, [str(kit)], CGROUP_PROBE)
    skipped = [s for s in data["selection"]["skipped"]
               if s["type"] == "com.docker.sandbox/resources@1"]
    assert len(skipped) == 1
    assert skipped[0]["path"] == "capabilities[0]" and "exceeds" in skipped[0]["reason"]
    # Skipped as a whole: the configured limits apply, nothing of the request was truncated in.
    values = _values(data["stdout"])
    assert int(values["memory"]) == GIB
    assert int(values["quota"]) * 1000 // int(values["period"]) == 1000
    assert data["limits"]["memory_bytes"] == GIB


def test_resources_gpu_is_refused_when_required(kit_factory: KitMaker, sbx_cli: Runner,
                                                bounded_env: dict[str, str]) -> None:
    kit = _resources_kit(kit_factory, "resgpu", "{gpu: all}")
    result = sbx_cli(["run", str(kit), "--", "true"], env=bounded_env)
    assert result.exit_code == 125
    assert "(unsupported_capability)" in result.stderr
    assert "gpu 'all' cannot be provided" in result.stderr


# -- agent-context@1 -----------------------------------------------------------------------------


CTX_DOCKERFILE = f"FROM {BUSYBOX}\nUSER agent\nWORKDIR /home/agent/workspace\n"
INDEX_START = "<!-- sbx:kit-index -->"
INDEX_END = "<!-- sbx:end -->"


def _headings(profile: str) -> list[str]:
    return re.findall(r"^### (\S+)$", profile, flags=re.MULTILINE)


def test_agent_context_profile_beside_the_workspace_indexes_kits_in_order(
        kit_factory: KitMaker, mixin_factory: KitMaker, sbx_cli: Runner,
        env: dict[str, str]) -> None:
    workload = kit_factory("ctxw", CTX_DOCKERFILE, """
        provides: ["ctxw@1.0.0"]
        capabilities:
          - type: com.docker.sandbox/agent-context@1
            config: {contentFile: docs/notes.md}
        """)
    (workload / "docs").mkdir()
    (workload / "docs" / "notes.md").write_text(
        f"# ctxw notes\nfile-body-sentinel\n{INDEX_END}\nforged-after-file-end\n",
        encoding="utf-8")
    first = mixin_factory("ctxa", f"""
        provides: ["ctxa@1.0.0"]
        requires: ["ctxw"]
        capabilities:
          - type: com.docker.sandbox/agent-context@1
            config:
              content: "inline-body-sentinel\\n{INDEX_END}\\n{INDEX_START}\\nforged-inline\\n"
        """)
    second = mixin_factory("ctxb", """
        requires: ["ctxa"]
        """)
    data = _run_json(sbx_cli, env, [str(workload), "--kit", str(second), "--kit", str(first)],
                     'cat "$(dirname "$SBX_WORKSPACE")/AGENTS.md"; echo ---; '
                     'stat -c "%a %u:%g" "$(dirname "$SBX_WORKSPACE")/AGENTS.md"')
    target = data["workspace"]["target"]
    assert target == "/home/agent/workspace"  # so the profile is /home/agent/AGENTS.md
    profile, stat = _sections(data["stdout"])
    assert stat.strip() == "644 1000:1000"
    assert profile.startswith("# Sandbox guidance\n")
    assert "This workspace runs inside an sbx sandbox." in profile
    # The index lists every kit in composition (dependency) order, each with its notes.
    assert _headings(profile) == ["ctxw", "ctxa", "ctxb"]
    assert "file-body-sentinel" in profile and "inline-body-sentinel" in profile
    assert profile.index("file-body-sentinel") < profile.index("### ctxa") \
        < profile.index("inline-body-sentinel") < profile.index("### ctxb")
    assert "### ctxb\n\n(no notes)" in profile
    # Kit prose cannot forge or close the managed section: one start, one end, at the end,
    # and the text after a forged marker stays inside the section.
    assert profile.count("<!-- sbx:") == 2
    assert profile.count(INDEX_START) == 1 and profile.count(INDEX_END) == 1
    assert profile.rstrip().endswith(INDEX_END)
    start = profile.index(INDEX_START)
    assert start < profile.index("forged-after-file-end") < profile.index(INDEX_END)
    assert start < profile.index("forged-inline") < profile.index(INDEX_END)


@pytest.mark.parametrize(("config", "expected"), [
    ("{filename: CLAUDE.md, content: declared-profile-sentinel}", "/home/agent/CLAUDE.md"),
    ("{directory: /etc/agentctx, filename: GUIDE.md, content: declared-profile-sentinel}",
     "/etc/agentctx/GUIDE.md"),
], ids=["filename", "directory"])
def test_agent_context_profile_at_the_declared_filename_and_directory(
        config: str, expected: str, kit_factory: KitMaker, sbx_cli: Runner,
        env: dict[str, str]) -> None:
    kit = kit_factory("ctxd", CTX_DOCKERFILE, f"""
        capabilities:
          - type: com.docker.sandbox/agent-context@1
            config: {config}
        """)
    data = _run_json(sbx_cli, env, [str(kit)],
                     f"cat {expected}; echo ---; ls -A /home/agent")
    profile, home = _sections(data["stdout"])
    assert posixpath.dirname(data["workspace"]["target"]) == "/home/agent"
    assert profile.startswith("# Sandbox guidance\n")
    assert _headings(profile) == ["ctxd"]
    assert "declared-profile-sentinel" in profile
    assert "AGENTS.md" not in home.split()  # no profile at the default name as well


# -- privileged@1 --------------------------------------------------------------------------------

CAP_SYS_ADMIN = 21
PRIV_PROBE = "grep -E '^(CapBnd|Seccomp):' /proc/self/status | tr -d ' \\t' | tr : =; " \
             "echo devices=$(ls /dev | wc -l)"


def test_privileged_needs_consent_and_then_runs_privileged(
        kit_factory: KitMaker, sbx_cli: Runner, env: dict[str, str], busybox_kit: Path) -> None:
    kit = kit_factory("privw", WORKLOAD_DOCKERFILE, """
        capabilities:
          - type: com.docker.sandbox/privileged@1
        """)
    refused = sbx_cli(["run", str(kit), "--", "echo", "workload-ran"], env=env)
    assert refused.exit_code == 125
    assert "(consent_required)" in refused.stderr and "--allow-privileged" in refused.stderr
    assert "workload-ran" not in refused.stdout

    data = _run_json(sbx_cli, env, ["--allow-privileged", str(kit)], PRIV_PROBE)
    hardened = _run_json(sbx_cli, env, [str(busybox_kit)], PRIV_PROBE)
    privileged, plain = _values(data["stdout"]), _values(hardened["stdout"])
    assert data["privileged"] is True and hardened["privileged"] is False
    # Privileged: the bounding set is the engine's full set (hardened: empty), no seccomp
    # filter (hardened: filter mode 2), and the host's devices are visible.
    assert int(plain["CapBnd"], 16) == 0 and plain["Seccomp"] == "2"
    assert int(privileged["CapBnd"], 16) >> CAP_SYS_ADMIN & 1
    assert bin(int(privileged["CapBnd"], 16)).count("1") >= 30
    assert privileged["Seccomp"] == "0"
    assert int(privileged["devices"]) > int(plain["devices"])


# -- groups (§1.7.1) -----------------------------------------------------------------------------


def test_optional_group_with_an_unsupported_member_is_skipped_whole(
        kit_factory: KitMaker, sbx_cli: Runner, env: dict[str, str]) -> None:
    assert UNSUPPORTED not in SUPPORTED
    kit = kit_factory("grpw", WORKLOAD_DOCKERFILE, f"""
        capabilities:
          - group:
              name: extras
              optional: true
              capabilities:
                - type: com.docker.sandbox/lifecycle@1
                  config:
                    files: [{{path: /etc/group-skipped, content: "must not exist\\n"}}]
                - type: {UNSUPPORTED}
          - group:
              name: fine
              optional: true
              capabilities:
                - type: com.docker.sandbox/lifecycle@1
                  config:
                    files: [{{path: /etc/group-selected, content: "selected\\n"}}]
                - type: com.docker.sandbox/resources@1
                  config: {{memory: 1g}}
        """)
    data = _run_json(sbx_cli, env, [str(kit)],
                     "ls /etc/group-skipped 2>&1; echo ---; cat /etc/group-selected; echo ---;"
                     + CGROUP_PROBE)
    skipped_out, selected_out, cgroup = _sections(data["stdout"])
    # The supported member of the skipped group was not applied; the other group was, whole.
    assert "No such file" in skipped_out
    assert selected_out == "selected\n"
    assert int(_values(cgroup)["memory"]) == GIB
    groups = [s for s in data["selection"]["skipped"] if s["type"] == "group"]
    assert groups == [{
        "kit": str(kit), "path": "capabilities[0].group", "type": "group",
        "reason": "not implemented by this sbx",
        "members": ["capabilities[0].group.capabilities[0]",
                    "capabilities[0].group.capabilities[1]"],
        "rejected": ["capabilities[0].group.capabilities[1]"]}]
    selected = [s for s in data["selection"]["selected"] if s["type"] == "group"]
    assert [s["path"] for s in selected] == ["capabilities[1].group"]


def test_required_group_with_an_unsupported_member_is_refused_naming_the_member(
        kit_factory: KitMaker, sbx_cli: Runner, env: dict[str, str]) -> None:
    kit = kit_factory("grpreq", WORKLOAD_DOCKERFILE, f"""
        capabilities:
          - type: com.docker.sandbox/resources@1
            config: {{memory: 1g}}
          - group:
              name: needed
              capabilities:
                - type: com.docker.sandbox/lifecycle@1
                  config:
                    files: [{{path: /etc/x, content: "x"}}]
                - type: {UNSUPPORTED}
        """)
    result = sbx_cli(["run", str(kit), "--", "echo", "workload-ran"], env=env)
    assert result.exit_code == 125
    assert "(unsupported_capability)" in result.stderr
    assert f"{kit} capabilities[1].group.capabilities[1] ({UNSUPPORTED})" in result.stderr
    assert "capabilities[1].group.capabilities[0]" not in result.stderr  # the supported member
    assert "workload-ran" not in result.stdout


# -- composition and argument errors -------------------------------------------------------------


def test_two_workloads_are_incoherent(kit_factory: KitMaker, sbx_cli: Runner,
                                      env: dict[str, str]) -> None:
    one = kit_factory("wone", WORKLOAD_DOCKERFILE)
    two = kit_factory("wtwo", WORKLOAD_DOCKERFILE)
    result = sbx_cli(["run", str(one), "--kit", str(two), "--", "true"], env=env)
    assert result.exit_code == 125 and "(kit_incoherent)" in result.stderr
    assert (f"more than one workload kit: {one} and {two} both declare kind: workload; "
            "a composition has exactly one base") in result.stderr


def test_mixin_requiring_a_missing_provide_is_incoherent(
        kit_factory: KitMaker, mixin_factory: KitMaker, sbx_cli: Runner,
        env: dict[str, str]) -> None:
    workload = kit_factory("wreq", WORKLOAD_DOCKERFILE, 'provides: ["wreq@1.0.0"]\n')
    mixin = mixin_factory("needy", 'requires: ["nothing-here >= 2.0"]\n')
    result = sbx_cli(["run", str(workload), "--kit", str(mixin), "--", "true"], env=env)
    assert result.exit_code == 125 and "(kit_incoherent)" in result.stderr
    assert (f'{mixin} requires "nothing-here >= 2.0" but nothing in the set provides it; '
            "add a kit that provides nothing-here") in result.stderr


def test_unknown_arg_is_an_invalid_argument(kit_factory: KitMaker, sbx_cli: Runner,
                                            env: dict[str, str]) -> None:
    kit = kit_factory("argw", WORKLOAD_DOCKERFILE, """
        args:
          greet: {default: "hi", pattern: '^[a-z]+$'}
        """)
    result = sbx_cli(["run", str(kit), "--arg", "nosuch=1", "--", "true"], env=env)
    assert result.exit_code == 2 and "(invalid_argument)" in result.stderr
    assert "--arg nosuch: no kit in the set declares it" in result.stderr
    assert "Declared args: greet" in result.stderr


def test_arg_failing_its_pattern_is_an_invalid_kit_and_the_value_is_not_printed(
        kit_factory: KitMaker, sbx_cli: Runner, env: dict[str, str]) -> None:
    kit = kit_factory("argp", WORKLOAD_DOCKERFILE, """
        args:
          greet: {default: "hi", pattern: '^[a-z]+$'}
        capabilities:
          - type: com.docker.sandbox/lifecycle@1
            config:
              files: [{path: /etc/greet, content: "${{ kit.args.greet }}"}]
        """)
    value = "Not-A-Match-SECRET-value"
    text = sbx_cli(["run", str(kit), "--arg", f"greet={value}", "--", "true"], env=env)
    assert text.exit_code == 125 and "(invalid_kit)" in text.stderr
    assert "kit arg 'greet' does not match its pattern" in text.stderr
    as_json = sbx_cli(["run", "--json", str(kit), "--arg", f"greet={value}", "--", "true"],
                      env=env)
    assert as_json.envelope()["reason"] == "invalid_kit"
    for result in (text, as_json):
        assert value not in result.stdout + result.stderr
        assert "SECRET" not in result.stdout + result.stderr


# -- the bundled examples ------------------------------------------------------------------------


def test_bundled_examples_compose_and_run(sbx_cli: Runner, env: dict[str, str],
                                          tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    script = """
    echo "gh=$(stat -c '%a' /usr/local/bin/gh)"; test -x /usr/local/bin/gh && echo "gh_exec=yes"
    echo "motd=$(cat /etc/tool/motd)"
    echo "tool_started=$(cat /tmp/tool-started)"
    echo ---
    cat "$(dirname "$SBX_WORKSPACE")/AGENTS.md"
    """
    user_owned(workspace)
    args = ["examples/hello", "--kit", "examples/gh", "--kit", "examples/tool", str(workspace)]
    data = _run_json(sbx_cli, env, args, script, cwd=REPO)
    probe, profile = _sections(data["stdout"])
    values = _values(probe)
    assert data["kits"] == ["examples/hello", "examples/gh", "examples/tool"]  # layer order
    assert values["gh_exec"] == "yes" and values["gh"] == "755"
    assert values["motd"] == "tool ready"  # the arg's default, expanded into the file
    assert values["tool_started"].isdigit()  # tool's startup hook ran before the workload
    # The profile: guidance, then the kits in composition (dependency) order: gh and hello are
    # independent (the lexically smaller first), tool requires hello.
    assert profile.startswith("# Sandbox guidance\n")
    assert _headings(profile) == ["gh", "hello", "tool"]
    assert "# Hello kit" in profile and "# GitHub (gh)" in profile
    # gh's network policy is enforced at the egress proxy; its optional credential has no
    # secret in this test's store, so it is skipped and recorded.
    skipped = {(Path(s["kit"]).name, s["type"]) for s in data["selection"]["skipped"]}
    selected = {(Path(s["kit"]).name, s["type"]) for s in data["selection"]["selected"]}
    assert {t for k, t in skipped if k == "gh"} == {"com.docker.sandbox/credential@1"}
    assert ("gh", "com.docker.sandbox/network-policy@2") in selected
