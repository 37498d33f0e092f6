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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from typing import Any, Final

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.credentials.secretsources import resolve_env, run_command, unresolved
from sbx.domain.credentials.secretvalues import (
    COMMAND,
    DYNAMIC,
    ENV,
    FILE,
    KEYRING,
    MAX_VALUE_BYTES,
    SERVICE_PATTERN,
    SecretInfo,
    SecretSource,
    mask,
    normalize_value,
    read_value,
    validate_command,
    validate_env_name,
    validate_service,
)
from sbx.seams import audit, keyrings, owned
from sbx.seams.host.private import ensure_private_dir, read_private_file, write_private_file
from sbx.seams.host.private import unsafe as _unsafe
from sbx.seams.keyrings import Keyring

SECRETS_DIR: Final = "secrets"
_TMP_PREFIX: Final = ".tmp-"
_RECORD_SUFFIX: Final = ".ref"
_MAX_RECORD_BYTES: Final = 8 * 1024
_AUTO: Final = "auto"


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
            return keyrings.detect(self.state_home)
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
        keyring = keyrings.open_backend(source.reference or "", self.state_home)
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
        keyring = keyrings.open_backend(record.reference or "", self.state_home)
        fix = (f"Store it again (`sbx secret set {service}`), or make that keyring available "
               "to sbx again.")
        if keyring is None:
            raise unresolved(service, f"it is in the OS keyring {record.reference}, which is "
                                       "not available now", fix)
        value = keyring.get(service)
        if value is None:
            raise unresolved(service, f"the OS keyring ({keyring.name}) no longer holds it",
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
