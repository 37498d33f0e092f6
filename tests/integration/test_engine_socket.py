"""The socket transport against dockerd: each of its calls answers as the SDK's does."""

from __future__ import annotations

import os
import stat
import subprocess
import uuid
from pathlib import Path

import pytest

from sbx.base import labels
from sbx.base.errors import SbxError
from sbx.base.paths import home_hash
from sbx.base.reasons import Reason
from sbx.seams.driver import SdkEngine
from sbx.seams.enginesocket import SocketEngine
from sbx.seams.transports import open_engine

from .conftest import BUSYBOX

pytestmark = pytest.mark.docker


@pytest.fixture
def drivers(engine: SdkEngine) -> tuple[SdkEngine, SdkEngine]:
    socket = open_engine(dict(os.environ))
    sdk = open_engine({**os.environ, "SBX_ENGINE_SOCKET": "0"})
    assert isinstance(socket, SocketEngine) and not isinstance(sdk, SocketEngine)
    return socket, sdk


def test_queries_answer_as_the_sdk(drivers: tuple[SdkEngine, SdkEngine]) -> None:
    socket, sdk = drivers
    assert socket.info() == sdk.info()
    assert socket.image(BUSYBOX) == sdk.image(BUSYBOX)
    assert socket.image(f"sbx-test/absent-{uuid.uuid4().hex}:1") is None
    assert socket.image("NOT A VALID REFERENCE") is None


def test_probes_read_what_the_sdk_reads(drivers: tuple[SdkEngine, SdkEngine],
                                        state_home: Path) -> None:
    socket, sdk = drivers
    image = sdk.image(BUSYBOX)
    assert image is not None
    probe_labels = labels.object_labels(home_hash=home_hash(state_home), run_id=uuid.uuid4().hex,
                                        deadline=2_000_000_000, kits=[],
                                        role=labels.ROLE_HELPER)
    files = ["/etc/passwd", "/nonexistent", "/etc/group"]
    paths = ["/tmp", "/etc", "/nonexistent", "/etc/passwd"]
    read = socket.probe_image(image.id, files=files, dirs=paths, labels=probe_labels,
                              paths=paths)
    passwd = read.files["/etc/passwd"]
    assert passwd is not None and b"agent" in passwd and read.files["/nonexistent"] is None
    assert read.files["/etc/group"] is not None
    assert read.modes["/tmp"] == 0o1777 and read.modes["/nonexistent"] is None
    assert read.stats["/tmp"] == 0o41777 and read.stats["/nonexistent"] is None
    assert stat.S_ISREG(read.stats["/etc/passwd"] or 0) and read.modes["/etc/passwd"] is None
    assert read == sdk.probe_image(image.id, files=files, dirs=paths, labels=probe_labels,
                                   paths=paths)


def test_refusals_carry_the_same_reasons(drivers: tuple[SdkEngine, SdkEngine]) -> None:
    socket, _sdk = drivers
    missing = uuid.uuid4().hex
    assert socket.remove_container(missing) is True  # gone already: fine
    socket.kill(missing)  # gone already: nothing to kill
    with pytest.raises(SbxError) as raised:
        socket.start(missing)
    assert raised.value.reason is Reason.START_FAILED
    assert "404" in raised.value.message


def test_a_containers_state_reads_as_the_sdks(drivers: tuple[SdkEngine, SdkEngine]) -> None:
    socket, sdk = drivers
    made = subprocess.run(["docker", "create", BUSYBOX, "true"], capture_output=True,
                          text=True, check=True, timeout=60).stdout.strip()
    try:
        assert socket.container_state(made) == sdk.container_state(made) == "created"
    finally:
        subprocess.run(["docker", "rm", "-f", made], capture_output=True, timeout=60,
                       check=False)
    assert socket.container_state(made) is None and sdk.container_state(made) is None


def test_a_proxys_network_calls_answer_as_the_sdks(drivers: tuple[SdkEngine, SdkEngine]) -> None:
    """find_network, connect_network, network_endpoint and send_signal: what the proxy beside
    the engine needs, the same through both transports."""
    socket, sdk = drivers
    tag = uuid.uuid4().hex[:10]
    names = [f"sbx-test-a-{tag}", f"sbx-test-b-{tag}"]
    made: list[str] = []
    try:
        for name in names:
            subprocess.run(["docker", "network", "create", name], capture_output=True,
                           check=True, timeout=60)
        assert socket.find_network(names[0]) == sdk.find_network(names[0]) is not None
        assert socket.find_network(f"sbx-absent-{tag}") is None
        assert sdk.find_network(f"sbx-absent-{tag}") is None
        container = subprocess.run(
            ["docker", "run", "-d", "--network", names[0], BUSYBOX, "sleep", "60"],
            capture_output=True, text=True, check=True, timeout=60).stdout.strip()
        made.append(container)
        socket.connect_network(sdk.find_network(names[1]) or "", container)
        for name in names:
            found = socket.network_endpoint(container, name)
            assert found is not None and found == sdk.network_endpoint(container, name)
            assert 8 <= found[1] <= 30 and found[0].count(".") == 3
        assert socket.network_endpoint(container, f"sbx-absent-{tag}") is None
        socket.send_signal(container, "SIGKILL")
        assert sdk.wait(container, 30) == 137
    finally:
        for ident in made:
            subprocess.run(["docker", "rm", "-f", ident], capture_output=True, timeout=60,
                           check=False)
        for name in names:
            subprocess.run(["docker", "network", "rm", name], capture_output=True, timeout=60,
                           check=False)
