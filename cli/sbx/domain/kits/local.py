"""Local kit directories: ``<stem>.yaml`` beside ``<stem>.dockerfile`` (KIT-SPEC-V3 §1.2).

The recipe is one of: ``dockerfile: <relative path>`` (must exist and stay inside the directory),
inline ``build: |`` text, or the conventional companion ``<stem>.dockerfile``. A missing
conventional companion means a declaration-only kit.
"""

from __future__ import annotations

import hashlib
import io
import posixpath
import tarfile
from pathlib import Path
from typing import Final

from sbx.base.errors import KitError, SbxError
from sbx.base.reasons import Reason
from sbx.domain.kits.bundled import registry_shaped, unknown_kit
from sbx.domain.kits.descriptor import SYNTAX_LINE, Descriptor, parse_descriptor_file
from sbx.domain.kits.diagnostics import Diagnostic
from sbx.domain.kits.localkit import LocalKit
from sbx.domain.kits.pathcheck import looks_like_path, path_kind, shown
from sbx.seams.host import files, lookup

# The recipe travels inside the build context under this name, whatever its origin (companion
# file, `dockerfile:` path or inline `build:` text), so the builder reads exactly what was hashed.
RECIPE_NAME: Final = ".sbx-recipe.dockerfile"
# Directories never hashed into the build cache key nor sent as build context noise.
_SKIP_DIRS: Final = frozenset({".git", "__pycache__", ".venv", "node_modules"})


def find_descriptor(directory: Path) -> Path:
    """``<dirname>.yaml`` first; else the one ``*.yaml`` whose first line is the v3 syntax line."""
    conventional = directory / f"{directory.name}.yaml"
    if lookup.is_file_checked(conventional):
        return conventional
    candidates = []
    for entry in sorted(files.matching(directory, "*.yaml")):
        try:
            first = files.first_line(entry).strip()
        except (OSError, UnicodeDecodeError):
            continue
        if first == SYNTAX_LINE:
            candidates.append(entry)
    if len(candidates) == 1:
        return candidates[0]
    found = ", ".join(c.name for c in candidates) or "none"
    raise SbxError(
        Reason.INVALID_KIT,
        f"{directory} holds no single kit descriptor (expected {conventional.name}, or one "
        f"*.yaml starting with {SYNTAX_LINE!r}; found: {found})",
        hint="Name the descriptor after its directory, e.g. hello/hello.yaml.",
    )


def load_local_kit(reference: str, *, cwd: Path, cache_dir: Path | None = None) -> LocalKit:
    path = lookup.joined_to_cwd(cwd / reference) if not posixpath.isabs(reference) \
        else Path(reference)
    kind = path_kind(path, reference)
    if kind == "file" and path.suffix == ".yaml":
        descriptor_path, directory = path, path.parent
    elif kind == "dir":
        directory = path
        descriptor_path = find_descriptor(directory)
    elif looks_like_path(reference):
        # Written as a path, it is meant as a kit directory: offering `sbx pull ./x` (which
        # takes registry references) would lead nowhere.
        what = "is a file, not a kit directory" if kind is not None else "does not exist"
        raise SbxError(
            Reason.INVALID_ARGUMENT,
            f"kit directory {shown(reference)} {what}",
            hint="Check the path: a local kit is a directory holding <name>.yaml (and "
                 "usually <name>.dockerfile).",
            details={"path": str(path)})
    else:
        # Not a path at all: what else the word may name is sbx.domain.kits.reference's call.
        if not registry_shaped(reference):
            raise unknown_kit(reference, cwd)
        raise SbxError(
            Reason.IMAGE_MISSING,
            f"kit {shown(reference)} is neither a local kit directory nor a pulled kit",
            hint=f"Check the path, or fetch a registry kit first with `sbx pull {reference}`.",
        )
    descriptor = parse_descriptor_file(descriptor_path, cache_dir=cache_dir)
    stem = descriptor_path.stem
    return LocalKit(reference=reference, directory=directory, stem=stem, descriptor=descriptor,
                    dockerfile_text=_recipe(descriptor, directory, stem))


def _recipe(descriptor: Descriptor, directory: Path, stem: str) -> str | None:
    data = descriptor.data
    build = data.get("build")
    named = data.get("dockerfile")
    if build is not None and named is not None:
        _refuse(descriptor, "build", "`build` and `dockerfile` are mutually exclusive")
    if "kits" in data and (build is not None or named is not None):
        _refuse(descriptor, "kits", "`kits` cannot be combined with `build` or `dockerfile`")
    if isinstance(build, str):
        return build
    if isinstance(named, str):
        target = lookup.resolved(directory / named)
        if not target.is_relative_to(lookup.resolved(directory)):
            _refuse(descriptor, "dockerfile", f"{named!r} escapes the kit directory")
        if not lookup.is_file_checked(target):
            _refuse(descriptor, "dockerfile", f"{named!r} does not exist")
        return files.file_text(target)
    companion = directory / f"{stem}.dockerfile"
    if lookup.is_file_checked(companion):
        return files.file_text(companion)
    return None


def _refuse(descriptor: Descriptor, field: str, message: str) -> None:
    raise KitError(
        f"{descriptor.file}: {field}: {message}",
        details={"diagnostics": [Diagnostic(field, message, descriptor.file, 0, 0).as_dict()]},
    )


def _context_files(kit: LocalKit) -> list[Path]:
    return files.tree_files(kit.directory, _SKIP_DIRS)


def build_context(kit: LocalKit) -> bytes:
    """The build context as a tar: the kit directory's files plus the recipe as RECIPE_NAME."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for full in _context_files(kit):
            files.add_to_archive(archive, full, full.relative_to(kit.directory).as_posix())
        recipe = (kit.dockerfile_text or "").encode("utf-8")
        info = tarfile.TarInfo(RECIPE_NAME)
        info.size = len(recipe)
        info.mode = 0o644
        archive.addfile(info, io.BytesIO(recipe))
    return buffer.getvalue()


def content_hash(kit: LocalKit) -> str:
    """sha256 over every file in the kit directory (path, mode, bytes) and the recipe text.

    The image built from a kit is cached under this hash, so any change to anything the build
    could read rebuilds it, and nothing else does.
    """
    digest = hashlib.sha256()
    digest.update(b"sbx-kit-build-v1\0")
    digest.update((kit.dockerfile_text or "").encode("utf-8") + b"\0")
    for full in _context_files(kit):
        relative = full.relative_to(kit.directory).as_posix()
        try:
            mode, payload = files.entry_content(full)
        except OSError:
            continue
        digest.update(f"{relative}\0{mode:o}\0{len(payload)}\0".encode())
        digest.update(payload)
    return digest.hexdigest()


__all__ = ["RECIPE_NAME", "build_context", "content_hash", "find_descriptor",
           "load_local_kit", "looks_like_path", "path_kind"]
