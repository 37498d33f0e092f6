"""`sbx pull` with the same words as an earlier pull runs without the CLI parser: typer's parse
of those words was kept (:mod:`sbx.usecases.parsedwords`) and is used again. There is one
parser; any words it has not read yet, ``--help`` and every usage error go to it
(``SBX_FAST_PULL=0``: every pull). What happens next is the same for both: :func:`run_pull`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from sbx.base.deferred import deferred
from sbx.base.strictjson import as_bool, as_str
from sbx.usecases import parsedwords
from sbx.views import kit as kit_view

if TYPE_CHECKING:
    from sbx.usecases import pull as pull_core
else:  # imported on first use: `sbx pull --help` loads no registry client
    pull_core = deferred("sbx.usecases.pull")

if TYPE_CHECKING:
    from sbx.commands.run_cached import Launch
    from sbx.usecases.context import AppContext

SWITCH_ENV: Final = "SBX_FAST_PULL"  # "0": every pull through typer
VERB: Final = "pull"


def pull_by_hand(launch: Launch) -> int | None:
    """The exit status of a pull whose words were parsed before; None when typer must read
    them."""
    if launch.env.get(SWITCH_ENV) == "0":
        return None
    parsed = parsedwords.recall(launch.env, VERB, launch.argv, launch.passthrough)
    if parsed is None:
        return None
    try:
        words = parsed.values["references"]
        references = tuple(as_str(r) for r in words) if isinstance(words, list) else ()
        accept = as_bool(parsed.values["accept"])
    except (KeyError, TypeError):
        return None  # not a pull's parse: typer reads the words again
    if not references:
        return None
    app = launch.context(verbose=parsed.verbose, traceback=parsed.traceback)
    return run_pull(app, references, accept=accept)


def run_pull(app: AppContext, references: Sequence[str], *, accept: bool) -> int:
    """The pull and its rendering, for both entries: a confirmation on a terminal (else
    --accept or a refusal), the core call, the result (human or the JSON envelope)."""
    import functools

    renderer = app.renderer
    confirm = (functools.partial(kit_view.confirm_widenings, renderer) if renderer.interactive()
               else None)
    result = pull_core.pull(app, references, accept=accept, confirm=confirm,
                            progress=renderer.progress, on_notice=renderer.note)
    kit_view.pull_result(renderer, result)
    return 0


def remember(app: AppContext, references: Sequence[str], *, accept: bool) -> None:
    """Keep typer's parse of these words for the next pull of the same words."""
    parsedwords.remember(app, VERB, {"references": list(references), "accept": accept})


__all__ = ["SWITCH_ENV", "VERB", "pull_by_hand", "remember", "run_pull"]
