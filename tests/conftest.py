"""Shared fixtures: every test gets its own state home and config path (never the real ones)."""

from __future__ import annotations

import io
import json
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sbx.__main__ import cli


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Hermetic by default (STYLE item 20): any code path that falls back to the default state
    # home or config path lands in the test's tmp dir, never in the developer's home.
    # No SBX_CONFIG: a config file named there must exist (a missing one is invalid_config),
    # while the default location, under XDG_CONFIG_HOME here, may be absent (all defaults).
    # Tests that want a config file set SBX_CONFIG to one they wrote.
    monkeypatch.setenv("SBX_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("SBX_CONFIG", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.delenv("SBX_TRACEBACK", raising=False)
    monkeypatch.setenv("NO_COLOR", "1")
    # Never the developer's OS keyring: `sbx secret set` uses the file store unless a test
    # chooses a keyring backend itself (tests/support/fakekeyring.py).
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.fail.Keyring")


@dataclass
class CliResult:
    exit_code: int
    stdout: str
    stderr: str

    def envelope(self) -> dict[str, Any]:
        """The last JSON envelope on stdout (its values are JSON: Any)."""
        lines = [line for line in self.stdout.splitlines() if line.startswith("{")]
        assert lines, f"no JSON envelope on stdout: {self.stdout!r} / {self.stderr!r}"
        loaded: dict[str, Any] = json.loads(lines[-1])
        return loaded


class _Stream(io.StringIO):
    """A text stream with a bytes buffer, like sys.stdout, so workload output is captured."""

    def __init__(self) -> None:
        super().__init__()
        self._bytes = io.BytesIO()

    @property
    def buffer(self) -> io.BytesIO:
        return self._bytes

    def text(self) -> str:
        return self.getvalue() + self._bytes.getvalue().decode("utf-8", "replace")


def run_cli(args: list[str], *, env: Mapping[str, str] | None = None,
            cwd: Path | None = None) -> CliResult:
    out, err = _Stream(), _Stream()
    code = cli(args, env=dict(os.environ if env is None else env), cwd=cwd, stdout=out,
               stderr=err)
    return CliResult(code, out.text(), err.text())


@pytest.fixture
def sbx_cli() -> Iterator[Callable[..., CliResult]]:
    yield run_cli
