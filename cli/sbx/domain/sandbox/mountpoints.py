"""Mount points whose mode the engine takes from the image.

A tmpfs mounted on a directory that exists in the image gets that directory's mode, whatever
``mode=`` says (runc copies it; measured on engine 20.10): an image whose /tmp is 0755 would give
the sandbox a /tmp it cannot write. So before a run, the image's /tmp and HOME directories are
checked (once per image id, cached) and, when one is wrong, a derived image with the modes fixed
is made once (nothing is started: a created container gets the directory entries and is
committed) and used from then on. An absent directory needs nothing: the engine creates the
mount point with the options' mode.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from sbx import __version__
from sbx.base import labels as label_keys
from sbx.domain.sandbox import imageprobe
from sbx.domain.sandbox.imagecache import record_use
from sbx.seams.engine import ImageInfo, Images
from sbx.seams.locks import name_lock

TMP_PATH: Final = "/tmp"  # noqa: S108 - the sandbox's /tmp, not a host temp file
TMP_MODE: Final = 0o1777
PREPARED_TAG: Final = "sbx-prep"
PREPARED_FROM_LABEL: Final = f"{label_keys.PREFIX}.prepared-from"


def wanted_modes(observed: Mapping[str, int | None], *, home: str) -> dict[str, int]:
    """The directories to fix and the mode each needs (empty: the image is fine as it is)."""
    fixes: dict[str, int] = {}
    tmp = observed.get(TMP_PATH)
    if tmp is not None and tmp != TMP_MODE:
        fixes[TMP_PATH] = TMP_MODE
    home_mode = observed.get(home)
    if home_mode is not None and home_mode & 0o700 != 0o700:
        fixes[home] = (home_mode | 0o700) & 0o777
    return fixes


def directory_tar(modes: Mapping[str, int]) -> bytes:
    import tarfile  # only when an image's mount points need fixing, not on every run

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for path, mode in sorted(modes.items()):
            info = tarfile.TarInfo(path.lstrip("/"))
            info.type = tarfile.DIRTYPE
            info.mode = mode
            archive.addfile(info)
    return buffer.getvalue()


def prepare_mountpoints(driver: Images, image: ImageInfo, *, home: str, cache_dir: Path,
                        helper_labels: Mapping[str, str],
                        lock_dir: Path | None = None, home_hash: str | None = None) -> ImageInfo:
    """``image`` itself when its /tmp and HOME mount points are fine, else the derived image."""
    observed = _observed_modes(driver, image, (TMP_PATH, home), cache_dir, helper_labels)
    fixes = wanted_modes(observed, home=home)
    if not fixes:
        return image
    digest = hashlib.sha256(json.dumps([image.id, sorted(fixes.items())]).encode()).hexdigest()
    tag = f"{PREPARED_TAG}/{digest[:32]}:1"
    with name_lock(lock_dir, tag):
        existing = driver.image(tag)
        if existing is not None:
            return existing
        derived = driver.derive_image(
            image, directory_tar(fixes), tag,
            image_labels={PREPARED_FROM_LABEL: image.id, label_keys.VERSION: _version()},
            helper_labels=helper_labels)
        if home_hash is not None:  # this home's from its creation (for gc)
            record_use(driver, home_hash, [derived])
        return derived


def _observed_modes(driver: Images, image: ImageInfo, paths: tuple[str, ...], cache_dir: Path,
                    helper_labels: Mapping[str, str]) -> dict[str, int | None]:
    found = imageprobe.probed(driver, image, dirs=paths, cache_dir=cache_dir,
                              helper_labels=helper_labels)
    return dict(found.modes)


def _version() -> str:
    return __version__


__all__ = ["PREPARED_TAG", "TMP_MODE", "TMP_PATH", "directory_tar", "prepare_mountpoints",
           "wanted_modes"]
