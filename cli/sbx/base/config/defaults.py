"""The one defaults table and the units and names the rest of the config package shares."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

KiB: Final = 1024
MiB: Final = 1024 * KiB
GiB: Final = 1024 * MiB

DEFAULT_SOURCE: Final = "default"
SCHEMA_RESOURCE: Final = "schema/config.schema.json"

# The one defaults table (sections and keys in display order). Read-only views so no caller can
# change a default for everyone else in the process.
DEFAULTS: Final[Mapping[str, Mapping[str, object]]] = MappingProxyType({
    "sandbox": MappingProxyType({
        "memory_bytes": 4 * GiB,
        "pids": 128,
        "cpu_millis": 1000,
        "tmp_bytes": 256 * MiB,
        "workspace_bytes": 512 * MiB,
        "home_bytes": 256 * MiB,
        "timeout_ms": 3_600_000,
        "user": 1000,
        "root_workspace": "refuse",
        "detach_keys": "ctrl-p,ctrl-q",
        "terminal_passthrough": False,
        "runtime": None,  # the engine's default OCI runtime (usually runc)
        "keep": "agents",
        "workspace_copy_bytes": 1 * GiB,  # --workspace-mode copy: file data copied in, at most
        "idle_stop": None,  # seconds idle before a named sandbox's keeper stops it; None: never
    }),
    "network": MappingProxyType({
        "upstream_proxy": None,
        "upstream_ca_file": None,
        "proxy_bind_host": "",
    }),
    "mounts": MappingProxyType({
        "allowed_roots": (),
        "blocked": (),
    }),
    "gc": MappingProxyType({
        "grace_seconds": 600,
        "batch_size": 256,
        "named_ttl": None,
        "image_idle_seconds": 86400,
    }),
})

# Sections whose keys the user names (each [engines] key is an engine's name): no defaults,
# so not in DEFAULTS; the schema alone bounds their values.
NAMED_SECTIONS: Final = ("engines",)

# The tmpfs mounts (/tmp, the workspace, HOME) are backed by memory and count against the
# container's memory limit, so caps that add up to more than the limit would let a full /tmp
# get the workload OOM-killed.
CROSS_KEYS: Final = ("memory_bytes", "tmp_bytes", "workspace_bytes", "home_bytes")


__all__ = ["CROSS_KEYS", "DEFAULTS", "DEFAULT_SOURCE", "NAMED_SECTIONS", "SCHEMA_RESOURCE", "GiB",
           "KiB", "MiB"]
