"""What a run reads of its image is probed once per image id: a miss asks, in one probe, for
what every run needs (accounts, mount points) beside what was asked; a repeat asks nothing;
only what the cache lacks is probed; a damaged entry is a miss, never an error."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from sbx.domain.sandbox import identity, imageprobe, mountpoints
from sbx.domain.sandbox.imageprobe import EVERY_RUN_DIRS, EVERY_RUN_FILES, cached, probed
from sbx.seams.engine import ImageInfo, ImageProbe

IMAGE = ImageInfo(id="sha256:abc", tags=(), user="", workdir="", entrypoint=None, cmd=None,
                  env=(), labels={})


class _Probes:
    def __init__(self, files: Mapping[str, bytes], modes: Mapping[str, int]) -> None:
        self.files, self.modes = dict(files), dict(modes)
        self.asked: list[tuple[tuple[str, ...], tuple[str, ...]]] = []
        self.stats = {"/bin/bash": 0o100755}
        self.asked_paths: list[tuple[str, ...]] = []

    def probe_image(self, image_id: str, *, files: Sequence[str], dirs: Sequence[str],
                    labels: Mapping[str, str], paths: Sequence[str] = ()) -> ImageProbe:
        self.asked.append((tuple(files), tuple(dirs)))
        self.asked_paths.append(tuple(paths))
        return ImageProbe({p: self.files.get(p) for p in files},
                          {p: self.modes.get(p) for p in dirs},
                          {p: self.stats.get(p) for p in paths})


def _probes() -> _Probes:
    return _Probes({"/etc/passwd": b"root:x:0:0::/:/bin/sh\n", "/b": b"\x00\xffpem"},
                   {"/tmp": 0o1777})


def test_the_mount_points_it_prefetches_are_the_ones_runs_ask_for() -> None:
    assert EVERY_RUN_DIRS == (mountpoints.TMP_PATH, identity.FALLBACK_HOME)


def test_one_probe_answers_the_accounts_and_the_mount_points(tmp_path: Path) -> None:
    probes = _probes()
    accounts = probed(probes, IMAGE, files=EVERY_RUN_FILES,  # type: ignore[arg-type]
                      cache_dir=tmp_path, helper_labels={})
    points = probed(probes, IMAGE, dirs=EVERY_RUN_DIRS,  # type: ignore[arg-type]
                    cache_dir=tmp_path, helper_labels={})
    assert accounts.files == {"/etc/passwd": b"root:x:0:0::/:/bin/sh\n"}
    assert points.modes == {"/tmp": 0o1777, "/home/sbx": None}
    assert probes.asked == [(EVERY_RUN_FILES, EVERY_RUN_DIRS)]  # absent ones remembered too
    assert cached(IMAGE, files=EVERY_RUN_FILES, cache_dir=tmp_path) == accounts


def test_the_group_database_is_not_prefetched(tmp_path: Path) -> None:
    """Each file read costs the engine a process of its own: only a USER naming its group
    reads /etc/group (sbx.domain.sandbox.images)."""
    probes = _probes()
    probed(probes, IMAGE, dirs=EVERY_RUN_DIRS,  # type: ignore[arg-type]
           cache_dir=tmp_path, helper_labels={})
    assert probes.asked == [(("/etc/passwd",), EVERY_RUN_DIRS)]


def test_only_what_the_cache_lacks_is_probed(tmp_path: Path) -> None:
    probes = _probes()
    wanted = ("/etc/passwd", "/b")
    first = probed(probes, IMAGE, files=wanted, cache_dir=tmp_path,  # type: ignore[arg-type]
                   helper_labels={})
    assert first.files == {"/etc/passwd": b"root:x:0:0::/:/bin/sh\n", "/b": b"\x00\xffpem"}
    assert probed(probes, IMAGE, files=wanted, cache_dir=tmp_path,  # type: ignore[arg-type]
                  helper_labels={}) == first
    probed(probes, IMAGE, files=("/b", "/c"), cache_dir=tmp_path,  # type: ignore[arg-type]
           helper_labels={})
    assert len(probes.asked) == 2 and probes.asked[1] == (("/c",), ())
    assert cached(IMAGE, files=("/d",), cache_dir=tmp_path) is None


def test_a_damaged_entry_is_probed_again(tmp_path: Path) -> None:
    probes = _probes()
    for damage in ('{"files": {"/b": "not base64!"}, "modes": {"/tmp": "x"}}', "[garbage",
                   '{"files": [], "modes": {"/tmp": true}}'):
        probed(probes, IMAGE, files=("/b",), dirs=("/tmp",),  # type: ignore[arg-type]
               cache_dir=tmp_path, helper_labels={})
        (entry,) = tmp_path.iterdir()
        entry.write_text(damage)
        again = probed(probes, IMAGE, files=("/b",), dirs=("/tmp",),  # type: ignore[arg-type]
                       cache_dir=tmp_path, helper_labels={})
        assert again == ImageProbe({"/b": b"\x00\xffpem"}, {"/tmp": 0o1777})
    assert len(probes.asked) == 4  # the first, then one per damage
    assert imageprobe.__all__


def test_a_paths_type_is_probed_once_and_remembered_absent_or_not(tmp_path: Path) -> None:
    probes = _probes()
    first = probed(probes, IMAGE, paths=("/bin/bash", "/bin/zsh"),  # type: ignore[arg-type]
                   cache_dir=tmp_path, helper_labels={})
    assert first.stats == {"/bin/bash": 0o100755, "/bin/zsh": None}
    again = probed(probes, IMAGE, paths=("/bin/zsh", "/bin/bash"),  # type: ignore[arg-type]
                   cache_dir=tmp_path, helper_labels={})
    assert again.stats == first.stats and probes.asked_paths == [("/bin/bash", "/bin/zsh")]
