"""What `sbx run WORKLOAD [WORKSPACE]`'s positional words mean, checked before any work.

People coming from `docker run IMAGE CMD` type `sbx run ./kit ls`: the second word is then the
WORKSPACE, and a "does not exist" about `ls` leads nowhere. A word that names no directory and is
not written as a path is far more likely a command, so the refusal shows the `--` form.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.kits.pathcheck import looks_like_path


def check_workspace_word(workload: str, workspace: str | None,
                         command: Sequence[str] | None, *,
                         is_directory: Callable[[str], bool]) -> None:
    """Refuse a WORKSPACE that is no directory (``is_directory``: whether a word names one
    here) and reads as a command, hinting ``sbx run WORKLOAD -- WORD``. Paths (``./x``, ``/x``,
    ``a/b``) are left to the mount checks, which name the rule."""
    if workspace is None or "/" in workspace or is_directory(workspace):
        return
    if looks_like_path(workspace):
        return
    suggested = shlex.join(["sbx", "run", workload, "--", workspace, *(command or ())])
    raise SbxError(
        Reason.INVALID_ARGUMENT,
        f"WORKSPACE {workspace!r} is no directory here; the word after the workload is the "
        "workspace, and a command to run in the sandbox goes after --",
        hint=f"To run {workspace!r} in the sandbox: {suggested}",
        details={"workspace": workspace})


def command_hint(argv: Sequence[str], unknown_option: str | None,
                 is_directory: Callable[[str], bool]) -> str | None:
    """For ``sbx run ./kit ls -la`` (refused by the parser: ``-la`` is no option of sbx run), the
    same line with ``--`` before the command word, or None when that is not what happened
    (``is_directory``: whether a word names a directory here).

    The command word is the last positional word before the unknown option that names no
    directory and is not written as a path: the workload's own options belong after ``--``.
    """
    if not unknown_option or "run" not in argv or "--" in argv:
        return None
    start = list(argv).index("run") + 1
    # The parser names the first letter of a bundle (`-la` is reported as `-l`).
    bundled = not unknown_option.startswith("--")
    stop = next((i for i in range(start, len(argv)) if argv[i] == unknown_option
                 or (bundled and argv[i].startswith(unknown_option)
                     and not argv[i].startswith("--"))), None)
    if stop is None:
        return None
    words = [i for i in range(start, stop) if not argv[i].startswith("-")]
    if len(words) < 2:  # the workload alone: the option really is unknown
        return None
    at = words[-1]
    word = argv[at]
    if looks_like_path(word) or "/" in word or is_directory(word):
        return None
    suggested = shlex.join(["sbx", *argv[:at], "--", *argv[at:]])
    return f"To run {shlex.join(argv[at:])!r} in the sandbox: {suggested}"


__all__ = ["check_workspace_word", "command_hint"]
