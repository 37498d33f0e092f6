"""The rules a proxy enforces: its kits' network with the user policy overlaid, followed live.

The proxy is handed the rules file's path (``ProxyConfig.user_policy``) and the sandbox it
serves; it looks at the file's identity (inode, mtime, size) at most every
:data:`CHECK_INTERVAL_S` while it decides, re-reads it when it changed and re-merges when a
rule in force lapses — so ``sbx policy allow|deny|rm`` reaches a running sandbox by its next
request, without a restart and without the proxy knowing where the state home is. The merge
is :func:`sbx.domain.egress.userpolicy.overlay`, the one ``sbx explain`` uses.

A file that cannot be read at start stops the proxy (its denies would be lost); one that
becomes unreadable later keeps the rules last read, said once on stderr.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

from sbx.base.errors import SbxError
from sbx.domain.egress.configfields import ProxyConfigError
from sbx.domain.egress.userpolicy import (
    PolicyFileError,
    UserRule,
    load_text,
    next_expiry,
    overlay,
)
from sbx.domain.kits.compose import Network
from sbx.seams import owned

CHECK_INTERVAL_S: Final = 0.01
MAX_FILE_BYTES: Final = 8 * 1024 * 1024
Signature = tuple[int, int, int] | None


class UserRules:
    """``network()``: what to decide with now."""

    def __init__(self, path: Path, base: Network | None, sandbox: str | None,
                 report: Callable[[str], None]) -> None:
        self.path = path
        self.base = base
        self.sandbox = sandbox
        self._report = report
        self._rules: tuple[UserRule, ...] = ()
        self._signature: Signature = None
        self._merged = base
        self._expiry: float | None = None
        self._next_check = 0.0
        self._complained: Signature = None
        rules = self._read()
        if isinstance(rules, str):
            raise ProxyConfigError(f"the user policy {path} cannot be read: {rules}")
        self._apply(rules)

    def network(self) -> Network | None:
        now = time.monotonic()
        if now >= self._next_check:
            self._next_check = now + CHECK_INTERVAL_S
            if self._changed():
                rules = self._read()
                if isinstance(rules, str):
                    if self._complained != self._signature:
                        self._complained = self._signature
                        self._report(f"the user policy {self.path} cannot be read ({rules}); "
                                     "the rules read before stay in force")
                else:
                    self._apply(rules)
            elif self._expiry is not None and time.time() >= self._expiry:
                self._apply(self._rules)
        return self._merged

    @property
    def rules(self) -> tuple[UserRule, ...]:
        return self._rules

    def _changed(self) -> bool:
        return self._stat() != self._signature

    def _stat(self) -> Signature:
        try:
            info = os.stat(self.path)
        except OSError:
            return None
        return (info.st_ino, info.st_mtime_ns, info.st_size)

    def _read(self) -> tuple[UserRule, ...] | str:
        """The rules, or what is wrong with the file; a missing file holds none."""
        self._signature = self._stat()
        try:  # this user's own file only (sbx.seams.owned), as the CLI reads it
            raw = owned.read_bytes(self.path, max_bytes=MAX_FILE_BYTES)
        except OSError as error:
            return error.strerror or str(error)
        except SbxError as error:
            return error.message
        if raw is None:
            return ()
        try:
            return load_text(raw.decode("utf-8"))
        except (PolicyFileError, UnicodeDecodeError) as error:
            return str(error)

    def _apply(self, rules: tuple[UserRule, ...]) -> None:
        now = time.time()
        self._rules = rules
        self._merged = overlay(self.base, rules, sandbox=self.sandbox, now=now)
        self._expiry = next_expiry((r for r in rules if r.applies(self.sandbox, now)), now)


__all__ = ["CHECK_INTERVAL_S", "UserRules"]
