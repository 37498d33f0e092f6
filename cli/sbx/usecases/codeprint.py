"""The fingerprint of sbx's own code (module names, sizes, modification times): what a cache of
parses or plans made by one checkout must not hand to an edited one of the same version."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

_CODE: list[str] = []


def code_fingerprint() -> str:
    """Computed once per process: a walk of the package's ``.py`` files, no reading."""
    if not _CODE:
        _CODE.append(walk_fingerprint())
    return _CODE[0]


def walk_fingerprint() -> str:
    """The fingerprint as the files are now (a long-lived process asks again)."""
    digest = hashlib.sha256()
    root = Path(__file__).resolve().parent.parent
    for directory, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith(".py"):
                info = os.stat(os.path.join(directory, name))
                digest.update(f"{directory}/{name}:{info.st_size}:{info.st_mtime_ns}\n".encode(
                    "utf-8", "surrogatepass"))
    return digest.hexdigest()


__all__ = ["code_fingerprint", "walk_fingerprint"]
