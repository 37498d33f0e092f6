"""The two things in git's index that reach past the repository: gitlinks and unsafe paths.

The index stays writable in a sandbox (``git add`` needs it), so after a run sbx reads it:

- a **gitlink** (mode 160000) makes the owner's next ``git status`` run git inside that
  directory, under whatever repository is there — the after-run check makes sure none is one
  the sandbox planted, however deep or wherever it is;
- a path with a ``.git``, ``.`` or ``..`` component is one git never adds itself, and
  ``git checkout -- .`` or ``git restore .`` write it out as given: an entry
  ``.git/hooks/pre-commit`` becomes a hook on the host. Such an index is quarantined.

Index versions 2 to 4, SHA-1 and SHA-256, and the split index's shared file are read; an index
that cannot be read is reported as not checked.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass, field
from typing import Final

from sbx.seams.host import dirfds

MAX_INDEX_BYTES: Final = 256 * 1024 * 1024
_GITLINK: Final = 0o160000
_HEADER: Final = struct.Struct(">4sII")
_FIXED: Final = 40  # ctime, mtime, dev, ino, mode, uid, gid, size


@dataclass
class IndexSummary:
    gitlinks: list[str] = field(default_factory=list)
    unsafe: list[str] = field(default_factory=list)  # paths git would never have added
    readable: bool = True


def unsafe_path(path: str) -> bool:
    """A path no ``git add`` produces: absolute, empty, ``.``/``..`` or ``.git`` components."""
    return any(part in ("", ".", "..") or part.lower() == ".git" for part in path.split("/"))


def read_index(gitdir_fd: int, name: str = "index") -> IndexSummary:
    """Gitlinks and unsafe paths of the index ``name`` in an open git directory (and of the
    shared index it links to); an absent index is an empty one."""
    summary = IndexSummary()
    data = read_bytes(gitdir_fd, name)
    if data is None:
        return summary
    if not isinstance(data, bytes):
        summary.readable = False
        return summary
    shared = _parse(data, summary)
    if shared is None:
        summary.readable = False
    elif shared:
        data = read_bytes(gitdir_fd, f"sharedindex.{shared}")
        if isinstance(data, bytes):
            if _parse(data, summary) is None:
                summary.readable = False
        else:
            summary.readable = False
    return summary


def read_bytes(gitdir_fd: int, name: str) -> bytes | bool | None:
    """The file's bytes; None when absent, False when it cannot be read as an index."""
    try:
        data = dirfds.read_regular_at(gitdir_fd, name, MAX_INDEX_BYTES)
    except FileNotFoundError:
        return None
    except OSError:
        return False
    return False if data is None else data


@dataclass(frozen=True)
class _Entry:
    fixed: bytes  # stat data, mode and object name, as stored
    flags: int
    extended: int | None
    path: bytes

    @property
    def mode(self) -> int:
        return int(struct.unpack_from(">I", self.fixed, 24)[0])


@dataclass(frozen=True)
class _Index:
    hash_size: int
    entries: list[_Entry]
    shared: str  # the shared index's hex name, "" for none


def _parse(data: bytes, summary: IndexSummary) -> str | None:
    """Add the entries of one index file; the shared index's hex name ("" for none), or None
    when the file is not an index sbx can read."""
    index = _decode(data)
    if index is None:
        return None
    for entry in index.entries:
        text = entry.path.decode("utf-8", "surrogateescape")
        if entry.mode & 0o170000 == _GITLINK:
            summary.gitlinks.append(text)
        if unsafe_path(text):
            summary.unsafe.append(text)
    return index.shared


def _decode(data: bytes) -> _Index | None:
    for hash_size, algorithm in ((20, "sha1"), (32, "sha256")):
        trailer = data[-hash_size:]
        if trailer != bytes(hash_size) and \
                hashlib.new(algorithm, data[:-hash_size]).digest() != trailer:
            continue  # not this hash (index.skipHash leaves the trailer zero)
        decoded = _decode_with(data, hash_size)
        if decoded is not None:
            return decoded
    return None


def _decode_with(data: bytes, hash_size: int) -> _Index | None:
    if len(data) < _HEADER.size + hash_size:
        return None
    signature, version, count = _HEADER.unpack_from(data)
    if signature != b"DIRC" or version not in (2, 3, 4):
        return None
    end = len(data) - hash_size
    offset = _HEADER.size
    previous = b""
    entries: list[_Entry] = []
    try:
        for _ in range(count):
            start = offset
            fixed = data[offset:offset + _FIXED + hash_size]
            flags = struct.unpack_from(">H", data, offset + _FIXED + hash_size)[0]
            offset += _FIXED + hash_size + 2
            extended = None
            if version >= 3 and flags & 0x4000:
                extended = struct.unpack_from(">H", data, offset)[0]
                offset += 2
            if version == 4:
                strip, offset = _varint(data, offset)
                if strip > len(previous):
                    return None
                nul = data.index(b"\0", offset, end)
                path = previous[:len(previous) - strip] + data[offset:nul]
                offset = nul + 1
            else:
                nul = data.index(b"\0", offset, end)
                path = data[offset:nul]
                offset = start + ((nul - start) // 8 + 1) * 8
            if offset > end:
                return None
            previous = path
            entries.append(_Entry(fixed, flags, extended, path))
        shared = _shared_index(data, offset, end, hash_size)
    except (ValueError, struct.error, IndexError):
        return None
    return None if shared is None else _Index(hash_size, entries, shared)


def without_unsafe(data: bytes) -> bytes | None:
    """The index ``data`` minus its unsafe entries, written as version 2 or 3 without
    extensions (git rebuilds the caches they held); None when that cannot be done (a split
    index, or not an index sbx reads)."""
    index = _decode(data)
    if index is None or index.shared:
        return None
    kept = [e for e in index.entries
            if not unsafe_path(e.path.decode("utf-8", "surrogateescape"))]
    version = 3 if any(e.extended is not None for e in kept) else 2
    parts = [_HEADER.pack(b"DIRC", version, len(kept))]
    for entry in kept:
        flags = (entry.flags & 0xF000) | min(len(entry.path), 0xFFF)
        if version == 2:
            flags &= ~0x4000
        body = entry.fixed + struct.pack(">H", flags)
        if entry.extended is not None:
            body += struct.pack(">H", entry.extended)
        body += entry.path
        parts.append(body + b"\0" * (8 - len(body) % 8))
    content = b"".join(parts)
    algorithm = "sha1" if index.hash_size == 20 else "sha256"
    return content + hashlib.new(algorithm, content).digest()


def _varint(data: bytes, offset: int) -> tuple[int, int]:
    byte = data[offset]
    offset += 1
    value = byte & 0x7F
    while byte & 0x80:
        value += 1
        byte = data[offset]
        offset += 1
        value = (value << 7) + (byte & 0x7F)
    return value, offset


def _shared_index(data: bytes, offset: int, end: int, hash_size: int) -> str | None:
    """The ``link`` extension's shared index name; None when the extensions are malformed."""
    while offset < end:
        if offset + 8 > end:
            return None
        signature = data[offset:offset + 4]
        size = struct.unpack_from(">I", data, offset + 4)[0]
        body = offset + 8
        if body + size > end:
            return None
        if signature == b"link" and size >= hash_size:
            return data[body:body + hash_size].hex()
        offset = body + size
    return "" if offset == end else None


__all__ = ["IndexSummary", "read_bytes", "read_index", "unsafe_path", "without_unsafe"]
