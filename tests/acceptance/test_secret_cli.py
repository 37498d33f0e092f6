"""`sbx secret set|ls|rm` through the installed console script, as a user would run it."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

SBX = shutil.which("sbx", path=str(Path(sys.executable).parent)) or "sbx"
TOKEN = "gho_GCaw4oSECRETVALUEabcdef43qy"  # noqa: S105 -- a made-up test value

pytestmark = pytest.mark.acceptance


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "SBX_HOME": str(tmp_path / "state"),
            "SBX_CONFIG": str(tmp_path / "config.toml"), "NO_COLOR": "1"}


def _sbx(tmp_path: Path, *args: str, stdin: str | None = None,
         ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SBX, *args], env=_env(tmp_path), capture_output=True, text=True,
                          input=stdin if stdin is not None else "", timeout=60, check=False)


def _envelope(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return loaded


def _no_value_anywhere(tmp_path: Path, *outputs: subprocess.CompletedProcess[str]) -> None:
    for done in outputs:
        assert TOKEN not in done.stdout and TOKEN not in done.stderr
    audit_log = tmp_path / "state" / "audit.jsonl"
    if audit_log.exists():
        assert TOKEN not in audit_log.read_text(encoding="utf-8")


def test_set_ls_rm(tmp_path: Path) -> None:
    stored = _sbx(tmp_path, "secret", "set", "github", stdin=TOKEN + "\n")
    assert stored.returncode == 0, stored.stderr
    assert "github" in stored.stdout and "gho_GC****...****43qy" in stored.stdout
    secret_file = tmp_path / "state" / "secrets" / "github"
    assert secret_file.read_text(encoding="utf-8") == TOKEN  # echo's newline stripped
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600

    listed = _sbx(tmp_path, "secret", "ls")
    assert listed.returncode == 0, listed.stderr
    row = next(line for line in listed.stdout.splitlines() if line.startswith("github"))
    assert row.split()[:3] == ["github", "gho_GC****...****43qy", str(len(TOKEN))]

    as_json = _sbx(tmp_path, "secret", "ls", "--json")
    assert as_json.returncode == 0
    envelope = _envelope(as_json)
    assert envelope["status"] == "ok" and envelope["exit_code"] == 0
    [entry] = envelope["data"]["secrets"]
    assert entry["service"] == "github" and entry["masked"] == "gho_GC****...****43qy"
    assert entry["length"] == len(TOKEN) and entry["updated"]

    removed = _sbx(tmp_path, "secret", "rm", "github")
    assert removed.returncode == 0 and "github" in removed.stdout
    assert not secret_file.exists()
    empty = _sbx(tmp_path, "secret", "ls", "--json")
    assert _envelope(empty)["data"]["secrets"] == []
    events = [json.loads(line)["event_type"] for line in
              (tmp_path / "state" / "audit.jsonl").read_text(encoding="utf-8").splitlines()]
    assert events == ["secret_set", "secret_removed"]
    _no_value_anywhere(tmp_path, stored, listed, as_json, removed, empty)


def test_set_with_json_and_replace(tmp_path: Path) -> None:
    first = _sbx(tmp_path, "secret", "set", "openai-api", "--json", stdin="sk-short\n")
    assert first.returncode == 0
    assert _envelope(first)["data"] == {
        "action": "set", "service": "openai-api", "masked": "sk-sho****", "length": 8,
        "updated": _envelope(first)["data"]["updated"]}
    second = _sbx(tmp_path, "secret", "set", "openai-api", stdin=TOKEN)
    assert second.returncode == 0
    assert (tmp_path / "state" / "secrets" / "openai-api").read_text(encoding="utf-8") == TOKEN
    _no_value_anywhere(tmp_path, first, second)


def test_ls_when_empty_prints_nothing_on_stdout(tmp_path: Path) -> None:
    done = _sbx(tmp_path, "secret", "ls")
    assert done.returncode == 0 and done.stdout == ""
    assert "no secrets stored" in done.stderr


@pytest.mark.parametrize("name", ["GitHub", "x-", "a_b", "a" * 65, "../etc", "a.b"])
def test_bad_service_name_exits_2(tmp_path: Path, name: str) -> None:
    done = _sbx(tmp_path, "secret", "set", name, stdin=TOKEN)
    assert done.returncode == 2
    assert f"{name!r} is not a valid service name (invalid_argument)" in done.stderr
    assert not (tmp_path / "state" / "secrets").exists()
    _no_value_anywhere(tmp_path, done)


def test_bad_service_name_json_envelope(tmp_path: Path) -> None:
    done = _sbx(tmp_path, "secret", "set", "Bad", "--json", stdin=TOKEN)
    assert done.returncode == 2
    envelope = _envelope(done)
    assert envelope["reason"] == "invalid_argument" and envelope["status"] == "refused"


def test_empty_stdin_is_refused(tmp_path: Path) -> None:
    done = _sbx(tmp_path, "secret", "set", "github", stdin="")
    assert done.returncode == 2 and "empty" in done.stderr
    assert "sbx secret set" in done.stderr  # the hint shows how to pipe a value


def test_rm_of_a_missing_secret_exits_2(tmp_path: Path) -> None:
    done = _sbx(tmp_path, "secret", "rm", "github")
    assert done.returncode == 2
    assert "no secret stored for 'github' (invalid_argument)" in done.stderr


def test_a_group_readable_secret_is_refused(tmp_path: Path) -> None:
    assert _sbx(tmp_path, "secret", "set", "github", stdin=TOKEN).returncode == 0
    os.chmod(tmp_path / "state" / "secrets" / "github", 0o640)
    done = _sbx(tmp_path, "secret", "ls")
    assert done.returncode == 125
    assert "(secret_store_unsafe)" in done.stderr and "chmod 600" in done.stderr
    _no_value_anywhere(tmp_path, done)
