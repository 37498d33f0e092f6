"""The distribution's promises about its imports (issue #14): every third-party package that
``cli/sbx`` imports is declared in pyproject.toml, no private module of a dependency is used,
and the upper pin on typer still has its reason."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterator
from email.parser import Parser
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "cli" / "sbx"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
WHEELHOUSE = ROOT / ".venv" / "sbx-wheelhouse"
# Imports only the type checker sees (`if TYPE_CHECKING:`) name stub-only modules such as
# _typeshed; they never run, so they need no declaration.
_STUB_ONLY = frozenset({"_typeshed"})


def _in_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, *, runtime_only: bool) -> Iterator[tuple[int, str, list[str]]]:
    """(line, module, imported names) for every absolute import, lazy ones included."""
    def walk(node: ast.AST) -> Iterator[ast.AST]:
        for child in ast.iter_child_nodes(node):
            if runtime_only and isinstance(child, ast.If) and _in_type_checking(child):
                yield from (n for stmt in child.orelse for n in [stmt, *walk(stmt)])
                continue
            yield child
            yield from walk(child)

    for node in walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, []
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module, [alias.name for alias in node.names]


def _third_party(module: str) -> bool:
    top = module.partition(".")[0]
    return top != "sbx" and top not in sys.stdlib_module_names and top != "__future__"


def _package_imports(*, runtime_only: bool) -> list[tuple[str, int, str, list[str]]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        rel = str(path.relative_to(ROOT))
        found += [(rel, line, module, names)
                  for line, module, names in _imports(tree, runtime_only=runtime_only)
                  if _third_party(module)]
    return found


def _declared() -> tuple[set[str], dict[str, set[str]]]:
    project = PYPROJECT["project"]
    required = {str(canonicalize_name(Requirement(t).name)) for t in project["dependencies"]}
    extras = {extra: {str(canonicalize_name(Requirement(t).name)) for t in texts}
              for extra, texts in project.get("optional-dependencies", {}).items()
              if extra != "dev"}
    return required, extras


def test_the_scan_sees_lazy_private_and_type_checking_imports() -> None:
    # The scanners below are only as good as this walk: lazy imports inside functions count,
    # and type-checking-only ones count for the private-module rule but not for the
    # declaration rule.
    tree = ast.parse(
        "import os\nfrom typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from _typeshed import X\n"
        "def f():\n    import typer._click\n    from docker import _private\n"
        "    from re2 import compile\n")
    runtime = [(module, names) for _line, module, names in _imports(tree, runtime_only=True)]
    assert runtime == [("os", []), ("typing", ["TYPE_CHECKING"]), ("typer._click", []),
                       ("docker", ["_private"]), ("re2", ["compile"])]
    every = {module for _line, module, _names in _imports(tree, runtime_only=False)}
    assert "_typeshed" in every
    assert [m for _l, m, _n in _imports(tree, runtime_only=True) if _third_party(m)] == [
        "typer._click", "docker", "re2"]


@pytest.mark.slow
def test_no_private_module_of_a_dependency_is_imported() -> None:
    # typer 0.28 vendors click as typer._click; sbx uses typer's public names
    # (typer.TyperException, typer.Exit) so a typer release can move its internals.
    offences = []
    for rel, line, module, names in _package_imports(runtime_only=False):
        if module.partition(".")[0] in _STUB_ONLY:
            continue
        private = [part for part in module.split(".") if part.startswith("_")]
        private += [name for name in names if name.startswith("_")]
        if private:
            offences.append(f"{rel}:{line}: {module} ({', '.join(private)})")
    assert not offences, "private modules or names of dependencies imported:\n" + "\n".join(
        offences)


@pytest.mark.slow
def test_every_third_party_import_is_declared() -> None:
    required, extras = _declared()
    optional = set().union(*extras.values())
    distributions = metadata.packages_distributions()
    seen: dict[str, str] = {}
    undeclared = []
    for rel, line, module, _names in _package_imports(runtime_only=True):
        top = module.partition(".")[0]
        owners = {str(canonicalize_name(d)) for d in distributions.get(top, [])}
        assert owners, f"{rel}:{line}: no installed distribution provides {top!r}"
        declared = owners & (required | optional)
        if not declared:
            undeclared.append(f"{rel}:{line}: {module} (from {', '.join(sorted(owners))})")
            continue
        seen[top] = declared.pop()
    assert not undeclared, "imported but not declared in pyproject.toml:\n" + "\n".join(
        undeclared)
    # Lazily imported and optional: keyring is the `keyring` extra, never a hard dependency.
    assert seen.get("keyring") == "keyring"
    assert "keyring" in extras["keyring"] and "keyring" not in required
    # And nothing declared goes unused (a stale dependency costs every install).
    transport_only = {"urllib3", "requests"}  # imported too, but listed to state the floor
    unused = required - set(seen.values()) - transport_only
    assert not unused, f"declared but never imported by cli/sbx: {sorted(unused)}"


def test_the_keyring_store_imports_keyring_only_lazily() -> None:
    # `keyring` is optional: importing sbx must never need it at module level.
    tree = ast.parse((PACKAGE / "seams" / "keyrings.py").read_text(encoding="utf-8"))
    top_level = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
    names = {a.name for n in top_level for a in n.names} | {
        n.module for n in top_level if isinstance(n, ast.ImportFrom)}
    assert "keyring" not in names


def _typer_cap() -> Version:
    [text] = [t for t in PYPROJECT["project"]["dependencies"]
              if canonicalize_name(Requirement(t).name) == "typer"]
    caps = [Version(s.version) for s in Requirement(text).specifier if s.operator == "<"]
    assert len(caps) == 1, f"typer is expected to carry exactly one upper bound: {text}"
    return caps[0]


@pytest.mark.slow
def test_cli_never_imports_pydantic() -> None:
    # The reason for typer's upper pin (pyproject.toml): typer 0.29 needs pydantic and routes
    # every parameter through it. If someone lifts the pin, this shows the cost on startup.
    code = ("import sys\nfrom sbx.__main__ import main\n"
            "sys.argv = ['sbx', '--help']\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "assert 'pydantic' not in sys.modules, 'pydantic was imported'\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False, env={**os.environ, "NO_COLOR": "1"})
    assert done.returncode == 0, done.stderr
    assert "Usage" in done.stdout


def test_the_typer_pin_still_has_its_reason() -> None:
    # Fails once the newest typer above the cap no longer requires pydantic: the reason for
    # the cap is gone, so lift it (and this test). scripts/wheelhouse.py downloads that
    # release's wheel (never installed) into .venv/sbx-wheelhouse/above-pins/.
    cap = _typer_cap()
    assert Version(metadata.version("typer")) < cap
    wheels = sorted(WHEELHOUSE.joinpath("above-pins").glob("typer-*.whl"))
    if not wheels:
        message = "no typer release above the cap in the wheelhouse: run scripts/setup.sh"
        if os.environ.get("SBX_REQUIRE_ENGINE") == "1":
            pytest.fail(message)
        pytest.skip(message)
    newest = max(wheels, key=lambda p: Version(p.name.split("-")[1]))
    with zipfile.ZipFile(newest) as wheel:
        [meta] = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
        headers = Parser().parsestr(wheel.read(meta).decode("utf-8"))
    version = Version(headers["Version"])
    assert version >= cap
    needs = {str(canonicalize_name(Requirement(t).name))
             for t in headers.get_all("Requires-Dist") or []
             if Requirement(t).marker is None}
    assert "pydantic" in needs, (
        f"typer {version} no longer requires pydantic: lift the `typer<{cap}` pin")


def test_distribution_metadata() -> None:
    project = PYPROJECT["project"]
    assert project["name"] == "sbx-sandbox"
    assert project["license"] == "Apache-2.0"  # an SPDX expression (PEP 639)
    assert project["license-files"] == ["LICENSE"]
    assert "Apache License" in (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert project["scripts"] == {"sbx": "sbx.launcher:main"}
    assert set(project["urls"]) >= {"Homepage", "Documentation"}
    # PEP 639: no License :: classifier next to an SPDX expression.
    assert not [c for c in project["classifiers"] if c.startswith("License ::")]
    assert "Programming Language :: Python :: 3.11" in project["classifiers"]
