"""domain/ decides; it does no I/O of its own. Files, processes, sockets and the environment are
reached through ``sbx.seams`` (one choke point each, where faults become reason codes).

The scan is syntactic: an import of a host-I/O module, a call of ``open``, or a call of a
``pathlib`` method that touches the file system. ``LEFT`` names the modules not yet moved; it may
only shrink.
"""

from __future__ import annotations

import ast
from pathlib import Path

import sbx

DOMAIN = Path(sbx.__file__).parent / "domain"
HOST_MODULES = frozenset({"os", "shutil", "tempfile", "subprocess", "socket", "fcntl", "select",
                          "signal", "mmap", "ctypes", "pty", "termios", "glob"})
PATH_IO = frozenset({"read_text", "read_bytes", "write_text", "write_bytes", "open", "iterdir",
                     "glob", "rglob", "stat", "lstat", "exists", "is_file", "is_dir",
                     "is_symlink", "mkdir", "unlink", "rmdir", "touch", "chmod", "readlink",
                     "resolve", "samefile", "owner", "expanduser", "symlink_to", "hardlink_to",
                     "cwd", "home", "absolute"})

LEFT: frozenset[str] = frozenset({
    "credentials/oauthstore",
    "credentials/secrets",
    "egress/ca",
    "egress/oauth_intercept",
    "egress/plan",
    "egress/policystore",
    "egress/requestlog",
    "sandbox/sources",
})


def io_uses(source: str) -> list[str]:
    """Each host-I/O use in a module's source, as ``line:what``."""
    uses: list[str] = []
    tree = ast.parse(source)
    seam_names = _seam_names(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            uses += [f"{node.lineno}:import {a.name}" for a in node.names
                     if a.name.split(".")[0] in HOST_MODULES]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] in HOST_MODULES:
                uses.append(f"{node.lineno}:from {node.module}")
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id == "open":
                uses.append(f"{node.lineno}:open()")
            elif (isinstance(func, ast.Attribute) and func.attr in PATH_IO
                  and not _in_memory(node) and not _through_seam(func, seam_names)):
                uses.append(f"{node.lineno}:.{func.attr}()")
    return uses


def _seam_names(tree: ast.Module) -> frozenset[str]:
    """Names the module binds to ``sbx.seams`` modules: ``files.unlink(p)`` is the seam's I/O."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and (
                node.module == "sbx.seams" or node.module.startswith("sbx.seams.")):
            names.update(a.asname or a.name for a in node.names)
    return frozenset(names)


def _through_seam(func: ast.Attribute, seam_names: frozenset[str]) -> bool:
    return isinstance(func.value, ast.Name) and func.value.id in seam_names


def _in_memory(call: ast.Call) -> bool:
    """``tarfile.open(fileobj=…)`` and its kind read a buffer already in hand, not a file."""
    return any(k.arg == "fileobj" for k in call.keywords)


def _offenders() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in sorted(DOMAIN.rglob("*.py")):
        uses = io_uses(path.read_text(encoding="utf-8"))
        if uses:
            found[path.relative_to(DOMAIN).with_suffix("").as_posix()] = uses
    return found


def test_domain_does_no_io_of_its_own() -> None:
    new = {m: u for m, u in _offenders().items() if m not in LEFT}
    assert not new, "host I/O in domain/ (reach it through sbx.seams): " + "; ".join(
        f"{m}: {', '.join(u[:6])}" for m, u in new.items())


def test_the_list_of_modules_left_only_shrinks() -> None:
    clean = sorted(LEFT - set(_offenders()))
    assert not clean, f"no host I/O left in {clean}: remove them from LEFT"


def test_the_scan_sees_each_kind_of_use() -> None:
    source = ("import os\nfrom shutil import rmtree\nopen('x')\nPath('x').read_text()\n"
              "'a'.replace('a', 'b')\n")
    assert [u.split(":", 1)[1] for u in io_uses(source)] == [
        "import os", "from shutil", "open()", ".read_text()"]


def test_a_call_through_a_seam_module_is_not_host_io() -> None:
    source = ("from sbx.seams.host import files\nfiles.unlink(p)\n"
              "from sbx.base import text\ntext.open(p)\n")
    assert [u.split(":", 1)[1] for u in io_uses(source)] == [".open()"]
