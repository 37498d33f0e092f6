"""The host's shared skills store (agent-skills@1): one directory per skill under
sbx.base.paths.skills_home, each holding a ``SKILL.md``, shown read-only in every sandbox whose
kits declare a skills directory.

``add`` copies a skill directory into the store without ever following a link: every entry is
opened relative to its parent's descriptor with ``O_NOFOLLOW``; a symlink is copied as a link
only when what it names resolves inside the source; devices, FIFOs and sockets are refused; the
copy is bounded in bytes, entries and depth; modes are normalised for the sandbox's user to read
(``0644``/``0755``: setuid, setgid and sticky bits dropped). The copy is made in a temporary
directory inside the store (a dot name: never a skill, never linked into a sandbox) and renamed
into place, so a sandbox sees the whole skill or none of it.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import stat
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from sbx.base.errors import SbxError
from sbx.base.reasons import REGISTRY, Reason
from sbx.domain.kits.document import load_document
from sbx.domain.kits.types import SKILL_NAME

SKILL_FILE: Final = "SKILL.md"
MAX_BYTES: Final = 64 * 1024 * 1024  # a skill is instructions and a few scripts, not a dataset
MAX_ENTRIES: Final = 10_000
MAX_DEPTH: Final = 32
MAX_FRONT_MATTER: Final = 64 * 1024  # read of SKILL.md for its description
MAX_DESCRIPTION: Final = 1024
TEMP_PREFIX: Final = ".sbx-"
_CONTROLS: Final = re.compile("[\x00-\x1f\x7f-\x9f]+")
_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


@dataclass(frozen=True)
class StoredSkill:
    name: str
    description: str
    size: int  # bytes of its regular files
    directory: Path

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "size": self.size,
                "directory": str(self.directory)}


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a skill in the store, or None."""
    if len(name.encode("utf-8", "surrogatepass")) > 255:
        return "it is longer than 255 bytes"
    if SKILL_NAME.fullmatch(name):
        return None
    if not name:
        return "it is empty"
    if "/" in name or "\\" in name:
        return "it contains a path separator"
    if name[0] in ".-_":
        return "it starts with a dot, dash or underscore"
    return "only letters, digits, '.', '_' and '-' are allowed"


def check_name(name: str, source: Path | None = None) -> str:
    """``name``, refused (``skill_name_invalid``) when it cannot name a skill; the fix names
    a valid one when ``source`` (the directory being added) is known."""
    problem = name_problem(name)
    if problem is not None:
        hint = REGISTRY[Reason.SKILL_NAME_INVALID].fix
        if source is not None:
            hint = (f"Add it under a valid name: sbx skills add {shlex.quote(str(source))} "
                    f"--name {suggested_name(name)}")
        raise SbxError(Reason.SKILL_NAME_INVALID,
                       f"{name!r} is not a valid skill name: {problem}",
                       hint=hint, details={"name": name})
    return name


def suggested_name(name: str) -> str:
    """A valid name close to ``name`` (invalid characters made dashes, no leading dot or
    dash), ``skill`` when nothing is left."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", name).lstrip(".-_")[:255]
    return cleaned if SKILL_NAME.fullmatch(cleaned) else "skill"


def clean_text(text: str) -> str:
    """One line of text with every run of control characters (newlines too) made one space."""
    return " ".join(_CONTROLS.sub(" ", text).split())


def description_of(text: str) -> str:
    """The ``description`` of a SKILL.md's YAML front matter (``---`` lines around it), control
    characters stripped and bounded; empty when there is none or it is not valid YAML."""
    lines = text.split("\n")
    if not lines or lines[0].rstrip("\r") != "---":
        return ""
    end = next((i for i, line in enumerate(lines[1:], 1) if line.rstrip("\r") in ("---", "...")),
               None)
    if end is None:
        return ""
    # The kit descriptor's parser: bounded, anchors refused, duplicate keys rejected.
    try:
        document = load_document("\n".join(lines[1:end]), SKILL_FILE)
    except SbxError:
        return ""
    value = document.get("description")
    if not isinstance(value, str):
        return ""
    return clean_text(value)[:MAX_DESCRIPTION]


class SkillStore:
    def __init__(self, root: Path) -> None:
        self.root = root

    # -- listing -----------------------------------------------------------------------------

    def listing(self) -> list[StoredSkill]:
        try:
            names = sorted(n for n in os.listdir(self.root) if not n.startswith("."))
        except FileNotFoundError:
            return []
        except OSError as error:
            raise _store_error(self.root, "read", error) from None
        out = []
        for name in names:
            directory = self.root / name
            try:
                fd = os.open(directory, _DIR_FLAGS)
            except OSError:
                continue  # a file or a link someone put there: not a skill sbx shows
            try:
                out.append(StoredSkill(clean_text(name), _read_description(fd),
                                       _size(fd, 0), directory))
            finally:
                os.close(fd)
        return out

    def exists(self, name: str) -> bool:
        return os.path.lexists(self.root / name)

    # -- add -----------------------------------------------------------------------------------

    def add(self, source: Path, name: str, *, force: bool) -> StoredSkill:
        """Copy the skill at ``source`` into the store as ``name`` (see the module's rules)."""
        check_name(name, source)
        if self.exists(name) and not force:
            where = shlex.quote(str(source))
            raise SbxError(Reason.SKILL_EXISTS,
                           f"the skills store already has a skill named {name!r}",
                           hint=f"Replace it: sbx skills add {where} --name {name} --force (or "
                                f"choose another --name)",
                           details={"name": name, "store": str(self.root)})
        root_fd = _open_source(source)
        try:
            real = os.path.realpath(source)
            store = os.path.realpath(self.root)
            if os.path.commonpath([real, store]) == real:
                raise _invalid(source, f"it holds the skills store itself ({self.root})")
            _require_skill_file(root_fd, source)
            try:
                self.root.mkdir(mode=0o755, parents=True, exist_ok=True)
                temp = Path(tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}add-", dir=self.root))
            except OSError as error:
                raise _store_error(self.root, "write", error) from None
            try:
                _Copy(source).directory(root_fd, temp, 0)
                os.chmod(temp, 0o755)  # noqa: S103 -- the sandbox user reads it
                self._install(temp, name)
            except BaseException:
                shutil.rmtree(temp, ignore_errors=True)
                raise
        finally:
            os.close(root_fd)
        return next(s for s in self.listing() if s.name == name)

    def _install(self, temp: Path, name: str) -> None:
        target = self.root / name
        old: Path | None = None
        try:
            if os.path.lexists(target):
                old = Path(tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}old-", dir=self.root))
                os.rename(target, old / "skill")
            os.rename(temp, target)
        except OSError as error:
            raise _store_error(self.root, "write", error) from None
        finally:
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)

    # -- rm ------------------------------------------------------------------------------------

    def remove(self, name: str) -> Path:
        check_name(name)
        target = self.root / name
        if not os.path.lexists(target):
            raise SbxError(Reason.SKILL_NOT_FOUND,
                           f"the skills store ({self.root}) has no skill named {name!r}",
                           hint="See the store's skills with: sbx skills ls",
                           details={"name": name, "store": str(self.root)})
        try:
            # Renamed away first: a sandbox starting now sees the skill whole or not at all.
            trash = Path(tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}rm-", dir=self.root))
            os.rename(target, trash / "skill")
        except OSError as error:
            raise _store_error(self.root, "write", error) from None
        shutil.rmtree(trash, ignore_errors=True)
        return target


def _store_error(root: Path, what: str, error: OSError) -> SbxError:
    return SbxError(Reason.STATE_UNWRITABLE if what == "write" else Reason.INVALID_ARGUMENT,
                    f"cannot {what} the skills store {root}: {error.strerror or error}",
                    hint="Fix that directory's permissions or free the disk (SBX_SKILLS "
                         "chooses another store).")


def _unsafe(source: Path, relative: str, why: str) -> SbxError:
    return SbxError(Reason.SKILL_SOURCE_UNSAFE, f"refused to copy {source}: {relative} {why}",
                    hint=REGISTRY[Reason.SKILL_SOURCE_UNSAFE].fix,
                    details={"source": str(source), "entry": relative})


def _invalid(source: Path, why: str) -> SbxError:
    return SbxError(Reason.SKILL_SOURCE_INVALID, f"{source} is not a skill directory: {why}",
                    hint=REGISTRY[Reason.SKILL_SOURCE_INVALID].fix,
                    details={"source": str(source)})


def _open_source(source: Path) -> int:
    # The path the user names may itself go through links (their choice); inside it none are
    # followed.
    try:
        return os.open(os.path.realpath(source), _DIR_FLAGS)
    except FileNotFoundError:
        raise _invalid(source, "it does not exist") from None
    except NotADirectoryError:
        raise _invalid(source, "it is not a directory") from None
    except OSError as error:
        raise _invalid(source, f"cannot open it ({error.strerror})") from None


def _require_skill_file(root_fd: int, source: Path) -> None:
    try:
        info = os.stat(SKILL_FILE, dir_fd=root_fd, follow_symlinks=False)
    except FileNotFoundError:
        raise _invalid(source, f"it has no {SKILL_FILE}") from None
    except OSError as error:
        raise _invalid(source, f"cannot read its {SKILL_FILE} ({error.strerror})") from None
    if not stat.S_ISREG(info.st_mode):
        raise _invalid(source, f"its {SKILL_FILE} is not a regular file")


class _Copy:
    """One bounded, link-safe copy of a source tree into a new directory."""

    def __init__(self, source: Path) -> None:
        self.source = source
        self.real = os.path.realpath(source)
        self.bytes = 0
        self.entries = 0

    def directory(self, fd: int, target: Path, depth: int, relative: str = "") -> None:
        if depth > MAX_DEPTH:
            raise _too_large(self.source, f"it nests deeper than {MAX_DEPTH} directories")
        for name in sorted(os.listdir(fd)):
            self.entries += 1
            if self.entries > MAX_ENTRIES:
                raise _too_large(self.source, f"it has more than {MAX_ENTRIES} entries")
            rel = f"{relative}{name}"
            info = os.stat(name, dir_fd=fd, follow_symlinks=False)
            mode = info.st_mode
            if stat.S_ISLNK(mode):
                self._link(fd, name, rel, target / name)
            elif stat.S_ISDIR(mode):
                child = _open_at(fd, name, _DIR_FLAGS, self.source, rel)
                try:
                    os.mkdir(target / name, 0o700)
                    self.directory(child, target / name, depth + 1, f"{rel}/")
                    os.chmod(target / name, 0o755)  # noqa: S103 -- as above
                finally:
                    os.close(child)
            elif stat.S_ISREG(mode):
                self._file(fd, name, rel, target / name)
            else:
                raise _unsafe(self.source, rel, f"is a {_kind(mode)}; a skill holds only "
                                                "files, directories and links inside it")

    def _link(self, fd: int, name: str, rel: str, target: Path) -> None:
        text = os.readlink(name, dir_fd=fd)
        if os.path.isabs(text):
            raise _unsafe(self.source, rel, f"is a symlink to the absolute path {text!r}")
        resolved = os.path.realpath(os.path.join(self.real, os.path.dirname(rel), text))
        if os.path.commonpath([resolved, self.real]) != self.real or not os.path.lexists(
                resolved):
            raise _unsafe(self.source, rel, f"is a symlink to {text!r}, outside the skill (or "
                                            "to nothing)")
        os.symlink(text, target)  # copied as a link, never followed

    def _file(self, fd: int, name: str, rel: str, target: Path) -> None:
        src = _open_at(fd, name, _FILE_FLAGS, self.source, rel)
        try:
            info = os.fstat(src)
            if not stat.S_ISREG(info.st_mode):  # swapped since the listing
                raise _unsafe(self.source, rel, f"is a {_kind(info.st_mode)}")
            mode = 0o755 if info.st_mode & stat.S_IXUSR else 0o644
            out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                          | os.O_CLOEXEC, 0o600)
            try:
                while chunk := os.read(src, 1 << 20):
                    self.bytes += len(chunk)
                    if self.bytes > MAX_BYTES:
                        raise _too_large(self.source,
                                         f"it holds more than {MAX_BYTES // (1024 * 1024)} MiB")
                    view = memoryview(chunk)
                    while view:
                        view = view[os.write(out, view):]
                os.fchmod(out, mode)  # setuid, setgid and sticky bits never survive
            finally:
                os.close(out)
        finally:
            os.close(src)


def _open_at(fd: int, name: str, flags: int, source: Path, rel: str) -> int:
    try:
        return os.open(name, flags, dir_fd=fd)
    except OSError as error:
        raise _unsafe(source, rel, f"could not be opened without following a link "
                                   f"({error.strerror})") from None


def _too_large(source: Path, why: str) -> SbxError:
    return SbxError(Reason.SKILL_TOO_LARGE, f"refused to copy {source}: {why}",
                    hint=REGISTRY[Reason.SKILL_TOO_LARGE].fix, details={"source": str(source)})


def _kind(mode: int) -> str:
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return "special file"


def _read_description(fd: int) -> str:
    try:
        skill = os.open(SKILL_FILE, _FILE_FLAGS, dir_fd=fd)
    except OSError:
        return ""
    try:
        if not stat.S_ISREG(os.fstat(skill).st_mode):
            return ""
        data = os.read(skill, MAX_FRONT_MATTER)
    except OSError:
        return ""
    finally:
        os.close(skill)
    return description_of(data.decode("utf-8", "replace"))


def _size(fd: int, depth: int) -> int:
    """The bytes of the regular files under ``fd``, no link followed (bounded in depth)."""
    total = 0
    for entry in _entries(fd):
        info = os.stat(entry, dir_fd=fd, follow_symlinks=False)
        if stat.S_ISREG(info.st_mode):
            total += info.st_size
        elif stat.S_ISDIR(info.st_mode) and depth < MAX_DEPTH:
            try:
                child = os.open(entry, _DIR_FLAGS, dir_fd=fd)
            except OSError:
                continue
            try:
                total += _size(child, depth + 1)
            finally:
                os.close(child)
    return total


def _entries(fd: int) -> Iterator[str]:
    try:
        yield from os.listdir(fd)
    except OSError:
        return


__all__ = ["MAX_BYTES", "SKILL_FILE", "SKILL_NAME", "SkillStore", "StoredSkill", "check_name",
           "clean_text", "description_of", "name_problem", "suggested_name"]
