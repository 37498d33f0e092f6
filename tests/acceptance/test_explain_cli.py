"""`sbx explain` end to end through the CLI, with the engine unreachable."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import run_cli
from tests.unit.test_explain import write_kits

from sbx import audit
from sbx.secrets import SecretStore

SECRET = "ghp_explain-test-secret-value-000"  # noqa: S105 - a test value


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "DOCKER_HOST": "unix:///nonexistent/docker.sock",
            "SBX_HOME": str(tmp_path / "state"), "NO_COLOR": "1"}


def test_request_allowed_denied_and_usage(tmp_path: Path, env: dict[str, str]) -> None:
    root = write_kits(tmp_path)
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


def test_request_json_envelope(tmp_path: Path, env: dict[str, str]) -> None:
    root = write_kits(tmp_path)
    result = run_cli(["explain", "--json", "./w", "evil.example"], env=env, cwd=root)
    envelope: dict[str, Any] = result.envelope()
    assert result.exit_code == 1 and envelope["status"] == "denied"
    data = envelope["data"]
    assert data["decision"]["code"] == "default_deny"
    assert data["decision"]["suggestion"] == "add `evil.example` to network-policy runtime.allow"


def test_sandbox_view_never_shows_the_secret(tmp_path: Path, env: dict[str, str]) -> None:
    root = write_kits(tmp_path)
    unbound = run_cli(["explain", "--json", "./w", "--kit", "./gh"], env=env, cwd=root)
    data: Any = unbound.envelope()["data"]
    assert [c["bound"] for c in data["credentials"]] == [False]
    assert [k["name"] for k in data["kits"]] == ["./w", "./gh"]
    assert any(s["type"].endswith("not-a-real-thing@1") for s in data["capabilities"]["skipped"])
    assert {h["name"] for h in data["hardening"]} >= {"sandbox.memory_bytes", "sandbox.timeout_ms"}
    runtime = [r["rule"]["kit"] for r in data["network"]["runtime"]]
    assert "./gh" in runtime and "./w" in runtime
    SecretStore(Path(env["SBX_HOME"])).set("github", SECRET)
    bound = run_cli(["explain", "./w", "--kit", "./gh"], env=env, cwd=root)
    assert bound.exit_code == 0
    assert "github (runtime): bound" in bound.stdout
    assert SECRET not in bound.stdout + bound.stderr


def test_last_and_run_id(tmp_path: Path, env: dict[str, str]) -> None:
    home = Path(env["SBX_HOME"])
    empty = run_cli(["explain", "--last"], env=env)
    assert empty.exit_code == 0 and "no runs recorded" in empty.stdout
    first, second = "a" * 32, "b" * 32
    audit.record(home, audit.SANDBOX_UNAVAILABLE, run_id=first, severity="warning",
                 details={"reason": "mount_blocked", "workload": "./w"})
    audit.record(home, audit.SANDBOX_STARTED, run_id=second, severity="info",
                 details={"workload": "./w", "kits": ["./w", "./gh"]})
    audit.record(home, audit.EGRESS_DENIED, run_id=second, severity="warning",
                 details={"host": "api.github.com", "port": 443, "method": "DELETE",
                          "path": "/repos/a/b", "scheme": "https", "phase": "runtime",
                          "rule": "./gh capabilities[0] runtime.deny", "code": "deny_rule"})
    last = run_cli(["explain", "--last"], env=env)
    assert last.exit_code == 0
    assert "DELETE api.github.com:443 /repos/a/b" in last.stdout
    assert ("explain: sbx explain ./w --kit ./gh DELETE https://api.github.com/repos/a/b"
            in last.stdout)
    one = run_cli(["explain", "--json", first], env=env)
    refusal: Any = one.envelope()["data"]
    assert refusal["refusals"][0]["code"] == "mount_blocked"
    assert refusal["refusals"][0]["explain"] == "sbx explain mount_blocked"
    assert run_cli(["explain", "c" * 32], env=env).exit_code == 2


def test_reason_forms_still_work(env: dict[str, str]) -> None:
    assert run_cli(["explain", "mount_blocked"], env=env).exit_code == 0
    assert run_cli(["explain", "--list"], env=env).exit_code == 0
    wrong = run_cli(["explain", "mount_blokced"], env=env)
    assert wrong.exit_code == 2 and "mount_blocked" in wrong.stderr
