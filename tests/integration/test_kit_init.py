"""`sbx kit init` writes kits that validate and run on a real engine: a workload FROM the
locally built busybox image runs `-- echo hi` and its own CMD; a `--mixin` kit composes with
it through `--kit` (its permission shows in `sbx kit inspect` and reaches the run)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sbx.seams.driver import SdkEngine

from .conftest import BUSYBOX

pytestmark = pytest.mark.docker

SBX = str(Path(sys.executable).with_name("sbx"))


def _sbx(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SBX, *args], env=env, cwd=cwd, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=300, check=False)


def _data(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, done.stderr
    loaded: dict[str, Any] = json.loads(done.stdout)["data"]
    return loaded


@pytest.fixture
def env(state_home: Path) -> dict[str, str]:
    return {**os.environ, "SBX_HOME": str(state_home), "SBX_CONFIG": os.devnull,
            "NO_COLOR": "1"}


def _uncomment_network_example(descriptor: Path) -> None:
    """Turn on the commented network-policy example `kit init` writes (and nothing else)."""
    lines = descriptor.read_text(encoding="utf-8").splitlines()
    start = lines.index("# capabilities:")
    end = next(i for i, line in enumerate(lines) if "credential@1" in line)
    descriptor.write_text("\n".join(lines[:start] + [line[2:] for line in lines[start:end]])
                          + "\n", encoding="utf-8")


def test_an_initialised_workload_validates_and_runs(env: dict[str, str], tmp_path: Path,
                                                   engine: SdkEngine) -> None:
    created = _data(_sbx(env, tmp_path, "kit", "init", "--json", "--from", BUSYBOX, "agent"))
    assert (created["kind"], created["base_image"]) == ("workload", BUSYBOX)
    valid = _data(_sbx(env, tmp_path, "kit", "validate", "--json", "agent"))
    assert {key: valid[key] for key in ("reference", "kind", "valid", "errors", "warnings")} == {
        "reference": "agent", "kind": "workload", "valid": True, "errors": [], "warnings": []}

    echoed = _sbx(env, tmp_path, "run", "agent", "--", "echo", "hi")
    assert echoed.returncode == 0, echoed.stderr
    assert echoed.stdout == "hi\n"
    # Its own CMD, as written by init: the sandbox user (not root) in the workspace.
    own = _sbx(env, tmp_path, "run", "agent")
    assert own.returncode == 0, own.stderr
    assert own.stdout == "agent: uid 1000 in /workspace\n"


def test_an_initialised_mixin_composes_with_a_workload(env: dict[str, str], tmp_path: Path,
                                                      engine: SdkEngine) -> None:
    assert _sbx(env, tmp_path, "kit", "init", "--from", BUSYBOX, "app").returncode == 0
    created = _data(_sbx(env, tmp_path, "kit", "init", "--mixin", "--json", "net"))
    assert [Path(f).name for f in created["files"]] == ["net.yaml"]
    _uncomment_network_example(tmp_path / "net" / "net.yaml")
    valid = _data(_sbx(env, tmp_path, "kit", "validate", "--json", "net"))
    assert (valid["kind"], valid["valid"], valid["errors"]) == ("mixin", True, [])

    # The effective composition: both kits in order, the mixin's capability and its rule.
    inspected = _data(_sbx(env, tmp_path, "kit", "inspect", "--json", "app", "--kit", "net"))
    assert [(k["name"], k["kind"]) for k in inspected["kits"]] == [("app", "workload"),
                                                                  ("net", "mixin")]
    [selected] = inspected["capabilities"]["selected"]
    assert (selected["kit"], selected["type"]) == ("net", "com.docker.sandbox/network-policy@1")
    [rule] = inspected["network"]["runtime"]
    assert (rule["rule"]["kit"], rule["rule"]["host"], rule["value"]) == (
        "net", "api.example.com", "allow")
    alone = _data(_sbx(env, tmp_path, "kit", "inspect", "--json", "app"))
    assert alone["network"] == {"install": [], "runtime": []}

    # And at run time: composed, the sandbox gets the egress proxy; alone, no network at all.
    probe = "env | grep -c '^HTTPS_PROXY=http://' || true"
    composed = _sbx(env, tmp_path, "run", "app", "--kit", "net", "--", "sh", "-c", probe)
    assert composed.returncode == 0, composed.stderr
    assert composed.stdout == "1\n"
    bare = _sbx(env, tmp_path, "run", "app", "--", "sh", "-c", probe)
    assert bare.returncode == 0, bare.stderr
    assert bare.stdout == "0\n"
