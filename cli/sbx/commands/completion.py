"""`sbx completion bash|zsh|fish`: adapter to :func:`sbx.usecases.completion.completion_script`."""

from __future__ import annotations

import enum
from typing import Annotated

import typer

from sbx.usecases import completion as completion_core


class Shell(enum.StrEnum):
    BASH = "bash"
    ZSH = "zsh"
    FISH = "fish"


def completion(
    ctx: typer.Context,
    shell: Annotated[Shell, typer.Argument(
        metavar="SHELL", help="The shell to print the script for.", case_sensitive=False)],
) -> int:
    """Print the shell completion script for SHELL (bash, zsh or fish).

    The same scripts are installed with the package (share/bash-completion/completions/sbx,
    share/zsh/site-functions/_sbx, share/fish/vendor_completions.d/sbx.fish), which bash, zsh
    and fish find on their own when sbx's prefix is theirs. Elsewhere, install one by hand:

    bash: sbx completion bash > ~/.local/share/bash-completion/completions/sbx

    zsh: sbx completion zsh > "${fpath[1]}/_sbx"

    fish: sbx completion fish > ~/.config/fish/completions/sbx.fish

    The scripts are static: completing never starts sbx.
    """
    ctx.obj.renderer.text(completion_core.completion_script(shell.value))
    return 0


__all__ = ["Shell", "completion"]
