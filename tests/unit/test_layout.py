"""The README's layout section names every package folder of cli/sbx, so the map a newcomer reads
is the tree that exists (a new folder, or a moved one, fails here until the README says where it
sits)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "cli" / "sbx"


def _layout_section() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"^## Layout\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert match, "README.md has no '## Layout' section"
    return match.group(1)


def test_every_package_folder_is_on_the_readme_map() -> None:
    section = _layout_section()
    folders = sorted(p.parent.relative_to(ROOT).as_posix() + "/"
                     for p in PACKAGE.rglob("__init__.py") if p.parent != PACKAGE)
    assert folders, "no packages found"
    # A nested package (seams/session/) is covered by its parent's line; a top-level one is not.
    missing = [f for f in folders
               if f not in section
               and (f.count("/") <= 3 or f.rsplit("/", 2)[0] + "/" not in section)]
    assert not missing, f"README layout does not mention: {missing}"


def test_the_map_names_no_folder_that_is_gone() -> None:
    named = re.findall(r"^(cli/sbx/[\w/]+/)", _layout_section(), re.M)
    assert named
    gone = [folder for folder in named if not (ROOT / folder).is_dir()]
    assert not gone, f"README layout names folders that do not exist: {gone}"


def test_the_map_is_what_the_package_docstrings_say() -> None:
    """The map is generated (scripts/gen_layout.py) from each folder's ``__init__`` docstring:
    a folder whose description changed, or that moved, fails here until regenerated."""
    spec = importlib.util.spec_from_file_location("gen_layout", ROOT / "scripts" / "gen_layout.py")
    assert spec is not None and spec.loader is not None
    gen_layout = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen_layout)
    match = gen_layout.BLOCK.search((ROOT / "README.md").read_text(encoding="utf-8"))
    assert match is not None
    assert match.group(2) == gen_layout.layout(), "run scripts/regen.sh"
