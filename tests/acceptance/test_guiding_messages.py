"""Messages that lead somewhere (issue #13 item 4), through the installed `sbx` console script:
a failed build shows its own output, a missing base image names the command that fetches an
image, a mistyped kit path is said not to exist, a command in WORKSPACE's place hints `--`,
explain prints values for people, `-v`/`-vv` do what the help says, and global options are
accepted after the subcommand."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

SBX = shutil.which("sbx", path=str(Path(sys.executable).parent)) or "sbx"
BUSYBOX = "sbx-test/busybox:1"

pytestmark = pytest.mark.acceptance


def _env(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "config.toml").touch()
    return {**os.environ, "SBX_HOME": str(tmp_path / "state"),
            "SBX_CONFIG": str(tmp_path / "config.toml"), "NO_COLOR": "1"}


def _sbx(args: list[str], env: dict[str, str], cwd: Path | None = None,
         ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SBX, *args], env=env, capture_output=True, text=True, timeout=180,
                          stdin=subprocess.DEVNULL, check=False, cwd=cwd)


def _kit(root: Path, name: str, dockerfile: str) -> Path:
    kit = root / name
    kit.mkdir(parents=True, exist_ok=True)
    (kit / f"{name}.yaml").write_text(
        "# syntax=docker/sandbox-kit:3\nschemaVersion: \"3\"\nkind: workload\n", encoding="utf-8")
    (kit / f"{name}.dockerfile").write_text(dockerfile, encoding="utf-8")
    return kit


@pytest.mark.docker
def test_a_failed_build_shows_its_own_output(tmp_path: Path) -> None:
    kit = _kit(tmp_path, "broken", f"FROM {BUSYBOX}\nRUN echo why-it-broke && exit 3\n")
    human = _sbx(["run", str(kit)], _env(tmp_path))
    assert human.returncode == 126 and "(build_failed)" in human.stderr
    lines = human.stderr.splitlines()
    shown = [line for line in lines if line.startswith("  | ")]
    assert "  | why-it-broke" in shown and len(shown) <= 20
    # the output comes before the error line, which ends with the reason code
    assert lines.index("  | why-it-broke") < next(
        i for i, line in enumerate(lines) if "(build_failed)" in line)
    machine = _sbx(["run", "--json", str(kit)], _env(tmp_path))
    envelope = json.loads(machine.stdout.splitlines()[-1])
    assert envelope["reason"] == "build_failed"
    assert "why-it-broke" in envelope["data"]["log_tail"]


@pytest.mark.docker
def test_a_missing_base_image_names_docker_pull(tmp_path: Path) -> None:
    kit = _kit(tmp_path, "nobase", "FROM sbx-test/absent-base:7\nCMD [\"true\"]\n")
    done = _sbx(["run", str(kit)], _env(tmp_path))
    assert done.returncode == 125 and "(image_missing)" in done.stderr
    assert "docker pull sbx-test/absent-base:7" in done.stderr
    assert "docker load" in done.stderr and "sbx pull" not in done.stderr


@pytest.mark.parametrize("command", [["run"], ["pull"], ["kit", "validate"], ["explain"]])
def test_a_mistyped_kit_path_is_not_offered_as_a_registry_reference(tmp_path: Path,
                                                                    command: list[str]) -> None:
    done = _sbx([*command, "./nope"], _env(tmp_path), cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "(invalid_argument)" in done.stderr
    assert "does not exist" in done.stderr or "no directory exists" in done.stderr
    assert "sbx pull ./nope" not in done.stderr


def test_a_command_where_workspace_belongs_hints_the_double_dash(tmp_path: Path) -> None:
    kit = _kit(tmp_path, "kit", f"FROM {BUSYBOX}\n")
    done = _sbx(["run", "./kit", "ls"], _env(tmp_path), cwd=tmp_path)
    assert done.returncode == 2 and "(invalid_argument)" in done.stderr
    assert "sbx run ./kit -- ls" in done.stderr
    with_tail = _sbx(["run", "./kit", "ls", "--", "-la"], _env(tmp_path), cwd=tmp_path)
    assert "sbx run ./kit -- ls -la" in with_tail.stderr
    assert kit.is_dir()


def test_a_command_with_its_own_options_hints_the_double_dash(tmp_path: Path) -> None:
    # `-la` is no option of sbx run: the parser refuses it, and the fix shows the `--` form.
    _kit(tmp_path, "kit", f"FROM {BUSYBOX}\n")
    done = _sbx(["run", "./kit", "ls", "-la"], _env(tmp_path), cwd=tmp_path)
    assert done.returncode == 2
    assert "No such option: -l" in done.stderr
    assert "fix: To run 'ls -la' in the sandbox: sbx run ./kit -- ls -la" in done.stderr
    as_json = _sbx(["run", "--json", "./kit", "ls", "-la"], _env(tmp_path), cwd=tmp_path)
    envelope = json.loads(as_json.stdout)
    assert envelope["reason"] == "invalid_argument"
    assert envelope["hint"].endswith("sbx run --json ./kit -- ls -la")
    # An unknown option of sbx itself, right after the workload, gets no made-up command.
    unknown = _sbx(["run", "./kit", "--bogus"], _env(tmp_path), cwd=tmp_path)
    assert unknown.returncode == 2 and "fix:" not in unknown.stderr


def test_explain_prints_values_for_people(tmp_path: Path) -> None:
    _kit(tmp_path, "kit", f"FROM {BUSYBOX}\n")
    done = _sbx(["explain", "./kit"], _env(tmp_path), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "sandbox.memory_bytes = 4 GiB " in out
    assert "sandbox.tmp_bytes = 256 MiB " in out
    assert "network.upstream_proxy = none " in out and "mounts.blocked = none " in out
    assert "None" not in out and "()" not in out and "'refuse'" not in out
    machine = json.loads(_sbx(["explain", "--json", "./kit"], _env(tmp_path),
                              cwd=tmp_path).stdout)
    memory = next(h for h in machine["data"]["hardening"] if h["name"] == "sandbox.memory_bytes")
    assert memory["raw"] == 4 * 1024**3  # machines get the number


@pytest.mark.docker
def test_v_is_detail_and_vv_adds_engine_calls(tmp_path: Path) -> None:
    # A label unique to this test run, so the image is built here (not reused from a cache).
    kit = _kit(tmp_path, "kit", f"FROM {BUSYBOX}\nLABEL run={uuid.uuid4()}\n"
                                "RUN echo build-detail-marker\nUSER agent\n")
    one = _sbx(["-v", "run", str(kit), "--", "true"], _env(tmp_path))
    assert one.returncode == 0, one.stderr
    assert "build-detail-marker" in one.stderr  # -v: the build's output
    assert "engine: " not in one.stderr  # engine calls only at -vv
    two = _sbx(["-vv", "run", str(kit), "--", "true"], _env(tmp_path))
    assert two.returncode == 0, two.stderr
    assert "engine: info(" in two.stderr


@pytest.mark.docker
def test_global_options_after_the_subcommand(tmp_path: Path) -> None:
    kit = _kit(tmp_path, "kit", f"FROM {BUSYBOX}\nUSER agent\n")
    after = _sbx(["run", "-vv", str(kit), "--", "true"], _env(tmp_path))
    assert after.returncode == 0, after.stderr
    assert "engine: " in after.stderr
    gc = _sbx(["gc", "--verbose"], _env(tmp_path))
    assert gc.returncode == 0, gc.stderr
    # the workload's own -v after `--` is the workload's
    echoed = _sbx(["run", str(kit), "--", "echo", "-v"], _env(tmp_path))
    assert echoed.returncode == 0 and echoed.stdout.strip() == "-v"
    assert "engine: " not in echoed.stderr
