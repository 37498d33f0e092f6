"""A deferred module is imported on its first attribute read, and every read sees the module as
it is then (what a test patches); `sbx --help` imports no use case through one."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sbx.base.deferred import deferred


def _fresh(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=60).stdout.strip()


def test_nothing_is_imported_before_the_first_attribute_read() -> None:
    code = ("import sys\nfrom sbx.base.deferred import deferred\n"
            "m = deferred('sbx.usecases.configview')\n"
            "before = 'sbx.usecases.configview' in sys.modules\n"
            "m.config_location\n"
            "print(before, 'sbx.usecases.configview' in sys.modules)")
    assert _fresh(code) == "False True"


def test_each_read_sees_what_the_module_holds_now(monkeypatch: pytest.MonkeyPatch) -> None:
    from sbx.usecases import configview

    proxy = deferred("sbx.usecases.configview")
    assert proxy.config_location is configview.config_location
    sentinel = object()
    monkeypatch.setattr(configview, "config_location", lambda env: sentinel)
    assert proxy.config_location({}) is sentinel


def test_a_missing_attribute_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError):
        deferred("sbx.usecases.configview").no_such_thing  # noqa: B018 -- the read is the test


def test_help_loads_no_use_case_module() -> None:
    code = ("import io, sys\nfrom sbx.__main__ import cli\n"
            "sys.stdout = io.StringIO()\ncli(['--help'])\nsys.stdout = sys.__stdout__\n"
            "print(sorted(m for m in sys.modules if m.startswith('sbx.usecases.')))")
    assert _fresh(code) == "['sbx.usecases.context', 'sbx.usecases.kitinit']"
