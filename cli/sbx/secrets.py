"""The secret store: one value per service, for ``credential@1`` (SPEC §8, ``sbx secret``).

Layout: ``<state home>/secrets/<service>``, one regular file per service holding the value as
UTF-8, mode 0600, in a 0700 directory. Writes are atomic (a private temporary file in the same
directory, fsync, rename, fsync of the directory), so a reader sees the old value or the new one,
never a torn one, and a crash leaves no half-written secret behind.

Reads refuse (``secret_store_unsafe``) a symlink, anything but a regular file, a file owned by
another user, and a file with any group or other permission bit: such a file may have been read
or planted by someone else, and sbx would hand its value to the egress proxy.

Values: non-empty, at most 64 KiB of UTF-8, and valid as an HTTP field value (no control
character other than tab) because the proxy injects them into request headers, where a CR or LF
would split the header. One trailing newline (``\\n`` or ``\\r\\n``, as ``echo`` or a here-string
adds) is stripped.

The OS keyring is not used yet. The values must reach the host-side egress proxy for every run
without a prompt, and on the machines sbx targets (headless Linux, CI, SSH sessions) the Secret
Service is usually absent or locked, so ``keyring`` would fall back to its ``fail`` backend — or
to a plaintext file of its own with weaker guarantees than this one. A keyring backend can be
put behind :class:`SecretStore` later without changing its callers.

Never log, audit or raise with a value: audit events carry the service name only, errors name
the file, and :class:`SecretInfo` holds the masked form.
"""

from __future__ import annotations

import errno
import os
import re
import secrets as _random
import stat
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, Final

from sbx import audit
from sbx.errors import SbxError
from sbx.reasons import Reason

SECRETS_DIR: Final = "secrets"
# credential@1's service grammar (schema/capabilities/credential@1.json): a DNS-label-like name.
SERVICE_PATTERN: Final = re.compile(r"^[a-z0-9]([a-z0-9-]{0,62}[a-z0-9])?$")
MAX_VALUE_BYTES: Final = 64 * 1024
_TMP_PREFIX: Final = ".tmp-"
_PRIVATE_BITS: Final = 0o077
# RFC 9110 field-value: no control character except HTAB (CR/LF would split the header).
_FORBIDDEN_CHARS: Final = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_SET_HINT: Final = 'Pipe the value on stdin: printf %s "$TOKEN" | sbx secret set SERVICE'


@dataclass(frozen=True)
class SecretInfo:
    """What may be shown about a stored secret: never the value itself."""

    service: str
    length: int
    masked: str
    updated: datetime

    def as_dict(self) -> dict[str, Any]:
        return {"service": self.service, "masked": self.masked, "length": self.length,
                "updated": self.updated.isoformat(timespec="seconds")}


def mask(value: str) -> str:
    """Mask a value for display (Docker sbx's rule): up to 6 characters all ``*``; 7-19 the first
    6 then ``****``; 20 or more the first 6, ``****...****`` and the last 4."""
    if len(value) <= 6:
        return "*" * len(value)
    if len(value) < 20:
        return value[:6] + "****"
    return value[:6] + "****...****" + value[-4:]


def validate_service(service: str) -> str:
    """Return ``service`` if it matches credential@1's grammar, else raise ``invalid_argument``."""
    if not SERVICE_PATTERN.fullmatch(service):
        raise SbxError(
            Reason.INVALID_ARGUMENT, f"{service!r} is not a valid service name",
            hint="Use 1-64 lowercase letters, digits and inner hyphens, as in a kit's "
                 "credential@1 `service` (e.g. github, openai-api).",
            details={"service": service})
    return service


def normalize_value(value: str) -> str:
    """Strip one trailing newline and check the value; raise ``invalid_argument`` if unusable.

    The messages never include the value or any part of it.
    """
    if value.endswith("\r\n"):
        value = value[:-2]
    elif value.endswith("\n"):
        value = value[:-1]
    if not value:
        raise SbxError(Reason.INVALID_ARGUMENT, "the secret value is empty", hint=_SET_HINT)
    if len(value.encode("utf-8", "surrogatepass")) > MAX_VALUE_BYTES:
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"the secret value is longer than {MAX_VALUE_BYTES} bytes")
    found = _FORBIDDEN_CHARS.search(value)
    if found:
        where = "a NUL byte" if found.group() == "\x00" else \
            f"control character U+{ord(found.group()):04X}"
        raise SbxError(
            Reason.INVALID_ARGUMENT, f"the secret value contains {where}",
            hint="Values are injected into HTTP headers: pass the bare token, on one line.")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise SbxError(Reason.INVALID_ARGUMENT,
                       "the secret value is not valid UTF-8") from None
    return value


def read_value(stream: IO[bytes]) -> str:
    """Read a value from a byte stream (stdin), bounded, decoded as UTF-8 and normalized."""
    # Room for the limit plus a trailing CR LF, plus one byte to notice an oversized value
    # without reading an unbounded stream into memory.
    raw = stream.read(MAX_VALUE_BYTES + 3)
    if len(raw) > MAX_VALUE_BYTES + 2:
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"the secret value is longer than {MAX_VALUE_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise SbxError(Reason.INVALID_ARGUMENT, "the secret value is not valid UTF-8") from None
    return normalize_value(text)


# -- private files (also used by sbx.egress.ca) ---------------------------------------------------


def _unsafe(path: Path, problem: str, fix: str) -> SbxError:
    return SbxError(Reason.SECRET_STORE_UNSAFE, f"refusing to use {path}: {problem}", hint=fix,
                    details={"path": str(path), "problem": problem})


def ensure_private_dir(directory: Path) -> Path:
    """Create ``directory`` (and parents) as 0700, or check an existing one.

    An existing directory that is a symlink, not a directory or owned by another user is
    refused (``secret_store_unsafe``); group/other permission bits on one we own are removed,
    since tightening is always safe.
    """
    directory.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        directory.mkdir(mode=0o700)
    except FileExistsError:
        pass
    except OSError as error:
        raise _unsafe(directory, f"cannot create it ({error.strerror})",
                      "Make the state home writable (or point SBX_HOME elsewhere).") from None
    info = os.lstat(directory)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise _unsafe(directory, "it is a symlink or not a directory",
                      f"Remove it (`rm {directory}`); sbx recreates it as a private directory.")
    if info.st_uid != os.geteuid():
        raise _unsafe(directory, f"it is owned by uid {info.st_uid}, not by this user",
                      f"Remove it, or run sbx as its owner (uid {info.st_uid}).")
    if stat.S_IMODE(info.st_mode) & _PRIVATE_BITS:
        os.chmod(directory, 0o700)
    return directory


def write_private_file(path: Path, data: bytes, *, mode: int = 0o600) -> None:
    """Atomically replace ``path`` with ``data``: a fresh temporary file in the same directory
    (O_CREAT|O_EXCL|O_NOFOLLOW, created with ``mode``), fsync, rename, fsync the directory."""
    tmp = path.with_name(f"{_TMP_PREFIX}{path.name}-{_random.token_hex(8)}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, mode)
    try:
        try:
            os.fchmod(fd, mode)  # the umask may have cleared bits that `mode` asks for
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_private_file(path: Path, *, max_bytes: int, forbidden_bits: int = _PRIVATE_BITS,
                      ) -> tuple[bytes, os.stat_result] | None:
    """Read a private file, or None when it does not exist.

    Refuses (``secret_store_unsafe``) a symlink, a non-regular file, a file owned by another
    user, one with any of ``forbidden_bits`` (default: every group/other bit; a public
    certificate passes 0o022, group/other *write*) and a file larger than ``max_bytes``.
    """
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise _unsafe(path, "it is a symlink",
                          f"Remove the link (`rm {path}`) and store the value again.") from None
        raise _unsafe(path, f"cannot read it ({error.strerror})",
                      f"Check the file's owner and permissions (`ls -l {path}`).") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _unsafe(path, "it is not a regular file",
                          f"Remove it (`rm -r {path}`) and store the value again.")
        if info.st_uid != os.geteuid():
            raise _unsafe(path, f"it is owned by uid {info.st_uid}, not by this user",
                          f"Remove it (`rm {path}`) and store the value again.")
        mode = stat.S_IMODE(info.st_mode)
        if mode & forbidden_bits:
            raise _unsafe(path, f"its mode {mode:04o} lets other users read or change it",
                          f"If nobody else could have touched it, `chmod 600 {path}`; "
                          "otherwise rotate the secret and store the new value.")
        if info.st_size > max_bytes:
            raise _unsafe(path, f"it is larger than {max_bytes} bytes",
                          f"Remove it (`rm {path}`) and store the value again.")
        chunks: list[bytes] = []
        remaining = max_bytes + 1
        while remaining > 0:
            chunk = os.read(fd, remaining)
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        data = b"".join(chunks)
        if len(data) > max_bytes:
            raise _unsafe(path, f"it is larger than {max_bytes} bytes",
                          f"Remove it (`rm {path}`) and store the value again.")
        return data, info
    finally:
        os.close(fd)


# -- the store -------------------------------------------------------------------------------------


class SecretStore:
    """Secrets keyed by service, as private files under ``<state_home>/secrets``."""

    def __init__(self, state_home: Path) -> None:
        self.state_home = state_home
        self.directory = state_home / SECRETS_DIR

    def _path(self, service: str) -> Path:
        return self.directory / validate_service(service)

    def set(self, service: str, value: str) -> SecretInfo:
        """Store ``value`` for ``service`` (replacing any previous one); audit the name only."""
        path = self._path(service)
        value = normalize_value(value)
        ensure_private_dir(self.directory)
        replaced = path.exists() or path.is_symlink()
        try:
            write_private_file(path, value.encode("utf-8"))
        except OSError as error:
            raise _unsafe(path, f"cannot write it ({error.strerror})",
                          "Make the state home writable (or point SBX_HOME elsewhere)."
                          ) from None
        audit.record(self.state_home, audit.SECRET_SET, run_id=None, severity="info",
                     details={"service": service, "replaced": replaced})
        info = self._info(service)
        if info is None:  # removed between the write and this read by a concurrent `rm`
            raise SbxError(Reason.INVALID_ARGUMENT,
                           f"secret {service!r} was removed while being stored")
        return info

    def get(self, service: str) -> str | None:
        """The value stored for ``service``, or None when there is none."""
        loaded = self._load(service)
        return None if loaded is None else loaded[0]

    def services(self) -> list[SecretInfo]:
        """Every stored secret, sorted by service, masked."""
        try:
            names = sorted(os.listdir(self.directory))
        except FileNotFoundError:
            return []
        except NotADirectoryError:
            raise _unsafe(self.directory, "it is not a directory",
                          f"Remove it (`rm {self.directory}`); sbx recreates it.") from None
        infos: list[SecretInfo] = []
        for name in names:
            if name.startswith(".") or not SERVICE_PATTERN.fullmatch(name):
                continue  # temporary files of a write in progress, or foreign files
            info = self._info(name)
            if info is not None:
                infos.append(info)
        return infos

    def remove(self, service: str) -> bool:
        """Delete the secret for ``service``; False when there was none. Audits the name only."""
        path = self._path(service)
        try:
            path.unlink()
        except FileNotFoundError:
            return False
        except IsADirectoryError:
            raise _unsafe(path, "it is a directory",
                          f"Remove it by hand (`rm -r {path}`).") from None
        _fsync_dir(self.directory)
        audit.record(self.state_home, audit.SECRET_REMOVED, run_id=None, severity="info",
                     details={"service": service})
        return True

    def _load(self, service: str) -> tuple[str, os.stat_result] | None:
        path = self._path(service)
        loaded = read_private_file(path, max_bytes=MAX_VALUE_BYTES)
        if loaded is None:
            return None
        data, info = loaded
        try:
            return data.decode("utf-8"), info
        except UnicodeDecodeError:
            raise _unsafe(path, "it is not valid UTF-8",
                          "Store the value again with `sbx secret set`.") from None

    def _info(self, service: str) -> SecretInfo | None:
        loaded = self._load(service)
        if loaded is None:
            return None
        value, info = loaded
        return SecretInfo(service=service, length=len(value), masked=mask(value),
                          updated=datetime.fromtimestamp(info.st_mtime, UTC))


__all__ = [
    "MAX_VALUE_BYTES",
    "SECRETS_DIR",
    "SERVICE_PATTERN",
    "SecretInfo",
    "SecretStore",
    "ensure_private_dir",
    "mask",
    "normalize_value",
    "read_private_file",
    "read_value",
    "validate_service",
    "write_private_file",
]
