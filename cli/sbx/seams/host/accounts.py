"""The host's password database, read for the homes it names: every account's, one user's by
name, and this process's own. Which of them the mount policy protects is
:mod:`sbx.domain.sandbox.mountpolicy`'s."""

from __future__ import annotations

import os
import pwd


def account_homes() -> list[str]:
    """The home directory of every account, in the database's order (as written there)."""
    return [entry.pw_dir for entry in pwd.getpwall()]


def home_of_user(name: str) -> str | None:
    """The home directory of the account ``name``; None when there is no such account."""
    try:
        return pwd.getpwnam(name).pw_dir
    except KeyError:
        return None


def own_home() -> str:
    """The home directory of this process's user, as the database names it; KeyError when
    the user has no entry."""
    return pwd.getpwuid(os.getuid()).pw_dir


__all__ = ["account_homes", "home_of_user", "own_home"]
