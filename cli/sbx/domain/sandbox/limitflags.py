"""`--memory`, `--cpus`, `--pids` on a command line: Docker's forms, held within the config's
bounds.

Parsed where the flags are read (a malformed value is ``invalid_argument``, never a traceback);
applied by the one planner (sbx.usecases.run.plan.assemble) on every run, fully planned or from
the plan cache, against the ``[sandbox]`` values the recipe recorded as bounds. A value over its
bound is refused (``limit_over_bound``), never truncated; none is rounded either.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Final

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason

if TYPE_CHECKING:  # annotations only: `sbx --help` need not load the container spec
    from sbx.domain.sandbox.hardening import Limits

# Docker's RAMInBytes: a number, an optional unit (powers of 1024), optional i and b.
_SIZE: Final = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtp]?)(?:i?b)?\s*$", re.IGNORECASE)
_UNITS: Final = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5}
MIN_MEMORY_BYTES: Final = 6 * 1024 * 1024  # the engine refuses less (docker: "6MB")
MIN_CPU_MILLIS: Final = 10  # the kernel's smallest CFS quota per 100 ms period: 0.01 CPU
FLAGS: Final = {"memory_bytes": "--memory", "cpu_millis": "--cpus", "pids": "--pids"}
CONFIG_KEYS: Final = tuple(FLAGS)  # the [sandbox] keys that bound them


@dataclass(frozen=True)
class LimitFlags:
    """What the flags asked for; None: not given (the config's or the kits' value applies)."""

    memory_bytes: int | None = None
    cpu_millis: int | None = None
    pids: int | None = None

    def given(self) -> dict[str, int]:
        return {key: value for key, value in (("memory_bytes", self.memory_bytes),
                                              ("cpu_millis", self.cpu_millis),
                                              ("pids", self.pids)) if value is not None}


def parse_memory(text: str, *, flag: str = "--memory") -> int:
    """Bytes from Docker's sizes: ``134217728``, ``128m``, ``2g``, ``1.5g``, ``512MiB``; at
    least the engine's minimum."""
    value = parse_size(text, flag=flag)
    if value < MIN_MEMORY_BYTES:
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"{flag} {text} is below the engine's minimum of 6 MiB",
                       hint=f"Give at least {flag} 6m.")
    return value


def parse_size(text: str, *, flag: str) -> int:
    """A positive whole number of bytes from Docker's sizes."""
    match = _SIZE.match(text)
    if match is None:
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"{flag} must be a size like 128m, 2g or a number of bytes, not {text!r}")
    try:
        exact = Decimal(match.group(1)) * (1024 ** _UNITS[match.group(2).lower()])
    except InvalidOperation:  # pragma: no cover - the pattern admits only decimal numbers
        raise SbxError(Reason.INVALID_ARGUMENT, f"{flag} {text!r} is not a size") from None
    if exact != exact.to_integral_value():
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"{flag} {text} is not a whole number of bytes ({exact})",
                       hint=f"Give it in a smaller unit, e.g. {flag} {int(exact)}.")
    if exact <= 0:
        raise SbxError(Reason.INVALID_ARGUMENT, f"{flag} must be more than zero, not {text!r}")
    return int(exact)


def parse_cpus(text: str, *, flag: str = "--cpus") -> int:
    """Thousandths of a CPU from a decimal number of CPUs: ``1``, ``0.5``, ``1.25``."""
    try:
        exact = Decimal(text.strip())
    except InvalidOperation:
        exact = Decimal("NaN")
    if not exact.is_finite() or exact <= 0:
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"{flag} must be a positive number of CPUs like 0.5 or 2, not {text!r}")
    millis = exact * 1000
    if millis != millis.to_integral_value():
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"{flag} {text} is finer than sbx applies (thousandths of a CPU)",
                       hint=f"Give at most three decimals, e.g. {flag} {exact:.3f}.")
    if millis < MIN_CPU_MILLIS:
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"{flag} {text} is below the kernel's minimum of 0.01 CPU",
                       hint=f"Give at least {flag} 0.01.")
    return int(millis)


def parse_pids(text: str, *, flag: str = "--pids") -> int:
    """A positive count of processes (no "unlimited": -1 and 0 are refused)."""
    stripped = text.strip()
    if not stripped.isdigit() or int(stripped) <= 0:
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"{flag} must be a positive number of processes, not {text!r}",
                       hint="A sandbox always has a pids limit; give e.g. --pids 256.")
    return int(stripped)


def parse_flags(memory: str | None, cpus: str | None, pids: str | None) -> LimitFlags:
    return LimitFlags(
        memory_bytes=parse_memory(memory) if memory is not None else None,
        cpu_millis=parse_cpus(cpus) if cpus is not None else None,
        pids=parse_pids(pids) if pids is not None else None)


def bounds_of(limits: Limits) -> dict[str, int]:
    """The bounds a recipe records: the configured values before any kit asked for less."""
    return {key: int(getattr(limits, key)) for key in CONFIG_KEYS}


def apply_flags(limits: Limits, bounds: Mapping[str, int], flags: LimitFlags) -> Limits:
    """``limits`` with the flags' values, each checked against its configured bound (the
    bound is the config's, not what a kit's resources@1 lowered it to). Over a bound: refused,
    naming every flag that is."""
    given = flags.given()
    over = [(key, value, int(bounds.get(key, getattr(limits, key))))
            for key, value in given.items()
            if value > int(bounds.get(key, getattr(limits, key)))]
    if over:
        parts = [f"{FLAGS[key]} {show(key, value)} is above the configured bound "
                 f"[sandbox] {key} = {show(key, bound)}" for key, value, bound in over]
        fixes = " ".join(f"{FLAGS[key]} {show(key, bound)}" for key, _value, bound in over)
        raise SbxError(
            Reason.LIMIT_OVER_BOUND, "; ".join(parts) + " (never truncated)",
            hint=f"Ask for at most the bound ({fixes}), or raise it in the config file "
                 "(`sbx config path` names it; `sbx config show` shows the values).",
            details={"limits": [{"flag": FLAGS[key], "asked": value, "bound": bound,
                                 "key": f"sandbox.{key}"} for key, value, bound in over]})
    return replace(limits, **given) if given else limits


def check_tmpfs_fit(memory_bytes: int, tmpfs: Mapping[str, str], *, flag: str) -> None:
    """The tmpfs mounts of a spec count against its memory limit: a ``--memory`` below their
    caps would let a full /tmp get the workload OOM-killed, so it is refused."""
    total = sum(tmpfs_size(options) for options in tmpfs.values())
    if total > memory_bytes:
        raise SbxError(
            Reason.LIMIT_OVER_BOUND,
            f"{flag} {show('memory_bytes', memory_bytes)} is below the sandbox's tmpfs caps "
            f"({', '.join(sorted(tmpfs))}: {show('memory_bytes', total)} in all), which count "
            "against it",
            hint=f"Give at least {flag} {show('memory_bytes', total)}, or lower [sandbox] "
                 "tmp_bytes, workspace_bytes or home_bytes in the config file.",
            details={"asked": memory_bytes, "tmpfs_bytes": total})


def tmpfs_size(options: str) -> int:
    """The ``size=`` of a tmpfs option string (sbx.domain.sandbox.hardening.tmpfs_options)."""
    for part in options.split(","):
        key, _, number = part.partition("=")
        if key == "size" and number.isdigit():
            return int(number)
    return 0


def show(key: str, value: int) -> str:
    """A limit as a flag would take it: ``512m``, ``1.5`` CPUs, a count."""
    if key == "cpu_millis":
        return f"{Decimal(value) / 1000:f}".rstrip("0").rstrip(".")
    if key == "memory_bytes":
        for unit, power in (("g", 3), ("m", 2), ("k", 1)):
            if value % (1024 ** power) == 0:
                return f"{value // 1024 ** power}{unit}"
    return str(value)


__all__ = ["CONFIG_KEYS", "FLAGS", "MIN_CPU_MILLIS", "MIN_MEMORY_BYTES", "LimitFlags",
           "apply_flags", "bounds_of", "check_tmpfs_fit", "parse_cpus", "parse_flags",
           "parse_memory", "parse_pids", "parse_size", "show", "tmpfs_size"]
