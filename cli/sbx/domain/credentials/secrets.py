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

Where a service's secret lives (its *source*), first match wins:

1. ``<service>.ref``, a small record (0600, never a value) naming one of
   - ``keyring``: the value is in the OS keyring (:mod:`sbx.seams.keyrings`, the ``keyring`` extra),
     chosen by ``sbx secret set`` whenever an OS keyring is available;
   - ``env``: the value is read from that variable of sbx's environment at each run start
     (``sbx secret set SERVICE --from-env VAR``);
   - ``command``: the value is what that command prints, run on the host at each run start
     (``sbx secret set SERVICE --from-command 'gh auth token'``);
2. ``<service>``: the value itself, in the file store (when no OS keyring is available).

Values from the keyring, a variable or a command are resolved in the ``sbx`` process
(:func:`resolve_for_run`) and handed to the egress proxy over its owner pipe: they are never
written to disk, printed, audited, or put in ``--json``. The proxy itself only reads the file
store (it runs with a minimal environment and no keyring session).

Never log, audit or raise with a value: audit events carry the service name only, errors name
the file, and :class:`SecretInfo` holds the masked form.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.seams import audit, owned
from sbx.seams.host.private import ensure_private_dir, read_private_file, write_private_file
from sbx.seams.host.private import unsafe as _unsafe

if TYPE_CHECKING:
    from sbx.seams.keyrings import Keyring

SECRETS_DIR: Final = "secrets"
# credential@1's service grammar (schema/capabilities/credential@1.json): a DNS-label-like name.
SERVICE_PATTERN: Final = re.compile(r"^[a-z0-9]([a-z0-9-]{0,62}[a-z0-9])?$")
MAX_VALUE_BYTES: Final = 64 * 1024
_TMP_PREFIX: Final = ".tmp-"
# RFC 9110 field-value: no control character except HTAB (CR/LF would split the header).
_FORBIDDEN_CHARS: Final = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_SET_HINT: Final = 'Pipe the value on stdin: printf %s "$TOKEN" | sbx secret set SERVICE'

# Sources (see the module docstring).
FILE: Final = "file"
KEYRING: Final = "keyring"
ENV: Final = "env"
COMMAND: Final = "command"
DYNAMIC: Final = frozenset({ENV, COMMAND})
_RECORD_SUFFIX: Final = ".ref"
_MAX_RECORD_BYTES: Final = 8 * 1024
MAX_COMMAND_CHARS: Final = 4096
COMMAND_TIMEOUT_S: Final = 30.0
ENV_NAME: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_AUTO: Final = "auto"


@dataclass(frozen=True)
class SecretInfo:
    """What may be shown about a secret: never the value itself.

    ``masked`` and ``length`` are known for the file store only (a keyring is not unlocked,
    and a variable or command is not resolved, just to list them). ``reference`` is the
    variable or command of a dynamic source, or the keyring's name.
    """

    service: str
    length: int | None
    masked: str | None
    updated: datetime
    source: str = FILE
    reference: str | None = None

    @property
    def dynamic(self) -> bool:
        return self.source in DYNAMIC

    def as_dict(self) -> dict[str, Any]:
        return {"service": self.service, "source": self.source, "reference": self.reference,
                "masked": self.masked, "length": self.length,
                "updated": self.updated.isoformat(timespec="seconds")}


@dataclass(frozen=True)
class SecretSource:
    """Where a service's secret lives: ``file``, ``keyring`` (``reference`` = the backend id),
    ``env`` (the variable name) or ``command`` (the command line)."""

    kind: str
    reference: str | None = None

    def describe(self) -> str:
        if self.kind == ENV:
            return f"${self.reference}"
        if self.kind == COMMAND:
            return f"`{self.reference}`"
        return self.kind


MASK_CLEAR_FROM: Final = 20  # shorter values show nothing of themselves
MASK_MAX_PREFIX: Final = 6


def mask(value: str) -> str:
    """Mask a value for display: below 20 characters nothing of it (``****``); from 20 on a
    prefix of at most an eighth of it and at most 6 characters (``ghp_xJ****``), which names
    the kind of token without giving much of it away. The length is shown separately."""
    if len(value) < MASK_CLEAR_FROM:
        return "****"
    return value[:min(MASK_MAX_PREFIX, len(value) // 8)] + "****"


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


# -- dynamic sources -------------------------------------------------------------------------------


def validate_env_name(name: str) -> str:
    """A variable name for ``--from-env`` (``[A-Za-z_][A-Za-z0-9_]*``), else
    ``invalid_argument``."""
    if not ENV_NAME.fullmatch(name):
        raise SbxError(Reason.INVALID_ARGUMENT, f"{name!r} is not an environment variable name",
                       hint="Name the variable without `$`, e.g. --from-env GH_TOKEN.")
    return name


def validate_command(command: str) -> str:
    """A command for ``--from-command``: one line, not empty, at most 4096 characters."""
    if not command.strip() or "\n" in command or "\r" in command or "\0" in command \
            or len(command) > MAX_COMMAND_CHARS:
        raise SbxError(Reason.INVALID_ARGUMENT,
                       "the command must be one non-empty line of at most "
                       f"{MAX_COMMAND_CHARS} characters",
                       hint="e.g. --from-command 'gh auth token'")
    return command


def _unresolved(service: str, what: str, fix: str) -> SbxError:
    return SbxError(Reason.CREDENTIAL_UNBOUND, f"the secret for {service!r}: {what}", hint=fix,
                    details={"service": service})


def resolve_env(service: str, name: str, env: Mapping[str, str]) -> str:
    """The value of variable ``name`` in ``env`` (sbx's own environment), checked."""
    value = env.get(name)
    if not value:
        raise _unresolved(service, f"${name} is not set in sbx's environment",
                          f"Export {name} in the shell that runs sbx, or store the value itself: "
                          f"sbx secret set {service}")
    try:
        return normalize_value(value)
    except SbxError as error:  # the messages never include the value
        raise _unresolved(service, f"${name} holds no usable value: {error.message}",
                          f"Put the bare token in {name}.") from None


def run_command(service: str, command: str, env: Mapping[str, str], *,
                timeout: float = COMMAND_TIMEOUT_S) -> str:
    """Run ``command`` with ``/bin/sh -c`` on the host and return what it prints, checked.

    Its stdin is empty and its stderr discarded (a helper may print anything there); stdout is
    read no further than the value limit, within ``timeout`` seconds. The command runs in a
    session of its own, ended whole when it exits or times out (sbx.seams.host.shell): nothing
    it starts in the background outlives it. Messages name the command and its exit status,
    never output.
    """
    from sbx.seams.host.shell import CommandTimeout, run_shell

    fix = f"Run `{command}` yourself to see why, then retry."
    try:
        done = run_shell(command, env=env, timeout=timeout, max_output=MAX_VALUE_BYTES + 2)
    except CommandTimeout:
        raise SbxError(Reason.COMMAND_TIMEOUT,
                       f"the secret for {service!r}: its command did not finish within "
                       f"{timeout:.0f}s; it was ended with everything it started", hint=fix,
                       details={"service": service}) from None
    except OSError as exc:
        raise _unresolved(service, f"cannot run its command ({exc.strerror})", fix) from None
    if done.overflow:
        raise _unresolved(service, f"its command printed more than {MAX_VALUE_BYTES} bytes",
                          fix)
    if done.returncode != 0:
        raise _unresolved(service, f"its command `{command}` failed (exit {done.returncode})",
                          fix)
    try:
        return normalize_value(done.stdout.decode("utf-8"))
    except (UnicodeDecodeError, SbxError):
        raise _unresolved(service, f"its command `{command}` printed no usable value (one "
                                   "line of UTF-8, no control characters)", fix) from None


# -- the store -------------------------------------------------------------------------------------


class SecretStore:
    """Secrets keyed by service under ``<state_home>/secrets``: values in private files or the
    OS keyring, or records of where a dynamic value comes from.

    ``keyring`` is the OS keyring to store new values in: ``"auto"`` (default) detects one
    (:func:`sbx.seams.keyrings.detect`) when a value is first stored; None always uses the file
    store.
    """

    def __init__(self, state_home: Path, *, keyring: Keyring | str | None = _AUTO) -> None:
        self.state_home = state_home
        self.directory = state_home / SECRETS_DIR
        self._keyring_choice = keyring

    @cached_property
    def keyring(self) -> Keyring | None:
        """The OS keyring new values go to, or None for the file store."""
        if self._keyring_choice == _AUTO:
            from sbx.seams.keyrings import detect

            return detect(self.state_home)
        return self._keyring_choice if not isinstance(self._keyring_choice, str) else None

    def _path(self, service: str) -> Path:
        return self.directory / validate_service(service)

    def _record_path(self, service: str) -> Path:
        return self.directory / f"{validate_service(service)}{_RECORD_SUFFIX}"

    # -- writing --------------------------------------------------------------------------

    def set(self, service: str, value: str) -> SecretInfo:
        """Store ``value`` for ``service`` (replacing whatever was there): in the OS keyring
        when one is available, else in the file store. Audits the name and source only."""
        self._path(service)
        value = normalize_value(value)
        ensure_private_dir(self.directory)
        previous = self.source(service)
        keyring = self.keyring
        if keyring is not None:
            keyring.set(service, value)
            self._write_record(service, SecretSource(KEYRING, keyring.backend_id))
            self._unlink(self._path(service))
        else:
            path = self._path(service)
            try:
                write_private_file(path, value.encode("utf-8"))
            except OSError as error:
                raise _unsafe(path, f"cannot write it ({error.strerror})",
                              "Make the state home writable (or point SBX_HOME elsewhere)."
                              ) from None
            self._unlink(self._record_path(service))
        if previous is not None and previous.kind == KEYRING and keyring is None:
            self._delete_from_keyring(service, previous)
        self._audit_set(service, previous, KEYRING if keyring is not None else FILE)
        if keyring is not None:
            return SecretInfo(service=service, length=len(value), masked=mask(value),
                              updated=datetime.now(UTC), source=KEYRING,
                              reference=keyring.backend_id)
        info = self._info(service)
        if info is None:  # removed between the write and this read by a concurrent `rm`
            raise SbxError(Reason.INVALID_ARGUMENT,
                           f"secret {service!r} was removed while being stored")
        return info

    def set_reference(self, service: str, source: SecretSource) -> SecretInfo:
        """Record that ``service``'s value comes from a variable or a command, resolved at
        each run start; no value is stored (any stored one is removed)."""
        if source.kind not in DYNAMIC or not source.reference:
            raise ValueError(f"not a dynamic source: {source!r}")
        if source.kind == ENV:
            validate_env_name(source.reference)
        else:
            validate_command(source.reference)
        self._path(service)
        ensure_private_dir(self.directory)
        previous = self.source(service)
        self._write_record(service, source)
        self._unlink(self._path(service))
        if previous is not None and previous.kind == KEYRING:
            self._delete_from_keyring(service, previous)
        self._audit_set(service, previous, source.kind)
        info = self._info(service)
        if info is None:
            raise SbxError(Reason.INVALID_ARGUMENT,
                           f"secret {service!r} was removed while being stored")
        return info

    def _write_record(self, service: str, source: SecretSource) -> None:
        path = self._record_path(service)
        payload = json.dumps({"source": source.kind, "reference": source.reference},
                             sort_keys=True).encode("utf-8")
        try:
            write_private_file(path, payload)
        except OSError as error:
            raise _unsafe(path, f"cannot write it ({error.strerror})",
                          "Make the state home writable (or point SBX_HOME elsewhere)."
                          ) from None

    def _unlink(self, path: Path) -> bool:
        try:
            path.unlink()
        except FileNotFoundError:
            return False
        except IsADirectoryError:
            raise _unsafe(path, "it is a directory",
                          f"Remove it by hand (`rm -r {path}`).") from None
        owned.fsync_directory(path.parent)
        return True

    def _delete_from_keyring(self, service: str, source: SecretSource) -> None:
        from sbx.seams.keyrings import open_backend

        keyring = open_backend(source.reference or "", self.state_home)
        if keyring is not None:
            keyring.delete(service)

    def _audit_set(self, service: str, previous: SecretSource | None, kind: str) -> None:
        audit.record(self.state_home, audit.SECRET_SET, run_id=None, severity="info",
                     details={"service": service, "replaced": previous is not None,
                              "source": kind})

    # -- reading --------------------------------------------------------------------------

    def source(self, service: str) -> SecretSource | None:
        """Where ``service``'s secret lives, or None when there is none."""
        record = self._read_record(service)
        if record is not None:
            return record
        path = self._path(service)
        if os.path.lexists(path):
            return SecretSource(FILE)
        return None

    def has(self, service: str) -> bool:
        """Whether a secret (or a dynamic source for one) is set for ``service``."""
        return self.source(service) is not None

    def get(self, service: str) -> str | None:
        """The *stored* value for ``service`` (file store or OS keyring); None when there is
        none or when it is dynamic (see :meth:`resolve`)."""
        record = self._read_record(service)
        if record is None:
            loaded = self._load(service)
            return None if loaded is None else loaded[0]
        if record.kind == KEYRING:
            return self._keyring_value(service, record)
        return None

    def resolve(self, service: str, env: Mapping[str, str]) -> str | None:
        """The value for ``service`` from wherever it lives: a stored one, ``env``'s variable,
        or the command's output (run now). None when nothing is set; a dynamic source that
        yields no value raises ``credential_unbound``."""
        record = self._read_record(service)
        if record is None or record.kind == KEYRING:
            return self.get(service)
        if record.kind == ENV:
            return resolve_env(service, record.reference or "", env)
        return run_command(service, record.reference or "", env)

    def _keyring_value(self, service: str, record: SecretSource) -> str:
        from sbx.seams.keyrings import open_backend

        keyring = open_backend(record.reference or "", self.state_home)
        fix = (f"Store it again (`sbx secret set {service}`), or make that keyring available "
               "to sbx again.")
        if keyring is None:
            raise _unresolved(service, f"it is in the OS keyring {record.reference}, which is "
                                       "not available now", fix)
        value = keyring.get(service)
        if value is None:
            raise _unresolved(service, f"the OS keyring ({keyring.name}) no longer holds it",
                              fix)
        return normalize_value(value)

    def _read_record(self, service: str) -> SecretSource | None:
        path = self._record_path(service)
        loaded = read_private_file(path, max_bytes=_MAX_RECORD_BYTES)
        if loaded is None:
            return None
        fix = f"Remove it (`rm {path}`) and set the secret again."
        try:
            data = json.loads(loaded[0].decode("utf-8"))
            kind = data["source"]
            reference = data["reference"]
        except (UnicodeDecodeError, ValueError, KeyError, TypeError):
            raise _unsafe(path, "it is not a secret source record sbx wrote", fix) from None
        if kind not in (KEYRING, ENV, COMMAND) or not isinstance(reference, str) \
                or not reference:
            raise _unsafe(path, "it is not a secret source record sbx wrote", fix)
        return SecretSource(kind, reference)

    def services(self) -> list[SecretInfo]:
        """Every stored secret and dynamic source, sorted by service (values masked)."""
        try:
            names = sorted(os.listdir(self.directory))
        except FileNotFoundError:
            return []
        except NotADirectoryError:
            raise _unsafe(self.directory, "it is not a directory",
                          f"Remove it (`rm {self.directory}`); sbx recreates it.") from None
        services = []
        for name in names:
            service = name.removesuffix(_RECORD_SUFFIX)
            if name.startswith(".") or not SERVICE_PATTERN.fullmatch(service):
                continue  # temporary files of a write in progress, or foreign files
            services.append(service)
        infos: list[SecretInfo] = []
        for service in dict.fromkeys(services):
            info = self._info(service)
            if info is not None:
                infos.append(info)
        return infos

    def remove(self, service: str) -> bool:
        """Delete the secret (or dynamic source) for ``service``, from the keyring too; False
        when there was none. Audits the name only."""
        previous = self.source(service)
        if previous is None:
            return False
        if previous.kind == KEYRING:
            self._delete_from_keyring(service, previous)
        removed = self._unlink(self._record_path(service))
        removed = self._unlink(self._path(service)) or removed
        if not removed:
            return False
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
        record = self._read_record(service)
        if record is not None:
            try:
                updated = os.lstat(self._record_path(service)).st_mtime
            except FileNotFoundError:
                return None
            return SecretInfo(service=service, length=None, masked=None,
                              updated=datetime.fromtimestamp(updated, UTC), source=record.kind,
                              reference=record.reference)
        loaded = self._load(service)
        if loaded is None:
            return None
        value, info = loaded
        return SecretInfo(service=service, length=len(value), masked=mask(value),
                          updated=datetime.fromtimestamp(info.st_mtime, UTC))


# -- a run's secrets -----------------------------------------------------------------------------


@dataclass(frozen=True)
class RunSecrets:
    """What one run's egress proxy gets: which services have a secret, and the values resolved
    in the ``sbx`` process (keyring, variable, command) that travel over the owner pipe."""

    available: Mapping[str, bool]
    provided: Mapping[str, str] = field(default_factory=dict, repr=False)
    problems: Mapping[str, str] = field(default_factory=dict)  # service → why it has none


def resolve_for_run(store: SecretStore, credentials: Iterable[Any],
                    env: Mapping[str, str]) -> RunSecrets:
    """Resolve the secret of every credential (objects with ``service`` and ``optional``) at
    run start. File-store values are left to the proxy, which reads them itself (and again on
    SIGHUP). A dynamic or keyring value that cannot be had refuses the run when a required
    credential needs it (its own ``credential_unbound`` error); an optional one is skipped."""
    available: dict[str, bool] = {}
    provided: dict[str, str] = {}
    problems: dict[str, str] = {}
    required = {c.service for c in credentials if not getattr(c, "optional", False)}
    for service in dict.fromkeys(c.service for c in credentials):
        source = store.source(service)
        if source is None or source.kind == FILE:
            available[service] = source is not None
            continue
        try:
            value = store.resolve(service, env)
        except SbxError as error:
            if service in required:
                raise
            problems[service] = error.message
            available[service] = False
            continue
        available[service] = value is not None
        if value is not None:
            provided[service] = value
    return RunSecrets(available, provided, problems)


def encode_provided(values: Mapping[str, str]) -> str:
    """Values for the proxy's owner pipe: base64 of compact JSON (one word, no newline)."""
    payload = json.dumps(dict(values), separators=(",", ":"), ensure_ascii=True)
    return base64.b64encode(payload.encode("ascii")).decode("ascii")


def decode_provided(text: str) -> dict[str, str]:
    """The inverse of :func:`encode_provided`; raises ValueError on anything else."""
    try:
        data = json.loads(base64.b64decode(text.encode("ascii"), validate=True))
    except (binascii.Error, UnicodeError, ValueError) as exc:
        raise ValueError("not an encoded secrets map") from exc
    if not isinstance(data, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
        raise ValueError("not an encoded secrets map")
    return data


__all__ = [
    "COMMAND",
    "DYNAMIC",
    "ENV",
    "FILE",
    "KEYRING",
    "MAX_VALUE_BYTES",
    "SECRETS_DIR",
    "SERVICE_PATTERN",
    "RunSecrets",
    "SecretInfo",
    "SecretSource",
    "SecretStore",
    "decode_provided",
    "encode_provided",
    "ensure_private_dir",
    "mask",
    "normalize_value",
    "read_private_file",
    "read_value",
    "resolve_env",
    "resolve_for_run",
    "run_command",
    "validate_command",
    "validate_env_name",
    "validate_service",
    "write_private_file",
]
