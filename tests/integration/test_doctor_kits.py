"""`sbx doctor WORKLOAD [--kit MIXIN]...`: `sbx run`'s planning, creating nothing (the
workload check); the first refusal run would make is its failure, with run's reason."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sbx.domain.credentials.secrets import SecretStore
from tests.support.kits import api_key_credential, capabilities, network_policy

from .conftest import BUSYBOX

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]
CREDENTIAL_KIT = capabilities(
    network_policy(runtime=["api.example.com"]),
    api_key_credential("examplesvc", "EXAMPLE_TOKEN", "api.example.com"))


def _checks(result: Any) -> dict[str, dict[str, Any]]:
    envelope = json.loads(result.stdout.splitlines()[-1])
    return {c["id"]: c for c in envelope["data"]["checks"]}


@pytest.fixture
def env(state_home: Path, tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "SBX_HOME": str(state_home), "SBX_CONFIG": os.devnull}


def test_bundled_composition_checks_out(sbx_cli: Any, env: dict[str, str]) -> None:
    result = sbx_cli(["doctor", "--json", "examples/hello", "--kit", "examples/gh", "--kit",
                      "examples/tool"], env=env, cwd=REPO)
    workload = _checks(result)["workload"]
    # gh's credential is optional: unbound, it is skipped as run skips it (a warning).
    assert workload["status"] == "warn", workload
    assert workload["reason"] == "credential_unbound"
    assert [s["type"] for s in workload["data"]["skipped"]] == [
        "com.docker.sandbox/credential@1"]
    assert workload["data"]["kits"] == ["examples/hello", "examples/gh", "examples/tool"]


def test_missing_image_fails_as_run_refuses(kit_factory: Callable[..., Path], sbx_cli: Any,
                                            env: dict[str, str]) -> None:
    kit = kit_factory("needs", "FROM sbx-test/not-here:9\n", CREDENTIAL_KIT)
    result = sbx_cli(["doctor", "--json", str(kit)], env=env)
    assert result.exit_code == 1
    workload = _checks(result)["workload"]
    assert workload["reason"] == "image_missing"
    assert "docker pull sbx-test/not-here:9" in workload["fix"]
    assert "sbx pull" not in workload["fix"]


def test_required_credential_unbound_fails(kit_factory: Callable[..., Path], sbx_cli: Any,
                                           env: dict[str, str]) -> None:
    kit = kit_factory("unbound", f"FROM {BUSYBOX}\nUSER agent\n", CREDENTIAL_KIT)
    result = sbx_cli(["doctor", "--json", str(kit)], env=env)
    assert result.exit_code == 1
    workload = _checks(result)["workload"]
    assert (workload["status"], workload["reason"]) == ("fail", "credential_unbound")


def test_bound_credential_passes_without_showing_the_value(
        kit_factory: Callable[..., Path], sbx_cli: Any, env: dict[str, str],
        state_home: Path) -> None:
    kit = kit_factory("bound", f"FROM {BUSYBOX}\nUSER agent\n", CREDENTIAL_KIT)
    SecretStore(state_home).set("examplesvc", "value-that-must-not-show-1234")
    result = sbx_cli(["doctor", "--json", str(kit)], env=env)
    workload = _checks(result)["workload"]
    assert workload["status"] == "ok", workload
    assert workload["data"]["credentials"] == {"examplesvc": "apikey"}
    assert "value-that-must-not-show" not in result.stdout + result.stderr


def test_invalid_kit_fails_the_workload_check(kit_factory: Callable[..., Path], sbx_cli: Any,
                                              env: dict[str, str]) -> None:
    kit = kit_factory("broken", f"FROM {BUSYBOX}\n", "capabilities: [{typ: x}]\n")
    result = sbx_cli(["doctor", "--json", str(kit)], env=env)
    assert result.exit_code == 1
    assert _checks(result)["workload"]["reason"] == "invalid_kit"
