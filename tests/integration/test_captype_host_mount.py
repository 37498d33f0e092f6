"""host-mount@1 in a real sandbox: a directory sbx keeps per kit and path, mounted through the
mount policy before the install hooks, shared by the kit's later sandboxes, not by another kit's,
kept after the sandbox is gone, and the hardened shape untouched."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.docker

DOCKERFILE = "FROM sbx-base/bookworm:1\nUSER agent\nWORKDIR /workspace\n"
Runner = Callable[..., Any]
KitMaker = Callable[..., Path]
MOUNT = "com.docker.sandbox/host-mount@1"

PROBE = r"""
cat /cache/install-log 2>/dev/null | wc -l | sed 's/^/install_lines=/'
cat /cache/runs 2>/dev/null | wc -l | sed 's/^/runs_before=/'
echo run >> /cache/runs && echo write=ok || echo write=refused
echo "owner=$(stat -c %u /cache)"
touch /root-write 2>/dev/null && echo root=writable || echo root=readonly
echo "capeff=$(grep CapEff /proc/self/status | cut -f2)"
echo "nnp=$(grep NoNewPrivs /proc/self/status | cut -f2)"
"""


def _kit(kit_factory: KitMaker, name: str, mode: str = "") -> Path:
    extra = f"\n      mode: \"{mode}\"" if mode else ""
    return kit_factory(name, DOCKERFILE, f"""capabilities:
  - type: {MOUNT}
    config:
      path: /cache{extra}
  - type: com.docker.sandbox/lifecycle@1
    config:
      install:
        - command: ["sh", "-c", "date >> /cache/install-log"]
""")


def _values(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


@pytest.fixture
def env(state_home: Path, tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "SBX_HOME": str(state_home), "SBX_CONFIG": os.devnull,
            "SBX_HOST_MOUNTS": str(tmp_path / "host-mounts")}


def _run(sbx_cli: Runner, kit: Path, env: dict[str, str]) -> dict[str, str]:
    result = sbx_cli(["run", "--json", str(kit), "--", "sh", "-c", PROBE], env=env)
    envelope = result.envelope()
    assert envelope["status"] == "ok", (envelope, result.stderr)
    return _values(envelope["data"]["stdout"])


def test_a_kit_s_sandboxes_share_its_directory_and_it_outlives_them(
        kit_factory: KitMaker, sbx_cli: Runner, env: dict[str, str]) -> None:
    kit = _kit(kit_factory, "cachekit", mode="0750")
    first = _run(sbx_cli, kit, env)
    assert first["install_lines"] == "1"  # mounted before the install hook ran
    assert first["runs_before"] == "0" and first["write"] == "ok"
    assert first["root"] == "readonly"
    assert first["capeff"] == "0000000000000000" and first["nnp"] == "1"
    second = _run(sbx_cli, kit, env)  # a new sandbox of the same kit
    assert second["runs_before"] == "1" and second["install_lines"] == "2"
    # On the host, after both sandboxes are gone: listable, with what they wrote.
    [runs] = list(Path(env["SBX_HOST_MOUNTS"]).glob("*/cache-*/runs"))
    assert runs.read_text().splitlines() == ["run", "run"]
    assert oct(runs.parent.stat().st_mode & 0o777) == "0o750"  # the kit's mode, at creation
    listed = sbx_cli(["kit", "mounts", "--json"], env=env).envelope()
    assert [m["path"] for m in listed["data"]["mounts"]] == ["/cache"]
    assert listed["data"]["mounts"][0]["directory"] == str(runs.parent)


def test_another_kit_naming_the_path_gets_its_own_directory(
        kit_factory: KitMaker, sbx_cli: Runner, env: dict[str, str]) -> None:
    _run(sbx_cli, _kit(kit_factory, "cachekit"), env)
    other = _run(sbx_cli, _kit(kit_factory, "otherkit"), env)
    assert other["runs_before"] == "0"
    assert len(list(Path(env["SBX_HOST_MOUNTS"]).glob("*/cache-*"))) == 2


def test_the_mount_policy_judges_the_directory(
        kit_factory: KitMaker, sbx_cli: Runner, env: dict[str, str], state_home: Path) -> None:
    # Pointed inside the state home (which holds secrets), the directory is refused by the
    # policy like any mount, before anything starts.
    env = {**env, "SBX_HOST_MOUNTS": str(state_home / "mounts")}
    result = sbx_cli(["run", str(_kit(kit_factory, "cachekit")), "--", "echo", "ran"], env=env)
    assert result.exit_code == 125, result.stderr
    assert "(mount_blocked)" in result.stderr and "sbx_state" in result.stderr
    assert "ran" not in result.stdout


def test_the_user_removes_a_kit_s_directories(
        kit_factory: KitMaker, sbx_cli: Runner, env: dict[str, str]) -> None:
    _run(sbx_cli, _kit(kit_factory, "cachekit"), env)
    listed = sbx_cli(["kit", "mounts", "--json"], env=env).envelope()["data"]["mounts"]
    [mount] = listed
    removed = sbx_cli(["kit", "mounts", "--rm", mount["kit"]], env=env)
    assert removed.exit_code == 0, removed.stderr
    assert not Path(mount["directory"]).exists()
    assert sbx_cli(["kit", "mounts", "--json"], env=env).envelope()["data"]["mounts"] == []


def test_moving_a_path_from_a_volume_to_a_host_mount_stops_for_approval(
        kit_factory: KitMaker, sbx_cli: Runner, env: dict[str, str]) -> None:
    kit = kit_factory("movekit", DOCKERFILE, "capabilities:\n"
                      "  - type: com.docker.sandbox/volume@1\n    config:\n      path: /cache\n")
    first = sbx_cli(["run", str(kit), "--", "true"], env=env)
    assert first.exit_code == 0, first.stderr
    descriptor = kit / "movekit.yaml"
    descriptor.write_text(descriptor.read_text().replace("volume@1", "host-mount@1"))
    refused = sbx_cli(["run", str(kit), "--", "echo", "ran"], env=env)
    assert refused.exit_code == 125, refused.stderr
    assert "(permission_widened)" in refused.stderr and "/cache" in refused.stderr
    assert "ran" not in refused.stdout
    assert not Path(env["SBX_HOST_MOUNTS"]).exists()  # nothing was made before the approval
    accepted = sbx_cli(["run", "--accept", str(kit), "--", "sh", "-c",
                        "echo x > /cache/f && echo ran"], env=env)
    assert accepted.exit_code == 0 and accepted.stdout == "ran\n", accepted.stderr
    assert len(list(Path(env["SBX_HOST_MOUNTS"]).glob("*/cache-*/f"))) == 1


def test_a_named_sandbox_mounts_the_directory_on_every_start(
        kit_factory: KitMaker, env: dict[str, str]) -> None:
    import uuid

    from tests.support.sbxproc import run_sbx

    kit = _kit(kit_factory, "cachekit")
    name = f"hm-{uuid.uuid4().hex[:10]}"

    def sbx(*args: str) -> Any:
        return run_sbx(list(args), env=env, timeout=180)

    try:
        assert sbx("run", "--name", name, "-d", str(kit), "--", "sleep", "600").returncode == 0
        assert sbx("exec", name, "--", "sh", "-c", "echo kept > /cache/named").returncode == 0
        assert sbx("stop", name).returncode == 0
        assert sbx("run", "--name", name, "-d", str(kit)).returncode == 0
        read = sbx("exec", name, "--", "cat", "/cache/named")
        assert read.stdout.decode() == "kept\n", read.stderr.decode()
    finally:
        run_sbx(["rm", "-f", name], env=env, timeout=120)
    # Removing the sandbox keeps the kit's directory.
    [kept] = list(Path(env["SBX_HOST_MOUNTS"]).glob("*/cache-*/named"))
    assert kept.read_text() == "kept\n"
