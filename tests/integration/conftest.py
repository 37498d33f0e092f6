"""Real-engine fixtures. Without an engine these tests skip; with SBX_REQUIRE_ENGINE=1 (CI)
a missing engine is a failure, never a skip."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sbx.base import labels
from sbx.base.errors import SbxError
from sbx.base.paths import home_hash
from sbx.seams.driver import SdkEngine
from sbx.seams.engine import OwnedObject
from sbx.seams.transports import open_engine
from tests.support.kits import write_kit
from tests.support.origin import Internet

BUSYBOX = "sbx-test/busybox:1"


@pytest.fixture(scope="session")
def engine() -> SdkEngine:
    driver = open_engine(dict(os.environ))
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


@pytest.fixture(scope="module")
def internet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Internet]:
    """The local "internet" (tests/support/origin.py), one per test module."""
    net = Internet(tmp_path_factory.mktemp("internet"))
    yield net
    net.close()


def user_owned(path: Path, uid: int = 1000) -> Path:
    """Give ``path`` to a non-root user when the tests run as root, as a user's project is:
    the sandbox takes the workspace owner's uid, and refuses a root-owned rw workspace."""
    if os.geteuid() == 0:
        os.chown(path, uid, uid)
    return path


def owned(driver: SdkEngine, state_home: Path) -> list[OwnedObject]:
    return driver.list_owned(labels.home_selector(home_hash(state_home)))


@pytest.fixture
def state_home(tmp_path: Path, engine: SdkEngine) -> Iterator[Path]:
    """The test's state home; after the test, nothing labelled with it may remain."""
    home = tmp_path / "state"
    yield home
    leaked = owned(engine, home)
    for obj in leaked:  # clean up so one failure does not cascade, then fail loudly
        if obj.kind == "container":
            engine.remove_container(obj.id)
    assert not leaked, f"sbx left objects behind: {leaked}"


def make_kit(root: Path, name: str, dockerfile: str, descriptor_extra: str = "") -> Path:
    return write_kit(root, name, descriptor_extra, recipe=dockerfile)


@pytest.fixture
def kit_factory(tmp_path: Path) -> Callable[..., Path]:
    def factory(name: str, dockerfile: str, descriptor_extra: str = "") -> Path:
        return make_kit(tmp_path / "kits", name, dockerfile, descriptor_extra)

    return factory


@pytest.fixture
def busybox_kit(kit_factory: Callable[..., Path]) -> Path:
    return kit_factory("probe",
                       f"FROM {BUSYBOX}\nUSER agent\nWORKDIR /workspace\nCMD [\"true\"]\n")


TESTER = "sbx-tester"  # uid 4321, in the docker group (scripts/setup.sh creates it)
TESTER_UID = 4321


def reachable_by_others(path: Path) -> None:
    """Let the test user traverse ``path`` and every directory above it. Done right before
    the use, not once per session: another pytest session on the machine resets
    /tmp/pytest-of-root to 0700 when it starts."""
    path.chmod(path.stat().st_mode | 0o111)
    for parent in path.parents:
        if parent == Path("/"):
            break
        parent.chmod(parent.stat().st_mode | 0o111)


@pytest.fixture(scope="session")
def tester_sbx(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """The argv that runs this checkout's sbx as the non-root host user ``sbx-tester``.

    The development venv lives where other users may not read it (and its interpreter links
    into root's home), so the test copies sbx and its dependencies to a world-readable
    directory and runs them with the system's python3 (the same 3.11 ABI).
    """
    import pwd
    import shutil
    import sysconfig

    if os.geteuid() != 0:
        pytest.skip("switching to the test user needs root")
    try:
        pwd.getpwnam(TESTER)
    except KeyError:
        message = f"the test user {TESTER} is missing: run scripts/setup.sh"
        if os.environ.get("SBX_REQUIRE_ENGINE") == "1":
            pytest.fail(message)
        pytest.skip(message)
    python = shutil.which("python3", path="/usr/bin:/bin")
    if python is None:
        pytest.fail("no system python3 for the test user")
    import tempfile

    # Its own directory, outside pytest's numbered temp dirs (another pytest session on the
    # machine rotates those away), removed at the end of the session.
    root = Path(tempfile.mkdtemp(prefix="sbx-tester-"))
    # The tests' own directories (pytest's, 0700 by default) must be reachable by the user.
    base = tmp_path_factory.getbasetemp()
    for path in [base, *base.parents]:
        if path == Path("/"):
            break
        path.chmod(path.stat().st_mode | 0o111)
    shutil.copytree(sysconfig.get_paths()["purelib"], root / "site",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pth", "__editable__*",
                                                  "sbx*", "_pytest", "pytest*", "mypy*",
                                                  "hypothesis*"))
    shutil.copytree(Path(__file__).resolve().parents[2] / "cli" / "sbx", root / "src" / "sbx",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for directory, _dirs, files in os.walk(root):
        os.chmod(directory, 0o755)  # noqa: S103 - the test user must read this copy
        for name in files:
            os.chmod(os.path.join(directory, name), 0o644)
    yield ["setpriv", f"--reuid={TESTER_UID}", f"--regid={TESTER_UID}", "--init-groups",
           "env", f"PYTHONPATH={root / 'src'}:{root / 'site'}", "PYTHONDONTWRITEBYTECODE=1",
           python, "-m", "sbx"]
    shutil.rmtree(root, ignore_errors=True)
