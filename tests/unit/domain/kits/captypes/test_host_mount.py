"""host-mount@1 without an engine: what the handler plans, how kits are told apart, and the
store of directories (made once, kept, listed, removed)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from sbx.base.paths import host_mounts_home
from sbx.domain.kits import captypes
from sbx.domain.kits.captypes.host_mount import kit_identity
from sbx.domain.kits.compose import Contribution, compose
from sbx.domain.sandbox.capabilities import SUPPORTED, PlannedHostMount, plan_capabilities
from sbx.domain.sandbox.hardening import Limits
from sbx.domain.sandbox.hostmounts import HostMountStore, directory_name

MOUNT = "com.docker.sandbox/host-mount@1"
MIB = 1024 * 1024
LIMITS = Limits(memory_bytes=4096 * MIB, pids=128, cpu_millis=1000, tmp_bytes=256 * MIB,
                workspace_bytes=512 * MIB, home_bytes=512 * MIB)


class _Kit:
    def __init__(self, directory: Path, image: str | None = None) -> None:
        self.reference = str(directory)
        self.directory = directory
        self.stem = directory.name
        self.image = image


def test_the_type_is_supported_and_owned_by_its_module() -> None:
    assert MOUNT in SUPPORTED and captypes.handler(MOUNT).types == (MOUNT,)


def test_each_path_is_planned_with_its_kit_s_identity(tmp_path: Path) -> None:
    kit: Any = _Kit(tmp_path / "cache")
    entries = [{"type": MOUNT, "config": {"path": "/cache", "mode": "0750"}},
               {"type": MOUNT, "config": {"path": "/data"}}]
    plan = plan_capabilities(compose([Contribution(kit.reference, entries)]), limits=LIMITS,
                             allow_privileged=False, workspace_target="/workspace",
                             kits={kit.reference: kit})
    identity = f"local:{os.path.realpath(tmp_path / 'cache')}/cache"
    assert plan.host_mounts == (PlannedHostMount("/cache", 0o750, identity),
                                PlannedHostMount("/data", None, identity))


def test_a_registry_kit_keeps_its_identity_across_digests(tmp_path: Path) -> None:
    one = kit_identity("r:1", tmp_path, "k", "reg.example/kits/cache@sha256:" + "a" * 64)
    two = kit_identity("r:2", tmp_path / "other", "k", "reg.example/kits/cache@sha256:" + "b" * 64)
    assert one == two == "registry:reg.example/kits/cache"
    assert kit_identity("x", tmp_path / "a", "k", None) != kit_identity("x", tmp_path / "b", "k",
                                                                         None)


def test_a_directory_is_made_once_with_its_mode_and_kept(tmp_path: Path) -> None:
    store = HostMountStore(tmp_path / "hm")
    made, new = store.ensure("local:/kits/a/a", "/cache", 0o750)
    assert new and oct(made.stat().st_mode & 0o777) == "0o750"
    (made / "f").write_text("kept")
    os.chmod(made, 0o700)
    again, new = store.ensure("local:/kits/a/a", "/cache", 0o755)
    assert again == made and not new
    assert oct(again.stat().st_mode & 0o777) == "0o700" and (again / "f").read_text() == "kept"
    other, _ = store.ensure("local:/kits/b/b", "/cache", None)
    second, _ = store.ensure("local:/kits/a/a", "/data", None)
    assert len({made, other, second}) == 3  # per kit and per path


def test_listing_and_removal(tmp_path: Path) -> None:
    store = HostMountStore(tmp_path / "hm")
    store.ensure("local:/kits/a/a", "/cache", None)
    store.ensure("local:/kits/a/a", "/data", None)
    store.ensure("local:/kits/b/b", "/cache", None)
    listed = sorted((m.kit, m.path) for m in store.listing())
    assert listed == [("local:/kits/a/a", "/cache"), ("local:/kits/a/a", "/data"),
                      ("local:/kits/b/b", "/cache")]
    assert [m.path for m in store.remove("local:/kits/a/a", "/data")] == ["/data"]
    assert [m.path for m in store.remove("local:/kits/a/a")] == ["/cache"]
    assert not store.kit_directory("local:/kits/a/a").exists()
    assert [(m.kit, m.path) for m in store.listing()] == [("local:/kits/b/b", "/cache")]


def test_names_and_the_root() -> None:
    assert directory_name("/home/agent/.cache").startswith("home_agent_.cache-")
    assert directory_name("/a/b") != directory_name("/a_b")
    assert host_mounts_home({"SBX_HOST_MOUNTS": "/x"}) == Path("/x")
    assert host_mounts_home({"XDG_DATA_HOME": "/d"}) == Path("/d/sbx/host-mounts")
    assert host_mounts_home({"HOME": "/h"}) == Path("/h/.local/share/sbx/host-mounts")
