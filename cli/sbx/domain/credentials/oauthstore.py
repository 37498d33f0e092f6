"""A service's OAuth tokens on the host: ``<state>/oauth/<service>.json`` (directory 0700, file
0600, written atomically), locked across processes while a refresh rotates them."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.credentials.oauth import MAX_RECORD_BYTES, OAUTH_DIR, SERVICE, Tokens
from sbx.seams import audit
from sbx.seams.host.private import ensure_private_dir, read_private_file, write_private_file


class OAuthStore:
    """A service's OAuth tokens as private files under ``<state_home>/oauth``."""

    def __init__(self, state_home: Path) -> None:
        self.state_home = state_home
        self.directory = state_home / OAUTH_DIR
        self.audited = True

    @classmethod
    def at(cls, directory: Path) -> OAuthStore:
        """A store of its own in ``directory`` (the logins made inside one sandbox, kept in
        its run directory), not audited: they never become the user's without
        ``sbx secret login --from-sandbox``."""
        store = cls(directory.parent)
        store.directory = directory
        store.audited = False
        return store

    def path(self, service: str) -> Path:
        if not SERVICE.fullmatch(service):
            raise SbxError(Reason.INVALID_ARGUMENT, f"{service!r} is not a valid service name",
                           hint="Use the credential@1 `service` of the kit, e.g. anthropic.")
        return self.directory / f"{service}.json"

    def has(self, service: str) -> bool:
        try:
            return self.get(service) is not None
        except SbxError:
            return False

    def get(self, service: str) -> Tokens | None:
        path = self.path(service)
        loaded = read_private_file(path, max_bytes=MAX_RECORD_BYTES)
        if loaded is None:
            return None
        try:
            return Tokens.from_dict(json.loads(loaded[0].decode("utf-8")))
        except (ValueError, UnicodeDecodeError, SbxError):
            raise SbxError(Reason.SECRET_STORE_UNSAFE,
                           f"refusing to use {path}: it is not an sbx OAuth token record",
                           hint=f"Log in again: sbx secret login {service}",
                           details={"path": str(path)}) from None

    def set(self, service: str, tokens: Tokens, *, audit_event: bool = True) -> None:
        path = self.path(service)
        ensure_private_dir(self.directory)
        write_private_file(path, json.dumps(tokens.as_dict(), sort_keys=True).encode("utf-8"))
        if audit_event and self.audited:
            audit.record(self.state_home, audit.SECRET_SET, run_id=None, severity="info",
                         details={"service": service, "kind": "oauth"})

    def services(self) -> list[tuple[str, Tokens | None, float]]:
        """(service, tokens or None when the record is unreadable, modification time) for
        every stored record, by service name."""
        try:
            names = sorted(p.name[:-len(".json")] for p in self.directory.iterdir()
                           if p.name.endswith(".json") and not p.name.startswith("."))
        except OSError:
            return []
        found: list[tuple[str, Tokens | None, float]] = []
        for name in names:
            if not SERVICE.fullmatch(name):
                continue
            try:
                tokens = self.get(name)
                mtime = self.path(name).stat().st_mtime
            except (SbxError, OSError):
                tokens, mtime = None, 0.0
            found.append((name, tokens, mtime))
        return found

    def remove(self, service: str) -> bool:
        try:
            self.path(service).unlink()
        except FileNotFoundError:
            return False
        if not self.audited:
            return True
        audit.record(self.state_home, audit.SECRET_REMOVED, run_id=None, severity="info",
                     details={"service": service, "kind": "oauth"})
        return True

    @contextlib.contextmanager
    def locked(self, service: str) -> Iterator[None]:
        """An exclusive lock on the service's record across processes (two sandboxes refreshing
        one rotating refresh token must not both use the old one)."""
        ensure_private_dir(self.directory)
        fd = os.open(self.directory / f".{service}.lock",
                     os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)
