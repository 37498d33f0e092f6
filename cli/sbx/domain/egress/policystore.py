"""Where the user policy lives: ``<state>/policy/rules.json``, edited under a file lock and
replaced atomically, so concurrent ``sbx policy`` commands never lose a rule and a proxy
re-reading the file sees the old rules or the new ones, never half of either."""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from sbx.base.errors import SbxError
from sbx.domain.egress.userpolicy import (
    POLICY_DIR,
    RULES_FILE,
    PolicyFileError,
    UserRule,
    dump_text,
    load_text,
)
from sbx.seams import owned, state

LOCK_FILE: Final = "rules.lock"
MAX_FILE_BYTES: Final = 8 * 1024 * 1024


def rules_path(state_home: Path) -> Path:
    return state_home / POLICY_DIR / RULES_FILE


class PolicyStore:
    def __init__(self, state_home: Path) -> None:
        self.state_home = state_home
        self.path = rules_path(state_home)
        self.directory = self.path.parent

    def load(self) -> tuple[UserRule, ...]:
        """Every stored rule (expired ones too); none when the file does not exist. A damaged
        file is ``state_corrupt``: a rules file read as empty would drop the user's denies."""
        try:  # this user's own file only (sbx.seams.owned): its allows widen every sandbox
            raw = owned.read_bytes(self.path, max_bytes=MAX_FILE_BYTES)
        except OSError as error:
            raise state.unwritable(self.path, error, action="read the user policy",
                                   home=self.state_home) from None
        if raw is None:
            return ()
        try:
            return load_text(raw.decode("utf-8"))
        except (PolicyFileError, UnicodeDecodeError) as error:
            raise self._corrupt(str(error)) from None

    def _corrupt(self, problem: str) -> SbxError:
        return state.corrupt(self.path, problem, what="the user policy",
                             fix=f"Move {self.path} aside (keep it to inspect); `sbx policy ls` "
                                 "then starts empty and `sbx policy allow|deny` adds rules "
                                 "again.")

    @contextlib.contextmanager
    def editing(self) -> Iterator[list[UserRule]]:
        """The rules to change in place, under the store's lock; written back (without the
        expired ones) when the block ends without an error."""
        with state.writing(self.directory, "create the user policy directory",
                           home=self.state_home):
            owned.ensure_directory(self.directory)
        lock = self.directory / LOCK_FILE
        with state.writing(lock, "lock the user policy", home=self.state_home):
            fd = owned.open_lock(lock)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            now = time.time()
            rules = [r for r in self.load() if r.expires is None or r.expires > now]
            yield rules
            with state.writing(self.path, "write the user policy", home=self.state_home):
                owned.write_file(self.path, dump_text(rules).encode("utf-8"))
        finally:
            os.close(fd)  # closing releases the lock


__all__ = ["LOCK_FILE", "PolicyStore", "rules_path"]
