"""Where a command meant for the sandbox was typed as sbx's own arguments (pure decisions)."""

from __future__ import annotations

import pytest

from sbx.domain.sandbox.runargs import command_hint


@pytest.mark.parametrize(("argv", "option", "expected"), [
    (["run", "./kit", "ls", "-la"], "-l",
     "To run 'ls -la' in the sandbox: sbx run ./kit -- ls -la"),
    (["-v", "run", "./kit", "grep", "-r", "x"], "-r",
     "To run 'grep -r x' in the sandbox: sbx -v run ./kit -- grep -r x"),
    (["run", "--kit", "./gh", "./kit", "git", "--version"], "--version",
     "To run 'git --version' in the sandbox: sbx run --kit ./gh ./kit -- git --version"),
])
def test_the_command_word_moves_behind_the_double_dash(
        argv: list[str], option: str, expected: str) -> None:
    assert command_hint(argv, option, lambda word: False) == expected


@pytest.mark.parametrize(("argv", "option"), [
    (["run", "./kit", "--bogus"], "--bogus"),  # only the workload: sbx's option is unknown
    (["run", "./kit", "./ws", "-x"], "-x"),  # a path is a workspace, not a command
    (["run", "./kit", "ws", "-x"], "-x"),  # an existing directory is a workspace
    (["run", "./kit", "ls", "--", "-la"], "-l"),  # already separated
    (["pull", "ref", "x", "-y"], "-y"),  # not sbx run
    (["run", "./kit", "ls", "-la"], None),  # not an unknown-option error
])
def test_no_hint_where_the_words_are_not_a_misplaced_command(
        argv: list[str], option: str | None) -> None:
    assert command_hint(argv, option, lambda word: word == "ws") is None
