"""The hardened container shape (SPEC §5), built in one pure function for every run path.

:func:`build_spec` is the only producer of :class:`ContainerSpec`; the driver only translates it.
The invariants are asserted by :func:`hardening_violations`, which the property test and the run
path both use, so a spec that lost a protection can never reach the engine.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from sbx.base.labels import NAME as NAME_LABEL
from sbx.base.labels import own_labels, value
from sbx.seams.containerspec import BOUNDED_ENGINE_LOG, NO_ENGINE_LOG, BindMount, ContainerSpec

if TYPE_CHECKING:
    from sbx.base.config import SandboxSettings

TMP_TARGET: Final = "/tmp"  # noqa: S108 - the container's /tmp, a size-capped tmpfs
DEFAULT_WORKSPACE: Final = "/workspace"
FORBIDDEN_NETWORK_MODES: Final = frozenset({"host"})
DOCKER_SOCKETS: Final = ("/var/run/docker.sock", "/run/docker.sock")


@dataclass(frozen=True)
class Limits:
    memory_bytes: int
    pids: int
    cpu_millis: int
    tmp_bytes: int
    workspace_bytes: int
    home_bytes: int

    @classmethod
    def from_sandbox(cls, sandbox: SandboxSettings) -> Limits:
        """The configured limits (``[sandbox]``), the one place they are read from config."""
        return cls(memory_bytes=sandbox.memory_bytes.value, pids=sandbox.pids.value,
                   cpu_millis=sandbox.cpu_millis.value, tmp_bytes=sandbox.tmp_bytes.value,
                   workspace_bytes=sandbox.workspace_bytes.value,
                   home_bytes=sandbox.home_bytes.value)


def tmpfs_options(size: int, *, mode: str, uid: int | None = None, gid: int | None = None) -> str:
    # exec stays on: agents unpack helper binaries into /tmp and the workspace (PEERS A.1).
    parts = ["rw", "exec", "nosuid", "nodev", f"size={size}", f"mode={mode}"]
    if uid is not None and gid is not None:
        parts += [f"uid={uid}", f"gid={gid}"]
    return ",".join(parts)


def build_spec(
    *,
    image: str,
    uid: int,
    gid: int,
    limits: Limits,
    workspace_target: str,
    workspace_bind: BindMount | None,
    extra_binds: Sequence[BindMount],
    command: Sequence[str] | None,
    entrypoint: Sequence[str] | None,
    env: Mapping[str, str],
    labels: Mapping[str, str],
    image_labels: Mapping[str, str],
    home: str,
    extra_tmpfs: Mapping[str, str] | None = None,
    privileged: bool = False,
    network_mode: str = "none",
    tty: bool = False,
    stdin_open: bool = False,
    engine_log: bool = False,
    home_volume: str | None = None,
    stdin_once: bool = True,
    name: str | None = None,
    runtime: str | None = None,
) -> ContainerSpec:
    """The one hardened shape. Every run path calls this; nothing else builds a spec.

    Without a host workspace the workspace is a tmpfs owned by the sandbox user (mode 0700), so
    nothing the workload writes reaches the host disk. HOME is always a tmpfs of its own, owned
    by the sandbox user and capped at ``home_bytes``: the root stays read-only and the agent
    still has somewhere to keep its caches and settings for the session. ``image_labels`` are
    the image's own: none of its ``dev.sbx.*`` labels may pass for sbx's (:func:`own_labels`).
    """
    if uid == 0 or gid == 0:
        raise ValueError("the sandbox user must not be uid or gid 0")
    tmpfs = {TMP_TARGET: tmpfs_options(limits.tmp_bytes, mode="1777")}
    if home_volume is None:
        tmpfs[home] = tmpfs_options(limits.home_bytes, mode="0700", uid=uid, gid=gid)
    tmpfs.update(extra_tmpfs or {})
    binds = list(extra_binds)
    if workspace_bind is None:
        tmpfs[workspace_target] = tmpfs_options(limits.workspace_bytes, mode="0700",
                                                uid=uid, gid=gid)
    else:
        binds.insert(0, workspace_bind)
    full_env = {**env, "HOME": home}
    full_env["SBX_WORKSPACE"] = workspace_target
    return ContainerSpec(
        image=image,
        user=f"{uid}:{gid}",
        working_dir=workspace_target,
        command=tuple(command) if command is not None else None,
        entrypoint=tuple(entrypoint) if entrypoint is not None else None,
        env=full_env,
        labels=own_labels(image_labels, labels),
        memory_bytes=limits.memory_bytes,
        memory_swap_bytes=limits.memory_bytes,  # swap = memory: no swap beyond the limit
        pids_limit=limits.pids,
        nano_cpus=limits.cpu_millis * 1_000_000,
        tmpfs=tmpfs,
        binds=tuple(binds),
        privileged=privileged,
        network_mode=network_mode,
        tty=tty,
        stdin_open=stdin_open,
        log_driver=(BOUNDED_ENGINE_LOG if engine_log else NO_ENGINE_LOG)[0],
        log_options=(BOUNDED_ENGINE_LOG if engine_log else NO_ENGINE_LOG)[1],
        stdin_once=stdin_once,
        name=name,
        runtime=runtime,
    )


def deadline_check(deadline: int, timeout_s: float) -> tuple[tuple[str, ...], int]:
    """A health check that kills every process of the sandbox once ``deadline`` (unix time)
    has passed: the engine runs it inside the container, as its user, on its own, so a sandbox
    does not outlive its time limit even when every sbx process was SIGKILLed.

    ``kill -KILL -1`` reaches everything the sandbox user runs except the container's init,
    which exits with its child. It needs /bin/sh, ``date`` and ``kill`` in the image; without
    them the check fails harmlessly and only sbx itself enforces the limit. The interval keeps
    the overshoot small for short runs and the cost low for long ones.
    """
    interval = 1 if timeout_s <= 120 else 5
    script = f'[ "$(date +%s)" -lt {int(deadline)} ] || kill -KILL -1'
    return ("CMD", "/bin/sh", "-c", script), interval


def build_create_step_spec(*, image: str, limits: Limits, workdir: str,
                           labels: Mapping[str, str], image_labels: Mapping[str, str],
                           keepalive: Sequence[str],
                           cap_drop: Sequence[str],
                           binds: Sequence[BindMount] = (),
                           runtime: str | None = None) -> ContainerSpec:
    """The create step's container: writable root (its result is committed), root user for
    install hooks, no network, no privileges, the same memory/pids/cpu limits and the same
    OCI runtime as the sandbox (its install hooks run the kits' code too)."""
    return ContainerSpec(
        image=image,
        user="0:0",
        working_dir=workdir,
        command=None,
        entrypoint=tuple(keepalive),
        env={},
        labels=own_labels(image_labels, labels),
        memory_bytes=limits.memory_bytes,
        memory_swap_bytes=limits.memory_bytes,
        pids_limit=limits.pids,
        nano_cpus=limits.cpu_millis * 1_000_000,
        tmpfs={},
        binds=tuple(binds),
        read_only=False,
        cap_drop=tuple(cap_drop),
        runtime=runtime,
    )


def hardening_violations(spec: ContainerSpec, limits: Limits, *,
                         privileged_consented: bool = False) -> list[str]:
    """Every way ``spec`` falls short of SPEC §5; empty when the spec is hardened.

    ``privileged`` is a violation unless a kit required privileged@1 and the user consented.
    """
    problems: list[str] = []
    if not spec.read_only:
        problems.append("root filesystem is writable")
    uid, _, gid = spec.user.partition(":")
    if not uid.isdigit() or not gid.isdigit() or int(uid) == 0 or int(gid) == 0:
        problems.append(f"user {spec.user!r} is not a non-root uid:gid")
    if tuple(spec.cap_drop) != ("ALL",):
        problems.append("capabilities are not all dropped")
    if "no-new-privileges:true" not in spec.security_opt:
        problems.append("no-new-privileges is not set")
    if any("unconfined" in opt for opt in spec.security_opt):
        problems.append("an unconfined security profile is requested")
    if spec.memory_bytes != limits.memory_bytes or spec.memory_swap_bytes != spec.memory_bytes:
        problems.append("memory limit missing or swap differs from memory")
    if spec.pids_limit != limits.pids or spec.nano_cpus != limits.cpu_millis * 1_000_000:
        problems.append("pids or cpu limit missing")
    tmp = spec.tmpfs.get(TMP_TARGET, "")
    if f"size={limits.tmp_bytes}" not in tmp or "nosuid" not in tmp or "nodev" not in tmp:
        problems.append(f"{TMP_TARGET} is not a size-capped nosuid,nodev tmpfs")
    if spec.working_dir not in spec.tmpfs and not any(b.target == spec.working_dir
                                                      for b in spec.binds):
        problems.append("workspace is neither a capped tmpfs nor a checked bind mount")
    if spec.working_dir in spec.tmpfs and f"size={limits.workspace_bytes}" not in \
            spec.tmpfs[spec.working_dir]:
        problems.append("workspace tmpfs is not size-capped")
    home = spec.env.get("HOME", "")
    home_tmpfs = spec.tmpfs.get(home, "")
    # A named sandbox keeps HOME in a volume of its own (it persists across stop/start).
    home_kept = value(spec.labels, NAME_LABEL) is not None and any(b.target == home
                                                                   for b in spec.binds)
    if not home_kept and (f"size={limits.home_bytes}" not in home_tmpfs
                          or "nosuid" not in home_tmpfs):
        problems.append("HOME is not a size-capped nosuid tmpfs")
    if spec.log_driver != "none" and not dict(spec.log_options).get("max-size"):
        problems.append(f"the engine log ({spec.log_driver}) has no size limit")
    if spec.network_mode in FORBIDDEN_NETWORK_MODES or spec.network_mode.startswith("container:"):
        problems.append(f"network mode {spec.network_mode!r} is forbidden")
    if spec.privileged and not privileged_consented:
        problems.append("privileged without the user's consent")
    for bind in spec.binds:
        if any(s in (bind.source, bind.target) for s in DOCKER_SOCKETS) or \
                bind.source.endswith("docker.sock"):
            problems.append(f"docker socket mounted from {bind.source}")
    return problems


__all__ = ["BOUNDED_ENGINE_LOG", "DEFAULT_WORKSPACE", "NO_ENGINE_LOG", "TMP_TARGET", "BindMount",
           "ContainerSpec", "deadline_check", "Limits", "build_create_step_spec", "build_spec",
           "hardening_violations", "tmpfs_options"]
