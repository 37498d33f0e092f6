"""Docker's forms of --memory, --cpus and --pids, and the bound check (pure decisions)."""

from __future__ import annotations

import pytest

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.sandbox.hardening import Limits
from sbx.domain.sandbox.limitflags import (
    LimitFlags,
    apply_flags,
    check_tmpfs_fit,
    parse_cpus,
    parse_flags,
    parse_memory,
    parse_pids,
    show,
)

MIB = 1 << 20
LIMITS = Limits(memory_bytes=1 << 30, pids=128, cpu_millis=1000, tmp_bytes=MIB,
                workspace_bytes=MIB, home_bytes=MIB)


@pytest.mark.parametrize(("text", "expected"), [
    ("134217728", 134217728), ("128m", 128 * MIB), ("128M", 128 * MIB), ("2g", 2 << 30),
    ("1.5g", 3 << 29), ("512MiB", 512 * MIB), ("512mb", 512 * MIB), ("8192k", 8 * MIB),
    ("1t", 1 << 40), (" 64m ", 64 * MIB),
])
def test_docker_sizes(text: str, expected: int) -> None:
    assert parse_memory(text) == expected


@pytest.mark.parametrize("text", ["", "m", "-1g", "1x", "1.5.2g", "12 34", "1e9", "nan",
                                  "0", "5m", "0.3k"])
def test_bad_sizes_are_refused_with_a_reason(text: str) -> None:
    with pytest.raises(SbxError) as raised:
        parse_memory(text)
    assert raised.value.reason is Reason.INVALID_ARGUMENT
    assert "--memory" in raised.value.message


@pytest.mark.parametrize(("text", "expected"), [
    ("1", 1000), ("0.5", 500), ("1.25", 1250), ("0.01", 10), ("16", 16000), ("2.000", 2000),
])
def test_fractional_cpus(text: str, expected: int) -> None:
    assert parse_cpus(text) == expected


@pytest.mark.parametrize("text", ["0", "-1", "abc", "", "inf", "nan", "0.0005", "1.2345",
                                  "0.005"])
def test_bad_cpus_are_refused_never_rounded(text: str) -> None:
    with pytest.raises(SbxError) as raised:
        parse_cpus(text)
    assert raised.value.reason is Reason.INVALID_ARGUMENT


@pytest.mark.parametrize("text", ["0", "-1", "1.5", "many", ""])
def test_bad_pids_are_refused(text: str) -> None:
    with pytest.raises(SbxError) as raised:
        parse_pids(text)
    assert raised.value.reason is Reason.INVALID_ARGUMENT


def test_parse_flags_leaves_what_was_not_given() -> None:
    assert parse_flags(None, "0.5", None) == LimitFlags(cpu_millis=500)
    assert parse_pids("64") == 64


def test_apply_within_bounds_and_refuse_over_them() -> None:
    bounds = {"memory_bytes": 2 << 30, "cpu_millis": 2000, "pids": 256}
    applied = apply_flags(LIMITS, bounds, LimitFlags(memory_bytes=2 << 30, pids=256))
    assert (applied.memory_bytes, applied.pids, applied.cpu_millis) == (2 << 30, 256, 1000)
    assert apply_flags(LIMITS, bounds, LimitFlags()) is LIMITS
    with pytest.raises(SbxError) as raised:
        apply_flags(LIMITS, bounds, LimitFlags(cpu_millis=2500))
    assert raised.value.reason is Reason.LIMIT_OVER_BOUND
    assert raised.value.details["limits"] == [
        {"flag": "--cpus", "asked": 2500, "bound": 2000, "key": "sandbox.cpu_millis"}]
    assert "--cpus 2.5" in raised.value.message and "= 2" in raised.value.message


def test_without_recorded_bounds_the_limits_are_the_bounds() -> None:
    with pytest.raises(SbxError):
        apply_flags(LIMITS, {}, LimitFlags(pids=129))


def test_tmpfs_fit() -> None:
    tmpfs = {"/tmp": "rw,size=1048576,mode=1777", "/home/u": "rw,exec,size=2097152,mode=0700"}
    check_tmpfs_fit(3 * MIB, tmpfs, flag="--memory")
    with pytest.raises(SbxError) as raised:
        check_tmpfs_fit(3 * MIB - 1, tmpfs, flag="--memory")
    assert raised.value.reason is Reason.LIMIT_OVER_BOUND


@pytest.mark.parametrize(("key", "value", "shown"), [
    ("memory_bytes", 1 << 30, "1g"), ("memory_bytes", 3 * MIB, "3m"),
    ("memory_bytes", 1000, "1000"), ("cpu_millis", 1500, "1.5"), ("cpu_millis", 2000, "2"),
    ("pids", 64, "64"),
])
def test_show(key: str, value: int, shown: str) -> None:
    assert show(key, value) == shown
