"""The reason registry: complete, unique, documented, and consistent with the exit statuses."""

from __future__ import annotations

import re

from sbx.base.reasons import REGISTRY, ExitStatus, Reason

SPEC_CODES = {
    "docker_unreachable", "image_missing", "resource_limits_unenforced", "root_user",
    "unsupported_platform", "invalid_config", "invalid_kit", "kit_incoherent",
    "unsupported_capability", "credential_unbound", "mount_blocked", "permission_widened",
    "create_failed", "start_failed", "proxy_failed", "timeout", "egress_denied",
    "cleanup_failed",
}


def test_every_spec_code_exists_with_its_fixed_name() -> None:
    assert {r.value for r in Reason} >= SPEC_CODES


def test_every_code_is_documented_once() -> None:
    assert set(REGISTRY) == set(Reason)
    titles = [info.title for info in REGISTRY.values()]
    assert len(titles) == len(set(titles))
    for reason, info in REGISTRY.items():
        assert re.fullmatch(r"[a-z][a-z_]*[a-z]", reason.value)
        assert info.title and info.cause.endswith(".") and info.fix.endswith((".", ")"))
        assert isinstance(info.exit_status, ExitStatus)


def test_refusals_timeouts_and_failures_are_distinguishable() -> None:
    assert Reason.TIMEOUT.exit_status == 124
    assert Reason.MOUNT_BLOCKED.exit_status == Reason.INVALID_CONFIG.exit_status == 125
    assert Reason.CREATE_FAILED.exit_status == 126
    assert Reason.INTERRUPTED.exit_status == 130
    assert len({ExitStatus.USAGE, ExitStatus.REFUSED, ExitStatus.FAILED, ExitStatus.TIMEOUT,
                ExitStatus.INTERNAL, ExitStatus.INTERRUPTED}) == 6
