"""The runtime image on a run's engine: this install of sbx packed into an image with no base
(:mod:`sbx.seams.host.runtimepack`), built there once, found again by its tag.

Packing reads and hashes the whole install (~1.4 s), so the tag of an unchanged install is
kept in the state home's cache under a key of what the pack is made of: sbx's code (names,
sizes, times), the interpreter and the versions of the proxy's distributions. A run then pays
one image lookup on the engine.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Final

from sbx.base import labels
from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.seams import owned
from sbx.seams.engine import Driver
from sbx.seams.host.runtimepack import (
    PROXY_DISTRIBUTIONS,
    PackError,
    build_context,
    runtime_pack,
)
from sbx.usecases.codeprint import code_fingerprint

CACHE_DIR: Final = ("cache", "runtime")


def install_key() -> str:
    """What the pack of this install is made of, without reading its files."""
    digest = hashlib.sha256()
    executable = os.path.realpath(sys.executable)
    info = os.stat(executable)
    digest.update(f"{sys.executable}\0{executable}\0{info.st_size}\0{info.st_mtime_ns}\0"
                  f"{sys.version}\0{code_fingerprint()}\0".encode("utf-8", "surrogatepass"))
    for name in PROXY_DISTRIBUTIONS:
        try:
            version = metadata.version(name)
        except metadata.PackageNotFoundError:
            version = "-"
        digest.update(f"{name}={version}\0".encode())
    return digest.hexdigest()[:32]


def cached_tag(state_home: Path, driver: Driver) -> str | None:
    """This install's runtime image when the engine has it (None: not there, or unknown)."""
    try:
        cached = owned.read_cache(_entry(state_home))
    except SbxError:
        return None
    if isinstance(cached, str) and driver.image(cached) is not None:
        return cached
    return None


def runtime_image(state_home: Path, driver: Driver,
                  on_progress: Callable[[str], None] = lambda _line: None) -> str:
    """The runtime image's tag on ``driver``'s engine, built there when it is missing."""
    cached = cached_tag(state_home, driver)
    if cached is not None:
        return cached
    on_progress("building sbx's runtime image on the engine (once per install)")
    try:
        pack = runtime_pack()
        context = build_context(pack)
    except (PackError, OSError) as error:
        raise SbxError(Reason.PROXY_FAILED,
                       f"cannot pack sbx's runtime image from this install: {error}",
                       hint="Reinstall sbx (`pip install --force-reinstall sbx-sandbox`), "
                            "then run again.") from None
    if driver.image(pack.tag) is None:
        driver.build(context, "Dockerfile", pack.tag,
                     {labels.MANAGED: "true", labels.ROLE: labels.ROLE_RUNTIME},
                     on_line=lambda _line: None)
    owned.write_cache(_entry(state_home), pack.tag)
    return pack.tag


def _entry(state_home: Path) -> Path:
    return state_home.joinpath(*CACHE_DIR, install_key())


__all__ = ["CACHE_DIR", "cached_tag", "install_key", "runtime_image"]
