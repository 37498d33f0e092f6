"""The rules a host and an engine must meet before any sandbox starts, and the limits it gets.

One function per rule, called by ``sbx run`` (through :mod:`sbx.usecases.pipeline`) and by ``sbx
doctor``'s host and engine checks, so the two can never disagree about what refuses a run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.sandbox.hardening import Limits

if TYPE_CHECKING:
    from sbx.base.config import Config
    from sbx.domain.sandbox.hardening import Limits
    from sbx.seams.engine import EngineInfo


def check_host(os_name: str) -> None:
    """sbx's isolation relies on unix semantics (uids, mount options, fd passing); ``os_name``
    is the host's ``os.name``."""
    if os_name != "posix":
        raise SbxError(Reason.UNSUPPORTED_PLATFORM, f"sbx runs on unix hosts, not {os_name}")


def check_engine(info: EngineInfo) -> None:
    """A Linux engine that enforces the limits it is given, or a refusal that says why."""
    if info.os and info.os != "linux":
        raise SbxError(Reason.UNSUPPORTED_PLATFORM,
                       f"the engine runs {info.os} containers; sbx needs a Linux engine",
                       hint="Use a Linux engine.")
    if info.product == "podman":
        raise SbxError(
            Reason.ENGINE_UNSUPPORTED,
            f"the engine is Podman {info.version}; sbx does not run sandboxes on Podman: its "
            "Docker-compatible API refuses the owner options of the size-capped HOME and /tmp "
            "(tmpfs uid=/gid=) and applies its own default rlimits, so the hardened shape "
            "sbx checks would not be the one that runs",
            hint="Use a Docker engine (Debian: `apt-get install docker.io`), e.g. "
                 "`export DOCKER_HOST=unix:///var/run/docker.sock`.",
            details={"engine": "podman", "version": info.version})
    # Rootless engines apply limits only on cgroup v2 with delegation; on v1 they silently
    # ignore them, which would make every limit a lie (PEERS A.4).
    if info.rootless and info.cgroup_version == "1":
        raise SbxError(
            Reason.RESOURCE_LIMITS_UNENFORCED,
            "the engine is rootless on cgroup v1: memory, pids and cpu limits would not be "
            "enforced", hint="Use a rootful engine or cgroup v2 with delegation.",
            details={"limits": ["memory", "pids", "cpu"]})


def sandbox_limits(config: Config) -> Limits:
    """The limits a sandbox gets before kits ask for less (``resources@1``): the config's."""
    return Limits.from_sandbox(config.sandbox)


__all__ = ["check_engine", "check_host", "sandbox_limits"]
