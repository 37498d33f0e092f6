"""`--engine NAME`: the [engines] entry a new sandbox goes to (sbx.usecases.fleet)."""

from __future__ import annotations

from typing import Annotated

import typer

EngineOption = Annotated[str | None, typer.Option(
    "--engine", metavar="NAME",
    help="Create it on this engine of the config's [engines] (default: the least-loaded one "
         "that answers, when [engines] is set and DOCKER_HOST/DOCKER_CONTEXT are not).")]

__all__ = ["EngineOption"]
