"""`sbx run` output and input through the real console script, checked byte for byte.

The workload's output comes from the engine's attach stream, opened before the container starts:
every byte must arrive, in order per stream, binary-safe — including a last chunk without a
newline and output written right before the workload exits — with and without a TTY, and
captured exactly into the ``--json`` envelope (up to 1 MiB per stream). stdin from a pipe or a
file reaches the workload with its EOF, and a reader that goes away stops the run quietly.

Large streams are compared by sha256: either the workload reports the hash of what it wrote
(into the workspace, out of band), or both sides derive the same bytes from a seed
(``hashlib.shake_256``, identical on every Python).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from sbx.seams.driver import SdkEngine
from tests.support.sbxproc import SBX, Finished, read_some, run_digested, run_sbx

from .conftest import make_kit, owned, user_owned

pytestmark = pytest.mark.docker

MiB = 1024 * 1024
REPEATS = 8  # the old log-following reader lost short output most of the time, not always
PARALLEL = 4
DEB_DOCKERFILE = 'FROM sbx-base/bookworm:1\nUSER agent\nWORKDIR /workspace\nCMD ["true"]\n'

# Each case: argv after `--`, exit status, exact stdout, exact stderr.
BINARY_OUT = bytes(range(256)) * 3 + b"\x00\xff\x00"
BINARY_ERR = b"\xff\xfe\x00err" + bytes(range(255, -1, -1))
SHORT_CASES: dict[str, tuple[list[str], int, bytes, bytes]] = {
    "printf-then-sleep": (["sh", "-c", "printf abc; sleep 1"], 0, b"abc", b""),
    "output-right-before-exit": (
        ["sh", "-c", "printf 'x%.0s' $(seq 1 5000); exit 3"], 3, b"x" * 5000, b""),
    "stderr-last-line-without-newline": (
        ["sh", "-c", "printf 'one\\ntwo\\n'; printf 'first line\\nlast line' >&2"], 0,
        b"one\ntwo\n", b"first line\nlast line"),
    "binary-with-nul-and-0xff": (
        ["python3", "-c",
         "import sys\n"
         f"sys.stdout.buffer.write({BINARY_OUT!r}); sys.stdout.flush()\n"
         f"sys.stderr.buffer.write({BINARY_ERR!r}); sys.stderr.flush()\n"
         "sys.exit(9)"], 9, BINARY_OUT, BINARY_ERR),
}

# 200 MiB on stdout and 50 MiB on stderr, from two threads at once; each thread writes the
# sha256 of exactly what it wrote into the workspace when done.
BIG_WRITER = """
import hashlib, os, threading
def emit(fd, size, path):
    digest = hashlib.sha256()
    left = size
    while left:
        block = os.urandom(min(left, 1 << 20))
        digest.update(block)
        view = memoryview(block)
        while view:
            view = view[os.write(fd, view):]
        left -= len(block)
    with open(path, "w") as handle:
        handle.write(digest.hexdigest())
err = threading.Thread(target=emit, args=(2, 50 << 20, "stderr.sha256"))
err.start()
emit(1, 200 << 20, "stdout.sha256")
err.join()
"""

TTY_SEED = b"sbx-tty-lossless"
TTY_BYTES = 20 * MiB
TTY_WRITER = f"""
import hashlib, os
view = memoryview(hashlib.shake_256({TTY_SEED!r}).digest({TTY_BYTES}))
while view:
    view = view[os.write(1, view):]
"""


@pytest.fixture(scope="module")
def deb_kit(tmp_path_factory: pytest.TempPathFactory, engine: SdkEngine) -> Path:
    """A bookworm workload kit, built before the tests so no build note reaches stderr."""
    root = tmp_path_factory.mktemp("lossless")
    kit = make_kit(root / "kits", "deb", DEB_DOCKERFILE)
    home = root / "warm-state"
    warm = run_sbx(["run", str(kit), "--", "true"],
                   env={**os.environ, "SBX_HOME": str(home),
                        "SBX_CONFIG": os.devnull}, timeout=300)
    assert warm.returncode == 0, warm.stderr
    assert not owned(engine, home)
    return kit


@pytest.fixture
def env(state_home: Path, tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "SBX_HOME": str(state_home),
            "SBX_CONFIG": os.devnull}


def _repeat(args: list[str], env: dict[str, str], count: int = REPEATS) -> list[Finished]:
    with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
        futures = [pool.submit(run_sbx, args, env=env, timeout=120) for _ in range(count)]
        return [future.result(timeout=300) for future in futures]


def _show(data: bytes) -> str:
    return f"{len(data)} bytes, starts {data[:40]!r}, ends {data[-40:]!r}"


def _envelope(result: Finished) -> dict[str, Any]:
    # Under --json stdout is the envelope alone: one line, nothing of the workload around it.
    assert result.stdout.endswith(b"\n") and result.stdout.count(b"\n") == 1, \
        _show(result.stdout)
    envelope: dict[str, Any] = json.loads(result.stdout)
    return envelope


# -- 1. large simultaneous streams, no TTY ------------------------------------------------------


def test_200_mib_stdout_and_50_mib_stderr_arrive_intact(deb_kit: Path, env: dict[str, str],
                                                         tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    user_owned(workspace)
    status, out, err = run_digested(
        ["run", "--no-tty", "--timeout", "300s", str(deb_kit), str(workspace), "--",
         "python3", "-c", BIG_WRITER], env=env, timeout=360)
    assert status == 0, err.head
    written_out = (workspace / "stdout.sha256").read_text(encoding="ascii")
    written_err = (workspace / "stderr.sha256").read_text(encoding="ascii")
    assert out.size == 200 * MiB
    assert err.size == 50 * MiB
    assert out.sha256 == written_out
    assert err.sha256 == written_err


# -- 2. short output, end of stream, binary: repeated --------------------------------------------


@pytest.mark.parametrize("case", sorted(SHORT_CASES))
def test_short_output_is_never_lost(case: str, deb_kit: Path, env: dict[str, str]) -> None:
    argv, status, stdout, stderr = SHORT_CASES[case]
    results = _repeat(["run", "--no-tty", str(deb_kit), "--", *argv], env)
    for attempt, result in enumerate(results):
        assert result.returncode == status, (attempt, result.stderr)
        assert result.stdout == stdout, (attempt, _show(result.stdout))
        assert result.stderr == stderr, (attempt, _show(result.stderr))


# -- 3. the same under --json, and the 1 MiB capture bound --------------------------------------


@pytest.mark.parametrize("case", sorted(SHORT_CASES))
def test_json_envelope_captures_short_output_exactly(case: str, deb_kit: Path,
                                                     env: dict[str, str]) -> None:
    argv, status, stdout, stderr = SHORT_CASES[case]
    results = _repeat(["run", "--json", str(deb_kit), "--", *argv], env, count=REPEATS // 2)
    for attempt, result in enumerate(results):
        assert result.returncode == status, (attempt, result.stderr)
        assert result.stderr == b"", (attempt, result.stderr)
        envelope = _envelope(result)
        assert envelope["exit_code"] == status
        assert envelope["status"] == ("ok" if status == 0 else "workload_exit")
        data = envelope["data"]
        assert data["stdout"] == stdout.decode("utf-8", "replace"), attempt
        assert data["stderr"] == stderr.decode("utf-8", "replace"), attempt
        assert data["output_truncated"] is False


@pytest.mark.parametrize(("script", "stdout", "stderr", "truncated"), [
    # exactly the bound on stdout: all of it, not truncated
    ("head -c 1048576 /dev/zero | tr '\\0' y; printf small >&2",
     "y" * MiB, "small", False),
    # one byte over on stdout: the first MiB, truncated; stderr untouched
    ("head -c 1048577 /dev/zero | tr '\\0' y; printf small >&2",
     "y" * MiB, "small", True),
    # over on stderr (last chunk without a newline): stdout untouched
    ("printf 'out\\nlast'; head -c 1200000 /dev/zero | tr '\\0' z >&2",
     "out\nlast", "z" * MiB, True),
], ids=["stdout-at-bound", "stdout-over-bound", "stderr-over-bound"])
def test_json_capture_is_bounded_per_stream(script: str, stdout: str, stderr: str,
                                            truncated: bool, deb_kit: Path,
                                            env: dict[str, str]) -> None:
    result = run_sbx(["run", "--json", str(deb_kit), "--", "sh", "-c", script], env=env)
    assert result.returncode == 0, result.stderr
    assert result.stderr == b""
    data = _envelope(result)["data"]
    assert data["output_truncated"] is truncated
    assert len(data["stdout"]) == len(stdout) and data["stdout"] == stdout
    assert len(data["stderr"]) == len(stderr) and data["stderr"] == stderr


# -- 4. through a TTY ------------------------------------------------------------------------------


def test_tty_carries_20_mib_byte_exact_in_raw_mode(deb_kit: Path, env: dict[str, str]) -> None:
    # With a TTY stdout and stderr are one stream (the terminal's); raw mode keeps the pty from
    # translating bytes, so what arrives must be exactly the seeded bytes.
    expected = hashlib.sha256(hashlib.shake_256(TTY_SEED).digest(TTY_BYTES)).hexdigest()
    for _attempt in range(2):
        status, out, err = run_digested(
            ["run", "-t", str(deb_kit), "--", "sh", "-c",
             'stty raw -echo && python3 -c "$1" && exit 5', "sh", TTY_WRITER],
            env=env, timeout=180)
        assert status == 5, err.head
        assert err.size == 0, err.head
        assert out.size == TTY_BYTES, out.head
        assert out.sha256 == expected


def test_tty_short_output_and_last_chunk(deb_kit: Path, env: dict[str, str]) -> None:
    # Cooked mode proves a terminal is really there (\n becomes \r\n) ...
    cooked = run_sbx(["run", "-t", str(deb_kit), "--", "sh", "-c", "printf 'a\\nb'"], env=env)
    assert (cooked.returncode, cooked.stdout, cooked.stderr) == (0, b"a\r\nb", b"")
    # ... and with output post-processing off, a last chunk without newline arrives as is,
    # stderr merged into the same stream in write order.
    results = _repeat(["run", "-t", str(deb_kit), "--", "sh", "-c",
                       "stty -opost; printf 'out\\n'; printf 'err\\nno-newline' >&2; exit 6"],
                      env, count=4)
    for attempt, result in enumerate(results):
        assert result.returncode == 6, (attempt, result.stderr)
        assert result.stdout == b"out\nerr\nno-newline", (attempt, _show(result.stdout))
        assert result.stderr == b""


# -- 5. stdin ------------------------------------------------------------------------------------


def test_piped_stdin_reaches_the_workload_exactly(deb_kit: Path, env: dict[str, str]) -> None:
    with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
        futures = [pool.submit(run_sbx, ["run", str(deb_kit), "--", "cat"], env=env,
                               data=b"a\nb") for _ in range(4)]
        results = [future.result(timeout=300) for future in futures]
    for result in results:
        assert (result.returncode, result.stdout, result.stderr) == (0, b"a\nb", b"")
    # EOF propagates: wc only answers once its stdin is closed.
    counted = run_sbx(["run", str(deb_kit), "--", "wc", "-c"], env=env, data=b"a\nb")
    assert (counted.returncode, counted.stdout, counted.stderr) == (0, b"3\n", b"")


def test_20_mib_binary_stdin_hashes_the_same_inside(deb_kit: Path, env: dict[str, str],
                                                     tmp_path: Path) -> None:
    payload = os.urandom(20 * MiB)
    expected = hashlib.sha256(payload).hexdigest()
    piped = run_sbx(["run", str(deb_kit), "--", "sha256sum"], env=env, data=payload, timeout=180)
    assert piped.returncode == 0, piped.stderr
    assert piped.stdout == f"{expected}  -\n".encode()
    # A regular file as stdin is forwarded too, and its end is the workload's EOF.
    source = tmp_path / "stdin.bin"
    source.write_bytes(payload[:3 * MiB])
    with source.open("rb") as handle:
        from_file = run_sbx(["run", str(deb_kit), "--", "wc", "-c"], env=env, stdin=handle,
                            timeout=180)
    assert (from_file.returncode, from_file.stdout, from_file.stderr) == (
        0, f"{3 * MiB}\n".encode(), b"")


def test_workload_that_ignores_stdin_does_not_deadlock(deb_kit: Path,
                                                        env: dict[str, str]) -> None:
    # 10 MiB offered on stdin that nobody reads, 10 MiB written to stdout: both sides fill
    # their buffers, and sbx must keep draining the output regardless. --timeout bounds a hang
    # (it would show as exit 124).
    result = run_sbx(["run", "--timeout", "60s", str(deb_kit), "--",
                      "head", "-c", str(10 * MiB), "/dev/zero"],
                     env=env, data=b"\x01" * (10 * MiB), timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout == b"\0" * (10 * MiB)
    assert result.stderr == b""


# -- 6. the reader of sbx's output goes away -------------------------------------------------------


READER_ATTEMPTS = 3
READER_PAUSE_S = 3  # the reader pauses before it leaves (`| less`, then q): output backs up
EXIT_AFTER_CLOSE_S = 20  # kill + remove take a second or two; the hang lasts 60 s


def _reader_goes_away(kit: Path, env: dict[str, str], engine: SdkEngine, state_home: Path,
                      errors: Path) -> tuple[bytes, int | None, bytes]:
    """`sbx run KIT -- sh -c 'yes | head -c 50000000' | (read 10 bytes, pause, leave)`: (the 10
    bytes, sbx's status or None when it had not exited EXIT_AFTER_CLOSE_S after the close, its
    stderr)."""
    with errors.open("wb") as stderr_file:
        proc = subprocess.Popen(
            [str(SBX), "run", "--timeout", "120s", str(kit), "--", "sh", "-c",
             "yes | head -c 50000000"],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr_file, env=env)
    assert proc.stdout is not None
    status: int | None = None
    try:
        first = read_some(proc.stdout, 10, timeout=60)
        time.sleep(READER_PAUSE_S)
        proc.stdout.close()
        try:
            status = proc.wait(timeout=EXIT_AFTER_CLOSE_S)
        except subprocess.TimeoutExpired:
            status = None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
            # A killed sbx cannot clean up: do it here, so the fixture's leak check does not
            # turn this failure into a teardown error.
            for obj in owned(engine, state_home):
                if obj.kind == "container":
                    engine.remove_container(obj.id)
    return first, status, errors.read_bytes()


def test_closed_reader_stops_the_workload_quietly_with_141(deb_kit: Path, env: dict[str, str],
                                                           engine: SdkEngine,
                                                           state_home: Path,
                                                           tmp_path: Path) -> None:
    for attempt in range(READER_ATTEMPTS):
        first, status, stderr = _reader_goes_away(deb_kit, env, engine, state_home,
                                                  tmp_path / f"stderr-{attempt}.bin")
        assert first == b"y\n" * 5, attempt
        assert status is not None, (
            f"attempt {attempt}: sbx had not exited {EXIT_AFTER_CLOSE_S} s after its reader "
            "went away")
        assert status == 141, (attempt, stderr)
        assert b"Traceback" not in stderr and b"BrokenPipe" not in stderr, attempt
        assert stderr == b"", attempt
        assert not owned(engine, state_home), attempt


# -- 7. -e / --env-file -------------------------------------------------------------------------


@pytest.fixture
def secrets() -> dict[str, str]:
    return {name: f"{name.lower()}-value-{uuid.uuid4().hex}" for name in
           ("A", "B", "C", "D", "FILE_A", "REFUSED")}


def test_env_flags_set_values_that_are_never_printed_or_audited(
        deb_kit: Path, env: dict[str, str], tmp_path: Path, state_home: Path,
        secrets: dict[str, str]) -> None:
    env_file = tmp_path / "vars.env"
    env_file.write_text(
        "# a comment line\n\n"
        f"A={secrets['FILE_A']}\n"  # -e A=... below wins: files first, then flags
        f"C={secrets['C']} two words=x\n"
        "D\n", encoding="utf-8")
    host = {**env, "B": secrets["B"], "D": secrets["D"]}
    result = run_sbx(["run", "-e", f"A={secrets['A']}", "-e", "B", "--env-file", str(env_file),
                      str(deb_kit), "--", "sh", "-c",
                      'printf "%s|%s|%s|%s" "$A" "$B" "$C" "$D"'], env=host)
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode() == (
        f"{secrets['A']}|{secrets['B']}|{secrets['C']} two words=x|{secrets['D']}")
    assert result.stderr == b""

    refused_file = tmp_path / "refused.env"
    refused_file.write_text(f"HTTP_PROXY={secrets['REFUSED']}\n", encoding="utf-8")
    value = secrets["REFUSED"]
    for flags in (["-e", f"HTTPS_PROXY={value}"], ["-e", f"https_proxy={value}"],
                  ["-e", f"SBX_X={value}"], ["-e", f"HOME={value}"],
                  ["--env-file", str(refused_file)]):
        refused = run_sbx(["run", *flags, str(deb_kit), "--", "true"], env=host)
        assert refused.returncode == 2, (flags, refused.stderr)
        assert b"(invalid_argument)" in refused.stderr, flags
        assert value.encode() not in refused.stdout + refused.stderr, flags

    audit = (state_home / "audit.jsonl").read_text(encoding="utf-8")
    assert "sandbox_started" in audit
    for name, secret in secrets.items():
        assert secret not in audit, f"the audit log holds the value of {name}"
