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


# Tests that judge the project as a whole (its tree, its packaging, its imports, its generated
# files, the test harness), not one module: the only files at the top of tests/unit.
PROJECT_WIDE = frozenset({"test_layout.py", "test_packaging.py", "test_import_cycles.py",
                          "test_generated_docs.py", "test_fakeengine.py",
                          "test_agreement_rules.py", "test_lazy_imports.py",
                          "test_module_sizes.py", "test_domain_no_io.py"})


def _owner(test: Path) -> Path:
    """The package folder a unit test file sits for (tests/unit/domain/sandbox → domain/sandbox)."""
    return PACKAGE / test.parent.relative_to(ROOT / "tests" / "unit")


def test_unit_tests_mirror_the_package() -> None:
    """A module's tests are found from its path: tests/unit/<folder>/test_<module>[_topic].py."""
    unit = ROOT / "tests" / "unit"
    top_modules = {p.stem for p in PACKAGE.glob("*.py")}  # __main__, app: tested at the top
    stray = [p.name for p in unit.glob("test_*.py")
             if p.name not in PROJECT_WIDE and p.stem.removeprefix("test_") not in top_modules]
    assert not stray, f"move these beside the package they test: {stray}"
    wrong: list[str] = []
    for test in unit.rglob("test_*.py"):
        if test.parent == unit:
            continue
        folder = _owner(test)
        names = {p.stem for p in folder.glob("*.py")} | {p.name for p in folder.iterdir()
                                                         if p.is_dir()}
        stem = test.stem.removeprefix("test_")
        if not folder.is_dir() or not any(stem == n or stem.startswith(n + "_") for n in names):
            wrong.append(test.relative_to(ROOT).as_posix())
    assert not wrong, f"no module of that name in the package folder they mirror: {wrong}"
