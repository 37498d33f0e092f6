"""Image assembly (KIT-SPEC-V3 §4.4): one runnable image from a workload image and its mixins.

What runs is never a kit image itself but an ordinary image assembled from them: the workload
image, then each mixin's filesystem in composition order (later over earlier). A mixin's image
config contributes only additive fields: ENV (PATH by appending the elements the mixin adds, any
other variable set, later wins) and LABEL. Its ENTRYPOINT, CMD, USER and WORKDIR are ignored, so
the workload's stand. A declaration-only mixin (no image) contributes nothing.

How, on the classic builder (engine 20.10, no BuildKit): a generated dockerfile sent as an
in-memory context, ``FROM <workload image id>`` then ``COPY --from=<mixin image id> / /`` per
mixin that has files, then one ``ENV`` for the variables the mixins change. The builder takes a
locally present image id as is; had the id vanished it would try a registry, so every id is
inspected right before the build (sbx never pulls). ``COPY --from`` keeps owners and modes, so a
mixin's directories replace the base's, owner included, as §4.4 says layers do.

Before building, filesystem collisions are refused: the runtime's job (§4.4). Each mixin image's
file index (paths, kinds, sha256 of regular files, symlink targets) is read once per image id
from an export of a created, never started helper container and cached as JSON. The workload's
export is streamed and only the paths the mixins also provide are hashed. Directories replacing
directories are fine; a path two kits provide with different content or type is a collision.

The assembled image is cached under a tag keyed by the workload and mixin image ids (in order)
and the sbx version, and reused while present; the collision check ran before it was built.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import posixpath
import re
import tarfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, closing
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Final, Protocol

from sbx import __version__
from sbx.base import labels as label_keys
from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.sandbox.imagecache import record_use
from sbx.seams import owned
from sbx.seams.engine import ImageInfo, Images
from sbx.seams.locks import name_lock

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

_LOGGER = logging.getLogger(__name__)

TAG_PREFIX: Final = "sbx-assembled"
ASSEMBLY_LABEL: Final = f"{label_keys.PREFIX}.assembly"
DOCKERFILE_NAME: Final = ".sbx-assembly.dockerfile"
# What the engine uses when an image sets no PATH; a mixin's PATH elements append to it then.
DEFAULT_PATH: Final = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
MAX_REPORTED: Final = 20
INDEX_FORMAT: Final = 1
# Entries every exported container holds but no image layer does (the engine's init layer).
# The engine bind-mounts or masks these at run time, so no kit's copy of them is ever seen.
ENGINE_PATHS: Final = frozenset({
    "/.dockerenv", "/etc/hostname", "/etc/hosts", "/etc/resolv.conf", "/etc/mtab",
    "/dev", "/dev/console", "/dev/pts", "/dev/shm", "/proc", "/sys",  # noqa: S108 - in-image paths
})
_HASH_CHUNK: Final = 1024 * 1024
_ENV_KEY_RE: Final = re.compile(r"^[^\s=\"'\\$]+$")

ProgressFactory = Callable[[str], AbstractContextManager[Callable[[str], None]]]


class WorkloadImage(Protocol):
    """What the workload side needs: its image and tag (``sbx.domain.sandbox.kitimages.KitImage``
    fits)."""

    @property
    def image(self) -> ImageInfo: ...
    @property
    def tag(self) -> str: ...


@dataclass(frozen=True)
class AssembledImage:
    image: ImageInfo
    tag: str
    built: bool  # False when the workload ran unchanged or a cached assembly was reused


@dataclass(frozen=True)
class FileEntry:
    """One path of an image's filesystem."""

    kind: str  # file | dir | symlink | hardlink (target not hashed) | other
    digest: str  # file: sha256 hex; symlink, hardlink: target; other: device detail; dir: ""


FileIndex = Mapping[str, FileEntry]  # absolute path (no trailing slash) -> entry


@dataclass(frozen=True)
class Collision:
    path: str
    first: str  # the kit already providing the path (the workload or an earlier mixin)
    second: str  # the mixin that would replace it
    detail: str

    def as_dict(self) -> dict[str, str]:
        return {"path": self.path, "first": self.first, "second": self.second,
                "detail": self.detail}


# -- pure parts -------------------------------------------------------------------------------


def assembly_key(workload_id: str, mixin_ids: Sequence[str], version: str) -> str:
    """sha256 over the workload image id, the mixin image ids in order and the sbx version."""
    payload = json.dumps({"format": "sbx-assembly-v1", "workload": workload_id,
                          "mixins": list(mixin_ids), "sbx": version},
                         separators=(",", ":"), sort_keys=True)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def assembled_tag(key: str) -> str:
    return f"{TAG_PREFIX}/{key}:1"


def _env_pairs(env: Iterable[str]) -> Iterator[tuple[str, str]]:
    for item in env:
        key, sep, value = item.partition("=")
        if sep and key:
            yield key, value


def merge_env(workload_env: Sequence[str], mixin_envs: Sequence[Sequence[str]]) -> list[str]:
    """The assembled image's environment (``KEY=value`` entries).

    Order of precedence: the workload's variables, then each mixin's in composition order, a
    later value replacing an earlier one. PATH is the exception: it starts as the workload's
    (the engine's default when the workload sets none) and each mixin appends the elements it
    holds that are not there yet, in its own order.
    """
    merged = dict(_env_pairs(workload_env))
    path = [p for p in merged.get("PATH", DEFAULT_PATH).split(":") if p]
    added = False
    for env in mixin_envs:
        for key, value in _env_pairs(env):
            if key != "PATH":
                merged[key] = value
                continue
            for element in value.split(":"):
                if element and element not in path:
                    path.append(element)
                    added = True
    if added:
        merged["PATH"] = ":".join(path)
    return [f"{key}={value}" for key, value in merged.items()]


def env_changes(workload_env: Sequence[str], merged_env: Sequence[str]) -> dict[str, str]:
    """The variables whose value in ``merged_env`` differs from (or is missing in) the workload."""
    before = dict(_env_pairs(workload_env))
    return {key: value for key, value in _env_pairs(merged_env) if before.get(key) != value}


def merge_labels(mixin_labels: Sequence[Mapping[str, str]]) -> dict[str, str]:
    """Mixin labels in composition order, later wins. sbx's own labels stay the assembly's."""
    merged: dict[str, str] = {}
    for labels in mixin_labels:
        merged.update({k: v for k, v in labels.items()
                       if not k.startswith(f"{label_keys.PREFIX}.")})
    return merged


def _quote(value: str) -> str:
    # Inside double quotes the dockerfile lexer unescapes \" \$ and \\ and nothing else.
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")
    return f'"{escaped}"'


def dockerfile(workload_id: str, copy_ids: Sequence[str], env: Mapping[str, str]) -> str:
    """The assembly recipe: FROM the workload, COPY each mixin's root in order, then ENV."""
    lines = [f"FROM {workload_id}"]
    lines.extend(f"COPY --from={image_id} / /" for image_id in copy_ids)
    if env:
        lines.append("ENV " + " ".join(f"{key}={_quote(value)}" for key, value in env.items()))
    return "\n".join(lines) + "\n"


def _describe(entry: FileEntry) -> str:
    return {"dir": "a directory", "file": "a file", "symlink": f"a symlink to {entry.digest}",
            "hardlink": f"a hard link to {entry.digest}"}.get(entry.kind, entry.digest)


def _difference(earlier: FileEntry, later: FileEntry) -> str | None:
    """Why ``later`` may not replace ``earlier``, or None when it may."""
    if earlier.kind == "dir" and later.kind == "dir":
        return None
    if earlier == later and earlier.kind != "hardlink":
        return None
    if earlier.kind == later.kind == "file":
        return "different content"
    return f"{_describe(earlier)} vs {_describe(later)}"


def find_collisions(workload_ref: str, workload: FileIndex,
                    mixins: Sequence[tuple[str, FileIndex]]) -> list[Collision]:
    """Every path two kits provide differently, sorted by path.

    Mixins are compared with each other in composition order (each against the latest provider
    of the path), and the workload's entries against the last mixin providing the same path.
    ``workload`` need only hold the paths the mixins provide.
    """
    provided: dict[str, tuple[str, FileEntry]] = {}
    found: dict[tuple[str, str, str], Collision] = {}
    for ref, index in mixins:
        for path, entry in index.items():
            previous = provided.get(path)
            if previous is not None:
                why = _difference(previous[1], entry)
                if why is not None:
                    found.setdefault((path, previous[0], ref),
                                     Collision(path, previous[0], ref, why))
            provided[path] = (ref, entry)
    for path, (ref, entry) in provided.items():
        base = workload.get(path)
        if base is None:
            continue
        why = _difference(base, entry)
        if why is not None:
            found.setdefault((path, workload_ref, ref), Collision(path, workload_ref, ref, why))
    return sorted(found.values(), key=lambda c: (c.path, c.first, c.second))


def collision_error(collisions: Sequence[Collision]) -> SbxError:
    shown = collisions[:MAX_REPORTED]
    first = shown[0]
    count = len(collisions)
    noun = "path" if count == 1 else "paths"
    lines = [f"  {c.path}: {c.first} and {c.second} ({c.detail})" for c in shown]
    if count > len(shown):
        lines.append(f"  ... and {count - len(shown)} more")
    return SbxError(
        Reason.KIT_INCOHERENT,
        f"{count} {noun} would be written differently by two kits, first {first.path} "
        f"({first.first} and {first.second}); assembling them would silently replace files",
        hint="Drop one of the kits, or change a mixin so it installs into a path of its own.",
        details={"collisions": [c.as_dict() for c in shown], "count": count},
        body="\n".join(lines),
    )


def with_parents(index: Mapping[str, FileEntry]) -> dict[str, FileEntry]:
    """The index plus every ancestor directory of its paths (a tar need not list them)."""
    full = dict(index)
    for path in index:
        parent = posixpath.dirname(path)
        while parent not in ("/", "") and parent not in full:
            full[parent] = FileEntry("dir", "")
            parent = posixpath.dirname(parent)
    return full


def _normalise(name: str) -> str | None:
    path = posixpath.normpath("/" + name.lstrip("/"))
    return None if path == "/" else path


def _sha256(archive: tarfile.TarFile, member: tarfile.TarInfo) -> str:
    digest = hashlib.sha256()
    extracted = archive.extractfile(member)
    if extracted is not None:
        with extracted:
            while chunk := extracted.read(_HASH_CHUNK):
                digest.update(chunk)
    return digest.hexdigest()


def read_index(stream: IO[bytes], wanted: Callable[[str], bool] | None = None,
               ) -> dict[str, FileEntry]:
    """The file index of a filesystem tar, read as a stream (nothing kept but the index).

    Only the paths ``wanted`` accepts are hashed and listed (all when None). The engine's
    per-container entries (:data:`ENGINE_PATHS`) are left out.
    """
    index: dict[str, FileEntry] = {}
    hashed: dict[str, str] = {}
    with tarfile.open(fileobj=stream, mode="r|") as archive:
        for member in archive:
            path = _normalise(member.name)
            if path is None or path in ENGINE_PATHS or (wanted is not None and not wanted(path)):
                continue
            if member.isdir():
                entry = FileEntry("dir", "")
            elif member.isreg():
                hashed[path] = _sha256(archive, member)
                entry = FileEntry("file", hashed[path])
            elif member.issym():
                entry = FileEntry("symlink", member.linkname)
            elif member.islnk():
                target = _normalise(member.linkname) or "/"
                entry = (FileEntry("file", hashed[target]) if target in hashed
                         else FileEntry("hardlink", target))
            elif member.ischr() or member.isblk():
                kind = "char device" if member.ischr() else "block device"
                entry = FileEntry("other", f"a {kind} {member.devmajor}:{member.devminor}")
            else:
                entry = FileEntry("other", "a fifo" if member.isfifo() else "a special file")
            index[path] = entry
    return index


class _ChunkReader(io.RawIOBase):
    """A readable binary stream over an iterator of byte chunks."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        super().__init__()
        self._chunks = chunks
        self._pending = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        while not self._pending:
            chunk = next(self._chunks, None)
            if chunk is None:
                return 0
            self._pending = memoryview(chunk)
        view = memoryview(buffer).cast("B")
        count = min(len(view), len(self._pending))
        view[:count] = self._pending[:count]
        self._pending = self._pending[count:]
        return count


# -- engine-facing parts ----------------------------------------------------------------------


def export_index(driver: Images, image_id: str, helper_labels: Mapping[str, str],
                 wanted: Callable[[str], bool] | None) -> dict[str, FileEntry]:
    """An image's file index (see :func:`read_index`) from a streamed export."""
    with closing(driver.export_image(image_id, helper_labels)) as chunks:
        return read_index(io.BufferedReader(_ChunkReader(chunks), _HASH_CHUNK), wanted)


def _cache_file(cache_dir: Path, image_id: str) -> Path:
    return cache_dir / f"{image_id.replace(':', '-').replace('/', '-')}.json"


def mixin_index(driver: Images, image_id: str, cache_dir: Path,
                helper_labels: Mapping[str, str]) -> dict[str, FileEntry]:
    """A mixin image's full file index, ancestors included; computed once per image id."""
    cache = _cache_file(cache_dir, image_id)
    try:
        data = owned.read_cache(cache)  # this user's own entry only
        if data["format"] == INDEX_FORMAT and data["image"] == image_id:
            return {str(p): FileEntry(str(v[0]), str(v[1])) for p, v in data["entries"].items()}
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError,
            RecursionError):  # a damaged cache entry is a miss
        pass
    index = with_parents(export_index(driver, image_id, helper_labels, None))
    owned.write_cache(cache, {"format": INDEX_FORMAT, "image": image_id, "entries": {
        p: [e.kind, e.digest] for p, e in sorted(index.items())}})
    return index


def workload_index(driver: Images, image_id: str, paths: set[str],
                   helper_labels: Mapping[str, str]) -> dict[str, FileEntry]:
    """The workload's entries for ``paths`` only, hashed while its export streams by.

    A hard link whose target was not among ``paths`` is resolved by a second, narrower pass.
    """
    index = export_index(driver, image_id, helper_labels, paths.__contains__)
    links = {path: entry.digest for path, entry in index.items() if entry.kind == "hardlink"}
    if links:
        targets = export_index(driver, image_id, helper_labels,
                                set(links.values()).__contains__)
        for path, target in links.items():
            resolved = targets.get(target)
            if resolved is not None and resolved.kind == "file":
                index[path] = resolved
    return index


def _check_env(ref: str, env: Sequence[str]) -> None:
    for key, value in _env_pairs(env):
        if not _ENV_KEY_RE.match(key) or any(c in value for c in "\n\r\0"):
            raise SbxError(
                Reason.INVALID_KIT,
                f"mixin {ref} sets the variable {key[:60]!r} in a form sbx cannot carry into "
                "the assembled image (a line break, NUL or odd character)",
                hint="Set the variable on one line, without quotes or `$` in its name.")


def _context(recipe: str) -> bytes:
    data = recipe.encode("utf-8")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        info = tarfile.TarInfo(DOCKERFILE_NAME)
        info.size = len(data)
        info.mode = 0o644
        archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def assemble(driver: Images, workload: WorkloadImage,
             mixins: Sequence[tuple[str, ImageInfo | None]], progress: ProgressFactory, *,
             workload_ref: str, cache_dir: Path, helper_labels: Mapping[str, str],
             lock_dir: Path | None = None, home_hash: str | None = None) -> AssembledImage:
    """The runnable image: the workload, unchanged without mixins, else assembled (or reused).

    ``mixins`` are ``(reference, image)`` in composition order; ``None`` marks a
    declaration-only mixin. ``cache_dir`` holds the per-image file indexes; helper containers
    carry ``helper_labels`` and are always removed. ``progress(title)`` is entered only when an
    assembly actually runs. Collisions raise ``KIT_INCOHERENT`` before anything is built.
    """
    content = [(ref, image) for ref, image in mixins if image is not None]
    if not content:
        return AssembledImage(workload.image, workload.tag, built=False)
    key = assembly_key(workload.image.id, [image.id for _, image in content], _version())
    tag = assembled_tag(key)
    with name_lock(lock_dir, tag):  # one assembly per tag however many runs start at once
        found = _cached_or_assembled(driver, workload, content, progress, key=key, tag=tag,
                                     workload_ref=workload_ref, cache_dir=cache_dir,
                                     helper_labels=helper_labels)
        if found.built and home_hash is not None:  # this home's from its creation (for gc)
            record_use(driver, home_hash, [found.image])
        return found


def _cached_or_assembled(driver: Images, workload: WorkloadImage,
                         content: Sequence[tuple[str, ImageInfo]], progress: ProgressFactory,
                         *, key: str, tag: str, workload_ref: str, cache_dir: Path,
                         helper_labels: Mapping[str, str]) -> AssembledImage:
    base = workload.image
    cached = driver.image(tag)
    if cached is not None:
        return AssembledImage(cached, tag, built=False)
    for ref, image in content:
        _check_env(ref, image.env)
    changes = env_changes(base.env, merge_env(base.env, [image.env for _, image in content]))
    build_labels = {**merge_labels([image.labels for _, image in content]),
                    ASSEMBLY_LABEL: key, label_keys.VERSION: _version()}
    names = ", ".join(ref for ref, _ in content)
    with progress(f"assembling {workload_ref} with {names}") as on_line:
        indexes: list[tuple[str, dict[str, FileEntry]]] = []
        for ref, image in content:
            on_line(f"reading the file list of {ref}")
            indexes.append((ref, mixin_index(driver, image.id, cache_dir, helper_labels)))
        provided = {path for _, index in indexes for path in index}
        on_line(f"checking {len(provided)} paths against {workload_ref}")
        base_index = workload_index(driver, base.id, provided, helper_labels)
        collisions = find_collisions(workload_ref, base_index, indexes)
        if collisions:
            raise collision_error(collisions)
        copies = [image.id for (_, image), (_, index) in zip(content, indexes, strict=True)
                  if index]
        for image_id in [base.id, *copies]:
            # The classic builder would look for a vanished id in a registry: never let it.
            if driver.image(image_id) is None:
                raise SbxError(Reason.IMAGE_MISSING,
                               f"image {image_id[:19]} disappeared during the assembly",
                               hint="Run again; sbx rebuilds kit images that are missing.")
        recipe = dockerfile(base.id, copies, changes)
        _LOGGER.debug("assembly recipe for %s:\n%s", tag, recipe)
        image = driver.build(_context(recipe), DOCKERFILE_NAME, tag, build_labels, on_line)
    return AssembledImage(image, tag, built=True)


def _version() -> str:
    return __version__


__all__ = ["ASSEMBLY_LABEL", "DEFAULT_PATH", "ENGINE_PATHS", "AssembledImage", "Collision",
           "FileEntry", "FileIndex", "WorkloadImage", "assemble", "assembled_tag", "assembly_key",
           "collision_error", "dockerfile", "env_changes", "export_index", "find_collisions",
           "merge_env", "merge_labels", "mixin_index", "read_index", "with_parents",
           "workload_index"]
