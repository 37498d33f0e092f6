"""Runs the ``sbx`` console script as a child process with binary pipes, every wait bounded.

Real-engine tests use these to see exactly the bytes a user's shell would see: nothing is
decoded, nothing is buffered by a test harness in between. :func:`run_digested` hashes the two
streams while they arrive, for outputs too large to keep; :func:`read_some` reads a fixed number
of bytes from a pipe under a deadline.
"""

from __future__ import annotations

import hashlib
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

SBX = Path(sys.executable).parent / "sbx"
CHUNK = 1024 * 1024


@dataclass(frozen=True)
class Finished:
    returncode: int
    stdout: bytes
    stderr: bytes


@dataclass(frozen=True)
class Digest:
    size: int
    sha256: str
    head: bytes  # the first bytes, to make a failure readable


def run_sbx(args: Sequence[str], *, env: Mapping[str, str], stdin: Any = subprocess.DEVNULL,
            data: bytes | None = None, timeout: float = 120.0,
            prefix: Sequence[str] | None = None, cwd: Path | None = None) -> Finished:
    """``sbx ARGS`` to completion; ``data`` is fed to its stdin through a pipe when given."""
    completed = subprocess.run(
        [*(prefix or [str(SBX)]), *args], input=data,
        stdin=None if data is not None else stdin, capture_output=True, env=dict(env),
        timeout=timeout, check=False, cwd=cwd)
    return Finished(completed.returncode, completed.stdout, completed.stderr)


def _consume(pipe: IO[bytes], into: dict[str, Digest], name: str) -> None:
    digest = hashlib.sha256()
    size = 0
    head = b""
    fd = pipe.fileno()
    while chunk := os.read(fd, CHUNK):
        digest.update(chunk)
        if len(head) < 64:
            head += chunk[:64 - len(head)]
        size += len(chunk)
    into[name] = Digest(size, digest.hexdigest(), head)


def run_digested(args: Sequence[str], *, env: Mapping[str, str],
                 timeout: float = 120.0) -> tuple[int, Digest, Digest]:
    """``sbx ARGS`` with stdin from /dev/null; (status, stdout digest, stderr digest)."""
    proc = subprocess.Popen([str(SBX), *args], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(env))
    assert proc.stdout is not None and proc.stderr is not None
    results: dict[str, Digest] = {}
    readers = [threading.Thread(target=_consume, args=(pipe, results, name), daemon=True)
               for name, pipe in (("stdout", proc.stdout), ("stderr", proc.stderr))]
    for reader in readers:
        reader.start()
    try:
        status = proc.wait(timeout=timeout)
        for reader in readers:
            reader.join(timeout=30)
            assert not reader.is_alive(), "sbx exited but its output pipes stayed open"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        proc.stdout.close()
        proc.stderr.close()
    return status, results["stdout"], results["stderr"]


def read_some(pipe: IO[bytes], count: int, timeout: float) -> bytes:
    """Exactly ``count`` bytes from ``pipe`` (fewer at EOF), waiting at most ``timeout``."""
    fd = pipe.fileno()
    deadline = time.monotonic() + timeout
    data = b""
    while len(data) < count:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        ready, _, _ = select.select([fd], [], [], remaining)
        if not ready:
            break
        chunk = os.read(fd, count - len(data))
        if not chunk:
            break
        data += chunk
    return data


__all__ = ["SBX", "Digest", "Finished", "read_some", "run_digested", "run_sbx"]
