"""Git's config files, read the way git reads them, for two questions only.

- **Is a config a sandbox wrote harmless?** A repository the sandbox created (``git init``,
  ``git clone``) keeps its config when every key is one that only describes the repository
  (:func:`is_harmless`); anything else may name a program git runs (``core.fsmonitor``,
  ``core.pager``, ``alias.*``, filters, includes) and the file is quarantined.
- **Which files do the host's configs make git execute?** Included configs, ``core.hooksPath``
  and the programs named by path (:func:`named_paths`): inside a workspace they are git's
  configuration too, so they are pinned read-only like ``.git/config``.

The reader is strict: a line it does not understand makes the whole file unreadable (None),
which callers treat as unsafe.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from sbx.seams.host import lookup

MAX_CONFIG_BYTES: Final = 1024 * 1024
MAX_INCLUDES: Final = 32

_SECTION: Final = re.compile(r'\[\s*([A-Za-z0-9.-]+)(?:\s+"((?:[^"\\\n]|\\.)*)")?\s*\]')
_KEY: Final = re.compile(r"([A-Za-z][A-Za-z0-9-]*)\s*(=?)")

# (section, key) pairs that describe a repository and name no program; "*" matches any
# subsection. A repository git init or git clone makes, with a user name, stays intact.
_HARMLESS: Final = frozenset({
    ("core", "repositoryformatversion"), ("core", "filemode"), ("core", "bare"),
    ("core", "logallrefupdates"), ("core", "ignorecase"), ("core", "precomposeunicode"),
    ("core", "symlinks"), ("core", "autocrlf"), ("core", "eol"), ("core", "safecrlf"),
    ("core", "quotepath"), ("core", "compression"), ("core", "abbrev"),
    ("extensions", "objectformat"), ("extensions", "refstorage"),
    ("extensions", "worktreeconfig"),
    ("remote", "url"), ("remote", "pushurl"), ("remote", "fetch"), ("remote", "push"),
    ("remote", "tagopt"), ("remote", "prune"), ("remote", "mirror"),
    ("branch", "remote"), ("branch", "merge"), ("branch", "rebase"),
    ("branch", "pushremote"), ("branch", "description"),
    ("user", "name"), ("user", "email"), ("init", "defaultbranch"),
    ("pull", "rebase"), ("pull", "ff"), ("push", "default"), ("push", "autosetupremote"),
    ("fetch", "prune"), ("merge", "ff"), ("merge", "conflictstyle"),
    ("submodule", "url"), ("submodule", "active"), ("lfs", "repositoryformatversion"),
    ("gc", "auto"), ("maintenance", "auto"),
})
_HARMLESS_SECTIONS: Final = frozenset({"color", "advice"})

# Keys whose value is a command line git runs (the first section matches any subsection).
_PROGRAM_KEYS: Final = frozenset({
    ("core", "fsmonitor"), ("core", "editor"), ("core", "pager"), ("core", "sshcommand"),
    ("core", "askpass"), ("core", "gitproxy"), ("sequence", "editor"),
    ("diff", "external"), ("diff", "command"), ("diff", "textconv"), ("difftool", "cmd"),
    ("difftool", "path"), ("merge", "driver"), ("mergetool", "cmd"), ("mergetool", "path"),
    ("filter", "clean"), ("filter", "smudge"), ("filter", "process"),
    ("credential", "helper"), ("gpg", "program"), ("interactive", "difffilter"),
    ("uploadpack", "packobjectshook"), ("web", "browser"), ("browser", "cmd"),
    ("browser", "path"), ("man", "cmd"), ("man", "path"), ("sendemail", "sendmailcmd"),
    ("sendemail", "smtpserver"), ("sendemail", "tocmd"), ("sendemail", "cccmd"),
    ("remote", "uploadpack"), ("remote", "receivepack"), ("remote", "vcs"),
})
_PROGRAM_SECTIONS: Final = frozenset({"alias", "pager"})


@dataclass(frozen=True)
class Entry:
    section: str  # lower case
    subsection: str | None  # as written (case matters)
    key: str  # lower case
    value: str | None  # None: the key alone (boolean true)


@dataclass(frozen=True)
class NamedPath:
    """A host path a config makes git read as configuration, run as hooks or execute."""

    path: str  # absolute, normalised
    role: str  # "config" (an include), "hooks" (core.hooksPath), "program"


def parse(text: str) -> list[Entry] | None:
    """The entries of a config file, or None when any line is not understood."""
    entries: list[Entry] = []
    section: tuple[str, str | None] | None = None
    lines = text.split("\n")
    index = 0
    while index < len(lines):
        line = lines[index].lstrip(" \t")
        index += 1
        while line.startswith("["):
            match = _SECTION.match(line)
            if match is None:
                return None
            section = _section_of(match.group(1), match.group(2))
            if section is None:
                return None
            line = line[match.end():].lstrip(" \t")
        if not line.strip() or line[0] in "#;":
            continue
        if section is None:
            return None
        key = _KEY.match(line)
        if key is None:
            return None
        rest = line[key.end():]
        if not key.group(2):
            if rest.strip() and rest.strip()[0] not in "#;":
                return None
            entries.append(Entry(section[0], section[1], key.group(1).lower(), None))
            continue
        value, index = _value(rest, lines, index)
        if value is None:
            return None
        entries.append(Entry(section[0], section[1], key.group(1).lower(), value))
    return entries


def _section_of(name: str, quoted: str | None) -> tuple[str, str | None] | None:
    if quoted is not None:
        return name.lower(), re.sub(r"\\(.)", r"\1", quoted)
    head, dot, tail = name.partition(".")
    if not head:
        return None
    return head.lower(), (tail.lower() if dot else None)  # the legacy [a.b] form


def _value(rest: str, lines: Sequence[str], index: int) -> tuple[str | None, int]:
    """A value with git's quoting, escapes, comments and backslash-newline continuations."""
    out: list[str] = []
    quoted = False
    while True:
        position = 0
        while position < len(rest):
            char = rest[position]
            position += 1
            if char == '"':
                quoted = not quoted
            elif char == "\\":
                if position == len(rest):  # a continuation: the value goes on
                    break
                escaped = rest[position]
                position += 1
                mapped = {"n": "\n", "t": "\t", "b": "\b", '"': '"', "\\": "\\"}.get(escaped)
                if mapped is None:
                    return None, index
                out.append(mapped)
            elif char in "#;" and not quoted:
                return "".join(out).strip(" \t"), index
            else:
                out.append(char)
        else:
            if quoted:
                return None, index
            return "".join(out).strip(" \t"), index
        if index >= len(lines):
            return None, index
        rest = lines[index]
        index += 1


def is_harmless(entries: Sequence[Entry]) -> bool:
    """Whether every key only describes the repository (see the module docstring)."""
    return all((entry.section, entry.key) in _HARMLESS or entry.section in _HARMLESS_SECTIONS
               for entry in entries)


def read_limited(path: str, *, dir_fd: int | None = None, follow: bool = True) -> str | None:
    """A config file's text (None when absent, unreadable or larger than git's own files)."""
    try:
        data = lookup.read_start_if_regular(path, MAX_CONFIG_BYTES + 1, parent=dir_fd,
                                            follow=follow)
    except OSError:
        return None
    if data is None or len(data) > MAX_CONFIG_BYTES:
        return None
    return data.decode("utf-8", "replace")


def named_paths(config_file: str, *, worktree: str | None, home: str | None) -> list[NamedPath]:
    """What ``config_file`` (and the configs it includes, followed) makes git read or run.

    Includes are resolved against the including file's directory, ``core.hooksPath`` and
    program paths against the worktree (where git runs them); ``~/`` against ``home``.
    Conditions of ``includeIf`` are not evaluated: every include may apply.
    """
    found: list[NamedPath] = []
    pending = [config_file]
    seen: set[str] = set()
    while pending and len(seen) < MAX_INCLUDES:
        current = pending.pop()
        if current in seen:
            continue
        seen.add(current)
        text = read_limited(current)
        entries = parse(text) if text is not None else None
        for entry in entries or ():
            for named in _named(entry, posixpath.dirname(current), worktree, home):
                found.append(named)
                if named.role == "config":
                    pending.append(named.path)
    return found


def _named(entry: Entry, base: str, worktree: str | None,
           home: str | None) -> list[NamedPath]:
    value = entry.value
    if value is None or not value.strip():
        return []
    if entry.key == "path" and (entry.section == "include"
                                or (entry.section == "includeif" and entry.subsection)):
        path = _resolve(value, base, home)
        return [NamedPath(path, "config")] if path else []
    if entry.section == "core" and entry.key == "hookspath":
        path = _resolve(value, worktree, home)
        return [NamedPath(path, "hooks")] if path else []
    if (entry.section, entry.key) in _PROGRAM_KEYS or entry.section in _PROGRAM_SECTIONS:
        return [NamedPath(path, "program") for path in _program_paths(value, worktree, home)]
    return []


def _program_paths(command: str, worktree: str | None, home: str | None) -> list[str]:
    """Paths in a command line: every word that names a file by path (has a "/")."""
    command = command.lstrip("!")
    try:
        words = shlex.split(command, comments=False)
    except ValueError:
        words = command.split()
    paths = []
    for word in words:
        if "/" in word and "://" not in word and not word.startswith("-"):
            path = _resolve(word, worktree, home)
            if path:
                paths.append(path)
    return paths


def _resolve(value: str, base: str | None, home: str | None) -> str | None:
    value = value.strip()
    if value.startswith("~/"):
        if home is None:
            return None
        value = posixpath.join(home, value[2:])
    elif value.startswith("%(prefix)/") or value.startswith("~"):
        return None
    if not posixpath.isabs(value):
        if base is None:
            return None
        value = posixpath.join(base, value)
    return posixpath.normpath(value)


def host_config_files(env: Mapping[str, str]) -> list[str]:
    """The user's and the system's git configs, in git's order of precedence (lowest first)."""
    files: list[str] = []
    if env.get("GIT_CONFIG_NOSYSTEM", "").lower() not in ("1", "true", "yes"):
        files.append(env.get("GIT_CONFIG_SYSTEM") or "/etc/gitconfig")
    home = env.get("HOME")
    if env.get("GIT_CONFIG_GLOBAL"):
        files.append(env["GIT_CONFIG_GLOBAL"])
    else:
        xdg = env.get("XDG_CONFIG_HOME") or (posixpath.join(home, ".config") if home else None)
        if xdg:
            files.append(posixpath.join(xdg, "git", "config"))
        if home:
            files.append(posixpath.join(home, ".gitconfig"))
    return files


__all__ = ["Entry", "NamedPath", "host_config_files", "is_harmless", "named_paths", "parse",
           "read_limited"]
