"""Real-engine fixtures. Without an engine these tests skip; with SBX_REQUIRE_ENGINE=1 (CI)
a missing engine is a failure, never a skip."""

from __future__ import annotations

import os
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sbx import labels
from sbx.driver import DockerDriver, OwnedObject
from sbx.errors import SbxError
from sbx.paths import home_hash

BUSYBOX = "sbx-test/busybox:1"


@pytest.fixture(scope="session")
def engine() -> DockerDriver:
    driver = DockerDriver(dict(os.environ))
    try:
        driver.info()
        present = driver.image(BUSYBOX) is not None
    except SbxError as error:
        message = f"no Docker engine: {error}"
        if os.environ.get("SBX_REQUIRE_ENGINE") == "1":
            pytest.fail(message)
        pytest.skip(message)
    if not present:
        message = f"test image {BUSYBOX} missing: run scripts/build-images.sh"
        if os.environ.get("SBX_REQUIRE_ENGINE") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return driver


def user_owned(path: Path, uid: int = 1000) -> Path:
    """Give ``path`` to a non-root user when the tests run as root, as a user's project is:
    the sandbox takes the workspace owner's uid, and refuses a root-owned rw workspace."""
    if os.geteuid() == 0:
        os.chown(path, uid, uid)
    return path


def owned(driver: DockerDriver, state_home: Path) -> list[OwnedObject]:
    return driver.list_owned(labels.home_selector(home_hash(state_home)))


@pytest.fixture
def state_home(tmp_path: Path, engine: DockerDriver) -> Iterator[Path]:
    """The test's state home; after the test, nothing labelled with it may remain."""
    home = tmp_path / "state"
    yield home
    leaked = owned(engine, home)
    for obj in leaked:  # clean up so one failure does not cascade, then fail loudly
        if obj.kind == "container":
            engine.remove_container(obj.id)
    assert not leaked, f"sbx left objects behind: {leaked}"


def make_kit(root: Path, name: str, dockerfile: str, descriptor_extra: str = "") -> Path:
    kit = root / name
    kit.mkdir(parents=True)
    (kit / f"{name}.yaml").write_text(
        "# syntax=docker/sandbox-kit:3\nschemaVersion: \"3\"\nkind: workload\n"
        + textwrap.dedent(descriptor_extra), encoding="utf-8")
    (kit / f"{name}.dockerfile").write_text(textwrap.dedent(dockerfile), encoding="utf-8")
    return kit


@pytest.fixture
def kit_factory(tmp_path: Path) -> Callable[..., Path]:
    def factory(name: str, dockerfile: str, descriptor_extra: str = "") -> Path:
        return make_kit(tmp_path / "kits", name, dockerfile, descriptor_extra)

    return factory


@pytest.fixture
def busybox_kit(kit_factory: Callable[..., Path]) -> Path:
    return kit_factory("probe",
                       f"FROM {BUSYBOX}\nUSER agent\nWORKDIR /workspace\nCMD [\"true\"]\n")
