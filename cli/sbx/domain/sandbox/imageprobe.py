"""What a run reads of its image, probed once and cached per image id: an id names the
image's content, so what was read cannot change. A miss probes, in the same one container,
what every run asks of an image (its accounts, its /tmp and HOME mount points), so a first
run pays one probe where it paid one per question."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from sbx.seams import owned
from sbx.seams.engine import ImageInfo, ImageProbe, Images

# Asked of every image a run uses: the password database (the sandbox user, the create step)
# and the mount points (mountpoints.TMP_PATH, identity.FALLBACK_HOME; a test keeps them equal).
# Not /etc/group: only a USER naming its group reads it, and each file read costs the engine
# a process of its own (tens of milliseconds) where a directory's stat costs one or two.
EVERY_RUN_FILES: Final = ("/etc/passwd",)
EVERY_RUN_DIRS: Final = ("/tmp", "/home/sbx")  # noqa: S108 - paths in the image


def probed(driver: Images, image: ImageInfo, *, files: Sequence[str] = (),
           dirs: Sequence[str] = (), paths: Sequence[str] = (), cache_dir: Path,
           helper_labels: Mapping[str, str]) -> ImageProbe:
    """``files``, ``dirs`` and ``paths`` of ``image``: from the cache, or one probe for all
    it lacks."""
    cache = _entry(cache_dir, image)
    known_files, known_modes, known_stats = _cached(cache)
    if any(p not in known_files for p in files) or any(p not in known_modes for p in dirs) \
            or any(p not in known_stats for p in paths):
        found = driver.probe_image(
            image.id,
            files=[p for p in dict.fromkeys((*files, *EVERY_RUN_FILES)) if p not in known_files],
            dirs=[p for p in dict.fromkeys((*dirs, *EVERY_RUN_DIRS)) if p not in known_modes],
            paths=[p for p in dict.fromkeys(paths) if p not in known_stats],
            labels=helper_labels)
        known_files.update(found.files)
        known_modes.update(found.modes)
        known_stats.update(found.stats)
        owned.write_cache(cache, {  # best effort: a miss costs the probe next time
            "files": {p: None if data is None else base64.b64encode(data).decode()
                      for p, data in known_files.items()},
            "modes": known_modes, "stats": known_stats})
    return ImageProbe({p: known_files[p] for p in files}, {p: known_modes[p] for p in dirs},
                      {p: known_stats[p] for p in paths})


def cached(image: ImageInfo, *, files: Sequence[str], cache_dir: Path) -> ImageProbe | None:
    """``files`` of ``image`` if an earlier probe cached them all (nothing is probed)."""
    known_files, _modes, _stats = _cached(_entry(cache_dir, image))
    if any(p not in known_files for p in files):
        return None
    return ImageProbe({p: known_files[p] for p in files}, {})


def _entry(cache_dir: Path, image: ImageInfo) -> Path:
    return cache_dir / f"{image.id.replace(':', '-')}.json"


def _cached(cache: Path) -> tuple[dict[str, bytes | None], dict[str, int | None],
                                  dict[str, int | None]]:
    loaded = owned.read_cache(cache)  # this user's own entry only
    files: dict[str, bytes | None] = {}
    modes: dict[str, int | None] = {}
    stats: dict[str, int | None] = {}
    if not isinstance(loaded, dict):
        return files, modes, stats
    stored_files, stored_modes = loaded.get("files"), loaded.get("modes")
    if isinstance(stored_files, dict):
        for path, text in stored_files.items():
            if text is None:
                files[str(path)] = None
            elif isinstance(text, str):
                try:
                    files[str(path)] = base64.b64decode(text, validate=True)
                except (binascii.Error, ValueError):
                    continue  # a damaged value is a miss for that file
    if isinstance(stored_modes, dict):
        for path, mode in stored_modes.items():
            if mode is None or (isinstance(mode, int) and not isinstance(mode, bool)
                                and 0 <= mode <= 0o7777):
                modes[str(path)] = mode
    stored_stats = loaded.get("stats")
    if isinstance(stored_stats, dict):
        for path, mode in stored_stats.items():
            if mode is None or (isinstance(mode, int) and not isinstance(mode, bool)
                                and 0 <= mode <= 0o177777):
                stats[str(path)] = mode
    return files, modes, stats


__all__ = ["EVERY_RUN_DIRS", "EVERY_RUN_FILES", "cached", "probed"]
