"""The password database's homes (sbx.seams.host.accounts), against this host's own."""

from __future__ import annotations

import os
import pwd

from sbx.seams.host import accounts


def test_the_homes_are_the_databases() -> None:
    assert accounts.account_homes() == [entry.pw_dir for entry in pwd.getpwall()]
    me = pwd.getpwuid(os.getuid())
    assert accounts.own_home() == me.pw_dir
    assert accounts.home_of_user(me.pw_name) == me.pw_dir


def test_an_unknown_user_has_no_home() -> None:
    assert accounts.home_of_user("no-such-user-sbx-test") is None
