"""Which kit paths a run pins read-only under its writable mounts, and what it refuses
(sbx.domain.sandbox.kitpins); real directories, no engine."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from sbx.base.errors import MountBlocked
from sbx.domain.kits.local import load_local_kit
from sbx.domain.sandbox.kitpins import KitFiles, kit_files, kit_pins
from sbx.domain.sandbox.sources import Pin, open_checked
from tests.support.kits import write_kit

RECIPE = "FROM scratch\n"


@pytest.fixture
def opened() -> Iterator[list[Pin]]:
    pins: list[Pin] = []
    yield pins
    for pin in pins:
        pin.source.close()


def mount(path: Path, target: str, pins: list[Pin]) -> Pin:
    pin = Pin(open_checked(str(path.resolve())), target, False)
    pins.append(pin)
    return pin


def files(reference: str, cwd: Path) -> KitFiles:
    return kit_files(load_local_kit(reference, cwd=cwd), cwd)


def shown(pins: list[Pin]) -> list[tuple[str, str, bool]]:
    return sorted((p.source.path, p.target, p.read_only) for p in pins)


def test_a_kit_inside_the_workspace_is_read_only_and_its_way_there_cannot_be_renamed(
        tmp_path: Path, opened: list[Pin]) -> None:
    ws = tmp_path / "ws"
    write_kit(ws / "tools" / "kits", "agent", "", RECIPE)
    workspace = mount(ws, "/workspace", opened)
    pins = kit_pins([files("./tools/kits/agent", ws)], [workspace])
    opened.extend(pins)
    root = str(ws.resolve())
    assert shown(pins) == [
        (f"{root}/tools", "/workspace/tools", False),
        (f"{root}/tools/kits", "/workspace/tools/kits", False),
        (f"{root}/tools/kits/agent", "/workspace/tools/kits/agent", True)]


def test_every_writable_mount_that_holds_the_kit_pins_it(tmp_path: Path,
                                                          opened: list[Pin]) -> None:
    write_kit(tmp_path / "share", "agent", "", RECIPE)
    workspace = mount(tmp_path / "share", "/workspace", opened)
    extra = mount(tmp_path, "/data", opened)
    pins = kit_pins([files(str(tmp_path / "share" / "agent"), tmp_path)], [workspace, extra])
    opened.extend(pins)
    targets = {(p.target, p.read_only) for p in pins}
    assert targets == {("/workspace/agent", True), ("/data/share", False),
                       ("/data/share/agent", True)}


def test_a_kit_outside_every_writable_mount_needs_no_pin(tmp_path: Path,
                                                          opened: list[Pin]) -> None:
    write_kit(tmp_path / "kits", "agent", "", RECIPE)
    (tmp_path / "ws").mkdir()
    assert kit_pins([files("./kits/agent", tmp_path)], [mount(tmp_path / "ws", "/w", opened)]) \
        == []


@pytest.mark.parametrize("where", ["same", "inside"])
def test_a_writable_mount_that_is_or_lies_in_a_kit_directory_is_refused(
        tmp_path: Path, opened: list[Pin], where: str) -> None:
    kit = write_kit(tmp_path, "agent", "", RECIPE)
    (kit / "src").mkdir()
    target = kit if where == "same" else kit / "src"
    with pytest.raises(MountBlocked) as refused:
        kit_pins([files("./agent", tmp_path)], [mount(target, "/workspace", opened)])
    assert refused.value.rule == "kit_writable"
    assert "the sandbox could rewrite the kit its next run uses" in refused.value.message


def test_a_kit_named_through_a_link_inside_the_workspace_is_refused(
        tmp_path: Path, opened: list[Pin]) -> None:
    write_kit(tmp_path / "kits", "agent", "", RECIPE)
    ws = tmp_path / "ws"
    ws.mkdir()
    os.symlink(tmp_path / "kits" / "agent", ws / "agent")
    with pytest.raises(MountBlocked) as refused:
        kit_pins([files("./agent", ws)], [mount(ws, "/workspace", opened)])
    assert refused.value.rule == "kit_writable" and refused.value.path == str(ws / "agent")
    assert str(tmp_path / "kits" / "agent") in (refused.value.hint or "")


def test_a_kit_reached_through_a_link_from_outside_is_pinned_where_it_really_is(
        tmp_path: Path, opened: list[Pin]) -> None:
    ws = tmp_path / "ws"
    write_kit(ws, "agent", "", RECIPE)
    (tmp_path / "kits").mkdir()
    os.symlink(ws / "agent", tmp_path / "kits" / "agent")
    pins = kit_pins([files("./kits/agent", tmp_path)], [mount(ws, "/workspace", opened)])
    opened.extend(pins)
    assert shown(pins) == [(str((ws / "agent").resolve()), "/workspace/agent", True)]


def test_a_descriptor_linked_into_the_workspace_is_pinned_as_a_file(
        tmp_path: Path, opened: list[Pin]) -> None:
    kit = write_kit(tmp_path / "kits", "agent", "", RECIPE)
    ws = tmp_path / "ws"
    ws.mkdir()
    (kit / "agent.yaml").rename(ws / "agent.yaml")
    os.symlink(ws / "agent.yaml", kit / "agent.yaml")
    pins = kit_pins([files("./kits/agent", tmp_path)], [mount(ws, "/workspace", opened)])
    opened.extend(pins)
    assert shown(pins) == [(str((ws / "agent.yaml").resolve()), "/workspace/agent.yaml", True)]


def test_a_descriptor_hard_linked_on_the_mounts_file_system_is_refused(
        tmp_path: Path, opened: list[Pin]) -> None:
    kit = write_kit(tmp_path / "kits", "agent", "", RECIPE)
    ws = tmp_path / "ws"
    ws.mkdir()
    os.link(kit / "agent.yaml", ws / "notes.yaml")
    with pytest.raises(MountBlocked) as refused:
        kit_pins([files("./kits/agent", tmp_path)], [mount(ws, "/workspace", opened)])
    assert "2 hard links" in refused.value.message


def test_kit_files_name_the_descriptor_and_its_recipe(tmp_path: Path) -> None:
    write_kit(tmp_path, "agent", "", RECIPE)
    named = files("./agent", tmp_path)
    assert named.named == named.directory == str(tmp_path / "agent")
    assert named.files == (str(tmp_path / "agent" / "agent.yaml"),
                           str(tmp_path / "agent" / "agent.dockerfile"))
    assert KitFiles.from_json(named.to_json()) == named


def test_a_config_file_under_a_writable_mount_is_read_only_too(tmp_path: Path,
                                                                opened: list[Pin]) -> None:
    ws = tmp_path / "ws"
    (ws / ".sbx").mkdir(parents=True)
    config = ws / ".sbx" / "config.toml"
    config.write_text("[sandbox]\n")
    pins = kit_pins([], [mount(ws, "/workspace", opened)], [str(config), os.devnull])
    opened.extend(pins)
    assert shown(pins) == [(str((ws / ".sbx").resolve()), "/workspace/.sbx", False),
                           (str(config.resolve()), "/workspace/.sbx/config.toml", True)]
