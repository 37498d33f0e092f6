"""Hostile kits, damaged or unwritable state and odd command lines, through the console script.

Issues #10, #11 and #13 as a user meets them: the installed ``sbx`` is run as a child process
and judged by its real exit status and stderr — never ``Traceback``, never exit 70, always the
reason code in parentheses, and never a hang (every run is bounded by a subprocess timeout).
Nothing here needs the engine (``DOCKER_HOST`` points at a socket that does not exist); the
engine-backed cases are in ``tests/integration/test_bad_state_engine.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.support import statehome

SBX = shutil.which("sbx", path=str(Path(sys.executable).parent)) or "sbx"
HEAD = '# syntax=docker/sandbox-kit:3\nschemaVersion: "3"\nkind: workload\n'
RUN = "0123456789abcdef0123456789abcdef"
HANG_S = 20  # the campaign's hang threshold: a hostile input must end far sooner

pytestmark = pytest.mark.acceptance


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != "SBX_CONFIG"}
    env.update({"SBX_HOME": str(tmp_path / "state"),
                "XDG_CONFIG_HOME": str(tmp_path / "xdg-config"), "NO_COLOR": "1",
                "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"})
    env.update(extra)
    return env


def _sbx(args: Sequence[str | bytes], env: dict[str, str],
         cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SBX, *args], env=env, capture_output=True, text=True,
                          errors="backslashreplace", timeout=HANG_S, cwd=cwd,
                          stdin=subprocess.DEVNULL, check=False)


def _clean(result: subprocess.CompletedProcess[str]) -> None:
    """No crash: not exit 70, no traceback, no internal_error."""
    assert result.returncode != 70, result.stderr
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout
    assert "(internal_error)" not in result.stderr, result.stderr


def _refused(result: subprocess.CompletedProcess[str], reason: str, status: int = 125) -> None:
    _clean(result)
    assert result.returncode == status, (result.returncode, result.stderr)
    assert f"({reason})" in result.stderr, result.stderr


def _answered_but_run_refuses(result: subprocess.CompletedProcess[str], reason: str) -> None:
    """explain answers from the kits, the config and the user policy, and says what `sbx run`
    would refuse (the engine stage of the plan could not finish)."""
    _clean(result)
    assert result.returncode == 0, (result.returncode, result.stderr)
    assert "sbx run would refuse to start:" in result.stdout and f"({reason})" in result.stdout


def _kit(root: Path, text: str, name: str = "kit") -> Path:
    kit = root / name
    kit.mkdir(parents=True, exist_ok=True)
    (kit / f"{name}.yaml").write_text(text, encoding="utf-8")
    (kit / f"{name}.dockerfile").write_text("FROM sbx-test/busybox:1\nUSER agent\n",
                                            encoding="utf-8")
    return kit


# -- #10 hostile descriptors ----------------------------------------------------------------------


def _laughs() -> str:
    lines = ["l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 9)]
    return HEAD + "\n".join(lines) + "\n"


HOSTILE = {
    "alias-bomb": _laughs(),
    "redos-default": HEAD + "args:\n  v:\n    pattern: '^(a+)+$'\n    default: '"
    + "a" * 32 + "!'\n",
    "lookahead-pattern": HEAD + "args:\n  v:\n    pattern: '(?=a)a'\n",
    "deep-flow": HEAD + "x: " + "[" * 400_000 + "\n",
    "deep-block": HEAD + "x:\n" + "".join(" " * i + "- \n" for i in range(1, 3000)),
    "many-nodes": HEAD + "provides: [" + ",".join(f"p{i}@1.0.0" for i in range(60_000)) + "]\n",
    "too-large": HEAD + "description: '" + "a" * (600 * 1024) + "'\n",
    "many-problems-one-line": HEAD + "licenses: [" + ",".join(f"{{a: {i}}}" for i in
                                                              range(4000)) + "]\n",
    "merge-key": HEAD + "labels: {<<: {a: b}}\n",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_kit_is_refused_promptly_by_every_command(tmp_path: Path, name: str) -> None:
    kit = _kit(tmp_path, HOSTILE[name])
    env = _env(tmp_path)
    _refused(_sbx(["explain", str(kit)], env), "invalid_kit")
    _refused(_sbx(["run", str(kit)], env), "invalid_kit")
    doctor = _sbx(["doctor", str(kit)], env)
    _clean(doctor)
    assert doctor.returncode == 1 and "(invalid_kit)" in doctor.stdout


def test_the_limits_are_named_in_the_refusal(tmp_path: Path) -> None:
    env = _env(tmp_path)
    too_large = _sbx(["explain", str(_kit(tmp_path, HOSTILE["too-large"], "big"))], env)
    assert "512 KiB (524288 bytes) limit" in too_large.stderr
    bomb = _sbx(["explain", str(_kit(tmp_path, HOSTILE["alias-bomb"], "bomb"))], env)
    assert "anchors (&l0) are not allowed" in bomb.stderr and "bomb.yaml:4:" in bomb.stderr
    lookahead = _sbx(["explain", str(_kit(tmp_path, HOSTILE["lookahead-pattern"], "look"))],
                     env)
    assert "args.v.pattern" in lookahead.stderr and "RE2" in lookahead.stderr


def test_a_catastrophic_pattern_matches_a_supplied_value_at_once(tmp_path: Path) -> None:
    kit = _kit(tmp_path, HEAD + "args:\n  v:\n    pattern: '^(a+)+$'\n")
    env = _env(tmp_path)
    _refused(_sbx(["explain", str(kit), "--arg", "v=" + "a" * 64 + "!"], env), "invalid_kit")
    # The value passes: planning goes on to the engine, which is down here (as for run).
    _answered_but_run_refuses(_sbx(["explain", str(kit), "--arg", "v=" + "a" * 64], env),
                              "docker_unreachable")


# -- #11 damaged state ----------------------------------------------------------------------------


def _event(kind: str, **details: object) -> bytes:
    return json.dumps({"timestamp": "2026-12-01T00:00:00.000+00:00", "event_type": kind,
                       "run_id": RUN, "severity": "warning", "details": details}).encode()


def test_explain_last_reads_past_a_damaged_audit_log(tmp_path: Path) -> None:
    home = tmp_path / "state"
    home.mkdir()
    (home / "audit.jsonl").write_bytes(b"\n".join([
        b"\xff\xfe\x80 not utf-8", b"[" * 100_000, b'{"event_type": 5}',
        b'{"timestamp": "t", "event_type": "sandbox_started", "run_id": "x", "severity": "i",'
        b' "details": {"kits": 7, "workload": ["w"]}}',
        _event("sandbox_unavailable", reason="mount_blocked", workload="./k"),
        b"{" * 10_000]) + b"\n")
    env = _env(tmp_path)
    last = _sbx(["explain", "--last"], env)
    _clean(last)
    assert last.returncode == 0 and "mount_blocked" in last.stdout
    assert "skipped 4 line(s)" in last.stderr  # the wrongly typed details still read
    by_id = _sbx(["explain", RUN, "--json"], env)
    assert by_id.returncode == 0
    assert json.loads(by_id.stdout)["data"]["skipped_lines"] == 4


JUNK_LOCK = b"\x00\x01binary\xff\xfe junk\x80" * 100


def test_a_damaged_kit_lock_refuses_run_and_pull_and_is_left_alone(tmp_path: Path) -> None:
    home = tmp_path / "state"
    home.mkdir()
    lock = home / "kits.lock.json"
    for content in (JUNK_LOCK, b"[" * 200_000, b'{"version": 1, "kits": [5]}'):
        lock.write_bytes(content)
        env = _env(tmp_path)
        run = _sbx(["run", "127.0.0.1:9/kits/shell:1"], env, cwd=tmp_path)
        _refused(run, "state_corrupt")
        assert str(lock) in run.stderr
        # The lock is read before any registry is contacted (and 127.0.0.1:9 is loopback).
        _refused(_sbx(["pull", "127.0.0.1:9/kits/shell:1"], env), "state_corrupt")
        assert lock.read_bytes() == content


def test_a_state_home_that_is_a_file_is_a_reason(tmp_path: Path) -> None:
    home = tmp_path / "home-file"
    home.write_text("I am a file\n", encoding="utf-8")
    kit = _kit(tmp_path, HEAD)
    env = _env(tmp_path, SBX_HOME=str(home))
    for args in (["run", str(kit)], ["explain", "--last"], ["explain", str(kit)], ["gc"],
                 ["secret", "ls"]):
        result = _sbx(args, env)
        _refused(result, "state_unwritable")
        assert "SBX_HOME" in result.stderr and "fix:" in result.stderr
    _refused(_sbx(["run", str(kit)], _env(tmp_path, SBX_HOME=str(home / "below"))),
             "state_unwritable")
    assert home.read_text(encoding="utf-8") == "I am a file\n"


def test_a_missing_state_home_is_created_on_first_write(tmp_path: Path) -> None:
    home = tmp_path / "not" / "yet"
    done = subprocess.run([SBX, "secret", "set", "github"], input="tok", text=True,
                          capture_output=True, env=_env(tmp_path, SBX_HOME=str(home)),
                          timeout=HANG_S, check=False)
    assert done.returncode == 0, done.stderr
    assert (home / "audit.jsonl").is_file()


def test_a_read_only_state_home(tmp_path: Path) -> None:
    source = tmp_path / "state-source"
    (source / "runs" / RUN).mkdir(parents=True)
    (source / "runs" / RUN / "run.json").write_text("{}", encoding="utf-8")
    (source / "audit.jsonl").write_bytes(_event("sandbox_unavailable", reason="timeout") + b"\n")
    with statehome.read_only(source, tmp_path / "state") as home:
        env = _env(tmp_path)
        last = _sbx(["explain", "--last"], env)
        _clean(last)
        assert last.returncode == 0 and "timeout" in last.stdout
        secret = subprocess.run([SBX, "secret", "set", "github"], input="tok", text=True,
                                capture_output=True, env=env, timeout=HANG_S, check=False)
        _clean(secret)
        assert secret.returncode == 125 and "Read-only file system" in secret.stderr
        gc = _sbx(["gc"], env)  # cannot take its lock: deletes nothing, says why
        _clean(gc)
        assert gc.returncode != 0 and "Read-only file system" in gc.stderr
        assert (home / "runs" / RUN / "run.json").is_file()


def test_a_full_state_home(tmp_path: Path) -> None:
    with statehome.full(tmp_path / "state", keep=("runs",)) as home:
        env = _env(tmp_path)
        last = _sbx(["explain", "--last"], env)
        _clean(last)
        assert last.returncode == 0
        secret = subprocess.run([SBX, "secret", "set", "github"], input="tok", text=True,
                                capture_output=True, env=env, timeout=HANG_S, check=False)
        _clean(secret)
        assert secret.returncode == 125 and "No space left on device" in secret.stderr
        gc = _sbx(["gc"], env)  # takes its lock, then cannot list (no engine): deletes nothing
        _refused(gc, "docker_unreachable", status=126)
        assert "nothing was removed" in gc.stderr and (home / "runs").is_dir()


# -- #11 odd command lines and output encodings --------------------------------------------------


ODD_ARGS: list[list[str | bytes]] = [
    ["run", "a" * 5000], ["run", "x/" * 3000], ["run", b"\xff\xfe"],
    ["run", "KIT", "--kit", "b" * 5000], ["run", "KIT", "--mount", "c" * 5000 + ":/x"],
    ["explain", "d" * 5000],
    ["explain", "e" * 300], ["explain", b"\xff"], ["explain", "KIT", "GET", "http://[::1"],
    ["explain", "KIT", "GET", "http://[::1]:99999/"], ["explain", "KIT", b"\xff\xfe"],
    ["explain", "KIT", "--kit", "f" * 5000], ["doctor", "g" * 5000],
    ["doctor", "KIT", "--kit", "h" * 5000], ["explain", "0" * 32],
    ["run", "KIT", "--arg", b"v=\xff"],
]


@pytest.mark.parametrize("args", ODD_ARGS, ids=[str(i) for i in range(len(ODD_ARGS))])
def test_odd_arguments_end_in_a_reason(tmp_path: Path, args: list[str | bytes]) -> None:
    kit = _kit(tmp_path, HEAD)
    argv = [str(kit) if a == "KIT" else a for a in args]
    result = _sbx(argv, _env(tmp_path), cwd=tmp_path)
    _clean(result)
    assert result.returncode in (1, 2, 125), (result.returncode, result.stderr)
    if result.returncode != 1:  # doctor's findings carry their codes on stdout
        assert result.stderr.rstrip().endswith(")") or "fix:" in result.stderr, result.stderr


def test_an_ascii_only_output_gets_every_line_readable(tmp_path: Path) -> None:
    kit = _kit(tmp_path, HEAD)
    env = _env(tmp_path, PYTHONIOENCODING="ascii")
    doctor = _sbx(["doctor"], env)
    _clean(doctor)
    assert doctor.returncode == 1  # the engine is down here
    assert doctor.stdout.startswith("+  platform - ")  # the ✓ line, readable, not dropped
    assert "x  engine - " in doctor.stdout
    for args, status in ((["explain", "timeout"], 0), (["explain", "--list"], 0),
                         # Answered from the kits (the engine is down here: said in a line).
                         (["explain", str(kit)], 0),
                         (["explain", str(kit), "GET", "http://\u00fc.example/\u00e9"], 1),
                         (["explain", "caf\u00e9"], 125)):
        result = _sbx(list(args), env)
        _clean(result)
        assert result.returncode == status, (args, result.stderr)
        assert result.stdout.isascii() and result.stderr.isascii()
    reason = _sbx(["explain", "timeout"], env)
    assert reason.stdout.startswith("timeout - Run timed out")


# -- #13 SBX_CONFIG and SBX_HOME are taken as given -----------------------------------------------


def test_a_missing_sbx_config_is_refused_not_defaults(tmp_path: Path) -> None:
    kit = _kit(tmp_path, HEAD)
    missing = tmp_path / "tpyo.toml"
    env = _env(tmp_path, SBX_CONFIG=str(missing))
    for args in (["run", str(kit)], ["explain", str(kit)]):
        result = _sbx(args, env)
        _refused(result, "invalid_config")
        assert "SBX_CONFIG" in result.stderr and str(missing) in result.stderr
    doctor = _sbx(["doctor"], env)
    _clean(doctor)
    assert doctor.returncode == 1 and "SBX_CONFIG" in doctor.stdout
    assert "(invalid_config)" in doctor.stdout


def test_the_default_config_location_may_be_missing(tmp_path: Path) -> None:
    kit = _kit(tmp_path, HEAD)
    # kit inspect: the config's values without the engine (explain plans, which needs it).
    result = _sbx(["kit", "inspect", str(kit)], _env(tmp_path))
    _clean(result)
    assert result.returncode == 0, result.stderr
    assert "(default;" in result.stdout
    planned = _sbx(["explain", str(kit)], _env(tmp_path))
    _answered_but_run_refuses(planned, "docker_unreachable")  # not invalid_config: it loaded


def test_allowed_roots_from_the_named_config_apply(tmp_path: Path) -> None:
    config = tmp_path / "sbx.toml"
    config.write_text(f'[mounts]\nallowed_roots = ["{tmp_path / "allowed"}"]\n',
                      encoding="utf-8")
    kit = _kit(tmp_path, HEAD)
    outside = tmp_path / "outside"
    outside.mkdir()
    result = _sbx(["run", str(kit), str(outside)], _env(tmp_path, SBX_CONFIG=str(config)))
    _refused(result, "mount_blocked")
