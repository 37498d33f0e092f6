"""Image assembly against a real engine: mixins over a busybox workload, collisions, caching.

Kit images are built with ``ensure_kit_image`` from temporary kit directories; every image a
test creates is removed at teardown (the base images stay). Nonces keep each test's images new.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import docker
import pytest

from sbx.base import labels
from sbx.base.errors import SbxError
from sbx.base.paths import home_hash
from sbx.base.reasons import Reason
from sbx.domain.kits.local import load_local_kit
from sbx.domain.sandbox.assemble import AssembledImage, assemble, export_index
from sbx.domain.sandbox.kitimages import KitImage, ensure_kit_image
from sbx.seams.driver import SdkEngine
from sbx.seams.engine import ImageInfo

from .conftest import BUSYBOX

pytestmark = pytest.mark.docker

TOOL_SH = "#!/bin/sh\necho \"tool ran with TOOL_HOME=$TOOL_HOME\"\n"
LATER_SH = "#!/bin/sh\necho later ran\n"


@contextmanager
def _quiet(_title: str) -> Iterator[Callable[[str], None]]:
    yield lambda _line: None


class Kits:
    """Writes kit directories, builds them, and remembers every image to remove afterwards."""

    def __init__(self, engine: SdkEngine, root: Path, state_home: Path) -> None:
        self.engine = engine
        self.root = root
        self.state_home = state_home
        self.created: list[str] = []
        self.helper_labels = labels.object_labels(
            home_hash=home_hash(state_home), run_id=uuid.uuid4().hex,
            deadline=int(time.time()) + 600, kits=["assemble-test"], role=labels.ROLE_HELPER)

    def build(self, name: str, dockerfile: str, *, kind: str = "mixin",
              files: dict[str, str] | None = None) -> KitImage:
        directory = self.root / name
        directory.mkdir(parents=True)
        (directory / f"{name}.yaml").write_text(
            f'# syntax=docker/sandbox-kit:3\nschemaVersion: "3"\nkind: {kind}\n',
            encoding="utf-8")
        nonce = f'LABEL test.nonce="{uuid.uuid4().hex}"\n'
        (directory / f"{name}.dockerfile").write_text(dockerfile + nonce, encoding="utf-8")
        for relative, text in (files or {}).items():
            path = directory / relative
            path.write_text(text, encoding="utf-8")
            path.chmod(0o755)
        kit = load_local_kit(str(directory), cwd=self.root)
        image = ensure_kit_image(self.engine, kit, _quiet)
        self.created.append(image.tag)
        return image

    def workload(self) -> KitImage:
        return self.build("work", f"FROM {BUSYBOX}\nENV WL=1\nUSER agent\n"
                                  'WORKDIR /workspace\nCMD ["echo", "workload cmd"]\n',
                          kind="workload")

    def mixin(self, name: str, path: str, content: str, extra: str = "") -> KitImage:
        return self.build(name, f"FROM scratch\nCOPY payload {path}\n{extra}",
                          files={"payload": content})

    def assemble(self, workload: KitImage,
                 mixins: list[tuple[str, KitImage]]) -> AssembledImage:
        result = assemble(self.engine, workload, [(ref, k.image) for ref, k in mixins], _quiet,
                          workload_ref="work", cache_dir=self.state_home / "cache" / "files",
                          helper_labels=self.helper_labels)
        if result.tag not in self.created:
            self.created.append(result.tag)
        return result

    def files(self, image: ImageInfo) -> dict[str, str]:
        index = export_index(self.engine, image.id, self.helper_labels, None)
        return {path: entry.digest for path, entry in index.items()}


@pytest.fixture
def kits(engine: SdkEngine, tmp_path: Path, state_home: Path) -> Iterator[Kits]:
    made = Kits(engine, tmp_path / "kits", state_home)
    yield made
    for tag in reversed(made.created):  # assemblies before the kit images they derive from
        engine.remove_image(tag)


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _run(image: str, command: list[str], container_labels: dict[str, str]) -> str:
    client = docker.from_env()
    container = client.containers.create(image, command, labels=container_labels,
                                         network_disabled=True)
    try:
        container.start()
        assert container.wait(timeout=60)["StatusCode"] == 0
        return container.logs().decode()
    finally:
        container.remove(force=True)
        client.close()


def test_mixins_layer_over_the_workload_in_order(kits: Kits) -> None:
    workload = kits.workload()
    tool = kits.mixin("tool", "/usr/local/bin/tool", TOOL_SH,
                      "ENV PATH=/usr/local/bin:/opt/tool/bin\nENV TOOL_HOME=/opt/tool\n"
                      'LABEL org.example.tool="1"\nUSER nobody\nWORKDIR /opt/tool\n'
                      'ENTRYPOINT ["/nope"]\nCMD ["nope"]\n')
    later = kits.mixin("later", "/opt/later/bin/later", LATER_SH,
                       "ENV PATH=/opt/later/bin:/usr/local/bin\nENV TOOL_HOME=/opt/later\n"
                       'ENV TRICKY="a \\"quoted\\" \\$HOME \\\\ end" EMPTY=""\n'
                       'LABEL org.example.tool="2" org.example.later="yes"\n')
    result = kits.assemble(workload, [("./tool", tool), ("./later", later)])
    image = result.image
    assert result.built is True and result.tag.startswith("sbx-assembled/")

    # Config: the workload's USER/WORKDIR/CMD; ENV merged, PATH appended in composition order.
    assert (image.user, image.workdir, image.cmd, image.entrypoint) == (
        "agent", "/workspace", ("echo", "workload cmd"), None)
    env = dict(item.split("=", 1) for item in image.env)
    tricky = dict(item.split("=", 1) for item in later.image.env)["TRICKY"]
    assert tricky == 'a "quoted" $HOME \\ end'
    assert env == {"PATH": "/bin:/usr/local/bin:/opt/tool/bin:/opt/later/bin",
                   "WL": "1", "TOOL_HOME": "/opt/later", "TRICKY": tricky, "EMPTY": ""}
    assert image.labels["org.example.tool"] == "2" and image.labels["org.example.later"] == "yes"

    # Filesystem: the workload's files plus both mixins', with their exact content.
    files = kits.files(image)
    assert files["/usr/local/bin/tool"] == _sha(TOOL_SH)
    assert files["/opt/later/bin/later"] == _sha(LATER_SH)
    assert files["/bin/sh"] == "busybox" and "/etc/passwd" in files

    # And it runs: the mixins' tools are on PATH, as the workload's user.
    output = _run(result.tag, ["sh", "-c", "tool; later; id -u; pwd"], kits.helper_labels)
    assert output.splitlines() == ["tool ran with TOOL_HOME=/opt/later", "later ran", "1000",
                                   "/workspace"]


def test_assembly_is_cached_by_its_inputs(kits: Kits) -> None:
    workload = kits.workload()
    tool = kits.mixin("tool", "/usr/local/bin/tool", TOOL_SH)
    started = time.monotonic()
    first = kits.assemble(workload, [("tool", tool)])
    first_s = time.monotonic() - started
    started = time.monotonic()
    second = kits.assemble(workload, [("tool", tool)])
    second_s = time.monotonic() - started
    assert (first.built, second.built) == (True, False)
    assert second.image.id == first.image.id and second.tag == first.tag
    assert second_s < first_s
    # The mixin's file index was computed once and kept per image id.
    cached = kits.state_home / "cache" / "files" / f"{tool.image.id.replace(':', '-')}.json"
    assert cached.is_file()
    # Zero mixins: the workload itself, nothing built.
    plain = kits.assemble(workload, [])
    assert plain == AssembledImage(workload.image, workload.tag, built=False)


def test_two_mixins_writing_one_path_differently_are_refused(kits: Kits) -> None:
    workload = kits.workload()
    one = kits.mixin("one", "/usr/local/bin/x", "#!/bin/sh\necho one\n")
    two = kits.mixin("two", "/usr/local/bin/x", "#!/bin/sh\necho two\n")
    with pytest.raises(SbxError) as raised:
        kits.assemble(workload, [("kit-one", one), ("kit-two", two)])
    error = raised.value
    assert error.reason is Reason.KIT_INCOHERENT
    assert "/usr/local/bin/x" in error.message
    assert "kit-one" in error.message and "kit-two" in error.message
    assert error.body == "  /usr/local/bin/x: kit-one and kit-two (different content)"
    assert not [tag for tag in kits.created if tag.startswith("sbx-assembled/")]


def test_identical_files_from_two_mixins_are_allowed(kits: Kits) -> None:
    workload = kits.workload()
    one = kits.mixin("one", "/usr/local/bin/x", "#!/bin/sh\necho same\n")
    two = kits.mixin("two", "/usr/local/bin/x", "#!/bin/sh\necho same\n")
    assert one.image.id != two.image.id
    result = kits.assemble(workload, [("one", one), ("two", two)])
    assert result.built is True
    assert kits.files(result.image)["/usr/local/bin/x"] == _sha("#!/bin/sh\necho same\n")


@pytest.mark.parametrize(("path", "detail"), [
    ("/etc/passwd", "different content"),
    ("/bin/sh", "a symlink to busybox vs a file"),
])
def test_mixin_replacing_a_workload_file_is_refused(kits: Kits, path: str, detail: str) -> None:
    workload = kits.workload()
    evil = kits.mixin("evil", path, "root::0:0::/root:/bin/sh\n")
    with pytest.raises(SbxError) as raised:
        kits.assemble(workload, [("./evil", evil)])
    assert raised.value.reason is Reason.KIT_INCOHERENT
    assert raised.value.body == f"  {path}: work and ./evil ({detail})"
