"""What a kit reference names, in the one order (a path, a pinned kit, a bundled short name),
and the refusals of what names nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.kits.bundled import SHORT_NAMES, agents_dir, data_dir
from sbx.domain.kits.lock import Lock as KitLock
from sbx.domain.kits.lock import LockEntry, lock_path, write_lock
from sbx.domain.kits.reference import (
    RegistryReference,
    find_kit,
    load_kit,
    name_of,
    short_names,
)
from sbx.domain.kits.surface import Surface
from tests.support.kits import write_kit

D1 = "sha256:" + "1" * 64


def _pin(state: Path, reference: str) -> None:
    entry = LockEntry(reference, D1, f"127.0.0.1:5000/kits/a@{D1}", "workload", Surface())
    write_lock(lock_path(state), KitLock().with_entry(entry))


@pytest.mark.parametrize(("name", "directory"), sorted(SHORT_NAMES.items()))
def test_each_short_name_loads_its_bundled_kit(tmp_path: Path, name: str,
                                               directory: str) -> None:
    kit = load_kit(name, cwd=tmp_path, lock_home=tmp_path / "state")
    assert kit.reference == name and kit.bundled
    assert kit.directory == data_dir() / directory
    # the agents are workloads, the browser kits mixins to compose with them
    kind = "workload" if directory.startswith("agents/") else "mixin"
    assert kit.descriptor.kind == kind and kit.dockerfile_text is not None


def test_the_bundled_kits_are_inside_the_package() -> None:
    import sbx

    package = Path(sbx.__file__).resolve().parent
    for directory in SHORT_NAMES.values():
        stem = directory.rsplit("/", 1)[1]
        assert (data_dir() / directory / f"{stem}.yaml").is_file()
        assert (data_dir() / directory).is_relative_to(package)


def test_an_existing_path_comes_before_a_short_name(tmp_path: Path) -> None:
    write_kit(tmp_path, "claude", "", "FROM scratch\n")
    kit = load_kit("claude", cwd=tmp_path, lock_home=tmp_path / "state")
    assert kit.directory == tmp_path / "claude" and not kit.bundled
    assert name_of("claude", cwd=tmp_path, lock_home=None).source == "path"


def test_a_pinned_kit_comes_before_a_short_name_and_after_a_path(tmp_path: Path) -> None:
    state = tmp_path / "state"
    _pin(state, "codex")
    assert name_of("codex", cwd=tmp_path, lock_home=state).source == "locked"
    assert name_of("codex", cwd=tmp_path, lock_home=None).source == "bundled"
    (tmp_path / "codex").mkdir()
    assert name_of("codex", cwd=tmp_path, lock_home=state).source == "path"


def test_short_names_say_what_shadows_them(tmp_path: Path) -> None:
    (tmp_path / "gemini").mkdir()
    listed = {n.name: n for n in short_names(cwd=tmp_path, lock_home=tmp_path / "state")}
    assert list(listed) == list(SHORT_NAMES)
    assert listed["gemini"].shadowed and listed["gemini"].as_dict()["resolves_to"] == str(
        tmp_path / "gemini")
    assert not listed["claude"].shadowed
    assert listed["claude"].as_dict()["resolves_to"] == str(agents_dir() / "claude-code")


@pytest.mark.parametrize("word", ["claud", "Claude", "codx", "gemni"])
def test_a_misspelt_short_name_is_kit_not_found_with_did_you_mean(tmp_path: Path,
                                                                  word: str) -> None:
    with pytest.raises(SbxError) as raised:
        load_kit(word, cwd=tmp_path, lock_home=tmp_path / "state")
    error = raised.value
    assert error.reason is Reason.KIT_NOT_FOUND
    assert error.details["suggestions"] and error.details["suggestions"][0] in SHORT_NAMES
    assert "Did you mean" in (error.hint or "") and "sbx pull" not in (error.hint or "")


def test_did_you_mean_offers_local_directories(tmp_path: Path) -> None:
    (tmp_path / "hello-kit").mkdir()
    (tmp_path / ".hidden-kit").mkdir()
    with pytest.raises(SbxError) as raised:
        load_kit("hello-kt", cwd=tmp_path, lock_home=None)
    assert raised.value.details["suggestions"] == ["hello-kit"]


def test_a_word_close_to_nothing_has_no_guess(tmp_path: Path) -> None:
    with pytest.raises(SbxError) as raised:
        load_kit("zzzz", cwd=tmp_path, lock_home=None)
    assert raised.value.reason is Reason.KIT_NOT_FOUND
    assert raised.value.details["suggestions"] == []
    assert "Did you mean" not in (raised.value.hint or "")


@pytest.mark.parametrize("reference", ["127.0.0.1:5000/kits/a:1", "org/kit", "kit:1.0",
                                       "kit@" + D1])
def test_only_a_registry_shaped_reference_gets_the_pull_hint(tmp_path: Path,
                                                             reference: str) -> None:
    assert isinstance(find_kit(reference, cwd=tmp_path, lock_home=tmp_path / "state"),
                      RegistryReference)
    with pytest.raises(SbxError) as raised:
        load_kit(reference, cwd=tmp_path, lock_home=tmp_path / "state")
    assert raised.value.reason is Reason.IMAGE_MISSING
    assert f"sbx pull {reference}" in (raised.value.hint or "")


@pytest.mark.parametrize("reference", ["./claude", "../nope", "/no/such/kit"])
def test_a_path_that_is_missing_is_never_a_short_name_or_a_pull(tmp_path: Path,
                                                                reference: str) -> None:
    with pytest.raises(SbxError) as raised:
        load_kit(reference, cwd=tmp_path, lock_home=None)
    assert raised.value.reason is Reason.INVALID_ARGUMENT
    assert "sbx pull" not in (raised.value.hint or "")


def test_a_bundled_kit_is_approved_under_its_own_directory_not_the_word(tmp_path: Path) -> None:
    from sbx.domain.kits.approvals import kit_identity

    bundled = load_kit("claude", cwd=tmp_path, lock_home=None)
    assert kit_identity(bundled, tmp_path) == str(agents_dir() / "claude-code")
    write_kit(tmp_path, "claude", "", "FROM scratch\n")
    local = load_kit("claude", cwd=tmp_path, lock_home=None)
    assert kit_identity(local, tmp_path) == str(tmp_path / "claude")
