"""Real-engine fixtures. Without an engine these tests skip; with SBX_REQUIRE_ENGINE=1 (CI)
a missing engine is a failure, never a skip."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from sbx.base import labels
from sbx.base.errors import SbxError
from sbx.base.paths import home_hash
from sbx.seams.driver import SdkEngine
from sbx.seams.engine import OwnedObject
from sbx.seams.transports import open_engine
from tests.support.kits import write_kit
from tests.support.origin import Internet
from tests.support.sbxproc import run_sbx

if TYPE_CHECKING:
    from tests.support.enginehost import EngineHost as EngineHostType

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


@pytest.fixture
def env(state_home: Path) -> dict[str, str]:
    """The environment of an `sbx` a test runs: its own state home, no user config, no colour
    (a module with other needs defines its own ``env``)."""
    return {**os.environ, "SBX_HOME": str(state_home), "SBX_CONFIG": os.devnull,
            "NO_COLOR": "1"}


@pytest.fixture
def cleanup(env: dict[str, str]) -> Iterator[list[str]]:
    """Named sandboxes a test appends here are removed after it (``env`` is the module's)."""
    names: list[str] = []
    yield names
    for each in names:
        run_sbx(["rm", "-f", each], env=env, timeout=120)


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


@pytest.fixture(scope="session")
def far_host(engine: SdkEngine) -> Iterator[FarHost]:
    """A second engine host (tests/support/enginehost.py) with the busybox test image, reached
    over ssh:// through an ``ssh`` on PATH that reads the host's own config (key, known_hosts);
    everything it made is removed at the end of the session."""
    with started_far_host() as far:
        yield far


@contextlib.contextmanager
def started_far_host(*, crun: bool = False) -> Iterator[FarHost]:
    """A second engine host (with crun registered when ``crun``), skipped (failed when
    SBX_REQUIRE_ENGINE=1) when this machine cannot host one; closed on leaving."""
    from tests.support.enginehost import EngineHost, EngineHostUnavailable

    host = EngineHost(crun=crun)
    try:
        host.start()
        host.load_image(BUSYBOX)
    except (EngineHostUnavailable, OSError, subprocess.SubprocessError) as error:
        host.close()
        message = f"no second engine host: {error}"
        if os.environ.get("SBX_REQUIRE_ENGINE") == "1":
            pytest.fail(message)
        pytest.skip(message)
    try:
        yield FarHost(host, ssh_wrapper(host.root / "bin", host.ssh_config))
    finally:
        host.close()


def ssh_wrapper(directory: Path, config: Path) -> Path:
    """A directory whose ``ssh`` is the real one with ``-F config``: what a user's
    ~/.ssh/config gives sbx and docker, without touching this machine's."""
    directory.mkdir(parents=True, exist_ok=True)
    wrapper = directory / "ssh"
    wrapper.write_text(f'#!/bin/sh\nexec /usr/bin/ssh -F "{config}" "$@"\n', encoding="utf-8")
    wrapper.chmod(0o755)
    return directory


@dataclasses.dataclass(frozen=True)
class FarHost:
    host: EngineHostType
    ssh_bin: Path  # put first on PATH

    def env(self, state_home: Path, **extra: str) -> dict[str, str]:
        """sbx's environment for a run on the far engine over ssh://."""
        base = {k: v for k, v in os.environ.items()
                if not k.startswith(("DOCKER_", "SBX_"))}
        # Its own directory of shared ssh logins: a login another test made (with other
        # known hosts) is not this test's.
        runtime = self.host.root / "run" / home_hash(state_home)[:8]
        runtime.mkdir(mode=0o700, parents=True, exist_ok=True)
        return {**base, "DOCKER_HOST": self.host.ssh_host, "SBX_HOME": str(state_home),
                "XDG_RUNTIME_DIR": str(runtime),
                "SBX_CONFIG": os.devnull, "NO_COLOR": "1",
                "PATH": f"{self.ssh_bin}:{base.get('PATH', '/usr/bin:/bin')}", **extra}

    def containers(self, home: Path) -> list[str]:
        """Ids of the containers labelled with state home ``home`` on the far engine."""
        listed = self.host.docker("ps", "-aq", "--filter",
                                  f"label={labels.HOME}={home_hash(home)}")
        return listed.stdout.decode().split()
