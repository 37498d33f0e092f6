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

import posixpath
import re
import shlex
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from sbx.base.errors import SbxError
from sbx.base.reasons import REGISTRY, Reason
from sbx.domain.kits.document import load_document
from sbx.domain.kits.types import SKILL_NAME
from sbx.seams.host import dirfds, files, lookup

SKILL_FILE: Final = "SKILL.md"
MAX_BYTES: Final = 64 * 1024 * 1024  # a skill is instructions and a few scripts, not a dataset
MAX_ENTRIES: Final = 10_000
MAX_DEPTH: Final = 32
MAX_FRONT_MATTER: Final = 64 * 1024  # read of SKILL.md for its description
MAX_DESCRIPTION: Final = 1024
TEMP_PREFIX: Final = ".sbx-"
_CONTROLS: Final = re.compile("[\x00-\x1f\x7f-\x9f]+")


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
            names = sorted(n for n in files.names(self.root) if not n.startswith("."))
        except FileNotFoundError:
            return []
        except OSError as error:
            raise _store_error(self.root, "read", error) from None
        out = []
        for name in names:
            directory = self.root / name
            try:
                fd = dirfds.open_directory(directory)
            except OSError:
                continue  # a file or a link someone put there: not a skill sbx shows
            try:
                out.append(StoredSkill(clean_text(name), _read_description(fd),
                                       _size(fd, 0), directory))
            finally:
                dirfds.close(fd)
        return out

    def holds(self, name: str) -> bool:
        """Whether anything (a skill, a file, a link) has the name ``name`` in the store."""
        return lookup.lexists(str(self.root / name))

    # -- add -----------------------------------------------------------------------------------

    def add(self, source: Path, name: str, *, force: bool) -> StoredSkill:
        """Copy the skill at ``source`` into the store as ``name`` (see the module's rules)."""
        check_name(name, source)
        if self.holds(name) and not force:
            where = shlex.quote(str(source))
            raise SbxError(Reason.SKILL_EXISTS,
                           f"the skills store already has a skill named {name!r}",
                           hint=f"Replace it: sbx skills add {where} --name {name} --force (or "
                                f"choose another --name)",
                           details={"name": name, "store": str(self.root)})
        root_fd = _open_source(source)
        try:
            real = lookup.real_path(str(source))
            store = lookup.real_path(str(self.root))
            if posixpath.commonpath([real, store]) == real:
                raise _invalid(source, f"it holds the skills store itself ({self.root})")
            _require_skill_file(root_fd, source)
            try:
                files.make_directory(self.root, 0o755, parents=True, exist_ok=True)
                temp = Path(files.private_directory(self.root, f"{TEMP_PREFIX}add-"))
            except OSError as error:
                raise _store_error(self.root, "write", error) from None
            try:
                _Copy(source).directory(root_fd, temp, 0)
                files.set_mode(temp, 0o755)  # the sandbox user reads it
                self._install(temp, name)
            except BaseException:
                files.remove_tree(temp, ignore_errors=True)
                raise
        finally:
            dirfds.close(root_fd)
        return next(s for s in self.listing() if s.name == name)

    def _install(self, temp: Path, name: str) -> None:
        target = self.root / name
        old: Path | None = None
        try:
            if lookup.lexists(str(target)):
                old = Path(files.private_directory(self.root, f"{TEMP_PREFIX}old-"))
                files.rename_over(target, old / "skill")
            files.rename_over(temp, target)
        except OSError as error:
            raise _store_error(self.root, "write", error) from None
        finally:
            if old is not None:
                files.remove_tree(old, ignore_errors=True)

    # -- rm ------------------------------------------------------------------------------------

    def remove(self, name: str) -> Path:
        check_name(name)
        target = self.root / name
        if not lookup.lexists(str(target)):
            raise SbxError(Reason.SKILL_NOT_FOUND,
                           f"the skills store ({self.root}) has no skill named {name!r}",
                           hint="See the store's skills with: sbx skills ls",
                           details={"name": name, "store": str(self.root)})
        try:
            # Renamed away first: a sandbox starting now sees the skill whole or not at all.
            trash = Path(files.private_directory(self.root, f"{TEMP_PREFIX}rm-"))
            files.rename_over(target, trash / "skill")
        except OSError as error:
            raise _store_error(self.root, "write", error) from None
        files.remove_tree(trash, ignore_errors=True)
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
        return dirfds.open_directory(lookup.real_path(str(source)))
    except FileNotFoundError:
        raise _invalid(source, "it does not exist") from None
    except NotADirectoryError:
        raise _invalid(source, "it is not a directory") from None
    except OSError as error:
        raise _invalid(source, f"cannot open it ({error.strerror})") from None


def _require_skill_file(root_fd: int, source: Path) -> None:
    try:
        info = dirfds.own_status_at(root_fd, SKILL_FILE)
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
        self.real = lookup.real_path(str(source))
        self.bytes = 0
        self.entries = 0

    def directory(self, fd: int, target: Path, depth: int, relative: str = "") -> None:
        if depth > MAX_DEPTH:
            raise _too_large(self.source, f"it nests deeper than {MAX_DEPTH} directories")
        for name in sorted(dirfds.names_at(fd)):
            self.entries += 1
            if self.entries > MAX_ENTRIES:
                raise _too_large(self.source, f"it has more than {MAX_ENTRIES} entries")
            rel = f"{relative}{name}"
            info = dirfds.own_status_at(fd, name)
            mode = info.st_mode
            if stat.S_ISLNK(mode):
                self._link(fd, name, rel, target / name)
            elif stat.S_ISDIR(mode):
                child = _open_at(fd, name, self.source, rel, directory=True)
                try:
                    files.make_directory(target / name, 0o700)
                    self.directory(child, target / name, depth + 1, f"{rel}/")
                    files.set_mode(target / name, 0o755)  # as above
                finally:
                    dirfds.close(child)
            elif stat.S_ISREG(mode):
                self._file(fd, name, rel, target / name)
            else:
                raise _unsafe(self.source, rel, f"is a {_kind(mode)}; a skill holds only "
                                                "files, directories and links inside it")

    def _link(self, fd: int, name: str, rel: str, target: Path) -> None:
        text = dirfds.link_text_at(fd, name)
        if posixpath.isabs(text):
            raise _unsafe(self.source, rel, f"is a symlink to the absolute path {text!r}")
        resolved = lookup.real_path(posixpath.join(self.real, posixpath.dirname(rel), text))
        if posixpath.commonpath([resolved, self.real]) != self.real or not lookup.lexists(
                resolved):
            raise _unsafe(self.source, rel, f"is a symlink to {text!r}, outside the skill (or "
                                            "to nothing)")
        files.make_link(text, target)  # copied as a link, never followed

    def _file(self, fd: int, name: str, rel: str, target: Path) -> None:
        src = _open_at(fd, name, self.source, rel, directory=False)
        try:
            info = dirfds.status_of(src)
            if not stat.S_ISREG(info.st_mode):  # swapped since the listing
                raise _unsafe(self.source, rel, f"is a {_kind(info.st_mode)}")
            mode = 0o755 if info.st_mode & stat.S_IXUSR else 0o644
            # setuid, setgid and sticky bits never survive
            copied = dirfds.copy_to_new_file(src, target, mode, MAX_BYTES - self.bytes)
            if copied is None:
                raise _too_large(self.source,
                                 f"it holds more than {MAX_BYTES // (1024 * 1024)} MiB")
            self.bytes += copied
        finally:
            dirfds.close(src)


def _open_at(fd: int, name: str, source: Path, rel: str, *, directory: bool) -> int:
    try:
        return dirfds.open_directory(name, fd) if directory else dirfds.open_file_at(fd, name)
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
        skill = dirfds.open_file_at(fd, SKILL_FILE)
    except OSError:
        return ""
    try:
        if not stat.S_ISREG(dirfds.status_of(skill).st_mode):
            return ""
        data = dirfds.read_once(skill, MAX_FRONT_MATTER)
    except OSError:
        return ""
    finally:
        dirfds.close(skill)
    return description_of(data.decode("utf-8", "replace"))


def _size(fd: int, depth: int) -> int:
    """The bytes of the regular files under ``fd``, no link followed (bounded in depth)."""
    total = 0
    for entry in _entries(fd):
        info = dirfds.own_status_at(fd, entry)
        if stat.S_ISREG(info.st_mode):
            total += info.st_size
        elif stat.S_ISDIR(info.st_mode) and depth < MAX_DEPTH:
            try:
                child = dirfds.open_directory(entry, fd)
            except OSError:
                continue
            try:
                total += _size(child, depth + 1)
            finally:
                dirfds.close(child)
    return total


def _entries(fd: int) -> Iterator[str]:
    try:
        yield from dirfds.names_at(fd)
    except OSError:
        return


__all__ = ["MAX_BYTES", "SKILL_FILE", "SKILL_NAME", "SkillStore", "StoredSkill", "check_name",
           "clean_text", "description_of", "name_problem", "suggested_name"]
