"""Count the imports of sbx modules made inside functions (deferred for start-up speed).

Each must say why on its own line or the comment line just above it; the total stays under the
budget the unit test holds. ``--list`` prints every one with its place.
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


def _reason(lines: list[str], line: int) -> str:
    own = lines[line - 1]
    if "#" in own:
        return own.split("#", 1)[1].strip()
    above = lines[line - 2].strip() if line >= 2 else ""
    return above[1:].strip() if above.startswith("#") else ""


def lazy_imports(root: Path = ROOT) -> list[LazyImport]:
    """Every import of an sbx module inside a function body (nested ones counted once)."""
    found: dict[tuple[Path, int], LazyImport] = {}
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for inner in ast.walk(node):
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
