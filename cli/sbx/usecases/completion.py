"""`sbx completion SHELL`: the completion scripts the package carries.

The scripts are generated from the command tree by ``scripts/gen_completions.py`` into
``sbx/data/completions/`` (drift-tested), shipped in the wheel both there and under
``share/`` (where pipx and distribution packages look), and read back here: nothing is
generated at run time, so the script printed is byte for byte the one installed.
"""

from __future__ import annotations

from importlib import resources
from typing import Final

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason

SHELLS: Final = ("bash", "zsh", "fish")
SCRIPT_FILES: Final = {"bash": "sbx.bash", "zsh": "_sbx", "fish": "sbx.fish"}
DATA_DIR: Final = "data/completions"


def completion_script(shell: str) -> str:
    """The completion script for ``shell`` (bash, zsh or fish)."""
    name = SCRIPT_FILES.get(shell)
    if name is None:
        raise SbxError(Reason.INVALID_ARGUMENT, f"no completion for shell {shell!r}",
                       hint=f"Choose one of {', '.join(SHELLS)}.")
    try:
        return resources.files("sbx").joinpath(DATA_DIR, name).read_text(encoding="utf-8")
    except OSError as exc:
        raise SbxError(Reason.INTERNAL_ERROR,
                       f"this installation of sbx lacks its {shell} completion script "
                       f"(sbx/{DATA_DIR}/{name}: {exc.strerror or type(exc).__name__})",
                       hint="Reinstall sbx (pipx reinstall sbx-sandbox).") from None


__all__ = ["DATA_DIR", "SCRIPT_FILES", "SHELLS", "completion_script"]
