"""Image assembly, without an engine: ENV/PATH merge, collisions, cache key, the recipe, and the
whole flow over a fake driver that serves filesystem tars from memory."""

from __future__ import annotations

import hashlib
import io
import tarfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.sandbox.assemble import (
    DEFAULT_PATH,
    MAX_REPORTED,
    AssembledImage,
    Collision,
    FileEntry,
    assemble,
    assembled_tag,
    assembly_key,
    collision_error,
    dockerfile,
    env_changes,
    find_collisions,
    merge_env,
    merge_labels,
    read_index,
    with_parents,
)
from sbx.seams.engine import ImageInfo
from tests.support.fakeengine import FakeEngine

# -- ENV / PATH / LABEL -------------------------------------------------------------------------


@pytest.mark.parametrize(("workload", "mixins", "expected"), [
    # A mixin's PATH appends only the elements it adds, in its own order.
    (["PATH=/bin"], [["PATH=/usr/local/bin:/opt/tool/bin"]],
     ["PATH=/bin:/usr/local/bin:/opt/tool/bin"]),
    (["PATH=/usr/bin:/bin"], [["PATH=/bin:/opt/a"], ["PATH=/opt/b:/opt/a:/usr/bin"]],
     ["PATH=/usr/bin:/bin:/opt/a:/opt/b"]),
    # Nothing new: PATH stays exactly as it was.
    (["PATH=/usr/bin:/bin"], [["PATH=/bin"]], ["PATH=/usr/bin:/bin"]),
    # No workload PATH: the engine's default is what the mixin appends to.
    ([], [["PATH=/opt/x"]], [f"PATH={DEFAULT_PATH}:/opt/x"]),
    ([], [["PATH=/usr/bin"]], []),
    # Other variables: set, later wins (over the workload too); order of first appearance kept.
    (["A=1", "B=2"], [["B=mixin", "C=3"], ["C=later"]], ["A=1", "B=mixin", "C=later"]),
    # Values keep every character after the first '='.
    ([], [["OPTS=a=b c"]], ["OPTS=a=b c"]),
    # Entries without '=' are not variables.
    (["A=1"], [["JUNK"]], ["A=1"]),
])
def test_merge_env(workload: list[str], mixins: list[list[str]], expected: list[str]) -> None:
    assert merge_env(workload, mixins) == expected


def test_env_changes_lists_only_what_the_mixins_change() -> None:
    workload = ["PATH=/bin", "A=1", "B=2"]
    merged = merge_env(workload, [["PATH=/opt/t", "A=1", "B=3", "C=4"]])
    assert env_changes(workload, merged) == {"PATH": "/bin:/opt/t", "B": "3", "C": "4"}


def test_merge_labels_later_wins_and_keeps_sbx_labels_out() -> None:
    merged = merge_labels([{"org.a": "1", "org.b": "1", "dev.sbx.kit": "m1"},
                           {"org.b": "2", "dev.sbx.version": "9"}])
    assert merged == {"org.a": "1", "org.b": "2"}


# -- the recipe and the cache key ----------------------------------------------------------------


def test_dockerfile_copies_in_order_and_escapes_env() -> None:
    text = dockerfile("sha256:w", ["sha256:m1", "sha256:m2"],
                      {"PATH": "/bin:/opt", "ODD": 'a "q" $HOME \\n \\'})
    assert text.splitlines() == [
        "FROM sha256:w",
        "COPY --from=sha256:m1 / /",
        "COPY --from=sha256:m2 / /",
        'ENV PATH="/bin:/opt" ODD="a \\"q\\" \\$HOME \\\\n \\\\"',
    ]
    assert dockerfile("sha256:w", [], {}) == "FROM sha256:w\n"


def test_assembly_key_is_stable_and_order_and_version_sensitive() -> None:
    key = assembly_key("sha256:w", ["sha256:a", "sha256:b"], "1.0")
    assert key == assembly_key("sha256:w", ("sha256:a", "sha256:b"), "1.0")
    assert len(key) == 64 and int(key, 16) >= 0
    others = {
        assembly_key("sha256:w", ["sha256:b", "sha256:a"], "1.0"),
        assembly_key("sha256:w", ["sha256:a"], "1.0"),
        assembly_key("sha256:w", ["sha256:a", "sha256:b"], "1.1"),
        assembly_key("sha256:v", ["sha256:a", "sha256:b"], "1.0"),
        # No ambiguity from joining: the ids are kept as a list.
        assembly_key("sha256:w", ["sha256:asha256:b"], "1.0"),
    }
    assert key not in others and len(others) == 5
    assert assembled_tag(key) == f"sbx-assembled/{key}:1"


# -- collisions ----------------------------------------------------------------------------------

F1, F2 = FileEntry("file", "1" * 64), FileEntry("file", "2" * 64)
DIR = FileEntry("dir", "")


def test_identical_files_and_shared_directories_do_not_collide() -> None:
    mixins = [("a", {"/usr": DIR, "/usr/x": F1}), ("b", {"/usr": DIR, "/usr/x": F1})]
    assert find_collisions("w", {"/usr": DIR, "/usr/x": F1}, mixins) == []


def test_two_mixins_writing_one_path_differently_collide() -> None:
    mixins = [("a", {"/usr/local/bin/x": F1}), ("b", {"/usr/local/bin/x": F2})]
    assert find_collisions("w", {}, mixins) == [
        Collision("/usr/local/bin/x", "a", "b", "different content")]


@pytest.mark.parametrize(("earlier", "later", "detail"), [
    (FileEntry("symlink", "usr/bin"), DIR, "a symlink to usr/bin vs a directory"),
    (DIR, F1, "a directory vs a file"),
    (F1, FileEntry("symlink", "/x"), "a file vs a symlink to /x"),
    (FileEntry("symlink", "/x"), FileEntry("symlink", "/y"), "a symlink to /x vs a symlink to /y"),
    # An unresolved hard link cannot be compared: refused rather than guessed equal.
    (FileEntry("hardlink", "/t"), FileEntry("hardlink", "/t"),
     "a hard link to /t vs a hard link to /t"),
])
def test_type_differences_collide(earlier: FileEntry, later: FileEntry, detail: str) -> None:
    assert find_collisions("w", {}, [("a", {"/p": earlier}), ("b", {"/p": later})]) == [
        Collision("/p", "a", "b", detail)]


def test_a_mixin_replacing_a_workload_file_collides() -> None:
    mixins = [("a", {"/etc": DIR, "/etc/passwd": F2, "/bin": DIR, "/bin/t": F1})]
    workload = {"/etc": DIR, "/etc/passwd": F1, "/bin": FileEntry("symlink", "usr/bin")}
    assert find_collisions("wl", workload, mixins) == [
        Collision("/bin", "wl", "a", "a symlink to usr/bin vs a directory"),
        Collision("/etc/passwd", "wl", "a", "different content"),
    ]


def test_workload_is_compared_with_the_last_provider() -> None:
    # b replaces a's file identically; the workload's differs from both: one report, naming b.
    mixins = [("a", {"/x": F1}), ("b", {"/x": F1})]
    assert find_collisions("w", {"/x": F2}, mixins) == [
        Collision("/x", "w", "b", "different content")]


def test_collision_error_names_at_most_twenty_paths_and_both_kits() -> None:
    collisions = [Collision(f"/p{i:02}", "first-kit", "second-kit", "different content")
                  for i in range(25)]
    error = collision_error(collisions)
    assert error.reason is Reason.KIT_INCOHERENT
    assert "25 paths" in error.message and "/p00 (first-kit and second-kit)" in error.message
    assert error.body is not None
    lines = error.body.splitlines()
    assert len(lines) == MAX_REPORTED + 1 and lines[-1] == "  ... and 5 more"
    assert lines[0] == "  /p00: first-kit and second-kit (different content)"
    assert len(error.details["collisions"]) == MAX_REPORTED and error.details["count"] == 25


def test_with_parents_adds_missing_ancestors() -> None:
    assert with_parents({"/a/b/c": F1, "/a": DIR}) == {"/a/b/c": F1, "/a/b": DIR, "/a": DIR}


# -- reading a filesystem tar ---------------------------------------------------------------------


def _tar(*members: tuple[str, str, bytes | str]) -> bytes:
    """A tar from (name, kind, data-or-target) with kind file | dir | symlink | hardlink | fifo."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, kind, payload in members:
            info = tarfile.TarInfo(name)
            if kind == "file":
                assert isinstance(payload, bytes)
                info.size = len(payload)
                archive.addfile(info, io.BytesIO(payload))
                continue
            info.type = {"dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE,
                         "hardlink": tarfile.LNKTYPE, "fifo": tarfile.FIFOTYPE}[kind]
            info.linkname = payload if isinstance(payload, str) else ""
            archive.addfile(info)
    return buffer.getvalue()


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


BUSYBOX_LIKE = _tar(
    (".dockerenv", "file", b""), ("bin/", "dir", ""), ("bin/busybox", "file", b"BB"),
    ("bin/sh", "symlink", "busybox"), ("bin/ash", "hardlink", "bin/busybox"),
    ("etc/", "dir", ""), ("etc/hosts", "file", b""), ("etc/passwd", "file", b"root:x:0:0\n"),
    ("./tmp/fifo", "fifo", ""), ("dev/", "dir", ""), ("dev/console", "file", b""),
)


def test_read_index_hashes_files_and_records_links_skipping_engine_entries() -> None:
    index = read_index(io.BytesIO(BUSYBOX_LIKE))
    assert index == {
        "/bin": DIR, "/bin/busybox": FileEntry("file", _sha(b"BB")),
        "/bin/sh": FileEntry("symlink", "busybox"), "/bin/ash": FileEntry("file", _sha(b"BB")),
        "/etc": DIR, "/etc/passwd": FileEntry("file", _sha(b"root:x:0:0\n")),
        "/tmp/fifo": FileEntry("other", "a fifo"),
    }


def test_read_index_lists_only_wanted_paths() -> None:
    index = read_index(io.BytesIO(BUSYBOX_LIKE), {"/etc/passwd", "/bin/ash"}.__contains__)
    # The hard link's target was not hashed, so the link stays unresolved here.
    assert index == {"/etc/passwd": FileEntry("file", _sha(b"root:x:0:0\n")),
                     "/bin/ash": FileEntry("hardlink", "/bin/busybox")}


# -- the whole flow over a fake driver ----------------------------------------------------------


def _image(image_id: str, env: tuple[str, ...] = (), labels: Mapping[str, str] | None = None,
           user: str = "", cmd: tuple[str, ...] | None = None) -> ImageInfo:
    return ImageInfo(id=image_id, tags=(), user=user, workdir="", entrypoint=None, cmd=cmd,
                     env=env, labels=dict(labels or {}))


@dataclass
class _Workload:
    image: ImageInfo
    tag: str


def builds(driver: FakeEngine) -> list[tuple[str, str, dict[str, str]]]:
    """(tag, recipe, labels) of each build, the recipe read from the build context."""
    found = []
    for tag, labels, context_tar, dockerfile_name, _args in driver.called("build"):
        with tarfile.open(fileobj=io.BytesIO(context_tar)) as archive:
            member = archive.extractfile(dockerfile_name)
            assert member is not None
            found.append((tag, member.read().decode(), labels))
    return found


def exports(driver: FakeEngine) -> list[str]:
    """The image ids exported, each with the helper labels."""
    calls = driver.called("export_image")
    assert all(labels == {"role": "helper"} for _, labels in calls)
    return [image_id for image_id, _ in calls]


@contextmanager
def _progress(title: str) -> Iterator[Callable[[str], None]]:
    yield lambda _line: None


def _setup(**mixin_tars: bytes) -> tuple[FakeEngine, _Workload, list[tuple[str, ImageInfo]]]:
    workload = _image("sha256:wl", env=("PATH=/bin", "HOME=/home/agent"), user="agent",
                      cmd=("sh",))
    mixins = [(name, _image(f"sha256:{name}", env=(f"PATH=/opt/{name}/bin", f"WHO={name}"),
                            labels={f"org.{name}": "1", "dev.sbx.kit": name}))
              for name in mixin_tars]
    driver = FakeEngine()
    driver.filesystems.update({"sha256:wl": BUSYBOX_LIKE,
                               **{f"sha256:{n}": t for n, t in mixin_tars.items()}})
    driver.images.update({"sha256:wl": workload, **{i.id: i for _, i in mixins}})
    return driver, _Workload(workload, "sbx-kit/wl:1"), mixins


def _assemble(driver: FakeEngine, workload: _Workload,
              mixins: Sequence[tuple[str, ImageInfo | None]], tmp_path: Path) -> AssembledImage:
    return assemble(driver, workload, mixins, _progress,
                    workload_ref="wl", cache_dir=tmp_path / "files",
                    helper_labels={"role": "helper"})


def test_without_content_mixins_the_workload_runs_unchanged(tmp_path: Path) -> None:
    driver, workload, _ = _setup()
    for mixins in ([], [("decl-only", None)]):
        result = _assemble(driver, workload, mixins, tmp_path)
        assert result == AssembledImage(workload.image, "sbx-kit/wl:1", built=False)
    assert builds(driver) == [] and exports(driver) == []


def test_assembly_builds_once_then_reuses_the_tag(tmp_path: Path) -> None:
    driver, workload, mixins = _setup(
        a=_tar(("usr/local/bin/a", "file", b"A"), ("opt/shared", "file", b"same")),
        b=_tar(("opt/b/bin/b", "file", b"B"), ("opt/shared", "file", b"same")),
        empty=_tar())
    with_decl: list[tuple[str, ImageInfo | None]] = [mixins[0], ("decl", None), *mixins[1:]]
    first = _assemble(driver, workload, with_decl, tmp_path)
    assert first.built is True
    [(tag, recipe, labels)] = builds(driver)
    assert first.tag == tag and tag.startswith("sbx-assembled/")
    # The empty mixin copies nothing but still contributes its ENV; the workload's USER/CMD stay
    # because the recipe never sets them.
    assert recipe.splitlines() == [
        "FROM sha256:wl", "COPY --from=sha256:a / /", "COPY --from=sha256:b / /",
        'ENV PATH="/bin:/opt/a/bin:/opt/b/bin:/opt/empty/bin" WHO="empty"',
    ]
    assert labels["org.a"] == labels["org.b"] == "1" and "dev.sbx.kit" not in labels
    assert labels["dev.sbx.assembly"] in tag
    assert driver.open_exports == 0
    exported = len(exports(driver))

    again = _assemble(driver, workload, with_decl, tmp_path)
    assert again == AssembledImage(first.image, tag, built=False)
    assert len(builds(driver)) == 1 and len(exports(driver)) == exported


def test_mixin_file_indexes_are_cached_per_image(tmp_path: Path) -> None:
    driver, workload, mixins = _setup(a=_tar(("usr/local/bin/a", "file", b"A")))
    _assemble(driver, workload, list(mixins), tmp_path)
    assert exports(driver).count("sha256:a") == 1
    assert (tmp_path / "files" / "sha256-a.json").is_file()
    # A different workload: a new assembly, but the mixin's index comes from the cache.
    other = _image("sha256:wl2", env=("PATH=/bin",))
    driver.images[other.id] = other
    driver.filesystems[other.id] = BUSYBOX_LIKE
    _assemble(driver, _Workload(other, "sbx-kit/wl2:1"), list(mixins), tmp_path)
    assert exports(driver).count("sha256:a") == 1 and len(builds(driver)) == 2


def test_collisions_are_refused_before_anything_is_built(tmp_path: Path) -> None:
    driver, workload, mixins = _setup(
        a=_tar(("usr/local/bin/x", "file", b"one")),
        b=_tar(("usr/local/bin/x", "file", b"two"), ("etc/passwd", "file", b"evil\n")))
    with pytest.raises(SbxError) as raised:
        _assemble(driver, workload, list(mixins), tmp_path)
    error = raised.value
    assert error.reason is Reason.KIT_INCOHERENT
    assert error.body is not None
    assert error.body.splitlines() == [
        "  /etc/passwd: wl and b (different content)",
        "  /usr/local/bin/x: a and b (different content)",
    ]
    assert builds(driver) == [] and driver.open_exports == 0


def test_workload_hard_link_is_resolved_by_a_second_pass(tmp_path: Path) -> None:
    # /bin/ash is a hard link to /bin/busybox in the workload; a mixin shipping the same bytes
    # there is no collision, different bytes are.
    same = _setup(m=_tar(("bin/ash", "file", b"BB")))
    assert _assemble(same[0], same[1], list(same[2]), tmp_path).built is True
    assert exports(same[0]).count("sha256:wl") == 2
    other = _setup(m=_tar(("bin/ash", "file", b"XX")))
    with pytest.raises(SbxError, match="/bin/ash"):
        _assemble(other[0], other[1], list(other[2]), tmp_path / "other")


def test_a_vanished_image_is_never_left_for_the_builder_to_pull(tmp_path: Path) -> None:
    driver, workload, mixins = _setup(a=_tar(("opt/a", "file", b"A")))
    del driver.images["sha256:a"]  # inspected by the caller, gone before the build
    with pytest.raises(SbxError) as raised:
        _assemble(driver, workload, list(mixins), tmp_path)
    assert raised.value.reason is Reason.IMAGE_MISSING and builds(driver) == []


@pytest.mark.parametrize("env", [("BAD=line\nbreak",), ("BAD KEY=1",), ("$X=1",)])
def test_mixin_env_that_cannot_be_written_is_refused(tmp_path: Path,
                                                     env: tuple[str, ...]) -> None:
    driver, workload, _ = _setup()
    mixin = _image("sha256:m", env=env)
    driver.images[mixin.id] = mixin
    driver.filesystems[mixin.id] = _tar(("opt/m", "file", b"M"))
    with pytest.raises(SbxError) as raised:
        _assemble(driver, workload, [("m", mixin)], tmp_path)
    assert raised.value.reason is Reason.INVALID_KIT and builds(driver) == []
