"""A kit as sbx holds it: its decoded descriptor, its recipe, and where they were found (a local
directory, or the lock's stored copy of a registry kit)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sbx.domain.kits.descriptor import Descriptor


@dataclass(frozen=True)
class LocalKit:
    reference: str  # as the user wrote it
    directory: Path
    stem: str
    descriptor: Descriptor
    dockerfile_text: str | None  # None: declaration-only
    # A kit pulled from a registry and pinned in the lock: its image (``repo@sha256:…``), used
    # as-is instead of a build (sbx.domain.kits.lock.load_locked_kit).
    image: str | None = None
    # True when a bundled agent's short name named it (sbx.domain.kits.reference): the word
    # is no path, so a directory of that name appearing later would change what it names.
    bundled: bool = False

    @property
    def descriptor_file(self) -> Path:
        return Path(self.descriptor.file)


__all__ = ["LocalKit"]
