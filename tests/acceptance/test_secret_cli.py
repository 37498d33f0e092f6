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
    assert "github" in stored.stdout and "gho****" in stored.stdout
    secret_file = tmp_path / "state" / "secrets" / "github"
    assert secret_file.read_text(encoding="utf-8") == TOKEN  # echo's newline stripped
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600

    listed = _sbx(tmp_path, "secret", "ls")
    assert listed.returncode == 0, listed.stderr
    row = next(line for line in listed.stdout.splitlines() if line.startswith("github"))
    assert row.split()[:3] == ["github", "gho****", str(len(TOKEN))]

    as_json = _sbx(tmp_path, "secret", "ls", "--json")
    assert as_json.returncode == 0
    envelope = _envelope(as_json)
    assert envelope["status"] == "ok" and envelope["exit_code"] == 0
    [entry] = envelope["data"]["secrets"]
    assert entry["service"] == "github" and entry["masked"] == "gho****"
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
        "action": "set", "service": "openai-api", "masked": "****", "length": 8,
        "source": "file", "reference": None, "updated": _envelope(first)["data"]["updated"]}
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


# --- where secrets live: file or OS keyring, host variable, host command ----------------------


def _sbx_env(env: dict[str, str], *args: str, stdin: str = "",
             ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SBX, *args], env=env, capture_output=True, text=True, input=stdin,
                          timeout=60, check=False)


def _nothing_stored(tmp_path: Path) -> None:
    for path in (tmp_path / "state").rglob("*"):
        if path.is_file():
            assert TOKEN.encode() not in path.read_bytes(), path


def test_set_says_the_file_store_is_used_without_a_keyring(tmp_path: Path) -> None:
    done = _sbx(tmp_path, "secret", "set", "github", stdin=TOKEN)
    assert done.returncode == 0, done.stderr
    assert "in the file store" in done.stdout and "no OS keyring" in done.stdout


def test_from_env_and_from_command_store_only_the_reference(tmp_path: Path) -> None:
    env = {**_env(tmp_path), "GH_TOKEN": TOKEN}
    by_env = _sbx_env(env, "secret", "set", "github", "--from-env", "GH_TOKEN")
    assert by_env.returncode == 0, by_env.stderr
    assert "read from $GH_TOKEN on the host at each run start" in by_env.stdout
    by_command = _sbx_env(env, "secret", "set", "openai", "--json", "--from-command",
                          'printf %s "$GH_TOKEN"')
    assert by_command.returncode == 0, by_command.stderr
    data = _envelope(by_command)["data"]
    assert (data["source"], data["reference"], data["masked"]) == (
        "command", 'printf %s "$GH_TOKEN"', None)
    listed = _sbx_env(env, "secret", "ls")
    rows = {line.split()[0]: line for line in listed.stdout.splitlines()[1:]}
    assert "env $GH_TOKEN" in rows["github"] and "command `printf" in rows["openai"]
    unset = _sbx_env(_env(tmp_path), "secret", "set", "x", "--from-env", "NOT_SET_HERE")
    assert unset.returncode == 2 and "$NOT_SET_HERE is not set" in unset.stderr
    assert "nothing was stored" in unset.stderr and "--no-verify" in unset.stderr
    failing = _sbx_env(env, "secret", "set", "y", "--from-command", "exit 4")
    assert failing.returncode == 2 and "failed (exit 4)" in failing.stderr
    later = _sbx_env(env, "secret", "set", "z", "--from-env", "LATER", "--no-verify")
    assert later.returncode == 0, later.stderr
    _no_value_anywhere(tmp_path, by_env, by_command, listed, unset, failing, later)
    _nothing_stored(tmp_path)


def test_a_from_command_that_backgrounds_a_child_leaves_nothing_running(
        tmp_path: Path) -> None:
    """The child a command puts in the background is ended with it, within seconds (not at
    the command's 30 s deadline, and not never)."""
    import time

    pids = tmp_path / "pids"
    done = _sbx_env(_env(tmp_path), "secret", "set", "svc", "--from-command",
                    f"sleep 300 & echo $! > {pids}; setsid sleep 301 & echo $! >> {pids}; "
                    "sleep 0.2; echo tok-123")
    assert done.returncode == 0, done.stderr
    started = [int(word) for word in pids.read_text().split()]
    assert len(started) == 2
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(Path(f"/proc/{pid}").exists()
                                              for pid in started):
        time.sleep(0.05)
    alive = [pid for pid in started if Path(f"/proc/{pid}/stat").exists()
             and Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"]
    assert alive == []


def test_import_offers_known_variables_and_needs_yes_without_a_terminal(
        tmp_path: Path) -> None:
    env = {**_env(tmp_path), "ANTHROPIC_API_KEY": TOKEN, "GH_TOKEN": TOKEN + "gh"}
    for name in ("OPENAI_API_KEY", "GITHUB_TOKEN", "GEMINI_API_KEY", "GOOGLE_API_KEY"):
        env.pop(name, None)
    refused = _sbx_env(env, "secret", "import")
    assert refused.returncode == 2
    assert "$ANTHROPIC_API_KEY as anthropic" in refused.stderr and "--yes" in refused.stderr
    dry = _sbx_env(env, "secret", "import", "--dry-run")
    assert dry.returncode == 0
    assert f"would import $GH_TOKEN as github ({len(TOKEN) + 2} characters)" in dry.stdout
    done = _sbx_env(env, "secret", "import", "--yes", "--json", "anthropic")
    assert done.returncode == 0, done.stderr
    [imported] = _envelope(done)["data"]["imported"]
    assert imported["service"] == "anthropic" and imported["source"] == "file"
    stored = (tmp_path / "state" / "secrets" / "anthropic").read_text(encoding="utf-8")
    assert stored == TOKEN
    again = _sbx_env(env, "secret", "import", "--yes")
    assert again.returncode == 0
    assert "skipped $ANTHROPIC_API_KEY (anthropic): anthropic already has a secret" \
        in again.stderr
    assert "imported $GH_TOKEN as github into the file store" in again.stdout
    _no_value_anywhere(tmp_path, refused, dry, done, again)


def test_an_os_keyring_plugin_gets_the_value_instead_of_the_file_store(tmp_path: Path) -> None:
    support = Path(__file__).resolve().parents[1] / "support"
    keyring_file = tmp_path / "keyring.json"
    env = {**_env(tmp_path), "PYTHON_KEYRING_BACKEND": "fakekeyring.FileKeyring",
           "SBX_TEST_KEYRING_FILE": str(keyring_file),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(support),
                                                       os.environ.get("PYTHONPATH")]))}
    stored = _sbx_env(env, "secret", "set", "github", stdin=TOKEN)
    assert stored.returncode == 0, stored.stderr
    assert "in the OS keyring (fakekeyring.FileKeyring)" in stored.stdout
    assert TOKEN in keyring_file.read_text(encoding="utf-8")
    assert not (tmp_path / "state" / "secrets" / "github").exists()
    listed = _sbx_env(env, "secret", "ls", "--json")
    [entry] = _envelope(listed)["data"]["secrets"]
    assert (entry["source"], entry["masked"]) == ("keyring", None)
    removed = _sbx_env(env, "secret", "rm", "github")
    assert removed.returncode == 0
    assert TOKEN not in keyring_file.read_text(encoding="utf-8")
    _no_value_anywhere(tmp_path, stored, listed, removed)
    _nothing_stored(tmp_path)
