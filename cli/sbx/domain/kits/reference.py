"""What a kit reference on a command line names — the one place that decides it.

In this order: an existing path (a kit directory or descriptor file), then a kit pinned in the
state home's kit lock by ``sbx pull``, then a bundled agent's short name (``claude``, ``codex``,
``gemini``). Anything else written as a path is a missing directory; written as a registry
reference it is a kit to ``sbx pull`` first; a bare word is ``kit_not_found`` with "did you
mean". ``sbx run``, ``sbx explain``, ``sbx kit validate``, ``sbx kit ls`` and named sandboxes
all go through :func:`find_kit`.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from pathlib import Path

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.kits.bundled import (
    SHORT_NAMES,
    bundled_kit,
    data_dir,
    registry_shaped,
    unknown_kit,
)
from sbx.domain.kits.local import load_local_kit
from sbx.domain.kits.localkit import LocalKit
from sbx.domain.kits.lock import load_locked_kit, lock_path, read_lock
from sbx.domain.kits.pathcheck import looks_like_path, path_kind
from sbx.seams.host import lookup


@dataclass(frozen=True)
class RegistryReference:
    """A reference written as a registry kit that the lock does not pin (not pulled yet)."""

    reference: str


@dataclass(frozen=True)
class Named:
    """Where a reference leads without loading it: ``source`` is path, locked, bundled or
    registry; ``path`` the directory or file for path and bundled."""

    reference: str
    source: str
    path: Path | None


def name_of(reference: str, *, cwd: Path, lock_home: Path | None) -> Named:
    """What ``reference`` names, in the resolution order; raises ``kit_not_found`` for a bare
    word that names nothing (and ``invalid_argument`` for a path that cannot be looked up)."""
    path = Path(reference) if posixpath.isabs(reference) else lookup.joined_to_cwd(cwd / reference)
    if path_kind(path, reference) is not None or looks_like_path(reference):
        return Named(reference, "path", path)
    if lock_home is not None and _locked(reference, lock_home):
        return Named(reference, "locked", None)
    bundled = bundled_kit(reference)
    if bundled is not None:
        return Named(reference, "bundled", bundled)
    if registry_shaped(reference):
        return Named(reference, "registry", None)
    raise unknown_kit(reference, cwd)


def find_kit(reference: str, *, cwd: Path, lock_home: Path | None,
             cache_dir: Path | None = None) -> LocalKit | RegistryReference:
    """The kit ``reference`` names, loaded; a registry reference the lock does not pin comes
    back as such (``kit validate`` asks the registry, ``run`` refuses it)."""
    named = name_of(reference, cwd=cwd, lock_home=lock_home)
    if named.source == "locked" and lock_home is not None:
        locked = load_locked_kit(reference, lock_home)
        if locked is not None:
            return locked
    if named.source == "registry":
        return RegistryReference(reference)
    if named.source == "bundled" and named.path is not None:
        kit = load_local_kit(str(named.path), cwd=cwd, cache_dir=cache_dir)
        return LocalKit(reference=reference, directory=kit.directory, stem=kit.stem,
                        descriptor=kit.descriptor, dockerfile_text=kit.dockerfile_text,
                        bundled=True)
    return load_local_kit(reference, cwd=cwd, cache_dir=cache_dir)


def load_kit(reference: str, *, cwd: Path, lock_home: Path | None,
             cache_dir: Path | None = None) -> LocalKit:
    """:func:`find_kit` for a run: a registry kit must have been pulled first."""
    found = find_kit(reference, cwd=cwd, lock_home=lock_home, cache_dir=cache_dir)
    if isinstance(found, RegistryReference):
        raise SbxError(
            Reason.IMAGE_MISSING,
            f"kit {_shown(reference)} is a registry reference that has not been pulled",
            hint=f"Fetch it first with `sbx pull {reference}` (or check the path).",
            details={"reference": reference})
    return found


@dataclass(frozen=True)
class ShortName:
    """A bundled agent's short name, its kit, and what the name resolves to here."""

    name: str
    bundled: Path  # the bundled kit directory
    resolves: Named  # a path or pinned kit of that name comes first

    @property
    def shadowed(self) -> bool:
        return self.resolves.source != "bundled"

    def as_dict(self) -> dict[str, str | bool | None]:
        target = self.resolves.path
        return {"name": self.name, "kit": self.bundled.name, "bundled": str(self.bundled),
                "source": self.resolves.source, "shadowed": self.shadowed,
                "resolves_to": str(target) if target is not None else self.name}


def short_names(*, cwd: Path, lock_home: Path | None) -> list[ShortName]:
    """Every bundled short name with what it names from ``cwd`` (for `sbx kit ls`)."""
    return [ShortName(name, data_dir() / directory,
                      name_of(name, cwd=cwd, lock_home=lock_home))
            for name, directory in SHORT_NAMES.items()]


def _locked(reference: str, lock_home: Path) -> bool:
    return read_lock(lock_path(lock_home)).get(reference) is not None


def _shown(reference: str) -> str:
    return repr(reference if len(reference) <= 120 else reference[:117] + "...")


__all__ = ["Named", "RegistryReference", "ShortName", "find_kit", "load_kit", "name_of",
           "short_names"]
