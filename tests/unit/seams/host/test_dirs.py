from __future__ import annotations

import stat
from pathlib import Path

from sbx.seams.host import dirs


def test_a_directory_is_made_set_aside_renamed_and_removed(tmp_path: Path) -> None:
    store = tmp_path / "a" / "store"
    dirs.make_directories(store, 0o755)
    dirs.make_directories(store, 0o755)  # already there: nothing
    temp = dirs.temporary_directory(store, ".sbx-add-")
    assert temp.parent == store and temp.name.startswith(".sbx-add-")
    assert stat.S_IMODE(temp.stat().st_mode) == 0o700
    dirs.make_directory(temp / "sub", 0o700)
    dirs.make_link("sub", temp / "link")
    dirs.set_mode(temp, 0o755)
    dirs.rename(temp, store / "skill")
    assert sorted(dirs.names(store / "skill")) == ["link", "sub"]
    assert stat.S_IMODE((store / "skill").stat().st_mode) == 0o755
    outside = tmp_path / "outside"
    outside.mkdir()
    dirs.make_link(str(outside), store / "skill" / "away")
    dirs.remove_tree(store / "skill")
    assert dirs.names(store) == [] and outside.is_dir()
