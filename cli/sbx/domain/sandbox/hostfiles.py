"""Files that tools on the host run or obey on their own, by tool: what the after-run report
watches in a writable workspace besides git's own metadata.

Each tool's files are matched at the depth the tool reads them: where a tool looks in the
current directory and its parents (direnv, mise, cargo, npm, vim, pdb, ...), at any depth; where
it reads the project root only (CI, hook managers, Python's ``-m``/REPL path), at the root.
Inside ``node_modules`` and ``site-packages`` (a dependency tree, which no tool reads
configuration from) only the Python start-up files are matched. The project's own code
(sources, build scripts, package scripts, installed dependencies) is not in the list: running
it runs what the agent wrote, and that is the README's residual risk, not a finding.
"""

from __future__ import annotations

import fnmatch
import sys
from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True)
class HostTool:
    tool: str
    anywhere: tuple[str, ...] = ()  # file names matched at any depth
    anywhere_dirs: tuple[str, ...] = ()  # directories whose whole content is watched
    nested: tuple[str, ...] = ()  # "dir/name" paths at any depth ("dir/" = a tree)
    root: tuple[str, ...] = ()  # paths matched at the workspace root only ("dir/" = a tree)
    suffixes: tuple[str, ...] = ()  # file name endings matched at any depth
    patterns: tuple[str, ...] = ()  # file name globs matched at any depth ("mise.*.toml")
    root_patterns: tuple[str, ...] = ()  # file name globs matched at the workspace root only


TOOLS: Final = (
    HostTool("git", root=(".gitmodules", ".lfsconfig")),
    HostTool("direnv", anywhere=(".envrc", ".env.local")),
    # mise reads each of its config names in every directory up to /, and per MISE_ENV
    # (mise.ENV.toml, mise.ENV.local.toml); a config's [hooks] and [env] _.source run on cd.
    HostTool("mise", anywhere=("mise.toml", ".mise.toml", "mise.local.toml",
                               ".mise.local.toml", ".rtx.toml", ".rtx.local.toml",
                               ".tool-versions"),
             nested=("mise/config.toml", "mise/config.local.toml", ".config/mise.toml",
                     ".config/mise.local.toml", ".mise/", ".config/mise/",
                     ".config/mise/conf.d/"),
             patterns=("mise.*.toml", ".mise.*.toml", ".rtx.*.toml")),
    HostTool("cargo", anywhere=("rust-toolchain", "rust-toolchain.toml"),
             nested=(".cargo/config", ".cargo/config.toml")),
    # pnpm-workspace.yaml carries pnpm's settings since pnpm 10 (scriptShell, pnpmfile, ...).
    HostTool("npm, pnpm, yarn, bun", anywhere=(".npmrc", ".yarnrc", ".yarnrc.yml",
                                               ".pnpmfile.cjs", ".pnpmfile.mjs",
                                               "pnpm-workspace.yaml", ".pnp.cjs",
                                               ".pnp.loader.mjs", "bunfig.toml",
                                               ".bunfig.toml"),
             nested=(".yarn/releases/", ".yarn/plugins/")),
    HostTool("python", anywhere=(".pdbrc", "sitecustomize.py", "usercustomize.py",
                                 "pyvenv.cfg")),
    # .lazy.lua: lazy.nvim's per-project spec, read from the current directory by default.
    HostTool("vim, neovim", anywhere=(".exrc", ".vimrc", ".nvimrc", ".nvim.lua", ".lvimrc",
                                      ".lazy.lua")),
    HostTool("emacs", anywhere=(".dir-locals.el", ".dir-locals-2.el")),
    HostTool("vs code", anywhere_dirs=(".vscode",), suffixes=(".code-workspace",)),
    HostTool("jetbrains", anywhere_dirs=(".idea", ".run")),
    HostTool("dev containers", anywhere=(".devcontainer.json",),
             anywhere_dirs=(".devcontainer",)),
    HostTool("ci", root=(".github/workflows/", ".gitlab-ci.yml", ".circleci/")),
    # lefthook takes its config in YAML, TOML or JSON, dotted or not, and under .config/.
    HostTool("hook managers", root=(".pre-commit-config.yaml", ".pre-commit-config.yml",
                                    ".husky/", ".githooks/", "lefthook.yml", ".lefthook.yml",
                                    "lefthook-local.yml", ".lefthook-local.yml", ".lefthook/",
                                    ".config/lefthook.yml", ".config/lefthook.yaml",
                                    ".config/lefthook-local.yml", ".config/lefthook-local.yaml"),
             root_patterns=("lefthook.*", ".lefthook.*", "lefthook-local.*",
                            ".lefthook-local.*")),
)

# Names Python imports from the current directory before its own library under `python -m`,
# `python -c` and the REPL: a module of one of these names at the root replaces the real one,
# whether source (.py), sourceless bytecode (.pyc) or an extension module (.so, any ABI tag).
SHADOWED_MODULES: Final = frozenset(sys.stdlib_module_names) | frozenset({
    "pip", "pytest", "setuptools", "pkg_resources", "_pytest"})
DEPENDENCY_TREES: Final = frozenset({"node_modules", "site-packages", "dist-packages"})

_ANYWHERE: Final = {name: t.tool for t in TOOLS for name in t.anywhere}
_ANYWHERE_DIRS: Final = {name: t.tool for t in TOOLS for name in t.anywhere_dirs}
_NESTED: Final = tuple(("/" + p, t.tool) for t in TOOLS for p in t.nested if not p.endswith("/"))
_NESTED_TREES: Final = tuple(("/" + p.rstrip("/"), t.tool) for t in TOOLS for p in t.nested
                             if p.endswith("/"))
_ROOT_FILES: Final = {p: t.tool for t in TOOLS for p in t.root if not p.endswith("/")}
_ROOT_TREES: Final = {p.rstrip("/"): t.tool for t in TOOLS for p in t.root if p.endswith("/")}
_SUFFIXES: Final = tuple((s, t.tool) for t in TOOLS for s in t.suffixes)
_SUFFIX_NAMES: Final = (".pth", *(s for s, _t in _SUFFIXES))
_PATTERNS: Final = tuple((p, t.tool) for t in TOOLS for p in t.patterns)
_ROOT_PATTERNS: Final = tuple((p, t.tool) for t in TOOLS for p in t.root_patterns)
# The literal head of each glob: a cheap first look before fnmatch.
_PATTERN_HEADS: Final = tuple(p.split("*", 1)[0] for p, _t in _PATTERNS)
_ROOT_PATTERN_HEADS: Final = tuple(p.split("*", 1)[0] for p, _t in _ROOT_PATTERNS)
_MODULE_SUFFIXES: Final = (".py", ".pyc", ".so")


_NAMES: Final = frozenset(
    {*_ANYWHERE, *(p.rsplit("/", 1)[-1] for p, _t in _NESTED),
     *(p.rsplit("/", 1)[-1] for p in _ROOT_FILES), ".git", ".hg", ".gitattributes",
     "__init__.py"})


def may_matter(name: str, *, root: bool) -> bool:
    """A cheap first look at a file's name (most names matter to no tool)."""
    return name in _NAMES or name.endswith(_SUFFIX_NAMES) or name.startswith(_PATTERN_HEADS) \
        or name.startswith("__init__.") \
        or (root and (name.endswith(_MODULE_SUFFIXES) or name.startswith(_ROOT_PATTERN_HEADS)))


def watched_tree(relative: str, name: str, *, in_dependencies: bool) -> str | None:
    """The tool that reads everything below directory ``relative`` (``name`` its last part)."""
    if relative in _ROOT_TREES:
        return _ROOT_TREES[relative]
    if in_dependencies:
        return None
    tool = _ANYWHERE_DIRS.get(name)
    if tool is None:
        path = "/" + relative
        tool = next((tool for tail, tool in _NESTED_TREES if path.endswith(tail)), None)
    return tool


def tool_of(relative: str, name: str, parent: str, *, in_dependencies: bool) -> str | None:
    """The tool that runs or obeys the file at ``relative`` (``name`` its last part, ``parent``
    the name of its directory); None when no listed tool does."""
    if name.endswith(".pth") and parent in ("site-packages", "dist-packages"):
        return "python"
    if in_dependencies:
        return None
    if relative in _ROOT_FILES:
        return _ROOT_FILES[relative]
    if "/" not in relative:
        if _shadows(name):
            return "python"
        tool = next((t for p, t in _ROOT_PATTERNS if fnmatch.fnmatchcase(name, p)), None)
        if tool is not None:
            return tool
    tool = _ANYWHERE.get(name)
    if tool is None:
        tool = next((t for p, t in _PATTERNS if fnmatch.fnmatchcase(name, p)), None)
    if tool is None and "/" in relative:
        path = "/" + relative
        tool = next((tool for tail, tool in _NESTED if path.endswith(tail)), None)
    if tool is not None:
        return tool
    return next((tool for suffix, tool in _SUFFIXES if name.endswith(suffix)), None)


def shadowing_package(relative: str) -> str | None:
    """``json/__init__.py`` at the root: a package that replaces a module Python imports."""
    head, _, tail = relative.partition("/")
    if head in SHADOWED_MODULES and _module_name(tail) == "__init__":
        return "python"
    return None


def _module_name(name: str) -> str | None:
    """The module a file of this name is to Python's importer (``json.cpython-311-x86_64-
    linux-gnu.so`` and ``json.abi3.so`` are ``json``), None for a file it does not import."""
    if name.endswith((".py", ".pyc")):
        return name.rsplit(".", 1)[0]
    if name.endswith(".so"):
        return name.split(".", 1)[0]
    return None


def _shadows(name: str) -> bool:
    return _module_name(name) in SHADOWED_MODULES


def covered() -> list[tuple[str, list[str]]]:
    """(tool, the files and directories watched for it), for the README and ``--help``."""
    out = []
    for tool in TOOLS:
        names = [*tool.anywhere, *(f"{d}/" for d in tool.anywhere_dirs), *tool.nested,
                 *tool.root, *(f"*{s}" for s in tool.suffixes), *tool.patterns,
                 *tool.root_patterns]
        out.append((tool.tool, names))
    return out


__all__ = ["DEPENDENCY_TREES", "SHADOWED_MODULES", "TOOLS", "HostTool", "covered",
           "may_matter", "shadowing_package", "tool_of", "watched_tree"]
