"""`sbx explain WORKLOAD [METHOD] TARGET` and the sandbox view, planned as `sbx run` plans.

Explain's WORKLOAD forms use run's own pipeline (sbx.usecases.pipeline), so they need the engine
(and build the workload image as run would); with the engine unreachable they refuse as run
does (tests/acceptance/test_explain_cli.py).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from sbx.domain.credentials.secrets import SecretStore
from tests.conftest import run_cli
from tests.unit.usecases.test_explain import CASES, expected_decision, write_kits

from .conftest import BUSYBOX

pytestmark = pytest.mark.docker

RECIPE = f'FROM {BUSYBOX}\nUSER agent\nCMD ["true"]\n'
SECRET = "ghp_explain-test-secret-value-000"  # noqa: S105 - a test value


@pytest.fixture
def env(state_home: Path) -> dict[str, str]:
    return {**os.environ, "SBX_HOME": str(state_home), "SBX_CONFIG": os.devnull,
            "NO_COLOR": "1"}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return write_kits(tmp_path / "kits", RECIPE)


@pytest.mark.parametrize(("mixins", "phase", "method", "target"), CASES)
def test_explain_agrees_with_decide(root: Path, env: dict[str, str], mixins: tuple[str, ...],
                                    phase: str, method: str | None, target: str) -> None:
    args = ["explain", "--json", "./w", *(a for m in mixins for a in ("--kit", m)),
            "--phase", phase, *([method] if method else []), target]
    result = run_cli(args, env=env, cwd=root)
    envelope: dict[str, Any] = result.envelope()
    decision = envelope["data"]["decision"]
    expected = expected_decision(root, mixins, phase, method, target)
    assert {"allowed": decision["allowed"], "code": decision["code"]} == expected
    assert result.exit_code == (0 if expected["allowed"] else 1)


def test_request_allowed_denied_and_usage(root: Path, env: dict[str, str]) -> None:
    ok = run_cli(["explain", "./w", "--kit", "./gh", "GET", "https://api.github.com/user"],
                 env=env, cwd=root)
    assert ok.exit_code == 0 and ok.stdout.startswith("allowed:")
    denied = run_cli(["explain", "./w", "--kit", "./gh", "DELETE",
                      "https://api.github.com/repos/a/b"], env=env, cwd=root)
    assert denied.exit_code == 1
    assert "deny_rule" in denied.stdout and "<- decides" in denied.stdout
    assert "fix:" in denied.stdout
    for bad in (["explain", "./w", "ftp://x/"], ["explain", "./w", "a", "b", "c"],
                ["explain", "./w", "--phase", "build", "x"]):
        assert run_cli(bad, env=env, cwd=root).exit_code == 2


def test_request_json_envelope(root: Path, env: dict[str, str]) -> None:
    result = run_cli(["explain", "--json", "./w", "evil.example"], env=env, cwd=root)
    envelope: dict[str, Any] = result.envelope()
    assert result.exit_code == 1 and envelope["status"] == "denied"
    data = envelope["data"]
    assert data["decision"]["code"] == "default_deny"
    assert data["decision"]["suggestion"] == "add `evil.example` to network-policy runtime.allow"


def test_sandbox_view_never_shows_the_secret(root: Path, env: dict[str, str]) -> None:
    unbound = run_cli(["explain", "--json", "./w", "--kit", "./gh"], env=env, cwd=root)
    data: Any = unbound.envelope()["data"]
    assert [c["bound"] for c in data["credentials"]] == [False]
    assert [k["name"] for k in data["kits"]] == ["./w", "./gh"]
    assert any(s["type"].endswith("not-a-real-thing@1") for s in data["capabilities"]["skipped"])
    # gh's optional credential is skipped when unbound, as `sbx run` skips it.
    assert any(s["type"].endswith("credential@1") for s in data["capabilities"]["skipped"])
    names = {h["name"] for h in data["hardening"]}
    assert names >= {"sandbox.memory_bytes", "sandbox.timeout_ms", "image", "user"}
    runtime = [r["rule"]["kit"] for r in data["network"]["runtime"]]
    assert "./gh" in runtime and "./w" in runtime
    # The command reproduces this request from anywhere: absolute kit paths.
    assert data["explain"] == f"sbx explain {root / 'w'} --kit {root / 'gh'}"
    SecretStore(Path(env["SBX_HOME"])).set("github", SECRET)
    bound = run_cli(["explain", "./w", "--kit", "./gh"], env=env, cwd=root)
    assert bound.exit_code == 0
    assert "github (runtime): bound" in bound.stdout
    assert SECRET not in bound.stdout + bound.stderr


def test_explain_command_carries_args_and_consent(tmp_path: Path, env: dict[str, str],
                                                  kit_factory: Any) -> None:
    kit = kit_factory("withargs", RECIPE, """
        args:
          flavour: {default: a, enum: [a, b]}
        capabilities:
          - type: com.docker.sandbox/privileged@1
        """)
    result = run_cli(["explain", "--json", "withargs", "--arg", "flavour=b",
                      "--allow-privileged"], env=env, cwd=kit.parent)
    command = result.envelope()["data"]["explain"]
    assert command == f"sbx explain {kit} --arg flavour=b --allow-privileged"
    # Run from anywhere, it reproduces the same plan.
    again = run_cli([*command.split()[1:], "--json"], env=env, cwd=tmp_path)
    assert again.exit_code == 0, again.stderr
