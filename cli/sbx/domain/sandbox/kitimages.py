"""A kit's image: built from the kit's recipe (cached by content hash), or the image a locked kit
is pinned at.

Nothing here pulls. Before a build, every base image the recipe names must already be present
locally; the classic builder would otherwise fetch a missing base from a registry, which is an
implicit pull sbx never makes (SPEC §2.1 step 3).
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from sbx import __version__
from sbx.base import labels as label_keys
from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.kits.local import RECIPE_NAME, build_context, content_hash
from sbx.domain.kits.localkit import LocalKit
from sbx.domain.sandbox.imagecache import record_use
from sbx.seams.engine import ImageInfo, Images
from sbx.seams.locks import name_lock

TAG_PREFIX: Final = "sbx-kit"
KIT_LABEL: Final = f"{label_keys.PREFIX}.kit"
HASH_LABEL: Final = f"{label_keys.PREFIX}.kit-hash"
_ARG_RE: Final = re.compile(r"^\s*ARG\s+([A-Za-z_][A-Za-z0-9_]*)(?:=(\S*))?\s*$", re.IGNORECASE)
_FROM_RE: Final = re.compile(r"^\s*FROM\s+(.*)$", re.IGNORECASE)
_VAR_RE: Final = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?")


def base_images(dockerfile: str) -> list[str]:
    """The external images a dockerfile builds FROM (stage names and ``scratch`` excluded).

    ``ARG`` defaults declared before the first ``FROM`` are substituted; a reference that still
    holds a variable cannot be checked and is refused rather than left for the builder to pull.
    """
    args: dict[str, str] = {}
    stages: set[str] = set()
    bases: list[str] = []
    seen_from = False
    for raw in _logical_lines(dockerfile):
        arg = _ARG_RE.match(raw)
        if arg and not seen_from:
            args[arg.group(1)] = (arg.group(2) or "").strip("\"'")
            continue
        match = _FROM_RE.match(raw)
        if not match:
            continue
        seen_from = True
        words = [w for w in shlex.split(match.group(1)) if not w.startswith("--")]
        if not words:
            continue
        ref = _VAR_RE.sub(lambda m: args.get(m.group(1)) or m.group(0), words[0])
        if len(words) >= 3 and words[1].lower() == "as":
            stages.add(words[2].lower())
        if ref.lower() == "scratch" or ref.lower() in stages:
            continue
        if "$" in ref:
            raise SbxError(Reason.INVALID_KIT,
                           f"cannot tell which base image `FROM {words[0]}` names",
                           hint="Give the ARG a default before the first FROM, or name the "
                                "base image literally.")
        bases.append(ref)
    return bases


def _logical_lines(text: str) -> list[str]:
    lines: list[str] = []
    current = ""
    for line in text.splitlines():
        stripped = line.rstrip()
        if stripped.lstrip().startswith("#"):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        lines.append(current + stripped)
        current = ""
    if current:
        lines.append(current)
    return lines


def kit_tag(kit: LocalKit, digest: str) -> str:
    stem = re.sub(r"[^a-z0-9._-]+", "-", kit.stem.lower()).strip("-._") or "kit"
    return f"{TAG_PREFIX}/{stem}:{digest[:20]}"


@dataclass(frozen=True)
class KitImage:
    image: ImageInfo
    tag: str
    built: bool  # False when the cached image was reused


def ensure_kit_image(driver: Images, kit: LocalKit,
                     progress: Callable[[str], AbstractContextManager[Callable[[str], None]]],
                     build_args: Mapping[str, str] | None = None, *,
                     lock_dir: Path | None = None, home_hash: str | None = None) -> KitImage:
    """The kit's image: reused when an image with the kit's content hash exists, else built
    (and marked as ``home_hash``'s at once: gc removes only what its home built or marks).

    ``progress(title)`` is entered only when a build actually runs. A locked registry kit is
    never built: its pinned image must be present (only `sbx pull` fetches or moves it).
    """
    if kit.image is not None:
        found = driver.image(kit.image)
        if found is None:
            raise SbxError(
                Reason.IMAGE_MISSING,
                f"kit {kit.reference} is locked at {kit.image}, which is not present locally; "
                "sbx never pulls implicitly",
                hint=f"Fetch it with `sbx pull {kit.reference}` (a moved tag is gated there).",
                details={"missing": [kit.image]})
        return KitImage(found, kit.image, built=False)
    if kit.dockerfile_text is None:
        raise SbxError(Reason.INVALID_KIT,
                       f"{kit.descriptor.kind} kit {kit.reference} has no recipe (no "
                       f"{kit.stem}.dockerfile, `dockerfile:` or `build:`); a workload must "
                       "have content",
                       hint=f"Add {kit.stem}.dockerfile beside {kit.descriptor_file.name}.")
    args = dict(build_args or {})
    digest = content_hash(kit)
    if args:  # build-phase arg values are part of what the image is
        digest = hashlib.sha256(
            (digest + json.dumps(args, sort_keys=True)).encode("utf-8")).hexdigest()
    tag = kit_tag(kit, digest)
    # One build per tag however many runs start at once (sbx.seams.locks).
    with name_lock(lock_dir, tag):
        kit_image = _cached_or_built(driver, kit, tag, digest, args, progress)
        if kit_image.built and home_hash is not None:
            record_use(driver, home_hash, [kit_image.image])
        return kit_image


def _cached_or_built(driver: Images, kit: LocalKit, tag: str, digest: str,
                     args: Mapping[str, str],
                     progress: Callable[[str], AbstractContextManager[Callable[[str], None]]],
                     ) -> KitImage:
    cached = driver.image(tag)
    if cached is not None:
        return KitImage(cached, tag, built=False)
    missing = [ref for ref in base_images(kit.dockerfile_text or "")
               if driver.image(ref) is None]
    if missing:
        names = ", ".join(missing)
        raise SbxError(
            Reason.IMAGE_MISSING,
            f"kit {kit.reference} builds FROM {names}, which is not present locally; sbx never "
            "pulls implicitly",
            # A base image is an ordinary image, which the engine fetches (`sbx pull` is for
            # kits, and its gate has nothing to say about a base image).
            hint=f"Fetch it with `docker pull {missing[0]}`, or `docker load -i FILE` from an "
                 "image archive; then run again.",
            details={"missing": missing},
        )
    with progress(f"building {kit.reference}") as on_line:
        labels = {KIT_LABEL: kit.stem, HASH_LABEL: digest, label_keys.VERSION: _version()}
        context = build_context(kit)
        image = driver.build(context, RECIPE_NAME, tag, labels, on_line, args)
        own = label_keys.own_labels(image.labels, labels)
        if any(image.labels.get(key) for key in own.keys() - labels.keys()):
            # The recipe (or its base image) sets dev.sbx.* labels: only sbx's may stand, so
            # the image is labelled again (every step comes from the build cache).
            image = driver.build(context, RECIPE_NAME, tag, own, on_line, args)
    return KitImage(image, tag, built=True)


def _version() -> str:
    return __version__


__all__ = ["HASH_LABEL", "KIT_LABEL", "TAG_PREFIX", "KitImage", "base_images", "ensure_kit_image",
           "kit_tag"]
