"""`sbx config path` and `sbx config show`, run as the installed console script: which file is
read and why, every value with its source (default or file:line), SBX_CONFIG, the JSON shape,
a bad config as a reason code and exit status (never a traceback), and the README's example."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.acceptance

SBX = shutil.which("sbx", path=str(Path(sys.executable).parent)) or "sbx"
README = Path(__file__).resolve().parents[2] / "README.md"
# Every setting `config show` lists; the README's example sets each one.
SETTINGS = {
    "sandbox.memory_bytes", "sandbox.pids", "sandbox.cpu_millis", "sandbox.tmp_bytes",
    "sandbox.workspace_bytes", "sandbox.home_bytes", "sandbox.timeout_ms", "sandbox.user",
    "sandbox.root_workspace", "sandbox.detach_keys", "sandbox.terminal_passthrough",
    "sandbox.runtime", "sandbox.keep", "sandbox.workspace_copy_bytes", "sandbox.idle_stop",
    "network.upstream_proxy",
    "network.upstream_ca_file", "network.proxy_bind_host", "mounts.allowed_roots",
    "mounts.blocked", "gc.grace_seconds", "gc.batch_size", "gc.named_ttl",
    "gc.image_idle_seconds",
}


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != "SBX_CONFIG"}
    env.update(SBX_HOME=str(tmp_path / "state"), XDG_CONFIG_HOME=str(tmp_path / "xdg"),
               HOME=str(tmp_path / "home"), NO_COLOR="1")
    env.update(extra)
    return env


def _sbx(env: dict[str, str], *args: str, cwd: Path | None = None,
         ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SBX, *args], env=env, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL, check=False, cwd=cwd)


def _json(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(done.stdout)
    return loaded


def _settings(done: subprocess.CompletedProcess[str]) -> dict[str, dict[str, str]]:
    return {item["name"]: item for item in _json(done)["data"]["settings"]}


def test_without_a_file_every_value_is_the_default(tmp_path: Path) -> None:
    env = _env(tmp_path)
    default = tmp_path / "xdg" / "sbx" / "config.toml"
    where = _sbx(env, "config", "path")
    assert where.returncode == 0, where.stderr
    assert where.stdout == f"{default}\n"  # nothing else on stdout: $EDITOR "$(sbx config path)"
    shown = _sbx(env, "config", "show")
    assert shown.returncode == 0, shown.stderr
    assert f"config file: {default} (absent: every value is the default)" in shown.stdout
    # Values print for people (sizes and durations), each with where it came from.
    assert "  sandbox.timeout_ms = 1 h  (default; [sandbox] timeout_ms in" in shown.stdout
    assert "  sandbox.memory_bytes = 4 GiB  (default;" in shown.stdout
    settings = _settings(_sbx(env, "config", "show", "--json"))
    assert set(settings) == SETTINGS
    assert {item["source"] for item in settings.values()} == {"default"}
    # Without XDG_CONFIG_HOME, the file is under HOME.
    del env["XDG_CONFIG_HOME"]
    path = _json(_sbx(env, "config", "path", "--json"))["data"]
    assert path["path"] == str(tmp_path / "home" / ".config" / "sbx" / "config.toml")
    assert path["chosen_by"] == "HOME" and path["exists"] is False


def test_a_file_value_names_its_file_and_line(tmp_path: Path) -> None:
    env = _env(tmp_path)
    config = tmp_path / "xdg" / "sbx" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text("# mine\n\n[sandbox]\npids = 64\n\n[gc]\nnamed_ttl = 86400\n",
                      encoding="utf-8")
    shown = _sbx(env, "config", "show")
    assert shown.returncode == 0, shown.stderr
    assert f"config file: {config}\n" in shown.stdout
    assert f"  sandbox.pids = 64  ({config}:4; [sandbox] pids in {config})" in shown.stdout
    settings = _settings(_sbx(env, "config", "show", "--json"))
    assert settings["sandbox.pids"]["value"] == "64"
    assert settings["sandbox.pids"]["source"] == f"{config}:4"
    assert settings["gc.named_ttl"]["source"] == f"{config}:7"
    assert settings["sandbox.memory_bytes"]["source"] == "default"


def test_sbx_config_names_the_file(tmp_path: Path) -> None:
    other = tmp_path / "elsewhere.toml"
    other.write_text("[sandbox]\ncpu_millis = 500\n", encoding="utf-8")
    ignored = tmp_path / "xdg" / "sbx" / "config.toml"
    ignored.parent.mkdir(parents=True)
    ignored.write_text("[sandbox]\ncpu_millis = 2000\n", encoding="utf-8")
    env = _env(tmp_path, SBX_CONFIG=str(other))
    path = _json(_sbx(env, "config", "path", "--json"))
    assert path["data"] == {"path": str(other), "exists": True, "chosen_by": "SBX_CONFIG",
                            "state_home": str(tmp_path / "state")}
    settings = _settings(_sbx(env, "config", "show", "--json"))
    assert settings["sandbox.cpu_millis"] == {
        "name": "sandbox.cpu_millis", "value": "500", "raw": 500, "source": f"{other}:2",
        "change": f"[sandbox] cpu_millis in {other}"}


def test_json_shape(tmp_path: Path) -> None:
    env = _env(tmp_path)
    for command in ("path", "show"):
        done = _sbx(env, "config", command, "--json")
        assert done.returncode == 0, done.stderr
        assert done.stderr == ""
        envelope = _json(done)
        assert set(envelope) == {"sbx_result_version", "command", "status", "exit_code", "data",
                                 "diagnostics", "reason", "message", "hint"}
        assert envelope["command"] == f"config {command}"
        assert (envelope["status"], envelope["exit_code"], envelope["reason"]) == ("ok", 0, None)
    data = _json(_sbx(env, "config", "show", "--json"))["data"]
    assert set(data) == {"path", "exists", "settings"}
    for item in data["settings"]:
        assert set(item) == {"name", "value", "raw", "source", "change"}
        # `raw` is the typed value (a number, a list, null); the others are text.
        assert all(isinstance(item[key], str) for key in ("name", "value", "source", "change"))


@pytest.mark.parametrize(("text", "line", "fragment"), [
    ("[sandbox]\npids = 64\ntimeout_msx = 5\n", 3,
     "sandbox.timeout_msx: unknown key; did you mean 'timeout_ms'?"),
    ("[sandbox]\npids = 0\n", 2, "sandbox.pids"),
    ("[sandbox\npids = 1\n", 1, "is not valid TOML"),
])
def test_a_bad_config_is_invalid_config_not_a_traceback(tmp_path: Path, text: str, line: int,
                                                        fragment: str) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(text, encoding="utf-8")
    env = _env(tmp_path, SBX_CONFIG=str(bad))
    shown = _sbx(env, "config", "show")
    assert shown.returncode == 125, shown.stderr
    assert shown.stdout == ""
    assert "Traceback" not in shown.stderr
    assert fragment in shown.stderr
    assert f"{bad}:{line}" in shown.stderr
    assert "(invalid_config)" in shown.stderr
    as_json = _sbx(env, "config", "show", "--json")
    assert as_json.returncode == 125
    envelope = _json(as_json)
    assert envelope["command"] == "config show"
    assert (envelope["status"], envelope["reason"], envelope["exit_code"]) == (
        "refused", "invalid_config", 125)
    # `config path` does not read the file: it still answers, so the user can open it.
    where = _sbx(env, "config", "path")
    assert (where.returncode, where.stdout) == (0, f"{bad}\n")


def test_a_missing_sbx_config_is_refused_by_show_and_reported_by_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    env = _env(tmp_path, SBX_CONFIG=str(missing))
    shown = _sbx(env, "config", "show")
    assert shown.returncode == 125
    assert "(invalid_config)" in shown.stderr and "Traceback" not in shown.stderr
    path = _json(_sbx(env, "config", "path", "--json"))["data"]
    assert (path["path"], path["exists"], path["chosen_by"]) == (str(missing), False,
                                                                 "SBX_CONFIG")


def _readme_example() -> str:
    text = README.read_text(encoding="utf-8")
    section = text.split("\n## Configuration\n", 1)[1]
    return section.split("```toml\n", 1)[1].split("\n```", 1)[0] + "\n"


def test_the_readme_example_config_is_valid_and_complete(tmp_path: Path) -> None:
    example = tmp_path / "example.toml"
    example.write_text(_readme_example(), encoding="utf-8")
    env = _env(tmp_path, SBX_CONFIG=str(example))
    done = _sbx(env, "config", "show", "--json")
    assert done.returncode == 0, done.stderr
    settings = _settings(done)
    assert set(settings) == SETTINGS
    defaults = [name for name, item in settings.items() if item["source"] == "default"]
    assert not defaults, f"the README's example config does not show: {defaults}"
