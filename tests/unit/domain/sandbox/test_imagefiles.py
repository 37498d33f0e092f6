"""Files read out of an image are cached per image id: a repeat asks for no probe, only what
the cache lacks is read, and a damaged entry is a miss, never an error."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from sbx.domain.sandbox.imagefiles import image_files
from sbx.seams.engine import ImageInfo

IMAGE = ImageInfo(id="sha256:abc", tags=(), user="", workdir="", entrypoint=None, cmd=None,
                  env=(), labels={})


class _Probes:
    def __init__(self, files: Mapping[str, bytes]) -> None:
        self.files = dict(files)
        self.asked: list[tuple[str, ...]] = []

    def read_image_files(self, image_id: str, paths: Sequence[str],
                         labels: Mapping[str, str]) -> dict[str, bytes | None]:
        self.asked.append(tuple(paths))
        return {p: self.files.get(p) for p in paths}


def test_one_probe_then_the_cache(tmp_path: Path) -> None:
    probes = _Probes({"/etc/passwd": b"root:x:0:0::/:/bin/sh\n", "/b": b"\x00\xffpem"})
    wanted = ("/etc/passwd", "/a", "/b")
    first = image_files(probes, IMAGE, wanted, tmp_path, {})  # type: ignore[arg-type]
    again = image_files(probes, IMAGE, wanted, tmp_path, {})  # type: ignore[arg-type]
    assert first == again == {"/etc/passwd": b"root:x:0:0::/:/bin/sh\n", "/a": None,
                              "/b": b"\x00\xffpem"}
    assert probes.asked == [wanted]  # absent files are remembered too
    image_files(probes, IMAGE, ("/b", "/c"), tmp_path, {})  # type: ignore[arg-type]
    assert probes.asked[1:] == [("/c",)]


def test_a_damaged_entry_is_read_again(tmp_path: Path) -> None:
    probes = _Probes({"/f": b"data"})
    image_files(probes, IMAGE, ("/f",), tmp_path, {})  # type: ignore[arg-type]
    (entry,) = tmp_path.iterdir()
    entry.write_text('{"/f": "not base64!"}')
    assert image_files(probes, IMAGE, ("/f",), tmp_path, {}) == {"/f": b"data"}  # type: ignore[arg-type]
    entry.write_text("[garbage")
    assert image_files(probes, IMAGE, ("/f",), tmp_path, {}) == {"/f": b"data"}  # type: ignore[arg-type]
    assert len(probes.asked) == 3
