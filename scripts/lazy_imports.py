"""Count the sbx imports deferred for start-up speed: those made inside functions (by statement
or by ``importlib.import_module``) and the modules declared with ``sbx.base.deferred``
(imported on first use).

Each must say why on its own line or the comment line just above it (for a ``deferred``
declaration, its ``else:`` line counts too); the total stays under the budget the unit test
holds. ``--list`` prints every one with its place.
"""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "cli" / "sbx"


@dataclass(frozen=True)
class LazyImport:
    path: Path
    line: int
    module: str
    reason: str  # the comment that says why ("" when none)


def _is_sbx(node: ast.stmt) -> str | None:
    if isinstance(node, ast.ImportFrom) and (
            node.level or (node.module or "").split(".")[0] == "sbx"):
        return node.module or "."
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.name.split(".")[0] == "sbx":
                return alias.name
    return None


def _reason(lines: list[str], line: int, *, declared: bool = False) -> str:
    own = lines[line - 1]
    if "#" in own:
        return own.split("#", 1)[1].strip()
    # A deferred declaration's reason may sit on the else: (or earlier declaration) above.
    for back in range(line - 2, max(line - 8, -1) if declared else line - 3, -1):
        above = lines[back].strip()
        if "#" in above:
            return above.split("#", 1)[1].strip()
        if not declared or not above.endswith(")") or "deferred(" not in above:
            break
    return ""


def _declared(node: ast.AST) -> str | None:
    """The module of a ``name = deferred("module")`` declaration."""
    if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Name) and node.value.func.id == "deferred"
            and node.value.args and isinstance(node.value.args[0], ast.Constant)
            and isinstance(node.value.args[0].value, str)):
        return node.value.args[0].value
    return None


def _imports_by_name(node: ast.AST) -> bool:
    """An ``importlib.import_module(...)`` call: it defers a module as an import statement does."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module" and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "importlib")


def lazy_imports(root: Path = ROOT) -> list[LazyImport]:
    """Every import of an sbx module inside a function body (nested ones counted once) and
    every deferred declaration."""
    found: dict[tuple[Path, int], LazyImport] = {}
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        # sbx.base.deferred is the mechanism itself: its declarations are what is counted
        by_name = path != root / "base" / "deferred.py"
        for node in ast.walk(ast.parse(text)):
            if (module := _declared(node)) is not None:
                found[(path, node.lineno)] = LazyImport(
                    path, node.lineno, module, _reason(lines, node.lineno, declared=True))
                continue
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for inner in ast.walk(node):
                if by_name and _imports_by_name(inner):  # e.g. sbx.app's command table
                    found[(path, inner.lineno)] = LazyImport(
                        path, inner.lineno, "importlib.import_module",
                        _reason(lines, inner.lineno))
                    continue
                if isinstance(inner, ast.Import | ast.ImportFrom) and (name := _is_sbx(inner)):
                    found[(path, inner.lineno)] = LazyImport(path, inner.lineno, name,
                                                             _reason(lines, inner.lineno))
    return sorted(found.values(), key=lambda i: (str(i.path), i.line))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--list", action="store_true", help="print every deferred import")
    args = parser.parse_args()
    imports = lazy_imports()
    if args.list:
        for item in imports:
            where = item.path.relative_to(ROOT.parent)
            print(f"{where}:{item.line}: {item.module}  # {item.reason or '(no reason)'}")
    by_module: dict[Path, int] = {}
    for item in imports:
        by_module[item.path] = by_module.get(item.path, 0) + 1
    for path, count in sorted(by_module.items(), key=lambda kv: -kv[1]):
        print(f"{count:4d} {path.relative_to(ROOT.parent)}")
    print(f"total {len(imports)}, without a reason {sum(1 for i in imports if not i.reason)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
