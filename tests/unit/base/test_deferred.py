"""A deferred module is imported on its first attribute read, and every read sees the module as
it is then (what a test patches); `sbx --help` imports no use case through one."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from sbx.base.deferred import deferred


def _fresh(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=60).stdout.strip()


@pytest.mark.slow
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


@pytest.mark.slow
def test_help_loads_no_use_case_module() -> None:
    code = ("import io, sys\nfrom sbx.__main__ import cli\n"
            "sys.stdout = io.StringIO()\ncli(['--help'])\nsys.stdout = sys.__stdout__\n"
            "print(sorted(m for m in sys.modules if m.startswith('sbx.usecases.')))")
    assert _fresh(code) == "['sbx.usecases.context']"  # no command module, so no kitinit


def _typed_names(tree: ast.Module) -> dict[str, str]:
    """The names bound under ``if TYPE_CHECKING:`` to modules (``from a import b`` → b: a.b)."""
    bound: dict[str, str] = {}
    for node in tree.body:
        if not (isinstance(node, ast.If) and isinstance(node.test, ast.Name)
                and node.test.id == "TYPE_CHECKING"):
            continue
        for stmt in node.body:
            if isinstance(stmt, ast.ImportFrom) and stmt.module:
                for alias in stmt.names:
                    bound[alias.asname or alias.name] = f"{stmt.module}.{alias.name}"
            elif isinstance(stmt, ast.Import):
                for alias in stmt.names:
                    bound[alias.asname or alias.name] = alias.name
    return bound


def _deferred_names(tree: ast.Module) -> dict[str, str]:
    return {target.id: call.args[0].value
            for node in ast.walk(tree) if isinstance(node, ast.Assign)
            for target in node.targets if isinstance(target, ast.Name)
            if isinstance(call := node.value, ast.Call) and isinstance(call.func, ast.Name)
            and call.func.id == "deferred" and call.args
            and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str)}


def test_every_deferred_module_is_the_one_its_type_checking_import_names() -> None:
    """mypy checks each use through the ``TYPE_CHECKING`` import: the deferred name must load
    that same module, and it must exist."""
    package = Path(__file__).resolve().parents[3] / "cli" / "sbx"
    wrong: list[str] = []
    checked = 0
    for path in package.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        typed = _typed_names(tree)
        for name, module in _deferred_names(tree).items():
            checked += 1
            if typed.get(name) != module or importlib.util.find_spec(module) is None:
                wrong.append(f"{path.relative_to(package)}: {name} = deferred({module!r}) "
                             f"but TYPE_CHECKING names {typed.get(name)!r}")
    assert checked >= 10 and not wrong, (checked, wrong)
