"""long-running@1, decided by its handler: provided by a named sandbox, refused or skipped in a
one-shot run, not judged where nothing runs (kit inspect, doctor)."""

from __future__ import annotations

from typing import Any

import pytest

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.kits.compose import Contribution, compose
from sbx.domain.sandbox.capabilities import SUPPORTED, plan_capabilities
from sbx.domain.sandbox.hardening import Limits

LONG = "com.docker.sandbox/long-running@1"
MIB = 1024 * 1024
LIMITS = Limits(memory_bytes=4096 * MIB, pids=128, cpu_millis=1000, tmp_bytes=256 * MIB,
                workspace_bytes=512 * MIB, home_bytes=512 * MIB)


def _plan(named: bool | None, optional: bool = False) -> Any:
    entry: dict[str, Any] = {"type": LONG, **({"optional": True} if optional else {})}
    return plan_capabilities(compose([Contribution("kit", [entry])]), limits=LIMITS,
                             allow_privileged=False, workspace_target="/workspace", kits={},
                             named=named)


def test_supported_and_provided_by_a_named_sandbox() -> None:
    assert LONG in SUPPORTED
    assert not _plan(True).skipped and not _plan(None).skipped


def test_a_one_shot_run_refuses_a_required_one_and_skips_an_optional_one() -> None:
    with pytest.raises(SbxError) as caught:
        _plan(False)
    assert caught.value.reason is Reason.LONG_RUNNING_UNNAMED and "--name" in (
        caught.value.hint or "")
    assert [s.type for s in _plan(False, optional=True).skipped] == [LONG]
