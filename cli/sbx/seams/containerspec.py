"""The container the engine is asked to create: the data the driver translates into an API call.

It lives with the driver (the seam) so the driver never imports the planning that fills it;
:func:`sbx.domain.sandbox.hardening.build_spec` is the only producer of a sandbox's spec.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

# The engine's own copy of a container's output. sbx reads a sandbox's output from the attach
# stream, so a run keeps none (the default json-file driver has no size limit: a chatty
# workload would fill the host's disk); the helpers whose output is read back from the log
# (doctor's limit probe) keep a small bounded one.
NO_ENGINE_LOG: Final = ("none", ())
BOUNDED_ENGINE_LOG: Final = ("json-file", (("max-size", "1m"), ("max-file", "1")))


@dataclass(frozen=True)
class BindMount:
    source: str  # a checked host path, or a volume name when ``volume``
    target: str
    read_only: bool
    volume: bool = False


@dataclass(frozen=True)
class ContainerSpec:
    image: str
    user: str  # "uid:gid", both non-zero
    working_dir: str
    command: tuple[str, ...] | None
    entrypoint: tuple[str, ...] | None
    env: Mapping[str, str]
    labels: Mapping[str, str]
    memory_bytes: int
    memory_swap_bytes: int
    pids_limit: int
    nano_cpus: int
    tmpfs: Mapping[str, str]
    binds: tuple[BindMount, ...] = ()
    network_mode: str = "none"
    read_only: bool = True
    cap_drop: tuple[str, ...] = ("ALL",)
    security_opt: tuple[str, ...] = ("no-new-privileges:true",)
    privileged: bool = False
    init: bool = True
    tty: bool = False  # a pseudo-terminal for an interactive session
    stdin_open: bool = False  # stdin attached (and closed by the engine when the client's ends)
    log_driver: str = BOUNDED_ENGINE_LOG[0]
    log_options: tuple[tuple[str, str], ...] = BOUNDED_ENGINE_LOG[1]
    # The engine's health check, used as a deadline the sandbox keeps by itself (see
    # deadline_check): (argv, interval in seconds), or None.
    healthcheck: tuple[tuple[str, ...], int] | None = None
    name: str | None = None  # the engine's container name (named sandboxes)
    stdin_once: bool = True  # the engine closes stdin when the attached client's ends
    runtime: str | None = None  # the engine's OCI runtime (HostConfig.Runtime); None: default
    sysctls: Mapping[str, str] = field(default_factory=dict)  # the container's own namespaces'
    extra: Mapping[str, str] = field(default_factory=dict)


__all__ = ["BOUNDED_ENGINE_LOG", "NO_ENGINE_LOG", "BindMount", "ContainerSpec"]
