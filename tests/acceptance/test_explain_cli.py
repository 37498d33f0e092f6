"""`sbx explain` end to end through the CLI, with the engine unreachable.

The WORKLOAD forms plan as `sbx run` does, so without an engine they refuse as run does; the
reason and run forms never need one. (With an engine: tests/integration/test_explain_requests.py.)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from sbx.seams import audit
from tests.conftest import run_cli
from tests.unit.usecases.test_explain import write_kits

SECRET = "ghp_explain-test-secret-value-000"  # noqa: S105 - a test value


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "DOCKER_HOST": "unix:///nonexistent/docker.sock",
            "SBX_HOME": str(tmp_path / "state"), "NO_COLOR": "1"}


def test_workload_forms_answer_and_say_what_run_would_refuse(tmp_path: Path,
                                                             env: dict[str, str]) -> None:
    """With the engine down explain answers from the kits, the config and the user policy,
    and says what `sbx run` would refuse, with run's reason and message."""
    root = write_kits(tmp_path, 'FROM sbx-test/busybox:1\nCMD ["true"]\n')
    ran = run_cli(["run", "--json", "./w", "--kit", "./gh"], env=env, cwd=root)
    assert ran.exit_code == 125 and ran.envelope()["reason"] == "docker_unreachable"
    cases = ((["./w", "--kit", "./gh"], 0, "ok"),
             (["./w", "--kit", "./gh", "GET", "https://api.github.com/user"], 0, "ok"),
             (["./w", "--kit", "./gh", "GET", "https://x/"], 1, "denied"))
    for args, status, verdict in cases:
        explained = run_cli(["explain", "--json", *args], env=env, cwd=root)
        envelope = explained.envelope()
        assert (explained.exit_code, envelope["status"]) == (status, verdict), explained.stderr
        refusal = envelope["data"]["run_refusal"]
        assert refusal["reason"] == "docker_unreachable"
        assert refusal["message"] == ran.envelope()["message"]
        human = run_cli(["explain", *args], env=env, cwd=root)
        assert "sbx run would refuse to start:" in human.stdout
        assert "(docker_unreachable)" in human.stdout
    denied = run_cli(["explain", "--json", "./w", "--kit", "./gh", "GET", "https://x/"],
                     env=env, cwd=root).envelope()["data"]
    assert denied["fix"]["command"] == "sbx policy allow x / --method GET"
    # Usage errors are still usage errors (found before any planning).
    for bad in (["explain", "./w", "ftp://x/"], ["explain", "./w", "a", "b", "c"],
                ["explain", "./w", "--phase", "build", "x"]):
        assert run_cli(bad, env=env, cwd=root).exit_code == 2


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
    # A run records the command that reproduces its request (absolute paths, its --arg).
    third = "c" * 31 + "d"
    audit.record(home, audit.SANDBOX_STARTED, run_id=third, severity="info",
                 details={"workload": "./w", "kits": ["./w"],
                          "explain": "sbx explain /abs/w --arg a=1"})
    audit.record(home, audit.EGRESS_DENIED, run_id=third, severity="warning",
                 details={"host": "evil.example", "port": 443, "method": None,
                          "phase": "runtime", "rule": "-", "code": "default_deny"})
    recorded = run_cli(["explain", "--last"], env=env)
    assert "explain: sbx explain /abs/w --arg a=1 evil.example:443" in recorded.stdout
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
