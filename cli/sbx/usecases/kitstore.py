"""The kit registry's content on the host: content-addressed blobs, and per repository the
blobs and manifests linked into it and its tags. Written by the egress proxy (a sandbox's
pushes), read by it and by ``sbx kit registry``.

Layout under the state home's ``kit-registry/``: ``blobs/sha256/<hex>``, ``uploads/<run>/<id>``
(in progress) and ``repositories/<name>/_links/<hex>`` (empty), ``_manifests/<hex>`` (the media
type), ``_tags/<tag>`` (a digest). Names and tags are checked by the grammar of
:mod:`sbx.domain.egress.kitregistry` before any path is made of them, and a repository's own
entries start with ``_``, which no name component can, so no name reaches another's files.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from sbx.domain.egress.kitregistry import (
    DIGEST_PATTERN,
    MAX_STORE_BYTES,
    MIN_FREE_BYTES,
    TAG_PATTERN,
    RegistryError,
    manifest_references,
    valid_name,
)
from sbx.seams import owned

CHUNK: Final = 256 * 1024
PUSH_GRACE_S: Final = 3600  # an unreferenced blob this young may be a push in progress
STALE_UPLOAD_S: Final = 86400  # no upload sits idle this long under a live proxy


@dataclass(frozen=True)
class TagInfo:
    name: str
    tag: str
    digest: str
    media_type: str
    size: int  # the manifest's own bytes plus the blobs it names, once each


class StoreFull(Exception):
    """A write would take the store over its bound or the disk below its floor."""


class KitStore:
    def __init__(self, root: Path, *, max_bytes: int = MAX_STORE_BYTES,
                 min_free: int = MIN_FREE_BYTES) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self.min_free = min_free

    # -- paths -----------------------------------------------------------------------------

    def _blob(self, digest: str) -> Path:
        if DIGEST_PATTERN.fullmatch(digest) is None:
            raise RegistryError(400, "DIGEST_INVALID", "not a sha256 digest")
        return self.root / "blobs" / "sha256" / digest.split(":", 1)[1]

    def _repo(self, name: str) -> Path:
        if not valid_name(name):
            raise RegistryError(400, "NAME_INVALID", "not a repository name")
        return self.root / "repositories" / name

    def ensure(self) -> None:
        for part in ("blobs/sha256", "uploads", "repositories"):
            owned.ensure_directory(self.root / part)

    # -- reads -----------------------------------------------------------------------------

    def linked(self, name: str, digest: str) -> bool:
        hexd = self._blob(digest).name
        return (self._repo(name) / "_links" / hexd).is_file() and self._blob(digest).is_file()

    def blob_path(self, name: str, digest: str) -> Path | None:
        """The blob's file when it is in ``name`` (a repository sees only its own blobs)."""
        return self._blob(digest) if self.linked(name, digest) else None

    def manifest(self, name: str, reference: str) -> tuple[str, str, bytes] | None:
        """(digest, media type, body) of a manifest of ``name`` by tag or digest."""
        repo = self._repo(name)
        digest = reference
        if DIGEST_PATTERN.fullmatch(reference) is None:
            if TAG_PATTERN.fullmatch(reference) is None:
                return None
            try:
                digest = (repo / "_tags" / reference).read_text("ascii").strip()
            except (OSError, UnicodeDecodeError):
                return None
            if DIGEST_PATTERN.fullmatch(digest) is None:
                return None
        try:
            media_type = (repo / "_manifests" / digest.split(":", 1)[1]).read_text(
                "ascii").strip()
            body = self._blob(digest).read_bytes()
        except (OSError, UnicodeDecodeError):
            return None
        if "sha256:" + hashlib.sha256(body).hexdigest() != digest:
            return None  # changed on disk: never served as what it is not
        return digest, media_type, body

    def repositories(self) -> list[str]:
        base = self.root / "repositories"
        found: list[str] = []
        if not base.is_dir():
            return found
        for directory, subdirs, _files in os.walk(base):
            subdirs[:] = sorted(d for d in subdirs if not d.startswith("_"))
            here = Path(directory)
            if (here / "_tags").is_dir() or (here / "_links").is_dir():
                found.append(here.relative_to(base).as_posix())
        return sorted(found)

    def tags(self, name: str) -> list[str]:
        directory = self._repo(name) / "_tags"
        try:
            return sorted(p.name for p in directory.iterdir()
                          if TAG_PATTERN.fullmatch(p.name) is not None)
        except OSError:
            return []

    def tag_info(self, name: str, tag: str) -> TagInfo | None:
        found = self.manifest(name, tag)
        if found is None:
            return None
        digest, media_type, body = found
        size = len(body)
        seen: set[str] = set()
        try:
            blobs, children = manifest_references(media_type, body)
        except RegistryError:
            blobs, children = [], []
        for ref in [*blobs, *children]:
            if ref not in seen:
                seen.add(ref)
                with contextlib.suppress(OSError):
                    size += self._blob(ref).stat().st_size
        return TagInfo(name, tag, digest, media_type, size)

    def used_bytes(self) -> int:
        total = 0
        for directory in (self.root / "blobs" / "sha256", self.root / "uploads"):
            for path, _dirs, files in os.walk(directory):
                for file in files:
                    with contextlib.suppress(OSError):
                        total += os.lstat(os.path.join(path, file)).st_size
        return total

    # -- writes ----------------------------------------------------------------------------

    def room(self, adding: int) -> None:
        """Raise :class:`StoreFull` unless ``adding`` more bytes fit the bound and the disk."""
        if self.used_bytes() + adding > self.max_bytes:
            raise StoreFull(f"the kit registry holds at most {self.max_bytes} bytes")
        with contextlib.suppress(OSError):
            if shutil.disk_usage(self.root).free - adding < self.min_free:
                raise StoreFull("the state home's disk is nearly full")

    def upload_dir(self, run_id: str) -> Path:
        self.drop_stale_uploads()
        return owned.ensure_directory(self.root / "uploads" / run_id)

    def drop_stale_uploads(self) -> None:
        """Remove upload directories nothing touched for a day: a proxy killed mid-push
        cannot close its own."""
        stale = time.time() - STALE_UPLOAD_S
        with contextlib.suppress(OSError):
            for run in list((self.root / "uploads").iterdir()):
                with contextlib.suppress(OSError):
                    if run.is_symlink() or not run.is_dir():
                        continue
                    touched = [run.lstat().st_mtime,
                               *(entry.lstat().st_mtime for entry in run.iterdir())]
                    if max(touched) < stale:
                        shutil.rmtree(run, ignore_errors=True)

    def commit_blob(self, name: str, staged: Path, digest: str) -> None:
        """Move a verified upload into the blobs and link it into ``name``."""
        target = self._blob(digest)
        if target.is_file():
            staged.unlink(missing_ok=True)
        else:
            os.chmod(staged, 0o600)
            os.replace(staged, target)
        self.link(name, digest)

    def link(self, name: str, digest: str) -> None:
        links = owned.ensure_directory(self._repo(name) / "_links")
        (links / self._blob(digest).name).touch(mode=0o600)

    def put_manifest(self, name: str, reference: str, media_type: str, body: bytes) -> str:
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        if DIGEST_PATTERN.fullmatch(reference) is not None and reference != digest:
            raise RegistryError(400, "DIGEST_INVALID", f"the manifest's digest is {digest}, "
                                f"not {reference}")
        blob = self._blob(digest)
        if not blob.is_file():
            owned.write_file(blob, body)
        repo = self._repo(name)
        owned.write_file(owned.ensure_directory(repo / "_manifests") / digest.split(":", 1)[1],
                         media_type.encode("ascii"))
        self.link(name, digest)
        if reference != digest:
            owned.write_file(owned.ensure_directory(repo / "_tags") / reference,
                             digest.encode("ascii"))
        return digest

    def remove(self, name: str, tag: str | None) -> list[str]:
        """Remove a tag (or the whole repository); blobs no repository links are removed
        too. Returns what went (``name:tag`` or ``name``)."""
        repo = self._repo(name)
        if tag is not None:
            path = repo / "_tags" / tag
            if TAG_PATTERN.fullmatch(tag) is None or not path.is_file():
                return []
            path.unlink()
            gone = [f"{name}:{tag}"]
        else:
            if not repo.is_dir():
                return []
            for meta in ("_links", "_manifests", "_tags"):
                shutil.rmtree(repo / meta, ignore_errors=True)
            with contextlib.suppress(OSError):
                os.removedirs(repo)
            gone = [name]
        self._sweep()
        self.drop_stale_uploads()
        return gone

    def _sweep(self) -> None:
        """Drop blobs no tag reaches any more, and the links to them; a blob written within
        the grace time may belong to a push whose manifest is still to come, so it stays."""
        keep: set[str] = set()
        for name in self.repositories():
            pending = [self.manifest(name, tag) for tag in self.tags(name)]
            while pending:
                found = pending.pop()
                if found is None or found[0] in keep:
                    continue
                keep.add(found[0])
                try:
                    blobs, children = manifest_references(found[1], found[2])
                except RegistryError:
                    continue
                keep.update(blobs)
                pending += [self.manifest(name, child) for child in children]
        recent = time.time() - PUSH_GRACE_S
        for path in self._blob_files():
            with contextlib.suppress(OSError):
                if DIGEST_PATTERN.fullmatch("sha256:" + path.name) is not None \
                        and "sha256:" + path.name not in keep and path.stat().st_mtime < recent:
                    path.unlink(missing_ok=True)
        base = self.root / "repositories"
        for name in self.repositories():
            for meta in ("_links", "_manifests"):
                with contextlib.suppress(OSError):
                    for entry in (base / name / meta).iterdir():
                        digest = "sha256:" + entry.name
                        if DIGEST_PATTERN.fullmatch(digest) is not None and digest not in keep \
                                and not self._blob(digest).is_file():
                            entry.unlink(missing_ok=True)

    def _blob_files(self) -> Iterator[Path]:
        with contextlib.suppress(OSError):
            yield from list((self.root / "blobs" / "sha256").iterdir())


__all__ = ["CHUNK", "KitStore", "StoreFull", "TagInfo"]
