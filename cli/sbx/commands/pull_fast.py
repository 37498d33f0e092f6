"""`sbx pull [--accept] [--json] REF...` read by hand, without the CLI parser (issue 15).

The common re-pull pays no typer: when the words are exactly sbx's global flags, ``pull``,
its two flags and references, they are parsed here; any other word (``--help``, an unknown or
misspelt option, ``--accept=…``, no reference, a ``--`` tail) returns None and typer parses the
command line as before, with its usage errors (``SBX_FAST_PULL=0``: always). What happens
next is
:mod:`sbx.commands.pull`'s: the same core call, the same confirmation, the same rendering.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from sbx.base.deferred import deferred
from sbx.views import kit as kit_view

if TYPE_CHECKING:
    from sbx.usecases import pull as pull_core
else:  # imported on first use: a pull read by hand loads neither typer nor its parser
    pull_core = deferred("sbx.usecases.pull")

if TYPE_CHECKING:
    from sbx.commands.run_cached import Launch
    from sbx.usecases.context import AppContext

SWITCH_ENV: Final = "SBX_FAST_PULL"  # "0": every pull through typer
_FLAGS: Final = frozenset({"--accept", "--json"})
_SHORT_VERBOSE: Final = re.compile(r"^-v+$")


@dataclass(frozen=True)
class PullWords:
    references: tuple[str, ...]
    accept: bool
    verbose: int
    traceback: bool


def parse(argv: Sequence[str], passthrough: tuple[str, ...] | None) -> PullWords | None:
    """The request of ``[GLOBAL...] pull [--accept] [--json] REF...`` (global flags first, as
    sbx.__main__ hoists them); None for anything else."""
    if passthrough is not None:
        return None
    verbose, traceback, index = 0, False, 0
    while index < len(argv) and argv[index] != "pull":
        word = argv[index]
        if word == "--verbose":
            verbose += 1
        elif _SHORT_VERBOSE.match(word):
            verbose += len(word) - 1
        elif word == "--traceback":
            traceback = True
        else:
            return None
        index += 1
    rest = argv[index + 1:]
    if index == len(argv) or any(w.startswith("-") and w not in _FLAGS for w in rest):
        return None
    references = tuple(w for w in rest if not w.startswith("-"))
    if not references:
        return None
    return PullWords(references, "--accept" in rest, verbose, traceback)


def pull_by_hand(launch: Launch) -> int | None:
    """The exit status of the pull; None when the words need typer."""
    if launch.env.get(SWITCH_ENV) == "0":
        return None
    words = parse(launch.argv, launch.passthrough)
    if words is None:
        return None
    app = launch.context(verbose=words.verbose, traceback=words.traceback)
    return run_pull(app, words.references, accept=words.accept)


def run_pull(app: AppContext, references: Sequence[str], *, accept: bool) -> int:
    """The pull and its rendering, for both parsers: a confirmation on a terminal (else
    --accept or a refusal), the core call, the result (human or the JSON envelope)."""
    import functools

    renderer = app.renderer
    confirm = (functools.partial(kit_view.confirm_widenings, renderer) if renderer.interactive()
               else None)
    result = pull_core.pull(app, references, accept=accept, confirm=confirm,
                            progress=renderer.progress, on_notice=renderer.note)
    kit_view.pull_result(renderer, result)
    return 0


__all__ = ["SWITCH_ENV", "PullWords", "parse", "pull_by_hand", "run_pull"]
