"""The limit probe: one tiny container reads its own cgroup limits, compared with what the
config asked."""

from __future__ import annotations

import math
import os
import shutil
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol

from sbx.base import labels as label_keys
from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.sandbox import runrecord
from sbx.domain.sandbox.hardening import DEFAULT_WORKSPACE, Limits, build_spec
from sbx.domain.sandbox.identity import FALLBACK_HOME
from sbx.domain.sandbox.requirements import sandbox_limits
from sbx.usecases import runstore
from sbx.usecases.doctor.model import PROBE_TIMEOUT_S, DoctorState, Status, Verdict

if TYPE_CHECKING:
    from sbx.seams.engine import Containers, Images, Inventory, Sessions
    from sbx.usecases.context import AppContext

    class ProbeEngine(Images, Containers, Sessions, Protocol):
        """The roles the limit probe uses: its image, its container and the container's log."""
PROBE_WAIT_S: Final = 10.0  # how long the probe's shell may run
PROBE_KIT: Final = "doctor-probe"
# The smallest image that has /bin/sh does; these are tried first, then other local images by
# size. sbx never pulls: with no usable local image, the limits check warns.
PROBE_IMAGES: Final = ("sbx-test/busybox:1", "busybox:latest", "busybox:musl", "busybox:uclibc",
                       "alpine:latest")
MAX_PROBE_ATTEMPTS: Final = 3
# The kernel stores memory limits in whole pages; anything within one large page is "as asked".
MEMORY_SLACK_BYTES: Final = 64 * 1024
UNLIMITED_V1_BYTES: Final = 1 << 62

# Reads the probe's own cgroup limits (v2 unified, else v1 per-controller) as key=value lines.
PROBE_SCRIPT: Final = """\
r() { [ -r "$1" ] && printf '%s=%s\\n' "$2" "$(cat "$1")"; return 0; }
c=/sys/fs/cgroup
if [ -f $c/cgroup.controllers ]; then
  echo cgroup=2
  r $c/memory.max memory; r $c/memory.swap.max swap; r $c/pids.max pids; r $c/cpu.max cpu
else
  echo cgroup=1
  r $c/memory/memory.limit_in_bytes memory; r $c/memory/memory.memsw.limit_in_bytes memsw
  r $c/pids/pids.max pids
  for d in cpu cpu,cpuacct cpuacct,cpu; do
    if [ -r $c/$d/cpu.cfs_quota_us ]; then
      r $c/$d/cpu.cfs_quota_us cpu_quota; r $c/$d/cpu.cfs_period_us cpu_period; break
    fi
  done
fi
"""


def check_limits(state: DoctorState) -> Verdict:
    if state.config is None:
        return Verdict(Status.FAIL, "not probed: the config is invalid (see the config check)",
                       Reason.INVALID_CONFIG, "Fix the config file, then run `sbx doctor` again.")
    limits = sandbox_limits(state.config)
    driver: Inventory = state.ctx.driver
    candidates = probe_candidates(driver.local_images())
    if not candidates:
        return Verdict(Status.WARN, "not probed: no local image to run the probe in",
                       Reason.IMAGE_MISSING, _NO_PROBE_IMAGE_FIX)
    # The limits are judged on the runtime sandboxes get (gVisor, Kata enforce them their own
    # way); a configured one the engine lacks is the runtimes check's finding, not this one's.
    runtime = state.config.sandbox.runtime.value
    if state.engine is None or runtime not in state.engine.runtimes:
        runtime = None
    attempts: list[str] = []
    for ref in candidates[:MAX_PROBE_ATTEMPTS]:
        try:
            readings = run_probe(state.ctx, ref, limits, wait_s=PROBE_WAIT_S, runtime=runtime)
        except SbxError as error:
            if error.reason in (Reason.START_FAILED, Reason.CREATE_FAILED,
                                Reason.IMAGE_MISSING):
                attempts.append(f"{ref}: {error.message}")
                continue
            raise
        return judge_limits(limits, readings, ref)
    return Verdict(Status.WARN, "not probed: no local image could run /bin/sh ("
                   + "; ".join(attempts) + ")", Reason.IMAGE_MISSING, _NO_PROBE_IMAGE_FIX,
                   {"attempts": attempts})


_NO_PROBE_IMAGE_FIX: Final = (
    "Make a tiny image with /bin/sh present locally (e.g. `scripts/build-images.sh` builds "
    "sbx-test/busybox:1, or `docker load` a busybox image); sbx never pulls.")


@dataclass(frozen=True)
class LimitReading:
    name: str  # memory | swap | pids | cpu
    asked: str
    read: str
    enforced: bool

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "asked": self.asked, "read": self.read,
                "enforced": self.enforced}


def probe_candidates(local: Sequence[tuple[str, int]]) -> list[str]:
    """Preferred probe images that are present, then every other local image, smallest first."""
    present = [ref for ref, _size in local]
    preferred = [ref for ref in PROBE_IMAGES if ref in present]
    others = [ref for ref, _size in sorted(local, key=lambda item: (item[1], item[0]))
              if ref not in preferred]
    return list(dict.fromkeys([*preferred, *others]))


def run_probe(ctx: AppContext, image_ref: str, limits: Limits, *,
              wait_s: float = PROBE_WAIT_S, runtime: str | None = None) -> dict[str, str]:
    """Run the probe container with ``limits`` in ``image_ref``; return what it read.

    The container gets sbx's hardened shape (read-only, no capabilities, no network, the
    configured user) and helper labels; it is removed on every path. A run directory recording
    doctor's pid lets ``sbx gc`` remove it should doctor be killed in between.
    """
    driver: ProbeEngine = ctx.driver
    image = driver.image(image_ref)
    if image is None:
        raise SbxError(Reason.IMAGE_MISSING, f"{image_ref} is not present locally")
    config = ctx.load_config()
    uid = config.sandbox.user.value
    run_id = uuid.uuid4().hex
    deadline = math.ceil(time.time() + wait_s + PROBE_TIMEOUT_S)
    labels = label_keys.object_labels(home_hash=ctx.home_hash, run_id=run_id,
                                      deadline=deadline, kits=[PROBE_KIT],
                                      role=label_keys.ROLE_HELPER)
    spec = build_spec(image=image.id, uid=uid, gid=uid, limits=limits,
                      workspace_target=DEFAULT_WORKSPACE, workspace_bind=None, extra_binds=(),
                      command=(), entrypoint=("/bin/sh", "-c", PROBE_SCRIPT), env={},
                      home=FALLBACK_HOME, labels=labels, image_labels=image.labels,
                      engine_log=True, runtime=runtime)
    run_dir, owner = _write_probe_record(ctx.state_home, run_id, deadline, image_ref)
    container_id: str | None = None
    try:
        container_id = driver.create(spec)
        runstore.update(run_dir, container_id=container_id)
        driver.start(container_id)
        if driver.wait(container_id, wait_s) is None:
            driver.kill(container_id)
            # Not an image problem (the next image would not help): the engine is stuck.
            raise SbxError(Reason.DOCKER_UNREACHABLE,
                           f"the probe in {image_ref} did not finish within {wait_s:g}s")
        output = b"".join(chunk for stream, chunk in driver.output(container_id)
                          if stream == "stdout")
    finally:
        removed = container_id is None or _remove_quietly(driver, container_id)
        if removed:
            shutil.rmtree(run_dir, ignore_errors=True)
        if owner is not None:
            os.close(owner)  # from now on gc may take what is left
    return parse_probe_output(output.decode("utf-8", "replace"))


def _remove_quietly(driver: Containers, container_id: str) -> bool:
    try:
        return driver.remove_container(container_id)
    except SbxError:
        return False  # the run directory stays, so `sbx gc` removes the probe later


def _write_probe_record(state_home: Path, run_id: str, deadline: int,
                        image_ref: str) -> tuple[Path, int | None]:
    """The probe's run directory, with its owner lock held (gc leaves a probe alone while
    doctor reads it, even once it has exited)."""
    return runstore.create(state_home, runrecord.RunRecord(
        run_id=run_id, deadline=deadline, workload=PROBE_KIT, pid=os.getpid(),
        image=image_ref),
        owner_lock=True)


def parse_probe_output(text: str) -> dict[str, str]:
    readings: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip():
            readings[key.strip()] = value.strip()
    return readings


def compare_limits(limits: Limits, readings: Mapping[str, str]) -> list[LimitReading]:
    """Each configured limit against what the probe read from its own cgroup (v1 or v2)."""
    version = readings.get("cgroup", "")
    asked_memory = limits.memory_bytes
    asked_cpu = limits.cpu_millis
    out: list[LimitReading] = []

    memory_raw = readings.get("memory")
    memory = _bytes_value(memory_raw, version)
    out.append(LimitReading("memory", _size(asked_memory), _shown(memory_raw, memory, _size),
                            memory is not None
                            and abs(memory - asked_memory) < MEMORY_SLACK_BYTES))

    # swap = memory (SPEC §5): v2 shows the swap allowed beyond memory (must be 0), v1 the
    # memory+swap total (must equal memory).
    if version == "2" and "swap" in readings:
        swap = _bytes_value(readings["swap"], version)
        out.append(LimitReading("swap", "none beyond memory", _swap_shown(swap, readings["swap"]),
                                swap == 0))
    elif version == "1" and "memsw" in readings:
        memsw = _bytes_value(readings["memsw"], version)
        extra = memsw - memory if memsw is not None and memory is not None else None
        out.append(LimitReading("swap", "none beyond memory",
                                _swap_shown(extra, readings["memsw"]), extra == 0))

    pids_raw = readings.get("pids")
    pids = int(pids_raw) if pids_raw is not None and pids_raw.isdigit() else None
    shown_pids = "unlimited" if pids_raw == "max" else (pids_raw or "unreadable")[:40]
    out.append(LimitReading("pids", str(limits.pids), shown_pids, pids == limits.pids))

    millis = _cpu_millis(readings, version)
    out.append(LimitReading("cpu", _cpus(asked_cpu),
                            _cpus(millis) if millis is not None else _cpu_raw(readings, version),
                            millis is not None and abs(millis - asked_cpu) <= 1))
    return out


def judge_limits(limits: Limits, readings: Mapping[str, str], image_ref: str) -> Verdict:
    compared = compare_limits(limits, readings)
    version = readings.get("cgroup", "?")
    data = {"cgroup_version": version, "probe_image": image_ref,
            "limits": [reading.as_dict() for reading in compared]}
    missing = [r for r in compared if not r.enforced]
    if missing:
        listed = ", ".join(f"{r.name} (asked {r.asked}, read {r.read})" for r in missing)
        return Verdict(Status.FAIL, f"not enforced: {listed}", Reason.RESOURCE_LIMITS_UNENFORCED,
                       Reason.RESOURCE_LIMITS_UNENFORCED.info.fix,
                       {**data, "unenforced": [r.name for r in missing]})
    shown = ", ".join(f"{r.name} {r.asked}" for r in compared if r.name != "swap")
    swap_note = "" if any(r.name == "swap" for r in compared) else "; swap not checked " \
        "(no swap accounting)"
    return Verdict(Status.OK, f"{shown} enforced (cgroup v{version}, probe {image_ref})"
                   f"{swap_note}", data=data)


def _bytes_value(raw: str | None, version: str) -> int | None:
    """Bytes, or None for unlimited/unreadable."""
    if raw is None or not raw.isdigit():
        return None  # v2 "max", garbage, or missing
    value = int(raw)
    if version == "1" and value >= UNLIMITED_V1_BYTES:
        return None  # v1 says "unlimited" with a huge page-aligned number
    return value


def _cpu_millis(readings: Mapping[str, str], version: str) -> int | None:
    if version == "2":
        quota, _, period = readings.get("cpu", "").partition(" ")
    else:
        quota, period = readings.get("cpu_quota", ""), readings.get("cpu_period", "")
    if not quota.isdigit() or not period.isdigit() or int(period) == 0:
        return None  # "max" (v2) or -1 (v1): no quota
    return round(int(quota) * 1000 / int(period))


def _cpu_raw(readings: Mapping[str, str], version: str) -> str:
    raw = readings.get("cpu" if version == "2" else "cpu_quota")
    if raw is None:
        return "unreadable"
    return "unlimited" if raw.startswith("max") or raw == "-1" else raw[:40]


def _swap_shown(extra: int | None, raw: str) -> str:
    if extra is None:
        return "unlimited" if raw == "max" or raw.isdigit() else (raw[:40] or "unreadable")
    return "none" if extra == 0 else f"{_size(extra)} beyond memory"


def _shown(raw: str | None, value: int | None, fmt: Callable[[int], str]) -> str:
    if value is not None:
        return fmt(value)
    if raw is None:
        return "unreadable"
    return "unlimited" if raw == "max" or raw.isdigit() else raw[:40]


def _size(number: int) -> str:
    for unit, name in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if number >= unit and number % unit == 0:
            return f"{number // unit} {name}"
    return f"{number} bytes"


def _cpus(millis: int) -> str:
    return f"{millis / 1000:.3f} CPUs"
