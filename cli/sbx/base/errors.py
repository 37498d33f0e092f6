"""The sbx error hierarchy: every expected failure is an :class:`SbxError` with a reason code."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sbx.base.reasons import ExitStatus, Reason


class SbxError(Exception):
    """An expected failure: carries a reason code, a one-line message and an optional hint.

    ``details`` is machine-readable context for ``--json`` and the audit log; it must never hold
    a secret value.
    """

    def __init__(
        self,
        reason: Reason,
        message: str,
        *,
        hint: str | None = None,
        details: Mapping[str, Any] | None = None,
        body: str | None = None,
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.hint = hint
        self.details: dict[str, Any] = dict(details or {})
        # Multi-line detail shown under the one-line message (e.g. positioned diagnostics).
        self.body = body

    @property
    def exit_status(self) -> ExitStatus:
        return self.reason.exit_status

    def __str__(self) -> str:
        # Every refusal ends with its code in parentheses (SPEC §3).
        return f"{self.message} ({self.reason.value})"


class ConfigError(SbxError):
    """The config file is invalid; ``details['problems']`` lists every violation."""

    def __init__(self, message: str, *, hint: str | None = None,
                 details: Mapping[str, Any] | None = None) -> None:
        super().__init__(Reason.INVALID_CONFIG, message, hint=hint, details=details)


class KitError(SbxError):
    """A kit descriptor is invalid; ``details['diagnostics']`` lists every problem found."""

    def __init__(self, message: str, *, hint: str | None = None,
                 details: Mapping[str, Any] | None = None, body: str | None = None) -> None:
        super().__init__(Reason.INVALID_KIT, message, hint=hint, details=details, body=body)


class EngineUnavailable(SbxError):
    def __init__(self, message: str, *, hint: str | None = None,
                 details: Mapping[str, Any] | None = None) -> None:
        super().__init__(Reason.DOCKER_UNREACHABLE, message, hint=hint, details=details)


class MountBlocked(SbxError):
    """A mount source or target was refused; ``details['rule']`` names the rule."""

    def __init__(self, message: str, *, rule: str, path: str,
                 hint: str | None = None) -> None:
        super().__init__(Reason.MOUNT_BLOCKED, message, hint=hint,
                         details={"rule": rule, "path": path})
        self.rule = rule
        self.path = path


__all__ = ["ConfigError", "EngineUnavailable", "KitError", "MountBlocked", "SbxError"]
