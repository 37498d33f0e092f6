"""The entry point: `--` splitting, the error edge, and the command dispatch table."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sbx import __version__
from sbx.__main__ import split_passthrough
from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.usecases.run import entry as run_core
from sbx.usecases.run.request import RunRequest


@pytest.mark.parametrize(("argv", "head", "tail"), [
    (["run", "k"], ["run", "k"], None),
    (["run", "k", "--", "echo", "--json"], ["run", "k"], ("echo", "--json")),
    (["run", "k", "ws", "--"], ["run", "k", "ws"], ()),
    (["run", "--", "a", "--", "b"], ["run"], ("a", "--", "b")),
])
def test_split_passthrough(argv: list[str], head: list[str],
                           tail: tuple[str, ...] | None) -> None:
    assert split_passthrough(argv) == (head, tail)


def test_version_flag_and_command(sbx_cli: Any) -> None:
    assert sbx_cli(["--version"]).stdout.strip() == f"sbx {__version__}"
    envelope = sbx_cli(["version", "--json"]).envelope()
    assert envelope["data"] == {"version": __version__}
    assert envelope["sbx_result_version"] == 1


def test_run_dispatches_one_typed_request(sbx_cli: Any, monkeypatch: pytest.MonkeyPatch,
                                          tmp_path: Path) -> None:
    seen: list[RunRequest] = []

    def fake_run(ctx: Any, request: RunRequest, **_kw: Any) -> Any:
        seen.append(request)
        raise SbxError(Reason.IMAGE_MISSING, "stop here")

    monkeypatch.setattr(run_core, "run", fake_run)
    result = sbx_cli(["run", "./kit", "./ws", "--access", "ro", "--mount", "/a:/b",
                      "--mount", "/c:/d:ro", "--timeout", "5", "--", "echo", "--json"])
    assert result.exit_code == 125 and "(image_missing)" in result.stderr
    assert seen == [RunRequest(
        workload="./kit", workspace="./ws", access="ro", mounts=("/a:/b", "/c:/d:ro"),
        timeout_s=5.0, command=("echo", "--json"), capture_output=False)]


def test_errors_under_json_are_an_envelope(sbx_cli: Any, tmp_path: Path) -> None:
    result = sbx_cli(["run", "--json", "registry.invalid/kits/nope:1"])
    assert result.exit_code == 125
    envelope = json.loads(result.stdout)
    assert envelope["status"] == "refused" and envelope["reason"] == "image_missing"
    assert envelope["exit_code"] == 125 and "sbx pull" in envelope["hint"]
    assert result.stderr == ""


@pytest.mark.parametrize("command", ["run", "pull"])
def test_a_mistyped_kit_path_says_the_directory_does_not_exist(sbx_cli: Any, tmp_path: Path,
                                                              command: str) -> None:
    for written in ("./nope", str(tmp_path / "nope")):
        result = sbx_cli([command, written])
        assert result.exit_code == 2, result.stderr
        assert "(invalid_argument)" in result.stderr
        assert "does not exist" in result.stderr or "no directory exists" in result.stderr
        assert "sbx pull" not in result.stderr.replace("sbx pull fetches", "")


def test_usage_error_under_json_is_an_envelope(sbx_cli: Any) -> None:
    result = sbx_cli(["run", "--json", "--bogus", "x"])
    assert result.exit_code == 2
    assert json.loads(result.stdout)["reason"] == "invalid_argument"


def test_every_refusal_message_ends_with_its_code(sbx_cli: Any) -> None:
    result = sbx_cli(["explain", "no_such_code"])
    assert result.exit_code == 2
    first_line = result.stderr.splitlines()[0]
    assert first_line.endswith("(invalid_argument)")


def _with_closed(redirect: str, *args: str, home: Path) -> subprocess.CompletedProcess[bytes]:
    """``python -m sbx ARGS`` started with a standard stream closed by the shell (``>&-``)."""
    env = {**os.environ, "SBX_HOME": str(home), "SBX_CONFIG": os.devnull, "SBX_RESIDENT": "0"}
    return subprocess.run(["sh", "-c", f'exec "$@" {redirect}', "sh", sys.executable, "-m", "sbx",
                           *args], env=env, capture_output=True, timeout=60, check=False)


def test_a_closed_stdout_ends_as_a_closed_pipe_never_a_crash(tmp_path: Path) -> None:
    home = tmp_path / "state"
    # an envelope that cannot be written is a closed pipe's 141; a message is dropped (0)
    assert _with_closed(">&-", "ls", "--json", home=home).returncode == 141
    for args in (["ls"], ["--version"], ["explain", "mount_blocked"]):
        done = _with_closed(">&-", *args, home=home)
        assert done.returncode in (0, 1, 141), (args, done.returncode, done.stderr)
        assert b"Traceback" not in done.stderr and b"internal_error" not in done.stderr
    assert not (home / "crash-reports").exists()


def test_a_closed_stderr_drops_only_what_sbx_says_there(tmp_path: Path) -> None:
    done = _with_closed("2>&-", "explain", "no_such_reason", home=tmp_path / "state")
    assert done.returncode == 2 and done.stderr == b""
    listed = _with_closed("2>&-", "ls", "--json", home=tmp_path / "state")
    assert listed.returncode == 0 and json.loads(listed.stdout)["status"] == "ok"
