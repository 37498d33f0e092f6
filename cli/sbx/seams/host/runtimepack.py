"""This interpreter and sbx as installed, packed as the build context of an image with no base
(``FROM scratch``): how a program of sbx (the egress proxy) runs on an engine that cannot see
this host's disk, with nothing pulled from any registry.

Every file keeps its absolute host path in the image, so the interpreter finds its prefix,
its shared libraries (by their RPATH and the loader's own paths) and its site-packages exactly
as it does here. What is packed: the interpreter and its standard library (without its tests,
IDLE, tkinter and the build config), sbx's package, the files of every distribution sbx
requires at run time (transitively), the system CA bundle, and each shared library any of
those executables and extension modules loads (``ldd``). The image's tag is the digest of all
of it, so a changed install builds a new image and an unchanged one is found again.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import stat
import sys
import sysconfig
import tarfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Final

from sbx.seams.host import processes

PROGRAM_USER: Final = "65534:65534"  # nobody: the image has no account of its own
_SKIP_STDLIB: Final = frozenset({"test", "idlelib", "tkinter", "turtledemo", "lib2to3",
                                 "ensurepip", "site-packages", "dist-packages", "__pycache__",
                                 "pydoc_data", "unittest", "sqlite3"})
# Extension modules no sbx program loads, and which would bring libraries of their own.
_SKIP_EXTENSIONS: Final = re.compile(r"^(_tkinter|_test|_ctypes_test|xxlimited|_xxtestfuzz|"
                                     r"_sqlite3|_curses|_dbm|_gdbm|readline)")
# What the egress proxy imports beyond the standard library (a test keeps this equal to
# what it loads): its TLS and certificates, and its HTTP/1.1 parser.
PROXY_DISTRIBUTIONS: Final = ("cryptography", "cffi", "h11")
_CA_BUNDLES: Final = ("/etc/ssl/certs/ca-certificates.crt",)
_LDD_LINE: Final = re.compile(r"(?:=>\s*)?(/\S+)\s+\(0x[0-9a-f]+\)")
_MAX_FILES: Final = 20_000


class PackError(Exception):
    """The install cannot be packed (a file vanished, ldd failed, too many files)."""


@dataclass(frozen=True)
class RuntimePack:
    """What the image holds, each at its host path: regular files, and the symbolic links on
    the way to them (a merged /usr's /lib among them), so no file is stored twice."""

    files: tuple[str, ...]
    links: tuple[tuple[str, str], ...]  # (path, what it points at, as readlink says)
    digest: str
    python: str  # the interpreter to run in the image
    pythonpath: str  # where sbx's package is found

    @property
    def tag(self) -> str:
        return f"sbx-runtime/{self.digest[:24]}:1"


def runtime_pack() -> RuntimePack:
    """The files to pack for this interpreter and install (read, never written)."""
    package = Path(__file__).resolve().parents[2]  # sbx/seams/host/ -> sbx/
    python = Path(sys.executable)
    # The path as invoked (a venv's python is a link): placing it keeps the link.
    found: dict[str, None] = {str(python): None}
    stdlib = Path(sysconfig.get_paths()["stdlib"]).resolve()
    _add_tree(found, stdlib, skip=_SKIP_STDLIB)
    platstdlib = Path(sysconfig.get_paths()["platstdlib"]).resolve()
    if platstdlib != stdlib:
        _add_tree(found, platstdlib, skip=_SKIP_STDLIB)
    library = sysconfig.get_config_var("LDLIBRARY") or ""
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    if library.endswith(".so") or ".so." in library:
        candidate = Path(libdir) / library
        if candidate.exists():
            found[str(candidate)] = None
    venv = Path(sys.prefix)
    if (venv / "pyvenv.cfg").is_file():
        found[str(venv / "pyvenv.cfg")] = None
    _add_tree(found, package, skip=frozenset({"__pycache__"}))
    for dist in _distributions(PROXY_DISTRIBUTIONS):
        for relative in dist.files or ():
            path = Path(str(dist.locate_file(relative)))
            if path.is_file() and "__pycache__" not in path.parts:
                found[str(path)] = None
    for bundle in _CA_BUNDLES:
        if Path(bundle).is_file():
            found[bundle] = None
    loaded = [str(python.resolve()), *(p for p in found if p.endswith(".so") or ".so." in p)]
    found.update(dict.fromkeys(_libraries(loaded)))
    if len(found) > _MAX_FILES:
        raise PackError(f"{len(found)} files to pack; more than {_MAX_FILES}")
    regular: dict[str, None] = {}
    links: dict[str, str] = {}
    for name in found:
        _place(name, regular, links)
    files = tuple(sorted(regular))
    digest = hashlib.sha256()
    for link, target in sorted(links.items()):
        digest.update(f"L{link}\0{target}\0".encode())
    for name in files:
        digest.update(f"F{name}\0{os.stat(name).st_mode & 0o755:o}\0".encode())
        digest.update(_read(Path(name)))
    return RuntimePack(files, tuple(sorted(links.items())), digest.hexdigest(),
                       python=str(python), pythonpath=str(package.parent))


def build_context(pack: RuntimePack) -> bytes:
    """A build context: ``rootfs/`` with every file at its host path, and the Dockerfile."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path, target in pack.links:
            link = tarfile.TarInfo("rootfs" + path)
            link.type = tarfile.SYMTYPE
            link.linkname = target
            link.mtime = 0
            tar.addfile(link)
        for name in pack.files:
            data = _read(Path(name))
            mode = os.stat(name).st_mode
            info = tarfile.TarInfo("rootfs" + name)
            info.size = len(data)
            # Setuid and setgid bits go: nothing in the image may raise privileges.
            info.mode = stat.S_IMODE(mode) & 0o755 | 0o444
            info.mtime = 0
            tar.addfile(info, io.BytesIO(data))
        recipe = dockerfile(pack).encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(recipe)
        info.mtime = 0
        tar.addfile(info, io.BytesIO(recipe))
    return buffer.getvalue()


def dockerfile(pack: RuntimePack) -> str:
    return (f"FROM scratch\nCOPY rootfs/ /\nUSER {PROGRAM_USER}\n"
            f'ENV PYTHONPATH={pack.pythonpath} PYTHONDONTWRITEBYTECODE=1 '
            f'PYTHONNOUSERSITE=1 LC_ALL=C.UTF-8\n'
            f'ENTRYPOINT ["{pack.python}"]\n')


def _place(path: str, regular: dict[str, None], links: dict[str, str], depth: int = 0) -> None:
    """``path`` as the image holds it: each symbolic link on the way kept as a link, the file
    stored once, where the links lead."""
    if depth > 40:
        raise PackError(f"too many levels of symbolic links at {path}")
    parts = Path(path).parts
    current = Path("/")
    for index, part in enumerate(parts[1:], start=1):
        candidate = current / part
        if candidate.is_symlink():
            target = os.readlink(candidate)
            links[str(candidate)] = target
            landed = os.path.normpath(current / target)
            rest = parts[index + 1:]
            _place(str(Path(landed, *rest)), regular, links, depth + 1)
            return
        current = candidate
    regular[str(current)] = None


def _libraries(paths: list[str]) -> Iterator[str]:
    """The shared libraries the loader maps for ``paths``: one ``ldd`` for all of them (it
    names each file's own, and exits non-zero when one of them is static, which adds none)."""
    for start in range(0, len(paths), 256):
        batch = paths[start:start + 256]
        try:
            done = processes.run(["ldd", *batch], timeout=60, max_output=16 * 1024 * 1024)
        except (OSError, processes.SubprocessError) as error:
            raise PackError(f"ldd: {error}") from error
        for line in done.stdout.decode("utf-8", "replace").splitlines():
            match = _LDD_LINE.search(line)
            if match is not None:
                yield match.group(1)


def _add_tree(found: dict[str, None], root: Path, *, skip: frozenset[str]) -> None:
    for directory, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in skip)
        dirs[:] = [d for d in dirs if not d.startswith("config-")]
        for name in names:
            path = Path(directory) / name
            if path.is_file() and not path.name.endswith((".pyc", ".pyo")) \
                    and not (name.endswith(".so") and _SKIP_EXTENSIONS.match(name)):
                found[str(path)] = None


def _distributions(names: Iterable[str]) -> Iterator[metadata.Distribution]:
    for name in names:
        try:
            yield metadata.distribution(name)
        except metadata.PackageNotFoundError as error:
            raise PackError(f"{name} is not installed beside sbx") from error


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as error:
        raise PackError(f"reading {path}: {error}") from error


__all__ = ["PROGRAM_USER", "PackError", "RuntimePack", "build_context", "dockerfile",
           "runtime_pack"]
