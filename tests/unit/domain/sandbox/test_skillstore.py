"""The host's skills store: name rule, SKILL.md front matter, and the copy's rules (no link
followed out, no special file, bounded, modes normalised, atomic, nothing left on refusal)."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.sandbox import skillstore
from sbx.domain.sandbox.skillstore import SkillStore, description_of, name_problem


def _skill(root: Path, name: str = "review", body: str = "# Review\n") -> Path:
    source = root / name
    source.mkdir(parents=True)
    (source / "SKILL.md").write_text(
        f"---\nname: {name}\ndescription: Reviews a change\n---\n{body}")
    return source


def _store_entries(store: Path) -> list[str]:
    return sorted(os.listdir(store)) if store.exists() else []


@pytest.mark.parametrize("name", ["review", "a", "Skill_2.0-x", "9" * 255])
def test_valid_names(name: str) -> None:
    assert name_problem(name) is None


@pytest.mark.parametrize(("name", "why"), [
    ("", "empty"), ("a/b", "separator"), ("../x", "separator"), (".hidden", "starts"),
    ("-rf", "starts"), ("_x", "starts"), ("x" * 256, "255"), ("sp ace", "only"),
    ("é", "only"), ("a\nb", "only"), ("a\\b", "separator")])
def test_invalid_names(name: str, why: str) -> None:
    problem = name_problem(name)
    assert problem is not None and why in problem


def test_description_from_front_matter_with_controls_stripped() -> None:
    text = '---\nname: x\ndescription: "Reviews\\x1b]52;c;Zm9v\\x07 a\\nchange"\n---\nbody\n'
    assert description_of(text) == "Reviews ]52;c;Zm9v a change"
    folded = "---\ndescription: >\n  one\n  two\n---\n"
    assert description_of(folded) == "one two"


@pytest.mark.parametrize("text", [
    "no front matter\ndescription: x\n", "---\ndescription: x\n",  # never closed
    "---\n: [unclosed\n---\n", "---\n- a list\n---\n", "---\ndescription: [1]\n---\n",
    "---\na: &x 1\ndescription: *x\n---\n"])  # aliases refused as in a kit descriptor
def test_no_description(text: str) -> None:
    assert description_of(text) == ""


def test_description_is_bounded() -> None:
    assert len(description_of("---\ndescription: " + "x" * 5000 + "\n---\n")) == \
        skillstore.MAX_DESCRIPTION


def test_add_copies_lists_and_removes(tmp_path: Path) -> None:
    source = _skill(tmp_path / "src")
    (source / "scripts").mkdir()
    tool = source / "scripts" / "run.sh"
    tool.write_text("#!/bin/sh\necho hi\n")
    tool.chmod(0o4700)  # setuid and owner-only: normalised for the sandbox's user
    (source / "private.md").write_text("notes")
    (source / "private.md").chmod(0o600)
    (source / "link.md").symlink_to("scripts/run.sh")  # inside: copied as a link
    store = SkillStore(tmp_path / "store")
    added = store.add(source, "review", force=False)
    copied = tmp_path / "store" / "review"
    assert added.directory == copied and added.description == "Reviews a change"
    assert stat.S_IMODE(os.stat(copied / "scripts" / "run.sh").st_mode) == 0o755
    assert stat.S_IMODE(os.stat(copied / "private.md").st_mode) == 0o644
    assert stat.S_IMODE(os.stat(copied).st_mode) == 0o755
    assert os.readlink(copied / "link.md") == "scripts/run.sh"
    assert added.size == sum(p.stat().st_size for p in source.rglob("*")
                             if p.is_file() and not p.is_symlink())
    assert [s.name for s in store.listing()] == ["review"]
    assert _store_entries(tmp_path / "store") == ["review"]  # no temporary left
    assert store.remove("review") == copied
    assert _store_entries(tmp_path / "store") == [] and store.listing() == []


def test_existing_name_refused_unless_forced(tmp_path: Path) -> None:
    store = SkillStore(tmp_path / "store")
    store.add(_skill(tmp_path / "a", body="first"), "review", force=False)
    second = _skill(tmp_path / "b", body="second")
    with pytest.raises(SbxError) as refused:
        store.add(second, "review", force=False)
    assert refused.value.reason is Reason.SKILL_EXISTS
    assert "first" in (tmp_path / "store" / "review" / "SKILL.md").read_text()
    store.add(second, "review", force=True)
    assert "second" in (tmp_path / "store" / "review" / "SKILL.md").read_text()
    assert _store_entries(tmp_path / "store") == ["review"]


def test_rm_of_a_missing_name(tmp_path: Path) -> None:
    with pytest.raises(SbxError) as refused:
        SkillStore(tmp_path / "store").remove("nope")
    assert refused.value.reason is Reason.SKILL_NOT_FOUND and refused.value.hint


def _refused(tmp_path: Path, source: Path, reason: Reason, name: str = "review") -> SbxError:
    store = tmp_path / "store"
    with pytest.raises(SbxError) as refused:
        SkillStore(store).add(source, name, force=False)
    assert refused.value.reason is reason, refused.value.message
    assert _store_entries(store) == []  # nothing written, no temporary left
    return refused.value


@pytest.mark.parametrize("target", ["/etc/passwd", "../outside.md", "scripts/../../outside.md",
                                    "missing.md"])
def test_links_out_of_the_source_refused(tmp_path: Path, target: str) -> None:
    source = _skill(tmp_path / "src")
    (source / "scripts").mkdir()
    (tmp_path / "src" / "outside.md").write_text("secret")
    (source / "scripts" / "x.md").symlink_to(target)
    error = _refused(tmp_path, source, Reason.SKILL_SOURCE_UNSAFE)
    assert "scripts/x.md" in error.message


def test_a_chain_of_links_out_is_refused(tmp_path: Path) -> None:
    # sub/up → .. is inside; sub/x → up/../.. looks inside lexically and is not.
    source = _skill(tmp_path / "src")
    (source / "sub").mkdir()
    (source / "sub" / "up").symlink_to("..")
    (source / "sub" / "x").symlink_to("up/../..")
    assert "sub/x" in _refused(tmp_path, source, Reason.SKILL_SOURCE_UNSAFE).message


def test_skill_md_as_a_link_refused(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (tmp_path / "real.md").write_text("---\ndescription: x\n---\n")
    (source / "SKILL.md").symlink_to(tmp_path / "real.md")
    _refused(tmp_path, source, Reason.SKILL_SOURCE_INVALID)


def test_fifo_and_socket_refused(tmp_path: Path) -> None:
    source = _skill(tmp_path / "src")
    os.mkfifo(source / "pipe")
    assert "FIFO" in _refused(tmp_path, source, Reason.SKILL_SOURCE_UNSAFE).message
    os.unlink(source / "pipe")
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(source / "sock"))
        assert "socket" in _refused(tmp_path, source, Reason.SKILL_SOURCE_UNSAFE).message
    finally:
        server.close()


def test_no_skill_md_or_not_a_directory(tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    bare.mkdir()
    _refused(tmp_path, bare, Reason.SKILL_SOURCE_INVALID)
    (tmp_path / "file").write_text("x")
    _refused(tmp_path, tmp_path / "file", Reason.SKILL_SOURCE_INVALID)
    _refused(tmp_path, tmp_path / "missing", Reason.SKILL_SOURCE_INVALID)


def test_a_source_holding_the_store_is_refused(tmp_path: Path) -> None:
    (tmp_path / "SKILL.md").write_text("x")
    store = tmp_path / "store"
    with pytest.raises(SbxError) as refused:
        SkillStore(store).add(tmp_path, "review", force=False)
    assert refused.value.reason is Reason.SKILL_SOURCE_INVALID
    assert _store_entries(store) == []


def test_size_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(skillstore, "MAX_BYTES", 100)
    source = _skill(tmp_path / "src")
    (source / "big.bin").write_bytes(b"x" * 200)
    _refused(tmp_path, source, Reason.SKILL_TOO_LARGE)


def test_bad_name_refused_before_reading(tmp_path: Path) -> None:
    _refused(tmp_path, _skill(tmp_path / "src"), Reason.SKILL_NAME_INVALID, name="../escape")
    assert not (tmp_path / "escape").exists()


def test_listing_skips_temporaries_and_non_directories(tmp_path: Path) -> None:
    store = tmp_path / "store"
    (store / ".sbx-add-x").mkdir(parents=True)
    (store / "file").write_text("x")
    (store / "link").symlink_to(tmp_path)
    (store / "plain").mkdir()
    assert [(s.name, s.description, s.size) for s in SkillStore(store).listing()] == [
        ("plain", "", 0)]


@pytest.mark.parametrize(("name", "suggested"), [
    (".hidden", "hidden"), ("my skill", "my-skill"), ("--", "skill"), ("a/b", "a-b")])
def test_the_fix_names_a_valid_name(tmp_path: Path, name: str, suggested: str) -> None:
    assert skillstore.suggested_name(name) == suggested
    with pytest.raises(SbxError) as refused:
        skillstore.check_name(name, tmp_path / "my src")
    assert refused.value.hint is not None
    assert refused.value.hint.endswith(f"sbx skills add '{tmp_path}/my src' --name {suggested}")
