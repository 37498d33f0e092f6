"""Files read out of an image, cached per image id: an id names the image's content, so what
was read once cannot change, and a repeat run asks the engine for no probe container."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from pathlib import Path

from sbx.seams import owned
from sbx.seams.engine import ImageInfo, Images


def image_files(driver: Images, image: ImageInfo, paths: Sequence[str], cache_dir: Path,
                helper_labels: Mapping[str, str]) -> dict[str, bytes | None]:
    """Each of ``paths`` in ``image`` (None: absent); what the cache lacks in one probe."""
    cache = cache_dir / f"{image.id.replace(':', '-')}.json"
    known = _cached(cache)
    missing = [p for p in paths if p not in known]
    if missing:
        known.update(driver.read_image_files(image.id, missing, helper_labels))
        owned.write_cache(cache, {p: None if data is None else base64.b64encode(data).decode()
                                  for p, data in known.items()})  # best effort
    return {p: known[p] for p in paths}


def _cached(cache: Path) -> dict[str, bytes | None]:
    loaded = owned.read_cache(cache)  # this user's own entry only
    if not isinstance(loaded, dict):
        return {}
    found: dict[str, bytes | None] = {}
    for path, text in loaded.items():
        if text is None:
            found[str(path)] = None
        elif isinstance(text, str):
            try:
                found[str(path)] = base64.b64decode(text, validate=True)
            except (binascii.Error, ValueError):
                continue  # a damaged value is a miss for that file
    return found


__all__ = ["image_files"]
