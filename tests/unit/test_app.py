"""The command table of sbx.app: what `sbx --help` lists is each command's real help, and a
command line imports only the command module it runs."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator, Mapping

import pytest

from sbx.app import COMMANDS, GROUPS, Command, Group, LazyGroup, app


def _entries(table: Mapping[str, Command | Group],
             path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Command]]:
    for name, entry in table.items():
        if isinstance(entry, Group):
            yield from _entries(entry.commands, (*path, name))
        else:
            yield (*path, name), entry


ALL = list(_entries(COMMANDS))


@pytest.mark.parametrize(("path", "entry"), ALL, ids=[" ".join(p) for p, _ in ALL])
def test_the_listed_summary_is_the_first_paragraph_of_the_real_help(
        path: tuple[str, ...], entry: Command) -> None:
    group: Mapping[str, Command | Group] = COMMANDS
    for name in path[:-1]:
        sub = group[name]
        assert isinstance(sub, Group)
        group = sub.commands
    built = LazyGroup(name="sbx", entries=group).commands[path[-1]]
    assert built.name == path[-1]
    assert (built.help or "").split("\n\n")[0] == entry.summary, \
        f"update the summary of `sbx {' '.join(path)}` in sbx.app.COMMANDS"
    # the listing shows only the summary: nothing else of the command may change it
    assert not built.short_help and not built.deprecated and not built.hidden
    for limit in (20, 45, 74, 200):
        shown = LazyGroup(name=path[-1], help=entry.summary)
        assert shown.get_short_help_str(limit) == built.get_short_help_str(limit)


def test_the_groups_are_the_tables_groups() -> None:
    assert {"secret", "kit", "skills", "config", "policy", "mcp", "template", "resident"} \
        == GROUPS
    assert app.registered_commands == [] and app.registered_groups == []


def _command_modules_loaded(*argv: str) -> list[str]:
    code = ("import sys, io, sbx.__main__ as m; "
            f"m.cli({list(argv)!r}, stdout=io.StringIO(), stderr=io.StringIO()); "
            "print(' '.join(sorted(n for n in sys.modules if n.startswith('sbx.commands.'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=60)
    return done.stdout.splitlines()[-1].split()  # the help itself is printed first


# sbx.__main__ imports the root help page's reader itself (`sbx --help` skips the CLI)
ENTRY = ["sbx.commands.help_fast"]


def test_help_imports_no_command_module() -> None:
    assert _command_modules_loaded("--help") == ENTRY
    assert _command_modules_loaded("kit", "--help") == ENTRY


def test_a_command_imports_its_own_module_only() -> None:
    assert _command_modules_loaded("version") == sorted([*ENTRY, "sbx.commands.version"])
    assert _command_modules_loaded("config", "path") == sorted([*ENTRY, "sbx.commands.config"])
    # the plan cache's entry is the run's: `sbx run` looks its plan up before any parsing
    assert "sbx.commands.run_cached" in _command_modules_loaded("run", "--help")
