"""The kits shipped inside sbx (the agents in ``sbx/data/agents``, the browser mixins in
``sbx/data/kits``) and their short names.

``sbx run claude . --kit browser`` is what people type; the kit directories keep the products'
own names (claude-code, codex, gemini-cli), so the short name is a fixed table, never a guess.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.seams.host import lookup

# short name -> directory under sbx/data, in the order `sbx kit ls` shows them
SHORT_NAMES: Final[dict[str, str]] = {
    "claude": "agents/claude-code",
    "codex": "agents/codex",
    "gemini": "agents/gemini-cli",
    "browser": "kits/browser",
    "browser-observer": "kits/browser-observer",
}


def data_dir() -> Path:
    """Where the bundled kits are: in the package, so a wheel carries them."""
    return lookup.resolved(Path(__file__)).parents[2] / "data"


def agents_dir() -> Path:
    """Where the bundled agent kits are."""
    return data_dir() / "agents"


def bundled_kit(name: str) -> Path | None:
    """The kit directory a short name stands for, or None when ``name`` is none of them."""
    directory = SHORT_NAMES.get(name)
    return None if directory is None else data_dir() / directory


def registry_shaped(reference: str) -> bool:
    """Whether ``reference`` is written as a registry reference: a host or repository path
    (``/``), a tag (``:``) or a digest (``@``). A bare word is not one: sending it to a
    registry would ask Docker Hub for something nobody published there."""
    return any(mark in reference for mark in "/:@")


def unknown_kit(reference: str, cwd: Path) -> SbxError:
    """The refusal of a bare word that names no kit: ``kit_not_found``, with the closest
    bundled short names and local directories."""
    close = suggestions(reference, cwd)
    shown = reference if len(reference) <= 120 else reference[:117] + "..."
    guess = f"Did you mean {' or '.join(close)}? " if close else ""
    return SbxError(
        Reason.KIT_NOT_FOUND,
        f"no kit named {shown!r}: it is no path here, no kit pinned by `sbx pull` and no "
        "bundled kit",
        hint=f"{guess}Bundled: {', '.join(SHORT_NAMES)} (`sbx kit ls`); a kit directory is "
             "named by its path (./DIR).",
        details={"reference": reference, "suggestions": close})


MAX_SCANNED: Final = 512  # directory entries looked at for "did you mean"; a huge cwd is cut


def suggestions(word: str, cwd: Path) -> list[str]:
    """Up to three bundled short names or directories of ``cwd`` close to ``word``, closest
    first (case does not count)."""
    candidates = list(SHORT_NAMES) + _local_directories(cwd)
    by_lower: dict[str, str] = {}
    for candidate in candidates:
        by_lower.setdefault(candidate.lower(), candidate)
    # Here, not at the top: a pull reads SHORT_NAMES and never suggests.
    import difflib

    found = difflib.get_close_matches(word.lower(), list(by_lower), n=3, cutoff=0.6)
    return [by_lower[match] for match in found]


def _local_directories(cwd: Path) -> list[str]:
    return sorted(name for name in lookup.subdirectory_names(cwd, MAX_SCANNED)
                  if not name.startswith("."))


__all__ = ["MAX_SCANNED", "SHORT_NAMES", "agents_dir", "bundled_kit", "data_dir", "registry_shaped",
           "suggestions", "unknown_kit"]
